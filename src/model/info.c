/*
 * info.c - kiln_model_info_read: what a GGUF file is (architecture, size, parameter count, weight
 * type, context length, split parts) from its header alone, for model listings and for choosing a
 * model that fits the machine without loading one.
 *
 * The file goes through the same validating GGUF reader as a load (every count, length and tensor
 * extent is checked against the file size), but only the header, the metadata and the tensor table
 * are read; tensor data is never touched, so listing a directory of multi-gigabyte models costs a
 * few page reads per file. A Hugging Face directory is read the same way through its config.json and
 * safetensors headers (nothing converted).
 */
#include "kiln.h"

#include "model/arch.h"
#include "model/gguf.h"
#include "model/hf.h"

#include <stdio.h>
#include <string.h>

/* Copies s into dst[cap] NUL-terminated, replacing bytes outside printable ASCII with '?'. */
static void copy_printable(char *dst, size_t cap, kn_str s) {
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)s.ptr[i];
        dst[i] = ch >= 0x20 && ch <= 0x7e ? (char)ch : '?';
    }
    dst[n] = 0;
}

/* Largest hyperparameter value reported; larger values read as absent (0). */
#define INFO_INT_MAX    (1 << 30)
/* Most parts of a split model recognized; beyond it split.count reads as 1. */
#define MAX_SPLIT_COUNT 100000

/* `{arch}.{suffix}` as an int32 in [1, INFO_INT_MAX], or 0 when absent or out of range. */
static int32_t arch_int(const kn_gguf *g, const char *arch, const char *suffix) {
    char key[128];
    int n = snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (n < 0 || (size_t)n >= sizeof key) return 0;
    int64_t v;
    if (!kn_gguf_get_i64(g, key, &v) || v < 1 || v > INFO_INT_MAX) return 0;
    return (int32_t)v;
}

kiln_status kiln_model_info_read(const char *path, kiln_model_info *out) {
    kn_error_clear();
    if (!out) return kn_error(KILN_ERR_INVALID_ARG, "kiln_model_info_read: out is NULL");
    memset(out, 0, sizeof *out);
    out->split_count = 1;
    if (!path) return kn_error(KILN_ERR_INVALID_ARG, "kiln_model_info_read: path is NULL");
    kn_gguf g;
    const bool dir = kn_hf_is_dir(path);
    kiln_status st = dir ? kn_hf_open_headers(path, &g) : kn_gguf_open(path, &g);
    if (st) {
        if (!dir) kn_error_prefix("%s", path);
        return st;
    }
    out->file_bytes = g.map.size;
    kn_str s;
    if (kn_gguf_get_str(&g, "general.architecture", &s)) copy_printable(out->arch, sizeof out->arch, s);
    if (kn_gguf_get_str(&g, "general.name", &s)) copy_printable(out->name, sizeof out->name, s);
    if (out->arch[0]) {
        out->n_ctx_train = arch_int(&g, out->arch, "context_length");
        out->n_embd = arch_int(&g, out->arch, "embedding_length");
        out->n_layer = arch_int(&g, out->arch, "block_count");
        out->n_head = arch_int(&g, out->arch, "attention.head_count");
        out->n_head_kv = arch_int(&g, out->arch, "attention.head_count_kv");
        if (!out->n_head_kv) out->n_head_kv = out->n_head;
        out->head_dim = arch_int(&g, out->arch, "attention.key_length");
        if (!out->head_dim && out->n_head) out->head_dim = out->n_embd / out->n_head;
    }
    int64_t v;
    if (kn_gguf_get_i64(&g, "split.count", &v) && v >= 1 && v <= MAX_SPLIT_COUNT) out->split_count = (int32_t)v;
    if (kn_gguf_get_i64(&g, "split.no", &v) && v >= 0 && v < out->split_count) out->split_no = (int32_t)v;

    /* Bytes per tensor type, to name the dominant one. The reader accepted only known types, each
     * below KN_DTYPE_COUNT, and element counts that fit in int64. Tensors of a hostile file may
     * overlap, so the sums saturate instead of wrapping. */
    uint64_t by_type[KN_DTYPE_COUNT] = {0};
    out->n_tensors = g.n_tensors;
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const kn_gguf_tensor *t = &g.tensors[i];
        uint64_t n = 1;
        for (int d = 0; d < KN_MAX_DIMS; d++) n *= (uint64_t)t->ne[d];
        if (!kn_add_ok(out->n_params, n, &out->n_params)) out->n_params = UINT64_MAX;
        if (!kn_add_ok(out->tensor_bytes, t->nbytes, &out->tensor_bytes)) out->tensor_bytes = UINT64_MAX;
        if ((unsigned)t->type < KN_DTYPE_COUNT && !kn_add_ok(by_type[t->type], t->nbytes, &by_type[t->type]))
            by_type[t->type] = UINT64_MAX;
    }
    int best = -1;
    for (int t = 0; t < KN_DTYPE_COUNT; t++)
        if (by_type[t] && (best < 0 || by_type[t] > by_type[best])) best = t;
    if (dir) out->file_bytes = out->tensor_bytes; /* a directory: its weights, not one mapping */
    if (best >= 0) snprintf(out->weight_type, sizeof out->weight_type, "%s", kn_dtype_name(best));
    out->runnable = g.n_tensors > 0 && kn_arch_find(out->arch, strlen(out->arch)); /* a split: the whole set */
    kn_gguf_close(&g);
    return KILN_OK;
}
