/*
 * test_gguf.c - tests of the GGUF reader (src/model/gguf.c), the GGUF writer (tools/lib/gguf_write.c)
 * and the synthetic model generator (tools/kiln-gen.c).
 *
 * - Round trips: every metadata type, string arrays and tensors of several types and alignments go
 *   through the writer and come back identical through the reader.
 * - The real stories260K.gguf from ../shared/data parses with the expected shape.
 * - Hostile input: truncations at many offsets, byte flips and 0xFF runs over the header, metadata and
 *   tensor table, seeded random mutations, and hand-crafted bad files (huge counts, huge lengths,
 *   overflowing shapes, bad types, bad offsets and alignments, duplicates, wrong versions). Every case
 *   must end in a clean error with a message, or in a successful parse whose every view lies inside
 *   the file. Parses run over a copy of the bytes that ends exactly at a PROT_NONE guard page, so a read
 *   past the end crashes the test instead of passing silently.
 * - kiln-gen ($BUILD/kiln-gen, BUILD defaults to "build"): every tiny preset in every weight type gives
 *   a file with the expected metadata, tensor names, shapes and types and a self-consistent tokenizer;
 *   the same arguments and seed give byte-identical files regardless of the thread count.
 */
#include "harness.h"

#include "gguf_write.h"
#include "model/gguf.h"
#include "tensor/dtype.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define STORIES "models/stories260K/stories260K.gguf"

/* ---- helpers ----------------------------------------------------------------------------------- */

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int slot;
    char *b = buf[slot++ & 3];
    snprintf(b, sizeof buf[0], "%s/%s", kt_tmpdir(), name);
    return b;
}

static uint64_t rng_state = 0x1234567;
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A copy of some bytes placed so that they end exactly where a PROT_NONE page begins. */
typedef struct guarded {
    uint8_t *region;
    size_t region_len;
} guarded;

/* Parses a guarded copy of bytes[0..len) of which only the first `copy` bytes are copied (the rest
 * reads as zeros: the reader never looks at tensor data, so sweeps copy the header region plus a
 * margin instead of paying for the whole file every time). kn_gguf_parse owns the mapping it is given and unmaps it on
 * close; that munmap of an address inside our region either fails harmlessly (unaligned) or unmaps
 * the data pages, and guarded_free unmaps the whole region in any case. */
static kiln_status parse_guarded_n(const uint8_t *bytes, size_t len, size_t copy, kn_gguf *g, guarded *gr) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t data_pages = (len + page - 1) / page;
    gr->region_len = (data_pages + 1) * page;
    gr->region = mmap(NULL, gr->region_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (gr->region == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    mprotect(gr->region + data_pages * page, page, PROT_NONE);
    uint8_t *d = gr->region + data_pages * page - len;
    if (len) memcpy(d, bytes, KN_MIN(copy, len));
    kn_mapping map = {len ? d : NULL, len};
    kn_error_clear();
    return kn_gguf_parse(map, g);
}

static kiln_status parse_guarded(const uint8_t *bytes, size_t len, kn_gguf *g, guarded *gr) {
    return parse_guarded_n(bytes, len, len, g, gr);
}

#define SWEEP_MARGIN 4096

static void guarded_free(guarded *gr) {
    if (gr->region) munmap(gr->region, gr->region_len);
    gr->region = NULL;
}

/* After a successful parse: every view the reader hands out lies inside the mapping. Reads every
 * byte of every string so that the guard page would catch a view running past the end. */
static int views_inside(const kn_gguf *g) {
    const uint8_t *lo = g->map.data, *hi = g->map.data + g->map.size;
    volatile unsigned sum = 0;
#define IN(p, n) ((const uint8_t *)(p) >= lo && (uint64_t)(n) <= (uint64_t)(hi - (const uint8_t *)(p)))
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kn_gguf_kv *kv = &g->kv[i];
        if (!IN(kv->key.ptr, kv->key.len)) return 0;
        for (uint64_t k = 0; k < kv->key.len; k++) sum += (uint8_t)kv->key.ptr[k];
        if (kv->type == KN_GGUF_STRING && !IN(kv->str.ptr, kv->str.len)) return 0;
        if (kv->type == KN_GGUF_ARRAY) {
            if (kv->arr_type == KN_GGUF_STRING) {
                const uint8_t *cur = kv->arr_data;
                for (uint64_t k = 0; k < kv->arr_n; k++) {
                    if (!IN(cur, 8)) return 0;
                    kn_str s = kn_gguf_next_str(&cur);
                    if (!IN(s.ptr, s.len)) return 0;
                    if (s.len) sum += (uint8_t)s.ptr[s.len - 1];
                }
            } else {
                size_t es = kn_gguf_type_size(kv->arr_type);
                if (es == 0 || kv->arr_n > (uint64_t)(hi - lo) / es || !IN(kv->arr_data, kv->arr_n * es)) return 0;
            }
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kn_gguf_tensor *t = &g->tensors[i];
        if (!IN(t->name.ptr, t->name.len)) return 0;
        if (!IN(t->data, t->nbytes)) return 0;
        if (t->data < lo + g->data_offset) return 0;
        uint64_t want = kn_row_bytes(t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        if (want != t->nbytes) return 0;
    }
#undef IN
    (void)sum;
    return 1;
}

/* A parse outcome is acceptable when it failed cleanly with a message, or succeeded with every view
 * inside the file. Returns 0 on an unacceptable outcome (and describes it). */
static int outcome_ok(kiln_status st, const kn_gguf *g, const char *what, long where) {
    if (st == KILN_OK) {
        if (!views_inside(g)) {
            printf("  %s at %ld: parse succeeded with a view outside the file\n", what, where);
            return 0;
        }
        return 1;
    }
    if (st != KILN_ERR_FORMAT && st != KILN_ERR_UNSUPPORTED && st != KILN_ERR_IO) {
        printf("  %s at %ld: unexpected status %d (%s)\n", what, where, (int)st, kn_error_msg());
        return 0;
    }
    if (!kn_error_msg()[0]) {
        printf("  %s at %ld: status %d without a message\n", what, where, (int)st);
        return 0;
    }
    return 1;
}

static uint8_t *read_all(const char *path, size_t *len) { return (uint8_t *)kt_read_file(path, len); }

/* ---- writer -> reader round trips -------------------------------------------------------------- */

static void test_roundtrip_metadata(void) {
    kn_gguf_writer *w;
    CHECK(kn_gguf_writer_create(&w) == KILN_OK);
    CHECK(kn_gguf_writer_set_u8(w, "t.u8", 255) == KILN_OK);
    CHECK(kn_gguf_writer_set_i8(w, "t.i8", -128) == KILN_OK);
    CHECK(kn_gguf_writer_set_u16(w, "t.u16", 65535) == KILN_OK);
    CHECK(kn_gguf_writer_set_i16(w, "t.i16", -32768) == KILN_OK);
    CHECK(kn_gguf_writer_set_u32(w, "t.u32", 4000000000u) == KILN_OK);
    CHECK(kn_gguf_writer_set_i32(w, "t.i32", INT32_MIN) == KILN_OK);
    CHECK(kn_gguf_writer_set_f32(w, "t.f32", 1.5f) == KILN_OK);
    CHECK(kn_gguf_writer_set_bool(w, "t.bool_t", true) == KILN_OK);
    CHECK(kn_gguf_writer_set_bool(w, "t.bool_f", false) == KILN_OK);
    CHECK(kn_gguf_writer_set_u64(w, "t.u64", UINT64_MAX) == KILN_OK);
    CHECK(kn_gguf_writer_set_i64(w, "t.i64", INT64_MIN) == KILN_OK);
    CHECK(kn_gguf_writer_set_f64(w, "t.f64", 3.141592653589793) == KILN_OK);
    CHECK(kn_gguf_writer_set_str(w, "t.str", "h\xc3\xa9llo w\xc3\xb6rld") == KILN_OK);
    CHECK(kn_gguf_writer_set_str(w, "t.empty", "") == KILN_OK);
    CHECK(kn_gguf_writer_set_strn(w, "t.nul", "a\0b", 3) == KILN_OK);
    const uint8_t a_u8[] = {0, 1, 255};
    const int8_t a_i8[] = {-128, 0, 127};
    const uint16_t a_u16[] = {0, 65535};
    const int16_t a_i16[] = {-32768, 32767, -1};
    const uint32_t a_u32[] = {1, 2, 3, 4000000000u};
    const int32_t a_i32[] = {INT32_MIN, -1, 0, INT32_MAX};
    const float a_f32[] = {0.5f, -2.25f, 1e30f};
    const uint8_t a_bool[] = {1, 0, 7};
    const uint64_t a_u64[] = {UINT64_MAX, 0};
    const int64_t a_i64[] = {INT64_MIN, INT64_MAX, 5};
    const double a_f64[] = {1e-300, -0.0, 2.5};
    CHECK(kn_gguf_writer_set_arr(w, "a.u8", KN_GGUF_UINT8, a_u8, 3) == KILN_OK);
    CHECK(kn_gguf_writer_set_arr(w, "a.i8", KN_GGUF_INT8, a_i8, 3) == KILN_OK);
    CHECK(kn_gguf_writer_set_arr(w, "a.u16", KN_GGUF_UINT16, a_u16, 2) == KILN_OK);
    CHECK(kn_gguf_writer_set_arr(w, "a.i16", KN_GGUF_INT16, a_i16, 3) == KILN_OK);
    CHECK(kn_gguf_writer_set_arr(w, "a.u32", KN_GGUF_UINT32, a_u32, 4) == KILN_OK);
    CHECK(kn_gguf_writer_set_arr(w, "a.i32", KN_GGUF_INT32, a_i32, 4) == KILN_OK);
    CHECK(kn_gguf_writer_set_arr(w, "a.f32", KN_GGUF_FLOAT32, a_f32, 3) == KILN_OK);
    CHECK(kn_gguf_writer_set_arr(w, "a.bool", KN_GGUF_BOOL, a_bool, 3) == KILN_OK);
    CHECK(kn_gguf_writer_set_arr(w, "a.u64", KN_GGUF_UINT64, a_u64, 2) == KILN_OK);
    CHECK(kn_gguf_writer_set_arr(w, "a.i64", KN_GGUF_INT64, a_i64, 3) == KILN_OK);
    CHECK(kn_gguf_writer_set_arr(w, "a.f64", KN_GGUF_FLOAT64, a_f64, 3) == KILN_OK);
    CHECK(kn_gguf_writer_set_arr(w, "a.empty", KN_GGUF_INT32, NULL, 0) == KILN_OK);
    const char *strs[] = {"alpha", "", "\xc4\xa0the", "a b c"};
    CHECK(kn_gguf_writer_set_arr_str(w, "a.str", strs, 4) == KILN_OK);
    CHECK(kn_gguf_writer_set_arr_str(w, "a.str_empty", NULL, 0) == KILN_OK);
    const char *path = tpath("meta.gguf");
    CHECK(kn_gguf_writer_write(w, path) == KILN_OK);
    kn_gguf_writer_free(w);

    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(!kt_exists(tmp));
    kn_gguf g;
    CHECKF(kn_gguf_open(path, &g) == KILN_OK, "%s", kn_error_msg());
    CHECK(g.version == 3);
    CHECK(g.n_kv == 29);
    CHECK(g.n_tensors == 0);
    uint64_t u;
    int64_t i;
    double f;
    bool b;
    kn_str s;
    CHECK(kn_gguf_get_u64(&g, "t.u8", &u) && u == 255 && kn_gguf_find(&g, "t.u8")->type == KN_GGUF_UINT8);
    CHECK(kn_gguf_get_i64(&g, "t.i8", &i) && i == -128 && kn_gguf_find(&g, "t.i8")->type == KN_GGUF_INT8);
    CHECK(kn_gguf_get_u64(&g, "t.u16", &u) && u == 65535);
    CHECK(kn_gguf_get_i64(&g, "t.i16", &i) && i == -32768);
    CHECK(kn_gguf_get_u64(&g, "t.u32", &u) && u == 4000000000u);
    CHECK(kn_gguf_get_i64(&g, "t.i32", &i) && i == INT32_MIN);
    CHECK(kn_gguf_get_f64(&g, "t.f32", &f) && f == 1.5);
    CHECK(kn_gguf_get_bool(&g, "t.bool_t", &b) && b);
    CHECK(kn_gguf_get_bool(&g, "t.bool_f", &b) && !b);
    CHECK(kn_gguf_get_u64(&g, "t.u64", &u) && u == UINT64_MAX);
    CHECK(!kn_gguf_get_i64(&g, "t.u64", &i));
    CHECK(kn_gguf_get_i64(&g, "t.i64", &i) && i == INT64_MIN);
    CHECK(kn_gguf_get_f64(&g, "t.f64", &f) && f == 3.141592653589793);
    CHECK(kn_gguf_get_str(&g, "t.str", &s) && kn_str_eq(s, "h\xc3\xa9llo w\xc3\xb6rld"));
    CHECK(kn_gguf_get_str(&g, "t.empty", &s) && s.len == 0);
    CHECK(kn_gguf_get_str(&g, "t.nul", &s) && s.len == 3 && memcmp(s.ptr, "a\0b", 3) == 0);
    CHECK(kn_gguf_find(&g, "t.missing") == NULL);

    uint64_t n;
    const uint8_t *d;
#define ARR(key, et, arr)                                                                                              \
    CHECK(kn_gguf_get_arr(&g, key, et, &n, &d) && n == KN_ARRAY_LEN(arr) && memcmp(d, arr, sizeof arr) == 0)
    ARR("a.u8", KN_GGUF_UINT8, a_u8);
    ARR("a.i8", KN_GGUF_INT8, a_i8);
    ARR("a.u16", KN_GGUF_UINT16, a_u16);
    ARR("a.i16", KN_GGUF_INT16, a_i16);
    ARR("a.u32", KN_GGUF_UINT32, a_u32);
    ARR("a.i32", KN_GGUF_INT32, a_i32);
    ARR("a.f32", KN_GGUF_FLOAT32, a_f32);
    ARR("a.u64", KN_GGUF_UINT64, a_u64);
    ARR("a.i64", KN_GGUF_INT64, a_i64);
    ARR("a.f64", KN_GGUF_FLOAT64, a_f64);
#undef ARR
    CHECK(kn_gguf_get_arr(&g, "a.bool", KN_GGUF_BOOL, &n, &d) && n == 3 && d[0] == 1 && d[1] == 0 && d[2] == 1);
    CHECK(kn_gguf_get_arr(&g, "a.empty", KN_GGUF_INT32, &n, &d) && n == 0);
    CHECK(!kn_gguf_get_arr(&g, "a.u8", KN_GGUF_INT8, &n, &d));
    CHECK(kn_gguf_get_arr(&g, "a.str", KN_GGUF_STRING, &n, &d) && n == 4);
    for (uint64_t k = 0; k < n; k++) {
        kn_str e = kn_gguf_next_str(&d);
        CHECKF(kn_str_eq(e, strs[k]), "string %llu", (unsigned long long)k);
    }
    CHECK(kn_gguf_get_arr(&g, "a.str_empty", KN_GGUF_STRING, &n, &d) && n == 0);
    /* keys come back in insertion order */
    CHECK(kn_str_eq(g.kv[0].key, "t.u8") && kn_str_eq(g.kv[28].key, "a.str_empty"));
    kn_gguf_close(&g);
}

typedef struct fill_ctx {
    uint64_t row_bytes;
    int calls;
    int fail_at; /* call index that fails, -1 never */
} fill_ctx;

/* kn_gguf_fill_fn producing deterministic bytes (byte j of row r is a function of r and j; the reader
 * treats tensor data as opaque, so any bytes do). Fails on call number fail_at when that is >= 0. */
static kiln_status fill_pattern(void *user, int64_t row0, int64_t n_rows, void *dst) {
    fill_ctx *c = user;
    if (c->fail_at >= 0 && c->calls == c->fail_at) return kn_error(KILN_ERR_IO, "fill callback failed on purpose");
    c->calls++;
    uint8_t *p = dst;
    for (int64_t r = 0; r < n_rows; r++)
        for (uint64_t j = 0; j < c->row_bytes; j++)
            p[(uint64_t)r * c->row_bytes + j] = (uint8_t)(((uint64_t)(row0 + r) * 131 + j * 7 + 3) & 0xFF);
    return KILN_OK;
}

typedef struct rt_tensor {
    const char *name;
    uint32_t n_dims;
    int64_t ne[4];
    kn_dtype type;
    bool use_fn;
} rt_tensor;

static void roundtrip_tensors(uint32_t alignment) {
    static const rt_tensor ts[] = {
        {"f32.vec", 1, {7}, KN_F32, false},
        {"f16.mat", 2, {33, 5}, KN_F16, false},
        {"bf16.mat", 2, {16, 3}, KN_BF16, true},
        {"q4_0.mat", 2, {64, 3}, KN_Q4_0, false},
        {"q8_0.3d", 3, {32, 2, 3}, KN_Q8_0, true},
        {"q4_k.mat", 2, {512, 2}, KN_Q4_K, false},
        {"q6_k.4d", 4, {256, 1, 2, 2}, KN_Q6_K, true},
        {"q5_1.big", 2, {4096, 6000}, KN_Q5_1, true}, /* 18 MB: written in several fill chunks */
        {"blk.0.attn_q.weight", 2, {256, 256}, KN_Q5_K, false},
    };
    const size_t nt = KN_ARRAY_LEN(ts);
    uint8_t *want[16] = {0};
    kn_gguf_writer *w;
    CHECK(kn_gguf_writer_create(&w) == KILN_OK);
    if (alignment) CHECK(kn_gguf_writer_set_alignment(w, alignment) == KILN_OK);
    CHECK(kn_gguf_writer_set_str(w, "general.architecture", "test") == KILN_OK);
    fill_ctx ctx[16];
    for (size_t k = 0; k < nt; k++) {
        const rt_tensor *t = &ts[k];
        uint64_t nb = kn_gguf_writer_tensor_bytes(t->n_dims, t->ne, t->type);
        CHECK(nb > 0);
        uint64_t rb = kn_row_bytes(t->type, t->ne[0]);
        want[k] = malloc(nb);
        CHECK(want[k] != NULL);
        ctx[k] = (fill_ctx){rb, 0, -1};
        CHECK(fill_pattern(&ctx[k], 0, (int64_t)(nb / rb), want[k]) == KILN_OK);
        ctx[k].calls = 0;
        if (t->use_fn)
            CHECK(kn_gguf_writer_add_tensor_fn(w, t->name, t->n_dims, t->ne, t->type, fill_pattern, &ctx[k]) ==
                  KILN_OK);
        else CHECK(kn_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, want[k]) == KILN_OK);
    }
    const char *path = tpath("tensors.gguf");
    CHECKF(kn_gguf_writer_write(w, path) == KILN_OK, "%s", kn_error_msg());
    kn_gguf_writer_free(w);
    CHECK(ctx[7].calls >= 2); /* the 17 MB tensor was produced in several chunks */

    kn_gguf g;
    CHECKF(kn_gguf_open(path, &g) == KILN_OK, "%s", kn_error_msg());
    uint32_t al = alignment ? alignment : 32;
    CHECK(g.alignment == al);
    CHECK(g.data_offset % al == 0);
    CHECK(g.n_tensors == nt);
    uint64_t end = 0;
    for (size_t k = 0; k < nt; k++) {
        const rt_tensor *t = &ts[k];
        const kn_gguf_tensor *r = kn_gguf_find_tensor(&g, t->name);
        CHECKF(r != NULL, "%s", t->name);
        CHECK(r == &g.tensors[k]);
        CHECK(r->n_dims == t->n_dims && r->type == t->type);
        for (uint32_t d = 0; d < 4; d++) CHECK(r->ne[d] == (d < t->n_dims ? t->ne[d] : 1));
        CHECK(r->offset % al == 0);
        CHECK(r->nbytes == kn_gguf_writer_tensor_bytes(t->n_dims, t->ne, t->type));
        CHECKF(memcmp(r->data, want[k], r->nbytes) == 0, "data of %s", t->name);
        end = r->offset + r->nbytes;
    }
    /* the file ends with the last tensor padded to the alignment */
    CHECK(g.map.size == g.data_offset + (end + al - 1) / al * al);
    kn_gguf_close(&g);
    for (size_t k = 0; k < nt; k++) free(want[k]);
}

static void test_roundtrip_tensors_align32(void) { roundtrip_tensors(0); }
static void test_roundtrip_tensors_align64(void) { roundtrip_tensors(64); }
static void test_roundtrip_tensors_align1(void) { roundtrip_tensors(1); }
static void test_roundtrip_tensors_align4096(void) { roundtrip_tensors(4096); }

#define EXPECT_ERR(expr, code)                                                                                         \
    do {                                                                                                               \
        kn_error_clear();                                                                                              \
        kiln_status st_ = (expr);                                                                                      \
        CHECKF(st_ == (code), "status %d, message '%s'", (int)st_, kn_error_msg());                                    \
        CHECKF(kn_error_msg()[0] != 0, "no error message");                                                            \
    } while (0)

static void test_writer_errors(void) {
    kn_gguf_writer *w;
    CHECK(kn_gguf_writer_create(&w) == KILN_OK);
    CHECK(kn_gguf_writer_set_u32(w, "k", 1) == KILN_OK);
    EXPECT_ERR(kn_gguf_writer_set_u32(w, "k", 2), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_set_str(w, "k", "again"), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_set_u8(w, "", 1), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_set_str(w, "s", NULL), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_set_arr(w, "a", KN_GGUF_STRING, "x", 1), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_set_arr(w, "a", KN_GGUF_ARRAY, "x", 1), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_set_arr(w, "a", KN_GGUF_UINT64, "x", UINT64_MAX / 4), KILN_ERR_INVALID_ARG);
    const char *bad[] = {"a", NULL};
    EXPECT_ERR(kn_gguf_writer_set_arr_str(w, "a", bad, 2), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_set_u64(w, "general.alignment", 64), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_set_alignment(w, 0), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_set_alignment(w, 48), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_set_alignment(w, 1u << 21), KILN_ERR_INVALID_ARG);
    CHECK(kn_gguf_writer_set_u32(w, "general.alignment", 64) == KILN_OK);
    EXPECT_ERR(kn_gguf_writer_set_alignment(w, 128), KILN_ERR_INVALID_ARG);
    /* failed calls left nothing behind: the file holds exactly k and general.alignment */
    float data[64] = {0};
    int64_t ne[4] = {32, 2, 1, 1};
    CHECK(kn_gguf_writer_add_tensor(w, "t", 2, ne, KN_F32, data) == KILN_OK);
    EXPECT_ERR(kn_gguf_writer_add_tensor(w, "t", 2, ne, KN_F32, data), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_add_tensor(w, "", 2, ne, KN_F32, data), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_add_tensor(w, "u", 0, ne, KN_F32, data), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_add_tensor(w, "u", 5, ne, KN_F32, data), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_add_tensor(w, "u", 2, ne, (kn_dtype)17, data), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_add_tensor(w, "u", 2, ne, KN_Q4_K, data), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_add_tensor(w, "u", 2, ne, KN_F32, NULL), KILN_ERR_INVALID_ARG);
    int64_t ne0[2] = {0, 2}, neodd[2] = {33, 1}, nebig[4] = {INT64_MAX, INT64_MAX, 1, 1};
    EXPECT_ERR(kn_gguf_writer_add_tensor(w, "u", 2, ne0, KN_F32, data), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_add_tensor(w, "u", 2, neodd, KN_Q8_0, data), KILN_ERR_INVALID_ARG);
    EXPECT_ERR(kn_gguf_writer_add_tensor_fn(w, "u", 2, nebig, KN_F32, fill_pattern, NULL), KILN_ERR_INVALID_ARG);
    CHECK(kn_gguf_writer_tensor_bytes(2, neodd, KN_Q8_0) == 0);

    /* write failures leave no file and no temporary file */
    EXPECT_ERR(kn_gguf_writer_write(w, tpath("no/such/dir/x.gguf")), KILN_ERR_IO);
    EXPECT_ERR(kn_gguf_writer_write(w, kt_tmpdir()), KILN_ERR_IO);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", kt_tmpdir());
    CHECK(!kt_exists(tmp));
    const char *path = tpath("errors.gguf");
    CHECK(kn_gguf_writer_write(w, path) == KILN_OK);
    kn_gguf g;
    CHECK(kn_gguf_open(path, &g) == KILN_OK);
    CHECK(g.n_kv == 2 && g.n_tensors == 1 && g.alignment == 64);
    kn_gguf_close(&g);

    /* a failing fill callback aborts the write; the existing file is untouched */
    fill_ctx ctx = {kn_row_bytes(KN_Q8_0, 32), 0, 0};
    int64_t ne2[2] = {32, 4};
    CHECK(kn_gguf_writer_add_tensor_fn(w, "v", 2, ne2, KN_Q8_0, fill_pattern, &ctx) == KILN_OK);
    size_t before_len = 0, after_len = 0;
    char *before = kt_read_file(path, &before_len);
    EXPECT_ERR(kn_gguf_writer_write(w, path), KILN_ERR_IO);
    CHECK(strstr(kn_error_msg(), "on purpose") != NULL);
    char *after = kt_read_file(path, &after_len);
    CHECK(before && after && before_len == after_len && memcmp(before, after, before_len) == 0);
    free(before);
    free(after);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(!kt_exists(tmp));
    ctx.fail_at = -1;
    CHECK(kn_gguf_writer_write(w, path) == KILN_OK);
    CHECK(kn_gguf_open(path, &g) == KILN_OK);
    CHECK(g.n_tensors == 2);
    kn_gguf_close(&g);
    kn_gguf_writer_free(w);
    kn_gguf_writer_free(NULL);
}

/* ---- the real stories260K file ----------------------------------------------------------------- */

static void test_stories260k(void) {
    const char *path = kt_data(STORIES);
    if (!kt_exists(path)) SKIP("%s not found", path);
    kn_gguf g;
    CHECKF(kn_gguf_open(path, &g) == KILN_OK, "%s", kn_error_msg());
    CHECK(g.version == 3);
    CHECK(g.n_tensors == 48);
    CHECK(g.alignment == 32);
    kn_str s;
    CHECK(kn_gguf_get_str(&g, "general.architecture", &s) && kn_str_eq(s, "llama"));
    CHECK(kn_gguf_get_str(&g, "tokenizer.ggml.model", &s) && kn_str_eq(s, "llama"));
    uint64_t u;
    CHECK(kn_gguf_get_u64(&g, "llama.embedding_length", &u) && u == 64);
    CHECK(kn_gguf_get_u64(&g, "llama.block_count", &u) && u == 5);
    CHECK(kn_gguf_get_u64(&g, "llama.attention.head_count", &u) && u == 8);
    CHECK(kn_gguf_get_u64(&g, "llama.attention.head_count_kv", &u) && u == 4);
    const kn_gguf_tensor *t = kn_gguf_find_tensor(&g, "token_embd.weight");
    CHECK(t && t->type == KN_F32 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512);
    t = kn_gguf_find_tensor(&g, "blk.4.ffn_down.weight");
    CHECK(t && t->ne[0] == 172 && t->ne[1] == 64);
    t = kn_gguf_find_tensor(&g, "blk.0.attn_k.weight");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 32);
    uint64_t n;
    const uint8_t *d;
    CHECK(kn_gguf_get_arr(&g, "tokenizer.ggml.tokens", KN_GGUF_STRING, &n, &d) && n == 512);
    kn_str tok = {0};
    for (uint64_t i = 0; i < 4; i++) tok = kn_gguf_next_str(&d);
    CHECK(kn_str_eq(tok, "<0x00>"));
    CHECK(views_inside(&g));
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        CHECK(g.tensors[i].offset % 32 == 0);
        CHECK(g.tensors[i].data + g.tensors[i].nbytes <= g.map.data + g.map.size);
    }
    kn_gguf_close(&g);
}

/* ---- hostile input ----------------------------------------------------------------------------- */

/* Truncates bytes at every offset of the header region (stride 1 up to 4 KiB, then small strides)
 * and at a stride through the data: every prefix must fail cleanly, except prefixes that still hold
 * every tensor's data (only the trailing padding is cut). */
static void truncation_sweep(const uint8_t *bytes, size_t len) {
    kn_gguf g;
    guarded gr;
    kiln_status st = parse_guarded(bytes, len, &g, &gr);
    CHECKF(st == KILN_OK, "%s", kn_error_msg());
    uint64_t header_end = g.data_offset, data_end = g.data_offset;
    for (uint64_t i = 0; i < g.n_tensors; i++)
        data_end = KN_MAX(data_end, g.data_offset + g.tensors[i].offset + g.tensors[i].nbytes);
    kn_gguf_close(&g);
    guarded_free(&gr);
    int cases = 0;
    for (size_t cut = 0; cut < len; cut += cut < 4096 ? 1 : cut < header_end ? 3 : 4093) {
        st = parse_guarded_n(bytes, cut, (size_t)header_end + SWEEP_MARGIN, &g, &gr);
        cases++;
        if (st == KILN_OK && cut < data_end) {
            printf("  truncation at %zu of %zu parsed successfully\n", cut, len);
            kn_gguf_close(&g);
            guarded_free(&gr);
            CHECK(0);
        }
        int ok = outcome_ok(st, &g, "truncation", (long)cut);
        if (st == KILN_OK) kn_gguf_close(&g);
        guarded_free(&gr);
        CHECK(ok);
        if (st != KILN_OK) CHECKF(st == KILN_ERR_FORMAT, "truncation at %zu: status %d", cut, (int)st);
    }
    CHECK(cases > 1000);
}

/* Applies one mutation (kind 0: flip the byte; 1: 8-byte 0xFF run; 2: 8-byte 0x00 run; 3: 1-4 random
 * bytes) at p of m (a copy of bytes), parses, checks the outcome and restores m. Returns 0 on a bad
 * outcome. */
static int mutate_once(uint8_t *m, const uint8_t *bytes, size_t len, size_t header_end, size_t p, int kind) {
    static const char *names[] = {"flip", "0xFF run", "0x00 run", "random"};
    size_t run = kind == 0 ? 1 : kind == 3 ? 1 + (size_t)(rng_next() % 4) : 8;
    run = KN_MIN(run, len - p);
    for (size_t k = 0; k < run; k++)
        m[p + k] = kind == 0 ? (uint8_t)~bytes[p + k] : kind == 1 ? 0xFF : kind == 2 ? 0x00 : (uint8_t)rng_next();
    kn_gguf g;
    guarded gr;
    kiln_status st = parse_guarded_n(m, len, header_end + SWEEP_MARGIN, &g, &gr);
    int ok = outcome_ok(st, &g, names[kind], (long)p);
    if (st == KILN_OK) kn_gguf_close(&g);
    guarded_free(&gr);
    memcpy(m + p, bytes + p, run);
    return ok;
}

/* Mutates the header region (header, metadata, tensor table): every byte flipped (stride 1 over the
 * first 1 KiB, then every 3rd byte), 0xFF and 0x00 runs every 5th (then 15th) byte, and 3000 seeded
 * random mutations. */
static void mutation_sweep(const uint8_t *bytes, size_t len) {
    kn_gguf g;
    guarded gr;
    kiln_status st = parse_guarded(bytes, len, &g, &gr);
    CHECKF(st == KILN_OK, "%s", kn_error_msg());
    const size_t header_end = (size_t)g.data_offset;
    kn_gguf_close(&g);
    guarded_free(&gr);
    uint8_t *m = malloc(len);
    CHECK(m != NULL);
    memcpy(m, bytes, len);
    int ok = 1, cases = 0;
    for (size_t p = 0; p < header_end && ok; p += p < 1024 ? 1 : 3, cases++)
        ok = mutate_once(m, bytes, len, header_end, p, 0);
    for (int kind = 1; kind <= 2; kind++)
        for (size_t p = 0; p < header_end && ok; p += p < 1024 ? 5 : 15, cases++)
            ok = mutate_once(m, bytes, len, header_end, p, kind);
    for (int i = 0; i < 3000 && ok; i++, cases++)
        ok = mutate_once(m, bytes, len, header_end, (size_t)(rng_next() % header_end), 3);
    free(m);
    CHECK(ok);
    CHECK(cases > 2000);
}

static void test_truncate_stories(void) {
    const char *path = kt_data(STORIES);
    if (!kt_exists(path)) SKIP("%s not found", path);
    size_t len;
    uint8_t *b = read_all(path, &len);
    CHECK(b != NULL);
    truncation_sweep(b, len);
    free(b);
}

static void test_mutate_stories(void) {
    const char *path = kt_data(STORIES);
    if (!kt_exists(path)) SKIP("%s not found", path);
    size_t len;
    uint8_t *b = read_all(path, &len);
    CHECK(b != NULL);
    mutation_sweep(b, len);
    free(b);
}

/* ---- crafted files ----------------------------------------------------------------------------- */

typedef struct bb {
    uint8_t p[4096];
    size_t n;
} bb;

static void bb_put(bb *b, const void *src, size_t n) {
    if (b->n + n > sizeof b->p) {
        printf("crafted file too large\n");
        exit(2);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void bb_u32(bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(bb *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}
static void bb_head(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b->n = 0;
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void bb_kv_u32(bb *b, const char *key, uint32_t v) {
    bb_str(b, key);
    bb_u32(b, KN_GGUF_UINT32);
    bb_u32(b, v);
}
static void bb_tinfo(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, offset);
}
static void bb_pad(bb *b, size_t al) {
    while (b->n % al) bb_put(b, "", 1);
}
static void bb_zeros(bb *b, size_t n) {
    for (size_t i = 0; i < n; i++) bb_put(b, "", 1);
}

/* Parses b and returns the status; the message must be non-empty on failure. */
static kiln_status parse_bb(const bb *b, int *msg_ok) {
    kn_gguf g;
    guarded gr;
    kiln_status st = parse_guarded(b->p, b->n, &g, &gr);
    *msg_ok = st == KILN_OK ? views_inside(&g) : kn_error_msg()[0] != 0;
    if (st == KILN_OK) kn_gguf_close(&g);
    guarded_free(&gr);
    return st;
}

#define EXPECT_PARSE(b, code)                                                                                          \
    do {                                                                                                               \
        int mok_;                                                                                                      \
        kiln_status st_ = parse_bb(&(b), &mok_);                                                                       \
        CHECKF(st_ == (code), "line %d: status %d, message '%s'", __LINE__, (int)st_, kn_error_msg());                 \
        CHECKF(mok_, "line %d: no message / bad views", __LINE__);                                                     \
    } while (0)

/* A valid one-tensor file: header, one key, tensor "t" F32 {8} at offset 0. */
static void bb_valid(bb *b) {
    bb_head(b, 3, 1, 1);
    bb_kv_u32(b, "general.alignment", 32);
    uint64_t ne[1] = {8};
    bb_tinfo(b, "t", 1, ne, KN_F32, 0);
    bb_pad(b, 32);
    bb_zeros(b, 32);
}

static void test_crafted(void) {
    bb b;
    /* sanity: the valid baselines parse */
    bb_valid(&b);
    EXPECT_PARSE(b, KILN_OK);
    bb_head(&b, 3, 0, 0);
    EXPECT_PARSE(b, KILN_OK);
    bb_head(&b, 2, 0, 0);
    EXPECT_PARSE(b, KILN_OK);

    /* magic and version */
    bb_valid(&b);
    memcpy(b.p, "GGUG", 4);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    memcpy(b.p, "GGML", 4);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 1, 0, 0);
    EXPECT_PARSE(b, KILN_ERR_UNSUPPORTED);
    bb_head(&b, 4, 0, 0);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 0, 0, 0);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 0xFFFFFFFFu, 0, 0);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    b.n = 0;
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_put(&b, "GGU", 3);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    b.n = 0;
    bb_put(&b, "GGUF", 4);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);

    /* huge counts */
    bb_head(&b, 3, 0, (uint64_t)1 << 62);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 3, 0, UINT64_MAX);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 3, UINT64_MAX, 0);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 3, (uint64_t)1 << 40, 0);
    bb_zeros(&b, 512);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 3, 0, 3); /* 3 entries announced, 1 present */
    bb_kv_u32(&b, "a", 1);
    bb_zeros(&b, 40);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);

    /* string lengths */
    bb_head(&b, 3, 0, 1);
    bb_u64(&b, (uint64_t)1 << 63);
    bb_zeros(&b, 64);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 3, 0, 1);
    bb_u64(&b, UINT64_MAX);
    bb_zeros(&b, 64);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, KN_GGUF_STRING);
    bb_u64(&b, (uint64_t)1 << 63);
    bb_zeros(&b, 64);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 3, 0, 1);
    bb_u64(&b, 0); /* empty key */
    bb_u32(&b, KN_GGUF_UINT32);
    bb_u32(&b, 1);
    bb_zeros(&b, 64);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);

    /* value types */
    const uint32_t bad_types[] = {13, 14, 100, 0x80000000u, 0xFFFFFFFFu};
    for (size_t i = 0; i < KN_ARRAY_LEN(bad_types); i++) {
        bb_head(&b, 3, 0, 1);
        bb_str(&b, "k");
        bb_u32(&b, bad_types[i]);
        bb_zeros(&b, 64);
        EXPECT_PARSE(b, KILN_ERR_FORMAT);
        bb_head(&b, 3, 0, 1);
        bb_str(&b, "k");
        bb_u32(&b, KN_GGUF_ARRAY);
        bb_u32(&b, bad_types[i]);
        bb_u64(&b, 1);
        bb_zeros(&b, 64);
        EXPECT_PARSE(b, KILN_ERR_FORMAT);
    }
    /* nested array */
    bb_head(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, KN_GGUF_ARRAY);
    bb_u32(&b, KN_GGUF_ARRAY);
    bb_u64(&b, 1);
    bb_u32(&b, KN_GGUF_UINT8);
    bb_u64(&b, 1);
    bb_zeros(&b, 8);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);

    /* array lengths */
    const uint64_t big_n[] = {((uint64_t)1 << 61) + 1, (uint64_t)1 << 62, UINT64_MAX, 1000};
    for (size_t i = 0; i < KN_ARRAY_LEN(big_n); i++) {
        const uint32_t ets[] = {KN_GGUF_UINT64, KN_GGUF_UINT32, KN_GGUF_UINT8, KN_GGUF_STRING};
        for (size_t e = 0; e < KN_ARRAY_LEN(ets); e++) {
            bb_head(&b, 3, 0, 1);
            bb_str(&b, "k");
            bb_u32(&b, KN_GGUF_ARRAY);
            bb_u32(&b, ets[e]);
            bb_u64(&b, big_n[i]);
            bb_zeros(&b, 64);
            EXPECT_PARSE(b, KILN_ERR_FORMAT);
        }
    }
    /* a string array whose element length runs past the end */
    bb_head(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, KN_GGUF_ARRAY);
    bb_u32(&b, KN_GGUF_STRING);
    bb_u64(&b, 2);
    bb_str(&b, "ok");
    bb_u64(&b, 1000);
    bb_zeros(&b, 8);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);

    /* duplicate key */
    bb_head(&b, 3, 0, 2);
    bb_kv_u32(&b, "dup", 1);
    bb_kv_u32(&b, "dup", 2);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);

    /* alignment values and types */
    const uint32_t bad_al[] = {0, 3, 48, (1u << 20) * 2, 0x80000000u};
    for (size_t i = 0; i < KN_ARRAY_LEN(bad_al); i++) {
        bb_head(&b, 3, 0, 1);
        bb_kv_u32(&b, "general.alignment", bad_al[i]);
        EXPECT_PARSE(b, KILN_ERR_FORMAT);
    }
    bb_head(&b, 3, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, KN_GGUF_STRING);
    bb_str(&b, "32");
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 3, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, KN_GGUF_FLOAT32);
    float f32 = 32.0f;
    bb_put(&b, &f32, 4);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 3, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, KN_GGUF_UINT64);
    bb_u64(&b, (uint64_t)1 << 40);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 3, 0, 1);
    bb_kv_u32(&b, "general.alignment", 64); /* valid */
    EXPECT_PARSE(b, KILN_OK);

    /* tensor infos */
    uint64_t ne8[8] = {8, 1, 1, 1, 1, 1, 1, 1};
    for (uint32_t nd = 0; nd <= 6; nd += (nd == 0 ? 5 : 1)) {
        bb_head(&b, 3, 1, 0);
        bb_tinfo(&b, "t", nd, ne8, KN_F32, 0);
        bb_pad(&b, 32);
        bb_zeros(&b, 64);
        EXPECT_PARSE(b, KILN_ERR_FORMAT);
    }
    bb_head(&b, 3, 1, 0);
    bb_u64(&b, 0); /* empty name */
    bb_u32(&b, 1);
    bb_u64(&b, 8);
    bb_u32(&b, KN_F32);
    bb_u64(&b, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 32);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    bb_head(&b, 3, 1, 0);
    bb_u64(&b, (uint64_t)1 << 62); /* name length */
    bb_zeros(&b, 64);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    const uint64_t ovf[][4] = {
        {(uint64_t)1 << 32, (uint64_t)1 << 32, 1, 1},
        {(uint64_t)1 << 62, 4, 1, 1},
        {(uint64_t)1 << 63, 1, 1, 1},
        {UINT64_MAX, 1, 1, 1},
        {(uint64_t)1 << 62, 1, 1, 1}, /* element count fits, byte size (x4) does not */
        {(uint64_t)1 << 20, (uint64_t)1 << 20, (uint64_t)1 << 20, (uint64_t)1 << 20},
    };
    for (size_t i = 0; i < KN_ARRAY_LEN(ovf); i++) {
        bb_head(&b, 3, 1, 0);
        bb_tinfo(&b, "t", 4, ovf[i], KN_F32, 0);
        bb_pad(&b, 32);
        bb_zeros(&b, 64);
        EXPECT_PARSE(b, KILN_ERR_FORMAT);
    }
    /* a plausible shape whose data is far larger than the file */
    uint64_t large[2] = {4096, 4096};
    bb_head(&b, 3, 1, 0);
    bb_tinfo(&b, "t", 2, large, KN_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    /* tensor types */
    const uint32_t bad_tt[] = {4, 5, 16, 17, 18, 19, 29, 31, 34, 40, 99, 0xFFFFFFFFu};
    for (size_t i = 0; i < KN_ARRAY_LEN(bad_tt); i++) {
        bb_head(&b, 3, 1, 0);
        uint64_t ne256[1] = {256};
        bb_tinfo(&b, "t", 1, ne256, bad_tt[i], 0);
        bb_pad(&b, 32);
        bb_zeros(&b, 1024);
        EXPECT_PARSE(b, KILN_ERR_UNSUPPORTED);
        /* the types GGUF files use that kiln lacks are named in the message */
        const char *want = bad_tt[i] == 16 ? "IQ2_XXS" : bad_tt[i] == 19 ? "IQ1_S" : bad_tt[i] == 34 ? "TQ1_0" : NULL;
        if (want) CHECKF(strstr(kn_error_msg(), want) != NULL, "message '%s' lacks %s", kn_error_msg(), want);
    }
    /* row length not a multiple of the block */
    uint64_t ne33[2] = {33, 2};
    bb_head(&b, 3, 1, 0);
    bb_tinfo(&b, "t", 2, ne33, KN_Q4_0, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 256);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    /* offsets: misaligned, out of range, overflowing, data cut short */
    const uint64_t bad_off[] = {4, 16, 64, (uint64_t)1 << 40, UINT64_MAX - 31, UINT64_MAX};
    for (size_t i = 0; i < KN_ARRAY_LEN(bad_off); i++) {
        bb_head(&b, 3, 1, 0);
        bb_tinfo(&b, "t", 1, ne8, KN_F32, bad_off[i]);
        bb_pad(&b, 32);
        bb_zeros(&b, 32 + 16);
        EXPECT_PARSE(b, KILN_ERR_FORMAT);
    }
    bb_head(&b, 3, 1, 0);
    bb_tinfo(&b, "t", 1, ne8, KN_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 31);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    /* duplicate tensor */
    bb_head(&b, 3, 2, 0);
    bb_tinfo(&b, "t", 1, ne8, KN_F32, 0);
    bb_tinfo(&b, "t", 1, ne8, KN_F32, 32);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
    /* two distinct tensors: fine */
    bb_head(&b, 3, 2, 0);
    bb_tinfo(&b, "t", 1, ne8, KN_F32, 0);
    bb_tinfo(&b, "u", 1, ne8, KN_F32, 32);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    EXPECT_PARSE(b, KILN_OK);
    /* alignment 64 makes offset 32 misaligned */
    bb_head(&b, 3, 1, 1);
    bb_kv_u32(&b, "general.alignment", 64);
    bb_tinfo(&b, "t", 1, ne8, KN_F32, 32);
    bb_pad(&b, 64);
    bb_zeros(&b, 128);
    EXPECT_PARSE(b, KILN_ERR_FORMAT);
}

static void test_open_errors(void) {
    kn_gguf g;
    kn_error_clear();
    CHECK(kn_gguf_open(tpath("does-not-exist.gguf"), &g) == KILN_ERR_IO);
    CHECK(kn_error_msg()[0] != 0);
    CHECK(g.tensors == NULL && g.kv == NULL);
    kn_error_clear();
    CHECK(kn_gguf_open(kt_tmpdir(), &g) == KILN_ERR_IO);
    CHECK(kn_error_msg()[0] != 0);
    const char *empty = tpath("empty.gguf");
    FILE *f = fopen(empty, "wb");
    CHECK(f != NULL);
    fclose(f);
    kn_error_clear();
    CHECK(kn_gguf_open(empty, &g) == KILN_ERR_FORMAT);
    CHECK(kn_error_msg()[0] != 0);
    const char *v1 = tpath("v1.gguf");
    f = fopen(v1, "wb");
    CHECK(f != NULL);
    fwrite("GGUF\x01\0\0\0", 1, 8, f);
    fclose(f);
    kn_error_clear();
    CHECK(kn_gguf_open(v1, &g) == KILN_ERR_UNSUPPORTED);
    CHECK(kn_error_msg()[0] != 0);
    kn_error_clear();
    CHECK(kn_gguf_open("/dev/null", &g) == KILN_ERR_IO);
    CHECK(kn_error_msg()[0] != 0);
}

/* ---- kiln-gen ---------------------------------------------------------------------------------- */

static const char *gen_path(void) {
    static char p[512];
    const char *b = getenv("BUILD");
    snprintf(p, sizeof p, "%s/kiln-gen", b && *b ? b : "build");
    return p;
}

/* Runs kiln-gen with args, output to out; returns its exit status (-1 if it did not exit). */
static int run_gen(const char *args, const char *out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s -o %s 2>%s/gen.stderr", gen_path(), args, out, kt_tmpdir());
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

typedef struct tiny_spec {
    const char *preset, *arch;
    int64_t vocab, dim, layers, heads, kv, hd, ffn;
    bool tied, bias, qk_norm, llama3;
    double eps;
} tiny_spec;

static const tiny_spec tiny_specs[] = {
    {"tiny-llama", "llama", 512, 256, 2, 8, 2, 32, 512, false, false, false, true, 1e-5},
    {"tiny-llama-plain", "llama", 512, 256, 2, 8, 2, 32, 512, true, false, false, false, 1e-5},
    {"tiny-qwen2", "qwen2", 512, 256, 2, 8, 2, 32, 512, true, true, false, false, 1e-6},
    {"tiny-qwen3", "qwen3", 512, 256, 2, 4, 2, 128, 512, true, false, true, false, 1e-6},
};

static const kn_dtype all_types[] = {KN_F32,  KN_F16,  KN_BF16, KN_Q4_0, KN_Q4_1, KN_Q5_0,
                                     KN_Q5_1, KN_Q8_0, KN_Q4_K, KN_Q5_K, KN_Q6_K};

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Checks one generated model against its spec; returns 0 after printing the first mismatch. */
static int check_generated(const char *path, const tiny_spec *sp, kn_dtype type) {
    kn_gguf g;
#define REQ(cond, ...)                                                                                                 \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            printf("  %s %s: %s: ", sp->preset, kn_dtype_name((int32_t)type), #cond);                                  \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
            return 0;                                                                                                  \
        }                                                                                                              \
    } while (0)
    kiln_status st = kn_gguf_open(path, &g);
    REQ(st == KILN_OK, "%s", kn_error_msg());
    int ok = 0;
    char key[128], nm[128];
    kn_str s;
    uint64_t u;
    double f;
    char **toks = NULL;
    uint64_t n_tok = 0;
    do {
#define REQ2(cond, ...)                                                                                                \
    if (!(cond)) {                                                                                                     \
        printf("  %s %s: %s: ", sp->preset, kn_dtype_name((int32_t)type), #cond);                                      \
        printf(__VA_ARGS__);                                                                                           \
        printf("\n");                                                                                                  \
        break;                                                                                                         \
    }
        REQ2(kn_gguf_get_str(&g, "general.architecture", &s) && kn_str_eq(s, sp->arch), "arch");
#define U(suffix, want)                                                                                                \
    snprintf(key, sizeof key, "%s.%s", sp->arch, suffix);                                                              \
    REQ2(kn_gguf_get_u64(&g, key, &u) && u == (uint64_t)(want), "%s = %llu", key, (unsigned long long)u);
        U("embedding_length", sp->dim);
        U("block_count", sp->layers);
        U("feed_forward_length", sp->ffn);
        U("attention.head_count", sp->heads);
        U("attention.head_count_kv", sp->kv);
        U("rope.dimension_count", sp->hd);
        U("context_length", 512);
        if (sp->hd * sp->heads != sp->dim || strcmp(sp->arch, "qwen3") == 0) {
            U("attention.key_length", sp->hd);
            U("attention.value_length", sp->hd);
        }
#undef U
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", sp->arch);
        REQ2(kn_gguf_get_f64(&g, key, &f) && fabs(f - sp->eps) < sp->eps * 1e-3, "eps %g", f);
        snprintf(key, sizeof key, "%s.rope.freq_base", sp->arch);
        REQ2(kn_gguf_get_f64(&g, key, &f) && f > 0, "rope base");
        const double rope_base = f;
        REQ2(kn_gguf_find(&g, "general.file_type") && kn_gguf_find(&g, "general.file_type")->type == KN_GGUF_UINT32,
             "file_type");

        /* expected tensors, in the generator's order */
        int n_expect = 0;
        bool bad = false;
        const int64_t qd = sp->heads * sp->hd, kvd = sp->kv * sp->hd;
#define T(name_, ne0_, ne1_, matrix_)                                                                                  \
    do {                                                                                                               \
        const kn_gguf_tensor *t_ = kn_gguf_find_tensor(&g, name_);                                                     \
        n_expect++;                                                                                                    \
        kn_dtype wt_ = (matrix_) ? type : KN_F32;                                                                      \
        if ((matrix_) && (ne0_) % kn_type_traits_get((int32_t)type)->block_size != 0) wt_ = KN_Q8_0;                   \
        if (!t_ || t_->ne[0] != (ne0_) || t_->ne[1] != ((ne1_) ? (ne1_) : 1) || t_->n_dims != ((ne1_) ? 2u : 1u) ||    \
            t_->type != wt_) {                                                                                         \
            printf("  %s %s: tensor %s missing or wrong (ne %lld x %lld, type %s)\n", sp->preset,                      \
                   kn_dtype_name((int32_t)type), name_, t_ ? (long long)t_->ne[0] : -1LL,                              \
                   t_ ? (long long)t_->ne[1] : -1LL, t_ ? kn_dtype_name((int32_t)t_->type) : "-");                     \
            bad = true;                                                                                                \
        }                                                                                                              \
    } while (0)
        T("token_embd.weight", sp->dim, sp->vocab, true);
        T("output_norm.weight", sp->dim, 0, false);
        if (!sp->tied) T("output.weight", sp->dim, sp->vocab, true);
        else REQ2(kn_gguf_find_tensor(&g, "output.weight") == NULL, "tied model has output.weight");
        if (sp->llama3) T("rope_freqs.weight", sp->hd / 2, 0, false);
        else REQ2(kn_gguf_find_tensor(&g, "rope_freqs.weight") == NULL, "unexpected rope_freqs");
        for (int l = 0; l < sp->layers; l++) {
#define L(suffix) (snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix), nm)
            T(L("attn_norm.weight"), sp->dim, 0, false);
            T(L("attn_q.weight"), sp->dim, qd, true);
            T(L("attn_k.weight"), sp->dim, kvd, true);
            T(L("attn_v.weight"), sp->dim, kvd, true);
            T(L("attn_output.weight"), qd, sp->dim, true);
            T(L("ffn_norm.weight"), sp->dim, 0, false);
            T(L("ffn_gate.weight"), sp->dim, sp->ffn, true);
            T(L("ffn_up.weight"), sp->dim, sp->ffn, true);
            T(L("ffn_down.weight"), sp->ffn, sp->dim, true);
            if (sp->bias) {
                T(L("attn_q.bias"), qd, 0, false);
                T(L("attn_k.bias"), kvd, 0, false);
                T(L("attn_v.bias"), kvd, 0, false);
            }
            if (sp->qk_norm) {
                T(L("attn_q_norm.weight"), sp->hd, 0, false);
                T(L("attn_k_norm.weight"), sp->hd, 0, false);
            }
#undef L
        }
#undef T
        if (bad) break;
        REQ2(g.n_tensors == (uint64_t)n_expect, "%llu tensors, expected %d", (unsigned long long)g.n_tensors, n_expect);

        /* weights: finite, matrices with std near 1/sqrt(row length), norms near 1 */
        bad = false;
        for (uint64_t i = 0; i < g.n_tensors && !bad; i++) {
            const kn_gguf_tensor *t = &g.tensors[i];
            const kn_type_traits *tr = kn_type_traits_get((int32_t)t->type);
            int64_t n = t->ne[0];
            float *row = malloc((size_t)n * sizeof(float));
            if (!row) {
                bad = true;
                break;
            }
            tr->to_float(t->data + (t->ne[1] > 1 ? kn_row_bytes(t->type, n) : 0), row, n);
            double sum = 0, sq = 0;
            for (int64_t k = 0; k < n; k++) {
                if (!isfinite(row[k])) bad = true;
                sum += row[k];
                sq += (double)row[k] * row[k];
            }
            double mean = sum / (double)n, sd = sqrt(fmax(sq / (double)n - mean * mean, 0));
            bool rope = kn_str_eq(t->name, "rope_freqs.weight");
            if (rope) {
                /* llama.cpp's llama3 formula with the tiny-llama parameters: factor 8, low 1, high 4, orig 128 */
                for (int64_t k = 0; k < n; k++) {
                    double freq = 1.0 / pow(rope_base, (double)(2 * k) / (double)sp->hd);
                    double wl = 2 * M_PI / freq, want;
                    if (wl < 128.0 / 4) want = 1;
                    else if (wl > 128.0 / 1) want = 8;
                    else {
                        double sm = (128.0 / wl - 1) / (4 - 1);
                        want = 1 / ((1 - sm) / 8 + sm);
                    }
                    if (fabs(row[k] - want) > 1e-4 * want) {
                        printf("  rope_freqs[%lld] = %g, want %g\n", (long long)k, row[k], want);
                        bad = true;
                    }
                }
                if (row[0] != 1.0f || row[n - 1] != 8.0f) bad = true;
            } else if (t->n_dims == 1) {
                bool is_bias = t->name.len > 5 && memcmp(t->name.ptr + t->name.len - 5, ".bias", 5) == 0;
                if (fabs(mean - (is_bias ? 0 : 1)) > 0.1 || sd < 0.02 || sd > 0.3) bad = true;
            } else if (t->n_dims == 2) {
                double want = 1 / sqrt((double)n);
                if (fabs(mean) > 0.5 * want || sd < 0.6 * want || sd > 1.4 * want) bad = true;
            }
            if (bad)
                printf("  %s %s: tensor %.*s: mean %g sd %g\n", sp->preset, kn_dtype_name((int32_t)type),
                       (int)t->name.len, t->name.ptr, mean, sd);
            free(row);
        }
        if (bad) break;

        /* tokenizer: vocab-sized arrays, ids in range, every merge "a b" has a, b and ab */
        REQ2(kn_gguf_get_str(&g, "tokenizer.ggml.model", &s) && kn_str_eq(s, "gpt2"), "tokenizer model");
        REQ2(kn_gguf_get_str(&g, "tokenizer.ggml.pre", &s) &&
                 kn_str_eq(s, strcmp(sp->arch, "llama") == 0 ? "llama-bpe" : "qwen2"),
             "tokenizer pre");
        const uint8_t *d;
        REQ2(kn_gguf_get_arr(&g, "tokenizer.ggml.tokens", KN_GGUF_STRING, &n_tok, &d) && n_tok == (uint64_t)sp->vocab,
             "tokens");
        toks = calloc(n_tok, sizeof *toks);
        char **sorted = calloc(n_tok, sizeof *sorted);
        if (!toks || !sorted) {
            free(sorted);
            break;
        }
        for (uint64_t i = 0; i < n_tok; i++) {
            kn_str e = kn_gguf_next_str(&d);
            toks[i] = calloc(1, e.len + 1);
            if (toks[i]) memcpy(toks[i], e.ptr, e.len);
            sorted[i] = toks[i];
        }
        qsort(sorted, n_tok, sizeof *sorted, cmp_cstr);
        for (uint64_t i = 1; i < n_tok && !bad; i++)
            if (strcmp(sorted[i - 1], sorted[i]) == 0) {
                printf("  duplicate token '%s'\n", sorted[i]);
                bad = true;
            }
        uint64_t n_types, n_merges;
        const uint8_t *types;
        if (!kn_gguf_get_arr(&g, "tokenizer.ggml.token_type", KN_GGUF_INT32, &n_types, &types) || n_types != n_tok)
            bad = true;
        if (!kn_gguf_get_arr(&g, "tokenizer.ggml.merges", KN_GGUF_STRING, &n_merges, &d) || n_merges < 100) bad = true;
        for (uint64_t i = 0; i < n_merges && !bad; i++) {
            kn_str m = kn_gguf_next_str(&d);
            char buf[256];
            const char *sp_ = memchr(m.ptr, ' ', m.len);
            if (!sp_ || m.len >= sizeof buf || memchr(sp_ + 1, ' ', m.len - (uint64_t)(sp_ + 1 - m.ptr))) {
                bad = true;
                break;
            }
            size_t la = (size_t)(sp_ - m.ptr), lb = m.len - la - 1;
            char *parts[3] = {buf, buf + 100, buf + 200};
            if (la >= 50 || lb >= 50) {
                bad = true;
                break;
            }
            memcpy(parts[0], m.ptr, la);
            parts[0][la] = 0;
            memcpy(parts[1], sp_ + 1, lb);
            parts[1][lb] = 0;
            memcpy(parts[2], m.ptr, la);
            memcpy(parts[2] + la, sp_ + 1, lb);
            parts[2][la + lb] = 0;
            for (int k = 0; k < 3; k++)
                if (!bsearch(&parts[k], sorted, n_tok, sizeof *sorted, cmp_cstr)) {
                    printf("  merge %llu '%.*s': token '%s' missing\n", (unsigned long long)i, (int)m.len, m.ptr,
                           parts[k]);
                    bad = true;
                }
        }
        free(sorted);
        if (bad) break;
        uint64_t bos, eos, eot;
        REQ2(kn_gguf_get_u64(&g, "tokenizer.ggml.bos_token_id", &bos) && bos < n_tok &&
                 strcmp(toks[bos], "<|begin_of_text|>") == 0,
             "bos");
        REQ2(kn_gguf_get_u64(&g, "tokenizer.ggml.eos_token_id", &eos) && eos < n_tok &&
                 strcmp(toks[eos], "<|end_of_text|>") == 0,
             "eos");
        REQ2(kn_gguf_get_u64(&g, "tokenizer.ggml.eot_token_id", &eot) && eot < n_tok &&
                 strcmp(toks[eot], "<|eot_id|>") == 0,
             "eot");
        int32_t tt;
        memcpy(&tt, types + 4 * bos, 4);
        REQ2(tt == 3, "bos type %d", tt);
        memcpy(&tt, types + 4 * 'a', 4);
        REQ2(tt == 1 && strcmp(toks['a'], "a") == 0 && strcmp(toks[' '], "\xc4\xa0") == 0 &&
                 strcmp(toks['\n'], "\xc4\x8a") == 0,
             "byte tokens");
        bool add_bos;
        REQ2(kn_gguf_get_bool(&g, "tokenizer.ggml.add_bos_token", &add_bos) && add_bos, "add_bos");
        ok = 1;
    } while (0);
#undef REQ2
#undef REQ
    if (toks)
        for (uint64_t i = 0; i < n_tok; i++) free(toks[i]);
    free(toks);
    kn_gguf_close(&g);
    return ok;
}

static void test_gen_tiny_presets(void) {
    if (!kt_exists(gen_path())) SKIP("%s not built", gen_path());
    const char *out = tpath("gen.gguf");
    for (size_t p = 0; p < KN_ARRAY_LEN(tiny_specs); p++) {
        for (size_t t = 0; t < KN_ARRAY_LEN(all_types); t++) {
            char args[256];
            snprintf(args, sizeof args, "--preset %s --type %s --seed %zu", tiny_specs[p].preset,
                     kn_dtype_name((int32_t)all_types[t]), p * 100 + t);
            CHECKF(run_gen(args, out) == 0, "kiln-gen %s failed", args);
            struct stat stt;
            CHECK(stat(out, &stt) == 0);
            CHECKF(stt.st_size < 8 * 1024 * 1024, "%s: %lld bytes", args, (long long)stt.st_size);
            CHECKF(check_generated(out, &tiny_specs[p], all_types[t]), "%s", args);
        }
    }
    unlink(out);
}

static int files_equal(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    char *x = kt_read_file(a, &la), *y = kt_read_file(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

static void test_gen_deterministic(void) {
    if (!kt_exists(gen_path())) SKIP("%s not built", gen_path());
    const char *a = tpath("det-a.gguf"), *b = tpath("det-b.gguf"), *c = tpath("det-c.gguf");
    const char *cases[] = {"--preset tiny-qwen3 --type Q4_K", "--preset tiny-llama --type Q5_0",
                           "--preset tiny-qwen2 --type BF16"};
    for (size_t i = 0; i < KN_ARRAY_LEN(cases); i++) {
        char args[256];
        snprintf(args, sizeof args, "%s --seed 7 --threads 1", cases[i]);
        CHECK(run_gen(args, a) == 0);
        snprintf(args, sizeof args, "%s --seed 7 --threads 2", cases[i]);
        CHECK(run_gen(args, b) == 0);
        snprintf(args, sizeof args, "%s --seed 8", cases[i]);
        CHECK(run_gen(args, c) == 0);
        CHECKF(files_equal(a, b), "%s: same seed gave different files", cases[i]);
        CHECKF(!files_equal(a, c), "%s: different seeds gave the same file", cases[i]);
    }
    /* manual shape equal to a preset gives the same bytes as the preset */
    CHECK(run_gen("--preset tiny-qwen2 --type Q8_0", a) == 0);
    CHECK(run_gen("--arch qwen2 --vocab 512 --dim 256 --layers 2 --heads 8 --kv-heads 2 --ffn 512 --ctx 512 "
                  "--tied --rope-base 1000000 --type Q8_0 --name tiny-qwen2",
                  b) == 0);
    CHECK(files_equal(a, b));
    unlink(a);
    unlink(b);
    unlink(c);
}

static void test_gen_fallback_and_errors(void) {
    if (!kt_exists(gen_path())) SKIP("%s not built", gen_path());
    const char *out = tpath("gen-fb.gguf");
    /* dim 288 (stories15M's) cannot hold 256-element K blocks: those rows fall back to Q8_0 */
    CHECK(run_gen("--arch llama --vocab 300 --dim 288 --layers 1 --heads 6 --kv-heads 6 --ffn 768 --type Q4_K", out) ==
          0);
    char errp[600];
    snprintf(errp, sizeof errp, "%s/gen.stderr", kt_tmpdir());
    char *err = kt_read_file(errp, NULL);
    CHECK(err && strstr(err, "Q8_0"));
    free(err);
    kn_gguf g;
    CHECK(kn_gguf_open(out, &g) == KILN_OK);
    CHECK(kn_gguf_find_tensor(&g, "blk.0.attn_q.weight")->type == KN_Q8_0);
    CHECK(kn_gguf_find_tensor(&g, "blk.0.ffn_down.weight")->type == KN_Q4_K); /* row length 768 */
    CHECK(kn_gguf_find_tensor(&g, "output.weight")->type == KN_Q8_0);
    kn_gguf_close(&g);
    /* row length 40: not a multiple of 32 either, so F16 */
    CHECK(run_gen("--arch llama --vocab 300 --dim 40 --layers 1 --heads 2 --ffn 64 --type Q4_0", out) == 0);
    CHECK(kn_gguf_open(out, &g) == KILN_OK);
    CHECK(kn_gguf_find_tensor(&g, "blk.0.attn_q.weight")->type == KN_F16);
    CHECK(kn_gguf_find_tensor(&g, "blk.0.ffn_down.weight")->type == KN_Q4_0);
    kn_gguf_close(&g);
    unlink(out);
    /* bad arguments: non-zero exit and no file */
    const char *bad[] = {
        "--preset no-such-preset",
        "--preset tiny-llama --type Q9_9",
        "--arch gpt2 --vocab 300 --dim 64 --layers 1 --heads 2 --ffn 64",
        "--arch llama --vocab 100 --dim 64 --layers 1 --heads 2 --ffn 64",
        "--arch llama --vocab 300 --dim 64 --layers 1 --heads 3 --ffn 64",
        "--arch llama --vocab 300 --dim 64 --layers 1 --heads 4 --kv-heads 3 --ffn 64",
        "--preset tiny-llama --layers x",
        "--preset tiny-llama --bogus",
    };
    for (size_t i = 0; i < KN_ARRAY_LEN(bad); i++) {
        CHECKF(run_gen(bad[i], out) != 0, "%s", bad[i]);
        CHECKF(!kt_exists(out), "%s", bad[i]);
    }
}

static void test_truncate_generated(void) {
    if (!kt_exists(gen_path())) SKIP("%s not built", gen_path());
    const char *out = tpath("gen-trunc.gguf");
    CHECK(run_gen("--preset tiny-qwen3 --type Q4_K", out) == 0);
    size_t len;
    uint8_t *b = read_all(out, &len);
    CHECK(b != NULL);
    truncation_sweep(b, len);
    if (!kt_cur_failed) mutation_sweep(b, len);
    free(b);
    unlink(out);
}

/* Removes the files the tests left in the scratch directory, and the directory when it is empty. */
static void cleanup(void) {
    static const char *const files[] = {"meta.gguf",  "tensors.gguf", "errors.gguf", "empty.gguf",
                                        "v1.gguf",    "gen.gguf",     "gen-fb.gguf", "gen-trunc.gguf",
                                        "det-a.gguf", "det-b.gguf",   "det-c.gguf",  "gen.stderr"};
    for (size_t i = 0; i < KN_ARRAY_LEN(files); i++) unlink(tpath(files[i]));
    rmdir(kt_tmpdir());
}

/* A file with 200,000 metadata keys (the last a duplicate) is rejected quickly: uniqueness is
 * checked by sorting, not by comparing every pair (which would take minutes). */
static void test_many_keys(void) {
    const int n = 200000;
    char path[512];
    snprintf(path, sizeof path, "%s/many-keys.gguf", kt_tmpdir());
    FILE *f = fopen(path, "wb");
    CHECK(f);
    uint32_t ver = 3;
    uint64_t nt = 0, nkv = (uint64_t)n;
    fwrite("GGUF", 1, 4, f);
    fwrite(&ver, 4, 1, f);
    fwrite(&nt, 8, 1, f);
    fwrite(&nkv, 8, 1, f);
    for (int i = 0; i < n; i++) {
        char key[16];
        uint64_t len = (uint64_t)snprintf(key, sizeof key, "k%07d", i == n - 1 ? 12345 : (i * 7919) % n);
        uint32_t type = KN_GGUF_UINT8;
        uint8_t v = 1;
        fwrite(&len, 8, 1, f);
        fwrite(key, 1, len, f);
        fwrite(&type, 4, 1, f);
        fwrite(&v, 1, 1, f);
    }
    fclose(f);
    kn_gguf g;
    kiln_status st = kn_gguf_open(path, &g);
    remove(path);
    CHECK(st == KILN_ERR_FORMAT);
    CHECK(strstr(kiln_last_error(), "duplicate metadata key") != NULL);
}

int main(void) {
    RUN(test_roundtrip_metadata);
    RUN(test_roundtrip_tensors_align32);
    RUN(test_roundtrip_tensors_align64);
    RUN(test_roundtrip_tensors_align1);
    RUN(test_roundtrip_tensors_align4096);
    RUN(test_writer_errors);
    RUN(test_stories260k);
    RUN(test_open_errors);
    RUN(test_crafted);
    RUN(test_truncate_stories);
    RUN(test_mutate_stories);
    RUN(test_gen_tiny_presets);
    RUN(test_gen_deterministic);
    RUN(test_gen_fallback_and_errors);
    RUN(test_truncate_generated);
    RUN(test_many_keys);
    cleanup();
    return kt_summary();
}
