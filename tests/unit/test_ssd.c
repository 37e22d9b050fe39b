/*
 * test_ssd.c - the prefix cache's SSD tier: the checksum (known answers, a plain reference, any
 * split); the file format (round trip, damaged, truncated, mismatched and hostile headers, other
 * versions); the tier on its own (write, restore, restart, supersession, LRU deletion under the
 * byte cap, vanished files, orphaned and temporary files, a broken index, write errors, an
 * unusable directory, files of an earlier format version); and through the engine on stories260K:
 * greedy output bit-identical with and without an SSD hit, restore after a restart (a new engine
 * on the same directory), restore into a smaller context, the SSD tier with the RAM tier off, and
 * damaged files (a flipped header byte, a flipped data byte, a truncated file, a file from another
 * model) found at start-up and at restore: all skipped, quarantined and counted, while every
 * request still gives the cold output (a flipped data byte is caught with the default settings;
 * with verification off it is loaded).
 */
#define KT_ENGINE_HELPERS
#include "harness.h"

#include "base/base.h"
#include "base/checksum.h"
#include "cache/prefix.h"
#include "cache/ssd.h"
#include "cache/ssd_file.h"
#include "kiln.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

/* ---- helpers -------------------------------------------------------------------------------------- */

/* A fresh directory under the test's scratch folder. */
static const char *fresh_dir(const char *name) {
    static char buf[8][512];
    static int slot;
    char *b = buf[slot++ & 7];
    snprintf(b, sizeof buf[0], "%s/%s", kt_tmpdir(), name);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", b);
    if (system(cmd) != 0) return NULL;
    return b;
}

/* Names of the *.kv files in dir, sorted, into names[cap][32]; returns the count. */
static int list_kv(const char *dir, char names[][32], int cap) {
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (l > 3 && strcmp(de->d_name + l - 3, ".kv") == 0 && l < 32 && n < cap) memcpy(names[n++], de->d_name, l + 1);
    }
    if (d) closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[32];
            memcpy(t, names[j], 32);
            memcpy(names[j], names[j - 1], 32);
            memcpy(names[j - 1], t, 32);
        }
    return n;
}

static int count_files(const char *dir) {
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) n += de->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static bool file_exists(const char *dir, const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return kt_exists(p);
}

/* XORs byte `off` of dir/name with 0x40 (off < 0: from the end). */
static bool flip_byte(const char *dir, const char *name, long off) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_RDWR);
    if (fd < 0) return false;
    struct stat sb;
    fstat(fd, &sb);
    const off_t at = off < 0 ? sb.st_size + off : off;
    unsigned char c;
    bool ok = pread(fd, &c, 1, at) == 1;
    c ^= 0x40;
    ok = ok && pwrite(fd, &c, 1, at) == 1;
    close(fd);
    return ok;
}

static bool truncate_by(const char *dir, const char *name, long by) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat sb;
    return stat(p, &sb) == 0 && truncate(p, sb.st_size - by) == 0;
}

/* Packs kv positions [0, n) as [n_layer][n][row] (the layout the writer takes). */
static void pack(const kn_kv *kv, int32_t n, uint8_t *k, uint8_t *v) {
    for (int32_t l = 0; l < kv->n_layer; l++) {
        memcpy(k + (size_t)l * n * kv->k_row, kn_kv_k_at(kv, l, 0, 0), (size_t)n * kv->k_row);
        memcpy(v + (size_t)l * n * kv->v_row, kn_kv_v_at(kv, l, 0, 0), (size_t)n * kv->v_row);
    }
}

static kn_ssdf_key test_key(uint8_t tag) {
    kn_ssdf_key k;
    memset(&k, 0, sizeof k);
    memset(k.model, tag, 32);
    memset(k.tokenizer, 0x5a, 32);
    k.kv_type = KN_SSDF_F32;
    k.n_layer = 2;
    k.kv_dim = 8;
    return k;
}

/* ---- checksum and file format ----------------------------------------------------------------- */

/* kn_hash64 exactly as checksum.h specifies it, written as plainly as possible (byte by byte, one
 * word at a time, lane = word index mod 8): the reference the unrolled, streaming code must equal. */
static uint64_t ref_avalanche(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t ref_hash64(const uint8_t *p, size_t n, uint64_t seed) {
    const uint64_t m1 = 0x9E3779B97F4A7C15ull;
    uint64_t lane[8];
    for (int i = 0; i < 8; i++) lane[i] = ref_avalanche(seed + (uint64_t)(i + 1) * m1);
    const size_t words = (n + 63) / 64 * 8; /* whole stripes, the last one padded with zeros */
    for (size_t w = 0; w < words; w++) {
        uint64_t word = 0;
        for (int b = 7; b >= 0; b--) word = word << 8 | (w * 8 + (size_t)b < n ? p[w * 8 + (size_t)b] : 0);
        const uint64_t x = lane[w % 8] ^ word;
        lane[w % 8] = ((x << 29) | (x >> 35)) * m1;
    }
    uint64_t x = n;
    for (int i = 0; i < 8; i++) x = ref_avalanche(x ^ lane[i]);
    return x;
}

static void test_checksum(void) {
    static uint8_t buf[1 << 16];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i * 7 + 3);
    /* Known answers: the SSD cache file format depends on these exact values on every CPU. */
    static const struct {
        size_t len;
        uint64_t seed, sum;
    } known[] = {
        {0, 0, 0xe77312f1304d8647ull},    {1, 0, 0x9da4566c09d83b5cull},     {7, 0, 0xfd851a3172b84431ull},
        {8, 0, 0x7d4dc47f6aef0a4dull},    {9, 0, 0x2b46412111c40dfdull},     {63, 0, 0x882761ec9fa478c6ull},
        {64, 0, 0x44f519c88c2a4d0full},   {65, 0, 0x348c03bf45c97ef7ull},    {127, 0, 0x45a0d44f8f9da1adull},
        {128, 0, 0xc44cf2a598722157ull},  {1000, 0, 0x6f873c5f70595409ull},  {65536, 0, 0x3de0a0140256234cull},
        {0, 42, 0x12a768b8f3805ba2ull},   {1, 42, 0x1fb0e7260c83fd75ull},    {7, 42, 0xf9a9414330d53ee2ull},
        {8, 42, 0xccc2c302cbe55fedull},   {9, 42, 0x4e4dd63351912f53ull},    {63, 42, 0x0fa366141a14e2adull},
        {64, 42, 0x2c2e06c263c571b6ull},  {65, 42, 0x2fc0b0452f2af5e3ull},   {127, 42, 0x038629d43062cee1ull},
        {128, 42, 0x2079ca57f724441cull}, {1000, 42, 0xf37f74b9cb86af8bull}, {65536, 42, 0x6ad7a12aa0c74fe2ull},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        CHECKF(kn_hash64_of(buf, known[i].len, known[i].seed) == known[i].sum, "length %zu seed %llu", known[i].len,
               (unsigned long long)known[i].seed);
        CHECK(ref_hash64(buf, known[i].len, known[i].seed) == known[i].sum);
    }
    /* Every length against the reference, from every alignment of the data. */
    for (size_t len = 0; len <= 700; len++)
        CHECKF(kn_hash64_of(buf + len % 8, len, 7) == ref_hash64(buf + len % 8, len, 7), "length %zu", len);
    /* Any split of the data gives the one-shot result: two parts, and many small odd-sized ones. */
    const uint64_t whole = kn_hash64_of(buf, 1000, 42);
    for (size_t split = 0; split <= 1000; split += 37) {
        kn_hash64 h;
        kn_hash64_init(&h, 42);
        kn_hash64_update(&h, buf, split);
        CHECK(kn_hash64_final(&h) == kn_hash64_of(buf, split, 42)); /* final leaves h usable */
        kn_hash64_update(&h, buf + split, 1000 - split);
        CHECK(kn_hash64_final(&h) == whole);
    }
    kn_hash64 h;
    kn_hash64_init(&h, 0);
    for (size_t at = 0, step = 1; at < sizeof buf; at += step, step = step % 97 + 13)
        kn_hash64_update(&h, buf + at, KN_MIN(step, sizeof buf - at));
    CHECK(kn_hash64_final(&h) == kn_hash64_of(buf, sizeof buf, 0));
    CHECK(kn_hash64_of(buf, 1000, 43) != whole);
    for (int i = 0; i < 1000; i += 13) { /* every single-bit change shows */
        buf[i] ^= 1;
        CHECK(kn_hash64_of(buf, 1000, 42) != whole);
        buf[i] ^= 1;
    }
    CHECK(kn_hash64_of(buf, 999, 42) != kn_hash64_of(buf, 1000, 42));
    CHECK(kn_hash64_of(NULL, 0, 1) != kn_hash64_of(NULL, 0, 2));
    uint8_t zeros[128] = {0}; /* trailing zeros count: the length is absorbed */
    CHECK(kn_hash64_of(zeros, 64, 0) != kn_hash64_of(zeros, 65, 0));
    CHECK(kn_hash64_of(zeros, 0, 0) != kn_hash64_of(zeros, 1, 0));
}

/* Writes an entry of n tokens (key `key`) to path; true on success. */
static bool write_file(const char *path, const kn_ssdf_key *key, const int32_t *tokens, int32_t n, const kn_kv *kv) {
    uint8_t *k = malloc((size_t)kv->n_layer * n * kv->k_row), *v = malloc((size_t)kv->n_layer * n * kv->v_row);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    bool ok = k && v && fd >= 0;
    if (ok) pack(kv, n, k, v);
    ok = ok && kn_ssdf_write(fd, key, tokens, (uint32_t)n, k, v, NULL) == KILN_OK;
    if (fd >= 0) close(fd);
    free(k);
    free(v);
    return ok;
}

static kn_ssdf_result read_file(const char *path, const kn_ssdf_key *expect, int32_t m, kn_kv *dst, bool verify) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return KN_SSDF_IO;
    kn_ssdf_header h;
    kn_ssdf_result r = kn_ssdf_read_header(fd, expect, &h);
    if (!r) {
        const size_t n_ctx = (size_t)dst->n_ctx;
        r = kn_ssdf_read_rows(fd, &h, (uint32_t)m, dst->k, n_ctx * dst->k_row, dst->v, n_ctx * dst->v_row, verify);
        kn_ssdf_header_free(&h);
    }
    close(fd);
    return r;
}

static void test_file_format(void) {
    kn_kv src, dst;
    CHECK(kn_kv_init(&src, KN_F32, 2, 64, 8) == KILN_OK);
    CHECK(kn_kv_init(&dst, KN_F32, 2, 64, 8) == KILN_OK);
    kt_fill_kv(&src, 40, 0.5f);
    int32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = 100 + i;
    const kn_ssdf_key key = test_key(1), other = test_key(2);
    char path[600];
    snprintf(path, sizeof path, "%s/format.kv", kt_tmpdir());
    CHECK(write_file(path, &key, toks, 40, &src));
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == kn_ssdf_file_size(&key, 40));
    /* Round trip: the header, all rows, a prefix of the rows, with and without verify. */
    int fd = open(path, O_RDONLY);
    kn_ssdf_header h;
    CHECK(kn_ssdf_read_header(fd, &key, &h) == KN_SSDF_OK);
    CHECK(h.n_tokens == 40 && memcmp(h.tokens, toks, sizeof toks) == 0);
    kn_ssdf_header_free(&h);
    close(fd);
    CHECK(read_file(path, &key, 40, &dst, true) == KN_SSDF_OK && kt_same_rows(&src, &dst, 40));
    memset(dst.k, 0, kn_kv_bytes(&dst) / 2);
    CHECK(read_file(path, &key, 17, &dst, true) == KN_SSDF_OK && kt_same_rows(&src, &dst, 17));
    CHECK(read_file(path, &key, 17, &dst, false) == KN_SSDF_OK && kt_same_rows(&src, &dst, 17));
    CHECK(read_file(path, NULL, 40, &dst, true) == KN_SSDF_OK); /* any key */
    CHECK(read_file(path, &other, 40, &dst, true) == KN_SSDF_MISMATCH);
    /* A flipped byte in the header (a token id): always caught, by the header checksum. */
    const char *dir = kt_tmpdir();
    CHECK(flip_byte(dir, "format.kv", 112 + 4 * 7));
    CHECK(read_file(path, &key, 40, &dst, false) == KN_SSDF_CORRUPT);
    CHECK(flip_byte(dir, "format.kv", 112 + 4 * 7));
    CHECK(flip_byte(dir, "format.kv", 20)); /* the fingerprint itself */
    CHECK(read_file(path, &key, 40, &dst, false) == KN_SSDF_CORRUPT);
    CHECK(flip_byte(dir, "format.kv", 20));
    /* A flipped byte in tensor data: caught with verify, also when only a prefix is used. */
    CHECK(flip_byte(dir, "format.kv", -3));
    CHECK(read_file(path, &key, 40, &dst, true) == KN_SSDF_CORRUPT);
    CHECK(read_file(path, &key, 5, &dst, true) == KN_SSDF_CORRUPT);
    CHECK(read_file(path, &key, 5, &dst, false) == KN_SSDF_OK); /* without verify: not read */
    CHECK(flip_byte(dir, "format.kv", -3));
    CHECK(read_file(path, &key, 40, &dst, true) == KN_SSDF_OK);
    /* Truncated: in the data, in the header, to nothing; and an appended byte. */
    CHECK(truncate_by(dir, "format.kv", 1));
    CHECK(read_file(path, &key, 40, &dst, false) == KN_SSDF_TRUNCATED);
    CHECK(truncate(path, 200) == 0 && read_file(path, &key, 40, &dst, false) == KN_SSDF_TRUNCATED);
    CHECK(truncate(path, 0) == 0 && read_file(path, &key, 40, &dst, false) == KN_SSDF_CORRUPT);
    CHECK(write_file(path, &key, toks, 40, &src));
    FILE *f = fopen(path, "ab");
    CHECK(f && fputc(0, f) == 0 && fclose(f) == 0);
    CHECK(read_file(path, &key, 40, &dst, false) == KN_SSDF_CORRUPT);
    /* Hostile counts: caught before they size anything. */
    CHECK(write_file(path, &key, toks, 40, &src));
    fd = open(path, O_RDWR);
    const uint8_t huge[4] = {0xff, 0xff, 0xff, 0x7f};
    CHECK(pwrite(fd, huge, 4, 92) == 4); /* n_tokens */
    close(fd);
    CHECK(read_file(path, &key, 40, &dst, false) == KN_SSDF_CORRUPT);
    CHECK(write_file(path, &key, toks, 40, &src));
    fd = open(path, O_RDWR);
    CHECK(pwrite(fd, huge, 4, 84) == 4); /* n_layer */
    close(fd);
    CHECK(read_file(path, &key, 40, &dst, false) == KN_SSDF_CORRUPT);
    f = fopen(path, "wb");
    CHECK(f &&
          fputs("not a cache file at all, just some text that is long enough to fill a header .........."
                "..............................................................",
                f) >= 0 &&
          fclose(f) == 0);
    CHECK(read_file(path, &key, 40, &dst, false) == KN_SSDF_CORRUPT);
    /* Another version (an earlier one computed its checksums differently; a later one may change
     * the layout) is refused before anything else is read. */
    for (uint8_t ver = 1; ver <= 3; ver += 2) {
        CHECK(write_file(path, &key, toks, 40, &src));
        fd = open(path, O_RDWR);
        const uint8_t v[4] = {ver, 0, 0, 0};
        CHECK(pwrite(fd, v, 4, 8) == 4);
        close(fd);
        CHECK(read_file(path, &key, 40, &dst, false) == KN_SSDF_OTHER_VERSION);
        CHECK(read_file(path, NULL, 40, &dst, true) == KN_SSDF_OTHER_VERSION);
    }
    unlink(path);
    kn_kv_free(&src);
    kn_kv_free(&dst);
}

/* ---- the tier on its own ------------------------------------------------------------------------- */

typedef struct held {
    int32_t tokens[64];
    int32_t n;
    uint8_t k[2 * 64 * 8 * 4], v[2 * 64 * 8 * 4];
    int released;
    bool on_ssd;
} held;

static void held_release(void *user, bool on_ssd) {
    held *h = user;
    h->released++;
    h->on_ssd = on_ssd;
}

/* Files of the quantized KV formats: a q8_0 (rotated) file and one of q4_0 keys with f16 values (K
 * and V tensors of different sizes) round-trip; read under another format's key they are a
 * mismatch, never data of that format. */
static void test_kv_type_files(void) {
    const kn_kv_format fmts[2] = {{.k = KN_KVT_Q8_0, .v = KN_KVT_Q8_0, .rot_k = true, .rot_v = true},
                                  {.k = KN_KVT_Q4_0, .v = KN_KVT_F16, .rot_k = true}};
    for (int f = 0; f < 2; f++) {
        kn_kv src, dst;
        CHECK(kn_kv_init_fmt(&src, &fmts[f], 2, 64, 2, 32) == KILN_OK);
        CHECK(kn_kv_init_fmt(&dst, &fmts[f], 2, 64, 2, 32) == KILN_OK);
        for (int32_t l = 0; l < 2; l++)
            for (int32_t p = 0; p < 40; p++) {
                float k[64], v[64];
                for (int i = 0; i < 64; i++) k[i] = (float)((l * 7 + p * 3 + i) % 11) - 5, v[i] = -k[i] * 0.5f;
                kn_kv_store(&src, l, p, k, v);
            }
        int32_t toks[40];
        for (int i = 0; i < 40; i++) toks[i] = 300 + i;
        kn_ssdf_key key = test_key(1), f16 = test_key(1);
        key.kv_type = kn_kv_format_code(&fmts[f], 32);
        key.kv_dim = f16.kv_dim = 64;
        f16.kv_type = KN_SSDF_F16;
        CHECK(key.kv_type != KN_SSDF_F16 && key.kv_type != KN_SSDF_F32);
        char path[600];
        snprintf(path, sizeof path, "%s/typed%d.kv", kt_tmpdir(), f);
        CHECK(write_file(path, &key, toks, 40, &src));
        struct stat sb;
        CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == kn_ssdf_file_size(&key, 40));
        CHECK(kn_ssdf_file_size(&key, 40) < kn_ssdf_file_size(&f16, 40));
        CHECK(read_file(path, &key, 40, &dst, true) == KN_SSDF_OK && kt_same_rows(&src, &dst, 40));
        CHECK(read_file(path, &key, 9, &dst, true) == KN_SSDF_OK && kt_same_rows(&src, &dst, 9));
        CHECK(read_file(path, &f16, 40, &dst, true) == KN_SSDF_MISMATCH);
        kn_kv_free(&src);
        kn_kv_free(&dst);
    }
}

/* Queues tokens[n] with the K/V of kv (F32, 2 layers, kv_dim 8) through h. */
static bool put(kn_ssd *s, held *h, const int32_t *tokens, int32_t n, const kn_kv *kv) {
    memcpy(h->tokens, tokens, (size_t)n * sizeof *tokens);
    h->n = n;
    h->released = 0;
    pack(kv, n, h->k, h->v);
    const kn_ssd_src src = {.tokens = h->tokens, .n = n, .k = h->k, .v = h->v, .release = held_release, .user = h};
    return kn_ssd_enqueue(s, &src);
}

static kn_ssd *open_tier(const char *dir, uint64_t max_bytes, bool verify) {
    kn_ssd_params p;
    memset(&p, 0, sizeof p);
    p.dir = dir;
    p.max_bytes = max_bytes;
    p.verify = verify;
    p.key = test_key(1);
    p.max_pending = 1 << 20;
    kn_ssd *s = NULL;
    kn_ssd_open(&p, &s);
    return s;
}

/* Writes n entries of 40 tokens, t[e][i] = base * (e + 1) + i, with the K/V of src through s (h[e]
 * holds entry e), each flushed before the next; true when all were written. */
static bool write_entries(kn_ssd *s, const kn_kv *src, int n, int32_t base, int32_t t[][40], held *h) {
    for (int e = 0; e < n; e++) {
        for (int i = 0; i < 40; i++) t[e][i] = base * (e + 1) + i;
        if (!put(s, &h[e], t[e], 40, src) || kn_ssd_flush(s, 5000) != KILN_OK || !h[e].on_ssd) return false;
    }
    return true;
}

/* Deletes dir's index with its -wal and -shm files; true when the index itself was there. */
static bool delete_index(const char *dir) {
    static const char *const parts[] = {"", "-wal", "-shm"};
    bool had = false;
    for (int i = 0; i < 3; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/index.sqlite%s", dir, parts[i]);
        const bool gone = unlink(p) == 0;
        had |= i == 0 && gone;
    }
    return had;
}

static void test_tier_roundtrip(void) {
    const char *dir = fresh_dir("tier");
    kn_kv src, dst;
    CHECK(kn_kv_init(&src, KN_F32, 2, 64, 8) == KILN_OK);
    CHECK(kn_kv_init(&dst, KN_F32, 2, 64, 8) == KILN_OK);
    kt_fill_kv(&src, 60, 0.25f);
    int32_t a[60], b[60];
    for (int i = 0; i < 60; i++) a[i] = b[i] = 7 + i;
    b[30] = 999;
    kn_ssd *s = open_tier(dir, 1 << 20, false);
    CHECK(s);
    static held h1, h2, h3;
    CHECK(put(s, &h1, a, 40, &src));
    CHECK(kn_ssd_flush(s, 5000) == KILN_OK);
    CHECK(h1.released == 1 && h1.on_ssd);
    kn_ssd_stats st;
    kn_ssd_get_stats(s, &st);
    const kn_ssdf_key key = test_key(1);
    CHECK(st.entries == 1 && st.writes == 1 && st.pending == 0 && st.bytes == kn_ssdf_file_size(&key, 40));
    /* Restore: the whole entry, a prefix, nothing below min_len, nothing for other tokens. */
    CHECK(kn_ssd_restore(s, a, 60, 0, &dst) == 40 && dst.n_past == 40 && kt_same_rows(&src, &dst, 40));
    dst.n_past = 0;
    CHECK(kn_ssd_restore(s, b, 60, 0, &dst) == 30 && kt_same_rows(&src, &dst, 30));
    CHECK(kn_ssd_restore(s, a, 60, 40, &dst) == 0); /* RAM already has 40 */
    CHECK(kn_ssd_restore(s, a, 25, 0, &dst) == 25); /* capped by the caller */
    int32_t c[10] = {1, 2, 3};
    CHECK(kn_ssd_restore(s, c, 10, 0, &dst) == 0);
    /* Covered: the same tokens again, or fewer, write nothing. */
    CHECK(put(s, &h2, a, 30, &src));
    CHECK(kn_ssd_flush(s, 5000) == KILN_OK && h2.released == 1 && h2.on_ssd);
    kn_ssd_get_stats(s, &st);
    CHECK(st.writes == 1 && st.entries == 1);
    /* Supersession: an extension replaces the file it extends. */
    char before[4][32], after[4][32];
    CHECK(list_kv(dir, before, 4) == 1);
    CHECK(put(s, &h3, a, 60, &src));
    CHECK(kn_ssd_flush(s, 5000) == KILN_OK);
    kn_ssd_get_stats(s, &st);
    CHECK(st.writes == 2 && st.entries == 1);
    CHECK(list_kv(dir, after, 4) == 1 && strcmp(before[0], after[0]) != 0);
    CHECK(kn_ssd_restore(s, a, 60, 0, &dst) == 60 && kt_same_rows(&src, &dst, 60));
    /* A different branch is a second file. */
    CHECK(put(s, &h1, b, 50, &src));
    CHECK(kn_ssd_flush(s, 5000) == KILN_OK);
    kn_ssd_get_stats(s, &st);
    CHECK(st.entries == 2);
    CHECK(kn_ssd_restore(s, b, 60, 0, &dst) == 50);
    kn_ssd_close(s);
    /* Restart: both entries are back, with verification on. */
    s = open_tier(dir, 1 << 20, true);
    CHECK(s);
    kn_ssd_get_stats(s, &st);
    CHECK(st.entries == 2 && st.quarantined == 0 && st.errors == 0);
    memset(dst.k, 0, kn_kv_bytes(&dst) / 2);
    CHECK(kn_ssd_restore(s, a, 60, 0, &dst) == 60 && kt_same_rows(&src, &dst, 60));
    /* Another key in the same directory sees none of them and leaves them alone. */
    kn_ssd_params p;
    memset(&p, 0, sizeof p);
    p.dir = dir;
    p.max_bytes = 1 << 20;
    p.key = test_key(9);
    p.max_pending = 1 << 20;
    kn_ssd *o = NULL;
    CHECK(kn_ssd_open(&p, &o) == KILN_OK);
    kn_ssd_get_stats(o, &st);
    CHECK(st.entries == 0 && st.quarantined == 0 && st.bytes > 0);
    CHECK(kn_ssd_restore(o, a, 60, 0, &dst) == 0);
    kn_ssd_close(o);
    kn_ssd_get_stats(s, &st);
    CHECK(st.entries == 2);
    kn_ssd_close(s);
    /* Entries queued when the tier closes are released unwritten. */
    s = open_tier(dir, 1 << 20, false);
    CHECK(s);
    kn_ssd_close(s);
    kn_kv_free(&src);
    kn_kv_free(&dst);
}

static void test_lru_cap(void) {
    const char *dir = fresh_dir("lru");
    kn_kv src, dst;
    CHECK(kn_kv_init(&src, KN_F32, 2, 64, 8) == KILN_OK);
    CHECK(kn_kv_init(&dst, KN_F32, 2, 64, 8) == KILN_OK);
    kt_fill_kv(&src, 40, 1.0f);
    const kn_ssdf_key key = test_key(1);
    const uint64_t one = kn_ssdf_file_size(&key, 40);
    kn_ssd *s = open_tier(dir, 2 * one + one / 2, false); /* room for two */
    CHECK(s);
    int32_t t[4][40];
    static held h[4];
    for (int e = 0; e < 4; e++) {
        for (int i = 0; i < 40; i++) t[e][i] = 1000 * (e + 1) + i;
        CHECK(put(s, &h[e], t[e], 40, &src));
        CHECK(kn_ssd_flush(s, 5000) == KILN_OK);
        if (e == 1) { /* entry 0 used again: entry 1 becomes the oldest */
            usleep(5000);
            CHECK(kn_ssd_restore(s, t[0], 40, 0, &dst) == 40);
            CHECK(kn_ssd_flush(s, 5000) == KILN_OK); /* the touch reaches the index */
            usleep(5000);
        }
    }
    kn_ssd_stats st;
    kn_ssd_get_stats(s, &st);
    CHECKF(st.entries == 2 && st.evictions == 2 && st.bytes <= st.budget, "entries %d evictions %llu bytes %llu",
           st.entries, (unsigned long long)st.evictions, (unsigned long long)st.bytes);
    char names[8][32];
    CHECK(list_kv(dir, names, 8) == 2);
    CHECK(kn_ssd_restore(s, t[3], 40, 0, &dst) == 40); /* the newest stayed */
    CHECK(kn_ssd_restore(s, t[1], 40, 0, &dst) == 0);  /* the least recently used went */
    CHECK(kn_ssd_restore(s, t[2], 40, 0, &dst) == 0 || kn_ssd_restore(s, t[0], 40, 0, &dst) == 0);
    /* An entry larger than the whole cap is not written at all. */
    kn_ssd_close(s);
    s = open_tier(dir, one / 2, false);
    CHECK(s);
    kn_ssd_get_stats(s, &st);
    CHECK(st.entries == 0 && st.evictions == 2 && list_kv(dir, names, 8) == 0);
    CHECK(put(s, &h[0], t[0], 40, &src) && kn_ssd_flush(s, 5000) == KILN_OK);
    CHECK(h[0].released == 1 && !h[0].on_ssd);
    kn_ssd_get_stats(s, &st);
    CHECK(st.writes == 0 && st.errors == 0);
    kn_ssd_close(s);
    kn_kv_free(&src);
    kn_kv_free(&dst);
}

/* Index rows whose files vanished are dropped (at start-up and at restore), not quarantined;
 * temporary files of dead writers are deleted; valid files without a row are re-indexed; a broken
 * index is set aside and rebuilt from the files. */
static void test_index_repair(void) {
    const char *dir = fresh_dir("repair");
    kn_kv src, dst;
    CHECK(kn_kv_init(&src, KN_F32, 2, 64, 8) == KILN_OK);
    CHECK(kn_kv_init(&dst, KN_F32, 2, 64, 8) == KILN_OK);
    kt_fill_kv(&src, 40, 2.0f);
    int32_t t[3][40];
    static held h[3];
    kn_ssd *s = open_tier(dir, 1 << 20, false);
    CHECK(s && write_entries(s, &src, 3, 500, t, h));
    char names[8][32], p[1024];
    CHECK(list_kv(dir, names, 8) == 3);
    /* Vanishing while running: the restore falls back, the entry is forgotten. */
    snprintf(p, sizeof p, "%s/%s", dir, names[0]);
    CHECK(unlink(p) == 0);
    int hits = 0;
    for (int e = 0; e < 3; e++) hits += kn_ssd_restore(s, t[e], 40, 0, &dst) == 40;
    CHECK(hits == 2);
    kn_ssd_stats st;
    kn_ssd_get_stats(s, &st);
    CHECK(st.entries == 2 && st.quarantined == 0);
    kn_ssd_close(s);
    /* Vanishing while stopped. */
    snprintf(p, sizeof p, "%s/%s", dir, names[1]);
    CHECK(unlink(p) == 0);
    s = open_tier(dir, 1 << 20, false);
    CHECK(s);
    kn_ssd_get_stats(s, &st);
    CHECK(st.entries == 1 && st.quarantined == 0);
    kn_ssd_close(s);
    /* A temporary file of a dead process goes; a deleted index is rebuilt from the files. */
    long pid_max = 4194304;
    FILE *pm = fopen("/proc/sys/kernel/pid_max", "r");
    if (pm) {
        if (fscanf(pm, "%ld", &pid_max) != 1) pid_max = 4194304;
        fclose(pm);
    }
    snprintf(p, sizeof p, "%s/%s.tmp.%ld", dir, names[2], pid_max + 1);
    FILE *f = fopen(p, "w");
    CHECK(f && fputs("partial", f) >= 0 && fclose(f) == 0);
    CHECK(delete_index(dir));
    s = open_tier(dir, 1 << 20, false);
    CHECK(s);
    kn_ssd_get_stats(s, &st);
    CHECK(st.entries == 1 && !kt_exists(p));
    hits = 0;
    for (int e = 0; e < 3; e++) hits += kn_ssd_restore(s, t[e], 40, 0, &dst) == 40 && kt_same_rows(&src, &dst, 40);
    CHECK(hits == 1);
    kn_ssd_close(s);
    /* A damaged index: set aside into quarantine/, rebuilt. */
    char idx[1024];
    snprintf(idx, sizeof idx, "%s/index.sqlite", dir);
    f = fopen(idx, "r+b");
    CHECK(f);
    char junk[4096];
    memset(junk, 'x', sizeof junk);
    CHECK(fwrite(junk, 1, sizeof junk, f) == sizeof junk && fclose(f) == 0);
    snprintf(idx, sizeof idx, "%s/index.sqlite-wal", dir);
    unlink(idx);
    s = open_tier(dir, 1 << 20, false);
    CHECK(s);
    kn_ssd_get_stats(s, &st);
    CHECKF(st.entries == 1 && st.quarantined == 1, "entries %d quarantined %llu", st.entries,
           (unsigned long long)st.quarantined);
    hits = 0;
    for (int e = 0; e < 3; e++) hits += kn_ssd_restore(s, t[e], 40, 0, &dst) == 40;
    CHECK(hits == 1);
    kn_ssd_close(s);
    /* quarantine/ keeps the newest 32 files. */
    char q[700];
    snprintf(q, sizeof q, "%s/quarantine", dir);
    for (int i = 0; i < 40; i++) {
        snprintf(p, sizeof p, "%s/old-%02d", q, i);
        f = fopen(p, "w");
        CHECK(f && fclose(f) == 0);
    }
    CHECK(list_kv(dir, names, 8) == 1 && flip_byte(dir, names[0], 100));
    s = open_tier(dir, 1 << 20, false);
    CHECK(s);
    kn_ssd_get_stats(s, &st);
    CHECK(st.entries == 0 && st.quarantined == 1);
    kn_ssd_close(s);
    CHECKF(count_files(q) == 32, "%d files in quarantine/", count_files(q));
    CHECK(file_exists(q, names[0]));
    kn_kv_free(&src);
    kn_kv_free(&dst);
}

/* A write that fails (here: the file size limit, as a full disk would) is counted and the entry is
 * simply not cached; the tier goes on working. */
static void test_write_error(void) {
    const char *dir = fresh_dir("errors");
    kn_kv src, dst;
    CHECK(kn_kv_init(&src, KN_F32, 2, 64, 8) == KILN_OK);
    CHECK(kn_kv_init(&dst, KN_F32, 2, 64, 8) == KILN_OK);
    kt_fill_kv(&src, 40, 3.0f);
    int32_t t[40];
    for (int i = 0; i < 40; i++) t[i] = 300 + i;
    kn_ssd *s = open_tier(dir, 1 << 20, false);
    CHECK(s);
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = {2048, old.rlim_max};
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    static held h;
    const bool queued = put(s, &h, t, 40, &src);
    const kiln_status fl = kn_ssd_flush(s, 5000);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(queued && fl == KILN_OK);
    CHECK(h.released == 1 && !h.on_ssd);
    kn_ssd_stats st;
    kn_ssd_get_stats(s, &st);
    CHECK(st.errors == 1 && st.writes == 0 && st.entries == 0);
    char names[4][32];
    CHECK(list_kv(dir, names, 4) == 0 && count_files(dir) <= 4); /* no partial or temporary file */
    CHECK(kn_ssd_restore(s, t, 40, 0, &dst) == 0);
    CHECK(put(s, &h, t, 40, &src) && kn_ssd_flush(s, 5000) == KILN_OK && h.on_ssd); /* works again */
    CHECK(kn_ssd_restore(s, t, 40, 0, &dst) == 40);
    kn_ssd_close(s);
    kn_kv_free(&src);
    kn_kv_free(&dst);
}

static void test_bad_dir(void) {
    char file[600], sub[700];
    snprintf(file, sizeof file, "%s/plainfile", kt_tmpdir());
    FILE *f = fopen(file, "w");
    CHECK(f && fclose(f) == 0);
    snprintf(sub, sizeof sub, "%s/below/a/file", file);
    kn_ssd_params p;
    memset(&p, 0, sizeof p);
    p.max_bytes = 1 << 20;
    p.key = test_key(1);
    kn_ssd *s = NULL;
    p.dir = sub;
    CHECK(kn_ssd_open(&p, &s) == KILN_ERR_IO && !s);
    CHECK(strstr(kiln_last_error(), "cannot create the SSD cache directory"));
    p.dir = file;
    CHECK(kn_ssd_open(&p, &s) == KILN_ERR_IO && !s);
    p.dir = "";
    CHECK(kn_ssd_open(&p, &s) == KILN_ERR_INVALID_ARG && !s);
    /* Nested directories that do not exist yet are created. */
    snprintf(sub, sizeof sub, "%s/new/nested/dir", kt_tmpdir());
    p.dir = sub;
    CHECK(kn_ssd_open(&p, &s) == KILN_OK && s);
    kn_ssd_close(s);
}

/* Rewrites the version field of dir/name (as a file of another format version would have it). */
static bool set_version(const char *dir, const char *name, uint8_t version) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    const int fd = open(p, O_RDWR);
    const uint8_t v[4] = {version, 0, 0, 0};
    const bool ok = fd >= 0 && pwrite(fd, v, 4, 8) == 4;
    if (fd >= 0) close(fd);
    return ok;
}

/* Files of format version 1 (an earlier kiln, whose checksum function differs) in the directory:
 * at start-up, indexed or not, they are quarantined and counted, never loaded. */
static void test_old_version(void) {
    const char *dir = fresh_dir("oldver");
    kn_kv src, dst;
    CHECK(kn_kv_init(&src, KN_F32, 2, 64, 8) == KILN_OK);
    CHECK(kn_kv_init(&dst, KN_F32, 2, 64, 8) == KILN_OK);
    kt_fill_kv(&src, 40, 4.0f);
    int32_t t[2][40];
    static held h[2];
    kn_ssd *s = open_tier(dir, 1 << 20, true);
    CHECK(s && write_entries(s, &src, 2, 700, t, h));
    kn_ssd_close(s);
    char names[4][32], q[700];
    snprintf(q, sizeof q, "%s/quarantine", dir);
    CHECK(list_kv(dir, names, 4) == 2);
    /* Indexed files. */
    CHECK(set_version(dir, names[0], 1) && set_version(dir, names[1], 1));
    s = open_tier(dir, 1 << 20, true);
    CHECK(s);
    kn_ssd_stats st;
    kn_ssd_get_stats(s, &st);
    CHECKF(st.entries == 0 && st.quarantined == 2, "entries %d quarantined %llu", st.entries,
           (unsigned long long)st.quarantined);
    CHECK(kn_ssd_restore(s, t[0], 40, 0, &dst) == 0 && kn_ssd_restore(s, t[1], 40, 0, &dst) == 0);
    CHECK(file_exists(q, names[0]) && file_exists(q, names[1]) && list_kv(dir, names, 4) == 0);
    /* A file without an index row (as after a crash, or an index deleted by hand). */
    CHECK(put(s, &h[0], t[0], 40, &src) && kn_ssd_flush(s, 5000) == KILN_OK);
    kn_ssd_close(s);
    CHECK(list_kv(dir, names, 4) == 1 && set_version(dir, names[0], 1) && delete_index(dir));
    s = open_tier(dir, 1 << 20, true);
    CHECK(s);
    kn_ssd_get_stats(s, &st);
    CHECK(st.entries == 0 && st.quarantined == 1 && list_kv(dir, names, 4) == 0);
    CHECK(kn_ssd_restore(s, t[0], 40, 0, &dst) == 0);
    kn_ssd_close(s);
    kn_kv_free(&src);
    kn_kv_free(&dst);
}

/* ---- through the engine ------------------------------------------------------------------------ */

/* An engine with the default settings (verification on) but for these sizes; NULL on failure. */
static kiln_engine *engine(kiln_model *m, int n_ctx, int64_t ram, const char *dir, int idle) {
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = n_ctx;
    ep.max_rows = 2;
    ep.prefill_chunk = 16;
    ep.prompt_cache = ram;
    ep.ssd_dir = dir;
    ep.ssd_max_bytes = 64 << 20;
    ep.ssd_demote_idle_s = idle;
    kiln_engine *e = NULL;
    kiln_engine_new(m, &ep, &e);
    return e;
}

#define N_PROMPTS 4
#define PLEN      70
#define GEN       16

typedef struct world {
    kiln_model *m;
    kiln_token p[N_PROMPTS][PLEN + GEN + 20];  /* prompt k: PLEN tokens; its "next turn" follows */
    kt_out cold[N_PROMPTS], cold2[N_PROMPTS];  /* outputs without any cache */
    kiln_token p2[N_PROMPTS][PLEN + GEN + 20]; /* next turn: prompt + reply + 10 tokens */
    int n2;
} world;

static world W;

/* Loads stories260K and the cold outputs of the prompts and their next turns. */
static bool world_init(void) {
    if (W.m) return true;
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path) || kiln_model_load(path, NULL, &W.m) != KILN_OK) return false;
    kiln_engine *cold = engine(W.m, 256, 0, NULL, 0);
    if (!cold) return false;
    kiln_generate_result r;
    for (int k = 0; k < N_PROMPTS; k++) {
        for (int i = 0; i < PLEN; i++) W.p[k][i] = (kiln_token)(1 + (i * 37 + k * 101) % 500);
        if (kt_generate(cold, W.p[k], PLEN, GEN, &W.cold[k], &r)) return false;
        memcpy(W.p2[k], W.p[k], PLEN * sizeof(kiln_token));
        memcpy(W.p2[k] + PLEN, W.cold[k].toks, GEN * sizeof(kiln_token));
        for (int i = 0; i < 10; i++) W.p2[k][PLEN + GEN + i] = (kiln_token)(9 + i * 13 + k);
        W.n2 = PLEN + GEN + 10;
        if (kt_generate(cold, W.p2[k], (size_t)W.n2, GEN, &W.cold2[k], &r)) return false;
    }
    kiln_engine_free(cold);
    return true;
}

static void test_engine_restart(void) {
    if (!world_init()) SKIP("no model");
    const char *dir = fresh_dir("engine");
    const char *hash = kiln_model_tokenizer_hash(W.m);
    CHECK(hash && strlen(hash) == 64);
    /* Run 1: every prompt once (misses); entries go to SSD at once (idle 0). */
    kiln_engine *e = engine(W.m, 256, 64 << 20, dir, 0);
    CHECK(e);
    kt_out o;
    kiln_generate_result r;
    for (int k = 0; k < N_PROMPTS; k++) {
        CHECK(kt_generate(e, W.p[k], PLEN, GEN, &o, &r) == KILN_OK && r.n_cached == 0 && kt_same_out(&o, &W.cold[k]));
    }
    CHECK(kiln_engine_flush_cache(e, 5000) == KILN_OK);
    kiln_engine_stats es;
    kiln_engine_get_stats(e, &es);
    CHECKF(es.ssd_enabled && es.ssd_entries == N_PROMPTS && es.ssd_writes == N_PROMPTS && es.ssd_pending == 0,
           "entries %d writes %llu", es.ssd_entries, (unsigned long long)es.ssd_writes);
    kiln_engine_free(e);
    /* Run 2 (a restart): the next turns hit the SSD and give the cold outputs. */
    e = engine(W.m, 256, 64 << 20, dir, 30);
    CHECK(e);
    for (int k = 0; k < N_PROMPTS; k++) {
        CHECK(kt_generate(e, W.p2[k], (size_t)W.n2, GEN, &o, &r) == KILN_OK);
        CHECKF(r.n_cached == PLEN + GEN - 1, "prompt %d: cached %d", k, r.n_cached);
        CHECK(kt_same_out(&o, &W.cold2[k]));
    }
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_hits == N_PROMPTS && es.ssd_hit_tokens == (uint64_t)N_PROMPTS * (PLEN + GEN - 1));
    /* Again: now from RAM (the turn was published when it ended). */
    CHECK(kt_generate(e, W.p2[0], (size_t)W.n2, GEN, &o, &r) == KILN_OK && r.n_cached == W.n2 - 1);
    CHECK(kt_same_out(&o, &W.cold2[0]));
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_hits == N_PROMPTS);
    /* Idle 30 s: nothing was demoted yet; a flush writes the new turns at once. */
    CHECK(es.ssd_writes == 0);
    CHECK(kiln_engine_flush_cache(e, 5000) == KILN_OK);
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_writes == N_PROMPTS && es.ssd_entries == N_PROMPTS); /* each superseded its turn 1 */
    kiln_engine_free(e);
    /* Run 3: a smaller context: restores a prefix of longer files (and checks all of them). */
    e = engine(W.m, 48, 64 << 20, dir, 30);
    CHECK(e);
    CHECK(kt_generate(e, W.p[1], 40, 4, &o, &r) == KILN_OK && r.n_cached == 39);
    kiln_engine *cold = engine(W.m, 48, 0, NULL, 0);
    kt_out c;
    CHECK(cold && kt_generate(cold, W.p[1], 40, 4, &c, &r) == KILN_OK && kt_same_out(&o, &c));
    kiln_engine_free(cold);
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_hits == 1 && es.ssd_quarantined == 0);
    kiln_engine_free(e);
    /* The SSD tier with the RAM tier off: entries go straight to SSD and come back from there. */
    const char *dir2 = fresh_dir("engine-noram");
    e = engine(W.m, 256, 0, dir2, 30);
    CHECK(e);
    CHECK(kt_generate(e, W.p[2], PLEN, GEN, &o, &r) == KILN_OK && r.n_cached == 0);
    CHECK(kiln_engine_flush_cache(e, 5000) == KILN_OK);
    CHECK(kt_generate(e, W.p2[2], (size_t)W.n2, GEN, &o, &r) == KILN_OK && r.n_cached == PLEN + GEN - 1);
    CHECK(kt_same_out(&o, &W.cold2[2]));
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_hits == 1 && es.cache_entries == 0);
    kiln_engine_free(e);
    /* A directory that cannot be created fails the engine with a clear error. */
    char bad[700];
    snprintf(bad, sizeof bad, "%s/plainfile2", kt_tmpdir());
    FILE *f = fopen(bad, "w");
    CHECK(f && fclose(f) == 0);
    strcat(bad, "/sub");
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 64;
    ep.ssd_dir = bad;
    kiln_engine *none = NULL;
    CHECK(kiln_engine_new(W.m, &ep, &none) == KILN_ERR_IO && !none);
    CHECK(strstr(kiln_last_error(), "SSD cache directory"));
}

/* RAM evictions are written in the background: a RAM budget of about one entry and idle demotion
 * off still leaves every prompt on SSD. */
static void test_engine_eviction(void) {
    if (!world_init()) SKIP("no model");
    const char *dir = fresh_dir("evict");
    /* stories260K: 5 layers x 32 KV dims x F16 x 2 = 640 bytes per token; one entry < 64 KiB. */
    kiln_engine *e = engine(W.m, 256, 80000, dir, 100000);
    CHECK(e);
    kt_out o;
    kiln_generate_result r;
    for (int k = 0; k < N_PROMPTS; k++) CHECK(kt_generate(e, W.p[k], PLEN, GEN, &o, &r) == KILN_OK);
    kiln_engine_stats es;
    kiln_engine_get_stats(e, &es);
    CHECK(es.cache_entries == 1);
    /* Without a flush: wait for the background writes of the evicted entries. */
    for (int i = 0; i < 500; i++) {
        kiln_engine_get_stats(e, &es);
        if (es.ssd_writes == N_PROMPTS - 1 && !es.ssd_pending) break;
        usleep(10000);
    }
    CHECKF(es.ssd_writes == N_PROMPTS - 1, "writes %llu", (unsigned long long)es.ssd_writes);
    for (int k = 0; k < N_PROMPTS; k++) {
        CHECK(kt_generate(e, W.p2[k], (size_t)W.n2, GEN, &o, &r) == KILN_OK && r.n_cached == PLEN + GEN - 1);
        CHECK(kt_same_out(&o, &W.cold2[k]));
    }
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_hits >= N_PROMPTS - 1); /* each published turn evicts the next prompt's entry from RAM */
    kiln_engine_free(e);
}

/* Idle demotion: an entry unused for ssd_demote_idle_s seconds is written in the background and
 * stays in RAM. */
static void test_engine_idle_demotion(void) {
    if (!world_init()) SKIP("no model");
    const char *dir = fresh_dir("idle");
    kiln_engine *e = engine(W.m, 256, 64 << 20, dir, 1);
    CHECK(e);
    kt_out o;
    kiln_generate_result r;
    const double t0 = kn_now_ms();
    CHECK(kt_generate(e, W.p[0], PLEN, GEN, &o, &r) == KILN_OK);
    kiln_engine_stats es;
    kiln_engine_get_stats(e, &es);
    const bool early = es.ssd_writes == 0 || kn_now_ms() - t0 >= 1000;
    for (int i = 0; i < 300 && es.ssd_writes == 0; i++) {
        usleep(10000);
        kiln_engine_get_stats(e, &es);
    }
    const double waited = kn_now_ms() - t0;
    CHECK(early);
    CHECKF(es.ssd_writes == 1 && waited >= 1000, "writes %llu after %.0f ms", (unsigned long long)es.ssd_writes,
           waited);
    CHECK(es.cache_entries == 1 && es.ssd_entries == 1);
    /* Used again from RAM: nothing more to write (its file covers it). */
    CHECK(kt_generate(e, W.p[0], PLEN, GEN, &o, &r) == KILN_OK && r.n_cached == PLEN - 1);
    CHECK(kiln_engine_flush_cache(e, 5000) == KILN_OK);
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_writes == 1 && es.ssd_hits == 0);
    kiln_engine_free(e);
}

/* Writes the N_PROMPTS first turns into dir with one engine and returns the file of each prompt
 * in names[k]. */
static bool populate(const char *dir, char names[N_PROMPTS][32]) {
    kiln_engine *e = engine(W.m, 256, 64 << 20, dir, 0);
    if (!e) return false;
    char seen[16][32];
    int n_seen = 0;
    bool ok = true;
    for (int k = 0; ok && k < N_PROMPTS; k++) {
        kt_out o;
        kiln_generate_result r;
        ok = kt_generate(e, W.p[k], PLEN, GEN, &o, &r) == KILN_OK && kiln_engine_flush_cache(e, 5000) == KILN_OK;
        char now[16][32];
        const int n = list_kv(dir, now, 16);
        ok = ok && n == n_seen + 1;
        for (int i = 0; ok && i < n; i++) {
            bool old = false;
            for (int j = 0; j < n_seen; j++) old |= strcmp(now[i], seen[j]) == 0;
            if (!old) memcpy(names[k], now[i], 32);
        }
        memcpy(seen, now, sizeof now);
        n_seen = n;
    }
    kiln_engine_free(e);
    return ok;
}

/* A cache file of another model (a generated tiny Llama): NULL when kiln-gen is unavailable. */
static const char *foreign_file(void) {
    static char path[1024];
    if (path[0]) return path;
    const char *b = getenv("BUILD");
    char model[600], cmd[1600];
    snprintf(model, sizeof model, "%s/tiny-llama.gguf", kt_tmpdir());
    snprintf(cmd, sizeof cmd, "%s/kiln-gen --preset tiny-llama --type F32 --seed 3 -o %s >/dev/null 2>&1",
             b && *b ? b : "build", model);
    if (system(cmd) != 0) return NULL;
    kiln_model *m;
    if (kiln_model_load(model, NULL, &m) != KILN_OK) return NULL;
    const char *dir = fresh_dir("foreign");
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 128;
    ep.ssd_dir = dir;
    ep.ssd_demote_idle_s = 0;
    kiln_engine *e = NULL;
    bool ok = kiln_engine_new(m, &ep, &e) == KILN_OK;
    kiln_token p[40];
    for (int i = 0; i < 40; i++) p[i] = (kiln_token)(1 + i);
    kt_out o;
    kiln_generate_result r;
    ok = ok && kt_generate(e, p, 40, 4, &o, &r) == KILN_OK && kiln_engine_flush_cache(e, 5000) == KILN_OK;
    kiln_engine_free(e);
    kiln_model_free(m);
    char names[4][32];
    if (!ok || list_kv(dir, names, 4) != 1) return NULL;
    snprintf(path, sizeof path, "%s/%s", dir, names[0]);
    return path;
}

static bool copy_over(const char *from, const char *dir, const char *name) {
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/%s'", from, dir, name);
    return system(cmd) == 0;
}

/* Damaged files found by the start-up checks (header flip, truncation, another model) and at
 * restore (a data flip): skipped, quarantined, counted; the answers stay correct. */
static void test_engine_corrupt_startup(void) {
    if (!world_init()) SKIP("no model");
    const char *foreign = foreign_file();
    if (!foreign) SKIP("kiln-gen unavailable");
    const char *dir = fresh_dir("corrupt");
    char names[N_PROMPTS][32];
    CHECK(populate(dir, names));
    CHECK(flip_byte(dir, names[0], 112 + 4 * 3)); /* a token id in the header */
    CHECK(truncate_by(dir, names[1], 700));
    CHECK(copy_over(foreign, dir, names[2]));
    CHECK(flip_byte(dir, names[3], -100)); /* tensor data */
    kiln_engine *e = engine(W.m, 256, 64 << 20, dir, 30);
    CHECK(e);
    kiln_engine_stats es;
    kiln_engine_get_stats(e, &es);
    CHECKF(es.ssd_quarantined == 3 && es.ssd_entries == 1, "quarantined %llu entries %d",
           (unsigned long long)es.ssd_quarantined, es.ssd_entries);
    kt_out o;
    kiln_generate_result r;
    for (int k = 0; k < N_PROMPTS; k++) {
        CHECK(kt_generate(e, W.p2[k], (size_t)W.n2, GEN, &o, &r) == KILN_OK);
        CHECKF(r.n_cached == 0, "prompt %d restored %d tokens from a damaged file", k, r.n_cached);
        CHECK(kt_same_out(&o, &W.cold2[k]));
    }
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_quarantined == 4 && es.ssd_entries == 0 && es.ssd_hits == 0);
    kiln_engine_free(e);
    char q[700];
    snprintf(q, sizeof q, "%s/quarantine", dir);
    for (int k = 0; k < N_PROMPTS; k++) CHECK(file_exists(q, names[k]) && !file_exists(dir, names[k]));
}

/* The same damage done while the engine runs (after its start-up checks): found at restore. */
static void test_engine_corrupt_restore(void) {
    if (!world_init()) SKIP("no model");
    const char *foreign = foreign_file();
    if (!foreign) SKIP("kiln-gen unavailable");
    const char *dir = fresh_dir("corrupt2");
    char names[N_PROMPTS][32];
    CHECK(populate(dir, names));
    /* RAM off, so every hit would have to come from SSD. */
    kiln_engine *e = engine(W.m, 256, 0, dir, 30);
    kiln_engine *v = NULL;
    CHECK(e);
    kiln_engine_stats es;
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_entries == N_PROMPTS && es.ssd_quarantined == 0);
    CHECK(flip_byte(dir, names[0], 40)); /* the tokenizer hash */
    CHECK(truncate_by(dir, names[1], 1));
    CHECK(copy_over(foreign, dir, names[2]));
    kt_out o;
    kiln_generate_result r;
    for (int k = 0; k < 3; k++) {
        CHECK(kt_generate(e, W.p2[k], (size_t)W.n2, GEN, &o, &r) == KILN_OK && r.n_cached == 0);
        CHECK(kt_same_out(&o, &W.cold2[k]));
    }
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_quarantined == 3 && es.ssd_hits == 0);
    /* The intact file still restores. */
    CHECK(kt_generate(e, W.p2[3], (size_t)W.n2, GEN, &o, &r) == KILN_OK && r.n_cached == PLEN + GEN - 1);
    CHECK(kt_same_out(&o, &W.cold2[3]));
    CHECK(kiln_engine_flush_cache(e, 5000) == KILN_OK); /* the four answered turns are files now */
    kiln_engine_free(e);
    /* Data damage in every file: not seen by the start-up checks (headers only), caught at
     * restore. */
    char now[16][32];
    const int n = list_kv(dir, now, 16);
    CHECK(n == N_PROMPTS);
    for (int i = 0; i < n; i++) CHECK(flip_byte(dir, now[i], -5));
    v = engine(W.m, 256, 0, dir, 30);
    CHECK(v);
    kiln_engine_get_stats(v, &es);
    CHECK(es.ssd_entries == N_PROMPTS && es.ssd_quarantined == 0);
    CHECK(kt_generate(v, W.p2[3], (size_t)W.n2, GEN, &o, &r) == KILN_OK && r.n_cached == 0);
    CHECK(kt_same_out(&o, &W.cold2[3]));
    kiln_engine_get_stats(v, &es);
    CHECK(es.ssd_quarantined == 1 && es.ssd_hits == 0);
    kiln_engine_free(v);
}

/* Flips one byte of the data part of dir/name: byte 5 of its first tensor (the K row of position 0
 * in layer 0, which every restore of the file reads). */
static bool flip_data_byte(const char *dir, const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    const int fd = open(p, O_RDONLY);
    kn_ssdf_header h;
    const bool ok = fd >= 0 && kn_ssdf_read_header(fd, NULL, &h) == KN_SSDF_OK;
    if (fd >= 0) close(fd);
    if (!ok) return false;
    const uint64_t at = h.data_offset + 5;
    kn_ssdf_header_free(&h);
    return flip_byte(dir, name, (long)at);
}

/* A byte flipped in the data part of a file (not its header): with the engine's default settings
 * the file fails its tensor checksum at restore, is quarantined and counted, and the request
 * computes its prefix, giving the output of an engine without any cache. Verification off (for
 * benchmarks only) loads the damaged K/V: the hit is taken and nothing is quarantined. */
static void test_engine_data_damage(void) {
    if (!world_init()) SKIP("no model");
    CHECK(kiln_engine_default_params().ssd_verify);
    for (int verify = 1; verify >= 0; verify--) {
        const char *dir = fresh_dir(verify ? "damage" : "damage-noverify");
        char names[N_PROMPTS][32];
        CHECK(populate(dir, names));
        CHECK(flip_data_byte(dir, names[0]));
        kiln_engine_params ep = kiln_engine_default_params(); /* nothing but sizes changed */
        ep.n_ctx = 256;
        ep.prompt_cache = 0; /* every hit comes from SSD */
        ep.ssd_dir = dir;
        if (!verify) ep.ssd_verify = false;
        kiln_engine *e = NULL;
        CHECK(kiln_engine_new(W.m, &ep, &e) == KILN_OK);
        kiln_engine_stats es;
        kiln_engine_get_stats(e, &es);
        CHECK(es.ssd_entries == N_PROMPTS && es.ssd_quarantined == 0); /* the header is sound */
        kt_out o;
        kiln_generate_result r;
        CHECK(kt_generate(e, W.p2[0], (size_t)W.n2, GEN, &o, &r) == KILN_OK);
        kiln_engine_get_stats(e, &es);
        if (verify) {
            CHECKF(r.n_cached == 0, "restored %d tokens from a damaged file", r.n_cached);
            CHECK(kt_same_out(&o, &W.cold2[0]));
            CHECK(es.ssd_quarantined == 1 && es.ssd_hits == 0);
            /* The answered turn is written in the background (the RAM tier is off): it takes the
             * damaged file's place, beside the three intact ones. */
            CHECK(kiln_engine_flush_cache(e, 5000) == KILN_OK);
            kiln_engine_get_stats(e, &es);
            CHECKF(es.ssd_entries == N_PROMPTS && es.ssd_quarantined == 1, "entries %d", es.ssd_entries);
            char q[700];
            snprintf(q, sizeof q, "%s/quarantine", dir);
            CHECK(file_exists(q, names[0]) && !file_exists(dir, names[0]));
            /* The intact files pass their checks and restore. */
            CHECK(kt_generate(e, W.p2[1], (size_t)W.n2, GEN, &o, &r) == KILN_OK && r.n_cached == PLEN + GEN - 1);
            CHECK(kt_same_out(&o, &W.cold2[1]));
        } else {
            CHECK(r.n_cached == PLEN + GEN - 1 && es.ssd_hits == 1 && es.ssd_quarantined == 0);
        }
        kiln_engine_free(e);
    }
}

/* An SSD directory filled by a q8_0 engine: an f16 engine on it finds nothing of it (a miss, no
 * quarantine) and computes the cold output; a q8_0 engine again restores from it. */
static void test_engine_kv_types(void) {
    if (!world_init()) SKIP("no model");
    const char *dir = fresh_dir("kvtypes");
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 256;
    ep.max_rows = 2;
    ep.prefill_chunk = 16;
    ep.prompt_cache = 0;
    ep.ssd_dir = dir;
    ep.ssd_max_bytes = 64 << 20;
    ep.ssd_demote_idle_s = 0;
    ep.kv_type = KILN_KV_Q8_0;
    kiln_engine *e = NULL;
    CHECK(kiln_engine_new(W.m, &ep, &e) == KILN_OK);
    kt_out o, q8;
    kiln_generate_result r;
    CHECK(kt_generate(e, W.p[0], PLEN, GEN, &q8, &r) == KILN_OK && r.n_cached == 0);
    CHECK(kiln_engine_flush_cache(e, 5000) == KILN_OK);
    kiln_engine_stats es;
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_writes == 1 && es.kv_type_k == KILN_KV_Q8_0 && es.kv_rotate_k);
    CHECK(es.kv_bytes_per_token > 0 && es.kv_bytes_per_token < kiln_model_kv_bytes_per_token(W.m, KILN_KV_F16));
    kiln_engine_free(e);
    ep.kv_type = KILN_KV_F16;
    CHECK(kiln_engine_new(W.m, &ep, &e) == KILN_OK);
    CHECK(kt_generate(e, W.p[0], PLEN, GEN, &o, &r) == KILN_OK && r.n_cached == 0 && kt_same_out(&o, &W.cold[0]));
    /* its own turn is written in the background (the RAM tier is off): flushed first, so the count
     * does not race with the writer; the q8_0 file is not among its entries */
    CHECK(kiln_engine_flush_cache(e, 5000) == KILN_OK);
    kiln_engine_get_stats(e, &es);
    CHECKF(es.ssd_hits == 0 && es.ssd_quarantined == 0 && es.ssd_entries == 1, "hits %d quarantined %d entries %d",
           (int)es.ssd_hits, (int)es.ssd_quarantined, (int)es.ssd_entries);
    kiln_engine_free(e);
    ep.kv_type = KILN_KV_Q8_0;
    CHECK(kiln_engine_new(W.m, &ep, &e) == KILN_OK);
    CHECK(kt_generate(e, W.p[0], PLEN, GEN, &o, &r) == KILN_OK && r.n_cached == PLEN - 1 && kt_same_out(&o, &q8));
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_hits == 1 && es.ssd_quarantined == 0);
    kiln_engine_free(e);
}

int main(void) {
    RUN(test_checksum);
    RUN(test_file_format);
    RUN(test_kv_type_files);
    RUN(test_tier_roundtrip);
    RUN(test_lru_cap);
    RUN(test_index_repair);
    RUN(test_write_error);
    RUN(test_bad_dir);
    RUN(test_old_version);
    RUN(test_engine_restart);
    RUN(test_engine_eviction);
    RUN(test_engine_idle_demotion);
    RUN(test_engine_corrupt_startup);
    RUN(test_engine_corrupt_restore);
    RUN(test_engine_data_damage);
    RUN(test_engine_kv_types);
    if (W.m) kiln_model_free(W.m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", kt_tmpdir());
    if (system(cmd) != 0) printf("  (could not remove %s)\n", kt_tmpdir());
    return kt_summary();
}
