/*
 * test_safetensors.c - tests of the safetensors reader (src/model/safetensors.c), the Hugging Face / MLX
 * directory loader (src/model/hf.c) and the converter (tools/kiln-hf.c).
 *
 * - Hand-built files: a good file parses with the right dtypes, shapes and bytes; every kind of bad
 *   header (truncation, a header length over the file, bad JSON, duplicate names, unknown dtype, size
 *   mismatch, overlap, hole, trailing bytes, a range past the end, overflowing shapes) is a clean
 *   KILN_ERR_FORMAT naming the file and the tensor; truncating a good file at every length never crashes.
 * - Sharded directories: the index and its shards; a missing shard, a tensor in the wrong shard or
 *   missing from the index are errors naming them.
 * - MLX dequantization on known answers for 2, 3, 4, 6 and 8 bits: w = scale * q + bias exactly.
 * - Round trip: kiln-gen models of every dense family converted by kiln-hf to F32 open through kn_hf_open
 *   with the same hyperparameter keys and bit-identical tensors (names, types, shapes, bytes) as the GGUF;
 *   so does stories260K. MLX 4-bit copies become Q4_1 whose values equal the MLX formula; 8-bit become
 *   F16 within rounding of it.
 * - Directory errors: missing config key, unknown model_type, missing tokenizer.json, wrong dtype.
 * - The fingerprint and tokenizer hash of a directory: stable, and changed by its weights / tokenizer.json.
 */
#include "harness.h"

#include "kiln.h"
#include "model/gguf.h"
#include "model/hf.h"
#include "model/safetensors.h"
#include "tensor/dtype.h"

#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int slot;
    char *b = buf[slot++ & 3];
    snprintf(b, sizeof buf[0], "%s/%s", kt_tmpdir(), name);
    return b;
}

/* Writes header JSON + data bytes as a safetensors file (hlen_override != 0 writes that length). */
static void write_st(const char *path, const char *json, const void *data, size_t n, uint64_t hlen_override) {
    FILE *f = fopen(path, "wb");
    uint64_t hl = hlen_override ? hlen_override : strlen(json);
    fwrite(&hl, 8, 1, f);
    fwrite(json, 1, strlen(json), f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static kiln_status open_st(const char *json, const void *data, size_t n, uint64_t hl, kn_safetensors *st) {
    const char *p = tpath("t.safetensors");
    write_st(p, json, data, n, hl);
    memset(st, 0, sizeof *st);
    return kn_st_open_file(p, st);
}

static void test_good_file(void) {
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[2] = {0x3c00, 0x4000};
    uint8_t data[28];
    memcpy(data, a, 24);
    memcpy(data + 24, b, 4);
    kn_safetensors st;
    const char *j =
        "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[24,28]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}   ";
    CHECK(open_st(j, data, sizeof data, 0, &st) == KILN_OK);
    CHECK(st.n_tensors == 2);
    const kn_st_tensor *ta = kn_st_find(&st, "a"), *tb = kn_st_find(&st, "b");
    CHECK(ta && tb && !kn_st_find(&st, "c"));
    CHECK(ta->dtype == KN_ST_F32 && ta->n_dims == 2 && ta->shape[0] == 2 && ta->shape[1] == 3);
    CHECK(memcmp(ta->data, a, 24) == 0);
    float f[2];
    CHECK(kn_st_to_f32(tb, f) && f[0] == 1.0f && f[1] == 2.0f);
    kn_st_close(&st);
    /* every truncation is a clean error */
    const char *p = tpath("full.safetensors");
    write_st(p, j, data, sizeof data, 0);
    size_t len;
    char *bytes = kt_read_file(p, &len);
    CHECK(bytes);
    for (size_t cut = 0; cut < len; cut++) {
        FILE *fo = fopen(tpath("cut.safetensors"), "wb");
        fwrite(bytes, 1, cut, fo);
        fclose(fo);
        memset(&st, 0, sizeof st);
        kiln_status s = kn_st_open_file(tpath("cut.safetensors"), &st);
        CHECKF(s != KILN_OK && *kiln_last_error(), "cut at %zu", cut);
    }
    free(bytes);
}

static void expect_bad(const char *json, const void *data, size_t n, uint64_t hl, const char *needle) {
    kn_safetensors st;
    kiln_status s = open_st(json, data, n, hl, &st);
    if (s == KILN_OK) kn_st_close(&st);
    CHECKF(s == KILN_ERR_FORMAT, "'%s' gave status %d", json, (int)s);
    CHECKF(strstr(kiln_last_error(), needle) && strstr(kiln_last_error(), "t.safetensors"), "message '%s' lacks '%s'",
           kiln_last_error(), needle);
}

static void test_bad_headers(void) {
    uint8_t d[64] = {0};
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d, 8, 1000, "runs past the end");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d, 8, (uint64_t)1 << 40, "limit");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", d, 8, 0, "bad header JSON");
    expect_bad("[1,2]", d, 0, 0, "not a safetensors");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
               d, 16, 0, "duplicate");
    expect_bad("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", d, 8, 0, "unknown dtype");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", d, 8, 0, "'a'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               d, 12, 0, "overlaps");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", d, 12, 0, "hole");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d, 12, 0, "after the last");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", d, 8, 0, "extends past");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", d, 8, 0,
               "overflows");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}", d, 8, 0, "shape");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", d, 8, 0, "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", d, 8, 0, "data_offsets");
    expect_bad("{\"a\":5}", d, 0, 0, "not an object");
    expect_bad("{\"__metadata__\":[1]}", d, 0, 0, "__metadata__");
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

static void test_sharded(void) {
    char dir[512], p[600];
    snprintf(dir, sizeof dir, "%s/shards", kt_tmpdir());
    mkdir(dir, 0755);
    float v[4] = {1, 2, 3, 4};
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    write_st(p, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", v, 8, 0);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    write_st(p, "{\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", v + 2, 8, 0);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_text(p, "{\"metadata\":{},\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
                  "\"y\":\"model-00002-of-00002.safetensors\"}}");
    kn_safetensors st;
    CHECK(kn_st_open_dir(dir, &st) == KILN_OK);
    CHECK(st.n_files == 2 && st.n_tensors == 2);
    const kn_st_tensor *y = kn_st_find(&st, "y");
    float y1 = 0; /* the header's length leaves the data unaligned: read it as bytes */
    if (y) memcpy(&y1, (const uint8_t *)y->data + sizeof y1, sizeof y1);
    CHECK(y && y1 == 4.0f);
    kn_st_close(&st);
    /* wrong shard */
    write_text(
        p, "{\"weight_map\":{\"x\":\"model-00002-of-00002.safetensors\",\"y\":\"model-00002-of-00002.safetensors\"}}");
    CHECK(kn_st_open_dir(dir, &st) == KILN_ERR_FORMAT);
    CHECKF(strstr(kiln_last_error(), "'x'"), "%s", kiln_last_error());
    /* a tensor of a shard missing from the index */
    char p1[600];
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
    write_st(p1,
             "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
             v, 16, 0);
    write_text(p, "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
                  "\"y\":\"model-00002-of-00002.safetensors\"}}");
    CHECK(kn_st_open_dir(dir, &st) == KILN_ERR_FORMAT);
    CHECKF(strstr(kiln_last_error(), "missing from the index"), "%s", kiln_last_error());
    /* a missing shard */
    write_text(
        p, "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\",\"y\":\"model-00003-of-00002.safetensors\"}}");
    CHECK(kn_st_open_dir(dir, &st) == KILN_ERR_IO);
    CHECKF(strstr(kiln_last_error(), "model-00003-of-00002.safetensors"), "%s", kiln_last_error());
    /* a shard name that leaves the directory */
    write_text(p, "{\"weight_map\":{\"x\":\"../x.safetensors\"}}");
    CHECK(kn_st_open_dir(dir, &st) == KILN_ERR_FORMAT);
}

/* Packs values as a little-endian bit stream. */
static void pack_bits(const uint32_t *q, int n, int bits, uint8_t *out) {
    memset(out, 0, (size_t)(n * bits + 7) / 8 + 4);
    for (int k = 0; k < n; k++)
        for (int b = 0; b < bits; b++)
            if (q[k] >> b & 1) out[(k * bits + b) / 8] |= (uint8_t)(1u << ((k * bits + b) % 8));
}

static void test_mlx_known_answers(void) {
    static const int widths[] = {2, 3, 4, 6, 8};
    for (size_t wi = 0; wi < 5; wi++) {
        const int bits = widths[wi], group = 32, cols = 64;
        uint32_t q[64];
        for (int k = 0; k < cols; k++) q[k] = (uint32_t)(k * 7 + 3) % (1u << bits);
        uint8_t packed[64 + 8];
        pack_bits(q, cols, bits, packed);
        /* scales/biases in bf16: 0.5, -3 (group 0); 0.25, 1.5 (group 1) */
        uint16_t sc[2] = {kn_fp32_to_bf16(0.5f), kn_fp32_to_bf16(0.25f)},
                 bi[2] = {kn_fp32_to_bf16(-3.0f), kn_fp32_to_bf16(1.5f)};
        float out[64];
        kn_mlx_dequant(packed, (size_t)cols * bits / 8, (uint8_t *)sc, (uint8_t *)bi, KN_ST_BF16, bits, group, 1, cols,
                       out);
        for (int k = 0; k < cols; k++) {
            const float want = k < 32 ? 0.5f * (float)q[k] - 3.0f : 0.25f * (float)q[k] + 1.5f;
            CHECKF(out[k] == want, "%d bits, element %d: %g vs %g", bits, k, out[k], want);
        }
    }
}

/* ---- round trips through kiln-hf ------------------------------------------------------------------ */

static const char *tool(const char *name) {
    static char p[2][512];
    static int slot;
    const char *b = getenv("BUILD");
    char *o = p[slot++ & 1];
    snprintf(o, sizeof p[0], "%s/%s", b && *b ? b : "build", name);
    return o;
}

static int sh(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The GGUF's arch keys and tensors equal the directory's (F32 conversion: bytes equal after F32). */
static void compare_models(const char *gguf, const char *dir, bool exact_types) {
    kn_gguf a, b;
    CHECK(kn_gguf_open(gguf, &a) == KILN_OK);
    kiln_status s = kn_hf_open(dir, &b);
    CHECKF(s == KILN_OK, "%s", kiln_last_error());
    kn_str arch;
    CHECK(kn_gguf_get_str(&b, "general.architecture", &arch));
    static const char *const keys[] = {
        "embedding_length",        "block_count",  "feed_forward_length",     "attention.head_count",
        "attention.head_count_kv", "expert_count", "attention.sliding_window"};
    for (size_t i = 0; i < 7; i++) {
        char k[128];
        snprintf(k, sizeof k, "%.*s.%s", (int)arch.len, arch.ptr, keys[i]);
        int64_t x = -1, y = -1;
        kn_gguf_get_i64(&a, k, &x);
        kn_gguf_get_i64(&b, k, &y);
        CHECKF(x == y, "%s: %lld vs %lld", k, (long long)x, (long long)y);
    }
    char k[128];
    double x = 0, y = 0;
    snprintf(k, sizeof k, "%.*s.rope.freq_base", (int)arch.len, arch.ptr);
    if (kn_gguf_get_f64(&a, k, &x)) CHECK(kn_gguf_get_f64(&b, k, &y) && (float)x == (float)y);
    int compared = 0;
    for (uint64_t i = 0; i < a.n_tensors; i++) {
        const kn_gguf_tensor *t = &a.tensors[i];
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (!strcmp(name, "rope_freqs.weight")) continue;
        const kn_gguf_tensor *u = kn_gguf_find_tensor(&b, name);
        CHECKF(u, "%s: tensor %s missing from the directory", dir, name);
        CHECKF(memcmp(t->ne, u->ne, sizeof t->ne) == 0, "%s shape", name);
        const int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        float *fa = malloc((size_t)n * 4), *fb = malloc((size_t)n * 4);
        kn_type_traits_get(t->type)->to_float(t->data, fa, n);
        kn_type_traits_get(u->type)->to_float(u->data, fb, n);
        bool same = memcmp(fa, fb, (size_t)n * 4) == 0;
        free(fa);
        free(fb);
        CHECKF(same, "%s: tensor %s values differ", dir, name);
        if (exact_types) CHECKF(u->type == KN_F32, "%s type", name);
        compared++;
    }
    CHECK(compared > 0);
    kn_gguf_close(&a);
    kn_gguf_close(&b);
}

static void test_roundtrip_families(void) {
    if (access(tool("kiln-gen"), X_OK) || access(tool("kiln-hf"), X_OK)) SKIP("kiln-gen / kiln-hf not built");
    static const char *const presets[] = {"tiny-llama-plain", "tiny-qwen2", "tiny-qwen3",
                                          "tiny-gemma3",      "tiny-phi3",  "tiny-qwen3moe"};
    for (size_t i = 0; i < KN_ARRAY_LEN(presets); i++) {
        char cmd[2048], g[512], d[512];
        snprintf(g, sizeof g, "%s/%s.gguf", kt_tmpdir(), presets[i]);
        snprintf(d, sizeof d, "%s/%s-hf", kt_tmpdir(), presets[i]);
        snprintf(cmd, sizeof cmd, "%s --preset %s --type f32 -o %s >/dev/null 2>&1", tool("kiln-gen"), presets[i], g);
        CHECKF(sh(cmd) == 0, "%s", cmd);
        snprintf(cmd, sizeof cmd, "%s %s %s 2>/dev/null", tool("kiln-hf"), g, d);
        CHECKF(sh(cmd) == 0, "%s", cmd);
        compare_models(g, d, true);
        if (kt_cur_failed) {
            printf("  preset %s\n", presets[i]);
            return;
        }
    }
}

static void test_roundtrip_stories(void) {
    const char *g = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(g)) SKIP("no stories260K");
    if (access(tool("kiln-hf"), X_OK)) SKIP("kiln-hf not built");
    char cmd[2048], d[512];
    snprintf(d, sizeof d, "%s/stories-hf", kt_tmpdir());
    snprintf(cmd, sizeof cmd, "%s %s %s 2>/dev/null", tool("kiln-hf"), g, d);
    CHECKF(sh(cmd) == 0, "%s", cmd);
    compare_models(g, d, true);
}

/* MLX copies: 4-bit becomes Q4_1, every other width (8, 6, 3, 2 bits) MLX8, all with the formula's values
 * exactly. */
static void test_mlx_load(void) {
    const char *g = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(g)) SKIP("no stories260K");
    if (access(tool("kiln-hf"), X_OK)) SKIP("kiln-hf not built");
    static const int widths[] = {4, 8, 6, 3, 2};
    for (int wi = 0; wi < 5; wi++) {
        char cmd[2048], d[512];
        snprintf(d, sizeof d, "%s/stories-mlx%d", kt_tmpdir(), widths[wi]);
        snprintf(cmd, sizeof cmd, "%s %s %s --mlx-bits %d --mlx-group 32 2>/dev/null", tool("kiln-hf"), g, d,
                 widths[wi]);
        CHECKF(sh(cmd) == 0, "%s", cmd);
        kn_gguf h;
        CHECKF(kn_hf_open(d, &h) == KILN_OK, "%s", kiln_last_error());
        const kn_safetensors *st = kn_hf_safetensors(&h);
        CHECK(st);
        const kn_gguf_tensor *t = kn_gguf_find_tensor(&h, "blk.0.ffn_up.weight");
        CHECK(t && t->type == (widths[wi] == 4 ? KN_Q4_1 : KN_MLX8));
        const kn_st_tensor *w = kn_st_find(st, "model.layers.0.mlp.up_proj.weight"),
                           *s = kn_st_find(st, "model.layers.0.mlp.up_proj.scales"),
                           *b = kn_st_find(st, "model.layers.0.mlp.up_proj.biases");
        CHECK(w && s && b && w->dtype == KN_ST_U32);
        int bits, group;
        CHECK(kn_hf_mlx_params(&h, "model.layers.0.mlp.up_proj", &bits, &group) && bits == widths[wi] && group == 32);
        const int64_t rows = t->ne[1], cols = t->ne[0];
        float *ref = malloc((size_t)(rows * cols) * 4), *got = malloc((size_t)(rows * cols) * 4);
        kn_mlx_dequant(w->data, (size_t)w->shape[1] * 4, s->data, b->data, s->dtype, bits, group, rows, cols, ref);
        kn_type_traits_get(t->type)->to_float(t->data, got, rows * cols);
        bool ok = true;
        for (int64_t i = 0; i < rows * cols && ok; i++) ok = got[i] == ref[i];
        free(ref);
        free(got);
        kn_gguf_close(&h);
        CHECKF(ok, "%d-bit values differ from scale * q + bias", widths[wi]);
    }
}

static void test_dir_errors(void) {
    const char *g = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(g)) SKIP("no stories260K");
    if (access(tool("kiln-hf"), X_OK)) SKIP("kiln-hf not built");
    char cmd[2048], d[512], p[600];
    snprintf(d, sizeof d, "%s/broken", kt_tmpdir());
    snprintf(cmd, sizeof cmd, "%s %s %s 2>/dev/null", tool("kiln-hf"), g, d);
    CHECK(sh(cmd) == 0);
    kn_gguf h;
    snprintf(p, sizeof p, "%s/config.json", d);
    size_t n;
    char *cfg = kt_read_file(p, &n);
    CHECK(cfg);
    /* missing key */
    char *bad = strdup(cfg);
    char *hs = strstr(bad, "\"hidden_size\"");
    CHECK(hs);
    memcpy(hs, "\"hidden_sizX\"", 13);
    write_text(p, bad);
    CHECK(kn_hf_open(d, &h) == KILN_ERR_FORMAT);
    CHECKF(strstr(kiln_last_error(), "config.json") && strstr(kiln_last_error(), "hidden_size"), "%s",
           kiln_last_error());
    free(bad);
    /* unknown architecture */
    bad = strdup(cfg);
    char *mt = strstr(bad, "\"llama\"");
    CHECK(mt);
    memcpy(mt, "\"llamb\"", 7);
    write_text(p, bad);
    CHECK(kn_hf_open(d, &h) == KILN_ERR_UNSUPPORTED);
    CHECKF(strstr(kiln_last_error(), "llamb"), "%s", kiln_last_error());
    free(bad);
    write_text(p, cfg);
    free(cfg);
    /* wrong dtype: F64 */
    char st[600];
    snprintf(st, sizeof st, "%s/model.safetensors", d);
    rename(st, tpath("saved.safetensors"));
    double dv[2] = {1, 2};
    write_st(st, "{\"model.norm.weight\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", dv, 16, 0);
    CHECK(kn_hf_open(d, &h) == KILN_ERR_UNSUPPORTED);
    CHECKF(strstr(kiln_last_error(), "F64") && strstr(kiln_last_error(), "model.norm"), "%s", kiln_last_error());
    /* truncated weights */
    size_t len;
    char *bytes = kt_read_file(tpath("saved.safetensors"), &len);
    CHECK(bytes);
    FILE *f = fopen(st, "wb");
    fwrite(bytes, 1, len - 100, f);
    fclose(f);
    free(bytes);
    CHECK(kn_hf_open(d, &h) == KILN_ERR_FORMAT);
    CHECKF(strstr(kiln_last_error(), "model.safetensors"), "%s", kiln_last_error());
    rename(tpath("saved.safetensors"), st);
    /* no tokenizer.json */
    snprintf(p, sizeof p, "%s/tokenizer.json", d);
    rename(p, tpath("tok.json"));
    CHECK(kn_hf_open(d, &h) == KILN_ERR_IO);
    CHECKF(strstr(kiln_last_error(), "tokenizer.json"), "%s", kiln_last_error());
    rename(tpath("tok.json"), p);
    CHECK(kn_hf_open(d, &h) == KILN_OK);
    kn_gguf_close(&h);
}

/* The fingerprint and tokenizer hash cover a directory: the same directory loads with the same hashes,
 * an edit of tokenizer.json changes the tokenizer hash, and different weights change the fingerprint. */
static void test_fingerprint(void) {
    const char *g = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(g)) SKIP("no stories260K");
    if (access(tool("kiln-hf"), X_OK)) SKIP("kiln-hf not built");
    char cmd[2048], a[512], b[512], p[600];
    snprintf(a, sizeof a, "%s/fp-f32", kt_tmpdir());
    snprintf(b, sizeof b, "%s/fp-mlx4", kt_tmpdir());
    snprintf(cmd, sizeof cmd, "%s %s %s 2>/dev/null && %s %s %s --mlx-bits 4 --mlx-group 64 2>/dev/null",
             tool("kiln-hf"), g, a, tool("kiln-hf"), g, b);
    CHECK(sh(cmd) == 0);
    kiln_model_params mp = kiln_model_default_params();
    kiln_model *m1, *m2, *m3, *m4;
    CHECKF(kiln_model_load(a, &mp, &m1) == KILN_OK, "%s", kiln_last_error());
    CHECK(kiln_model_load(a, &mp, &m2) == KILN_OK);
    CHECK(kiln_model_load(b, &mp, &m3) == KILN_OK);
    CHECK(!strcmp(kiln_model_fingerprint(m1), kiln_model_fingerprint(m2)));
    CHECK(!strcmp(kiln_model_tokenizer_hash(m1), kiln_model_tokenizer_hash(m2)));
    CHECK(strcmp(kiln_model_fingerprint(m1), kiln_model_fingerprint(m3)) != 0);
    CHECK(!strcmp(kiln_model_tokenizer_hash(m1), kiln_model_tokenizer_hash(m3)));
    snprintf(p, sizeof p, "%s/tokenizer.json", a);
    FILE *f = fopen(p, "ab");
    CHECK(f);
    fputs("\n", f);
    fclose(f);
    CHECK(kiln_model_load(a, &mp, &m4) == KILN_OK);
    CHECK(strcmp(kiln_model_tokenizer_hash(m1), kiln_model_tokenizer_hash(m4)) != 0);
    kiln_model_free(m1);
    kiln_model_free(m2);
    kiln_model_free(m3);
    kiln_model_free(m4);
}

int main(void) {
    RUN(test_good_file);
    RUN(test_bad_headers);
    RUN(test_sharded);
    RUN(test_mlx_known_answers);
    RUN(test_roundtrip_stories);
    RUN(test_roundtrip_families);
    RUN(test_mlx_load);
    RUN(test_dir_errors);
    RUN(test_fingerprint);
    return kt_summary();
}
