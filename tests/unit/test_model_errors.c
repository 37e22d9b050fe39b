/*
 * test_model_errors.c - model files that are valid GGUF but wrong for kiln get a clear error naming
 * the problem: an unknown architecture, a missing tensor, a tensor of the wrong shape, a missing
 * hyperparameter, an inconsistent head count, a head too wide. Each case copies a generated tiny model with one edit.
 */
#include "harness.h"

#include "gguf_write.h"
#include "kiln.h"
#include "model/gguf.h"

typedef struct edit {
    const char *drop_tensor;   /* leave this tensor out */
    const char *drop_key;      /* leave this metadata key out */
    const char *set_arch;      /* replace general.architecture */
    const char *shrink_tensor; /* write this tensor with half its rows */
    const char *key_u32;       /* set this key to val_u32 */
    uint32_t val_u32;
} edit;

/* Copies one metadata entry to the writer. */
static kiln_status copy_kv(kn_gguf_writer *w, const kn_gguf_kv *kv, const char *key) {
    switch (kv->type) {
        case KN_GGUF_UINT8: return kn_gguf_writer_set_u8(w, key, (uint8_t)kv->v.u);
        case KN_GGUF_INT8: return kn_gguf_writer_set_i8(w, key, (int8_t)kv->v.i);
        case KN_GGUF_UINT16: return kn_gguf_writer_set_u16(w, key, (uint16_t)kv->v.u);
        case KN_GGUF_INT16: return kn_gguf_writer_set_i16(w, key, (int16_t)kv->v.i);
        case KN_GGUF_UINT32: return kn_gguf_writer_set_u32(w, key, (uint32_t)kv->v.u);
        case KN_GGUF_INT32: return kn_gguf_writer_set_i32(w, key, (int32_t)kv->v.i);
        case KN_GGUF_FLOAT32: return kn_gguf_writer_set_f32(w, key, (float)kv->v.f);
        case KN_GGUF_BOOL: return kn_gguf_writer_set_bool(w, key, kv->v.b);
        case KN_GGUF_UINT64: return kn_gguf_writer_set_u64(w, key, kv->v.u);
        case KN_GGUF_INT64: return kn_gguf_writer_set_i64(w, key, kv->v.i);
        case KN_GGUF_FLOAT64: return kn_gguf_writer_set_f64(w, key, kv->v.f);
        case KN_GGUF_STRING: return kn_gguf_writer_set_strn(w, key, kv->str.ptr, kv->str.len);
        case KN_GGUF_ARRAY:
            if (kv->arr_type != KN_GGUF_STRING)
                return kn_gguf_writer_set_arr(w, key, kv->arr_type, kv->arr_data, kv->arr_n);
            {
                char **v = calloc(kv->arr_n + 1, sizeof *v);
                const uint8_t *cur = kv->arr_data;
                for (uint64_t i = 0; i < kv->arr_n; i++) {
                    kn_str s = kn_gguf_next_str(&cur);
                    v[i] = strndup(s.ptr, s.len);
                }
                kiln_status st = kn_gguf_writer_set_arr_str(w, key, (const char *const *)v, kv->arr_n);
                for (uint64_t i = 0; i < kv->arr_n; i++) free(v[i]);
                free(v);
                return st;
            }
        default: return KILN_ERR_FORMAT;
    }
}

static int copy_with(const char *src, const char *dst, const edit *e) {
    kn_gguf g;
    if (kn_gguf_open(src, &g)) return -1;
    kn_gguf_writer *w = NULL;
    int rc = kn_gguf_writer_create(&w) ? -1 : 0;
    for (uint64_t i = 0; !rc && i < g.n_kv; i++) {
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)g.kv[i].key.len, g.kv[i].key.ptr);
        if (strcmp(key, "general.alignment") == 0 || (e->drop_key && strcmp(key, e->drop_key) == 0)) continue;
        if (e->key_u32 && strcmp(key, e->key_u32) == 0) continue;
        if (e->set_arch && strcmp(key, "general.architecture") == 0)
            rc = kn_gguf_writer_set_str(w, key, e->set_arch) ? -1 : 0;
        else rc = copy_kv(w, &g.kv[i], key) ? -1 : 0;
    }
    if (!rc && e->key_u32) rc = kn_gguf_writer_set_u32(w, e->key_u32, e->val_u32) ? -1 : 0;
    for (uint64_t i = 0; !rc && i < g.n_tensors; i++) {
        const kn_gguf_tensor *t = &g.tensors[i];
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (e->drop_tensor && strcmp(name, e->drop_tensor) == 0) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (e->shrink_tensor && strcmp(name, e->shrink_tensor) == 0) ne[t->n_dims - 1] /= 2;
        rc = kn_gguf_writer_add_tensor(w, name, t->n_dims, ne, t->type, t->data) ? -1 : 0;
    }
    if (!rc) rc = kn_gguf_writer_write(w, dst) ? -1 : 0;
    kn_gguf_writer_free(w);
    kn_gguf_close(&g);
    return rc;
}

static const char *base_model(void) {
    static char path[512];
    if (path[0]) return path;
    const char *b = getenv("BUILD");
    char cmd[1024];
    snprintf(path, sizeof path, "%s/base.gguf", kt_tmpdir());
    snprintf(cmd, sizeof cmd, "%s/kiln-gen --preset tiny-qwen2 --type Q8_0 -o %s >/dev/null 2>&1",
             b && *b ? b : "build", path);
    if (system(cmd) != 0) path[0] = 0;
    return path;
}

/* Loading the edited copy fails with `want` and a message containing `needle`. */
static void expect_failure(const edit *e, kiln_status want, const char *needle) {
    if (!base_model()[0]) SKIP("kiln-gen unavailable");
    char dst[512];
    snprintf(dst, sizeof dst, "%s/edited.gguf", kt_tmpdir());
    CHECK(copy_with(base_model(), dst, e) == 0);
    kiln_model *m = NULL;
    kiln_status st = kiln_model_load(dst, NULL, &m);
    CHECKF(st == want, "status %s (%s), wanted %s", kiln_status_str(st), kiln_last_error(), kiln_status_str(want));
    CHECKF(strstr(kiln_last_error(), needle) != NULL, "message '%s' lacks '%s'", kiln_last_error(), needle);
    CHECK(m == NULL);
}

static void test_copy_unchanged_loads(void) {
    if (!base_model()[0]) SKIP("kiln-gen unavailable");
    edit e = {0};
    char dst[512];
    snprintf(dst, sizeof dst, "%s/same.gguf", kt_tmpdir());
    CHECK(copy_with(base_model(), dst, &e) == 0);
    kiln_model *m = NULL;
    CHECKF(kiln_model_load(dst, NULL, &m) == KILN_OK, "%s", kiln_last_error());
    kiln_model_free(m);
}

static void test_unknown_arch(void) {
    edit e = {.set_arch = "gpt-j"};
    expect_failure(&e, KILN_ERR_UNSUPPORTED, "architecture 'gpt-j'");
}

static void test_missing_tensor(void) {
    edit e = {.drop_tensor = "blk.1.ffn_up.weight"};
    expect_failure(&e, KILN_ERR_FORMAT, "missing tensor 'blk.1.ffn_up.weight'");
}

static void test_missing_bias(void) {
    edit e = {.drop_tensor = "blk.0.attn_k.bias"};
    expect_failure(&e, KILN_ERR_FORMAT, "missing tensor 'blk.0.attn_k.bias'");
}

static void test_wrong_shape(void) {
    edit e = {.shrink_tensor = "blk.0.attn_q.weight"};
    expect_failure(&e, KILN_ERR_FORMAT, "tensor 'blk.0.attn_q.weight' has shape");
}

static void test_missing_hparam(void) {
    edit e = {.drop_key = "qwen2.block_count"};
    expect_failure(&e, KILN_ERR_FORMAT, "qwen2.block_count");
}

static void test_bad_head_count(void) {
    edit e = {.key_u32 = "qwen2.attention.head_count_kv", .val_u32 = 3};
    expect_failure(&e, KILN_ERR_FORMAT, "head count");
}

/* A head width derived from the embedding (no key_length) past the widest head kiln rotates. */
static void test_head_too_wide(void) {
    edit e = {.key_u32 = "qwen2.embedding_length", .val_u32 = 65536};
    expect_failure(&e, KILN_ERR_FORMAT, "head dimension 8192 must be even, positive and at most 4096");
}

static void test_vocab_mismatch(void) {
    edit e = {.shrink_tensor = "token_embd.weight"};
    expect_failure(&e, KILN_ERR_FORMAT, "token_embd.weight");
}

int main(void) {
    RUN(test_copy_unchanged_loads);
    RUN(test_unknown_arch);
    RUN(test_missing_tensor);
    RUN(test_missing_bias);
    RUN(test_wrong_shape);
    RUN(test_missing_hparam);
    RUN(test_bad_head_count);
    RUN(test_head_too_wide);
    RUN(test_vocab_mismatch);
    return kt_summary();
}
