/*
 * hf_inspect.c - kiln_file (include/kiln.h): a GGUF file or a Hugging Face / MLX directory opened to
 * list its metadata and tensors as stored, and to give any tensor's values as float32 (`kiln inspect`).
 * A GGUF file is read by the GGUF reader; a directory through kn_hf_open, whose safetensors table (not
 * the converted view the loader uses) is what is listed and dequantized.
 */
#include "kiln.h"
#include "model/hf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln_file {
    kn_gguf g;
    const kn_safetensors *st; /* a directory's weights; NULL for GGUF */
    json_t *config;
    const char **keys; /* a directory's config.json member names, in file order */
    size_t n_keys;
};

kiln_status kiln_file_open(const char *path, kiln_file **out) {
    kn_error_clear();
    if (!out || !path) return kn_error(KILN_ERR_INVALID_ARG, "kiln_file_open: NULL argument");
    *out = NULL;
    kiln_file *f = kn_calloc(1, sizeof *f);
    if (!f) return KILN_ERR_NOMEM;
    kiln_status st = kn_hf_is_dir(path) ? kn_hf_open_headers(path, &f->g) : kn_gguf_open(path, &f->g);
    if (st) {
        free(f);
        return st;
    }
    f->st = kn_hf_safetensors(&f->g);
    f->config = kn_hf_config(&f->g);
    if (f->config) {
        f->keys = kn_calloc(json_object_size(f->config) + 1, sizeof *f->keys);
        if (!f->keys) {
            kiln_file_close(f);
            return KILN_ERR_NOMEM;
        }
        const char *k;
        json_t *v;
        json_object_foreach(f->config, k, v) f->keys[f->n_keys++] = k;
    }
    *out = f;
    return KILN_OK;
}

void kiln_file_close(kiln_file *f) {
    if (!f) return;
    kn_gguf_close(&f->g);
    free(f->keys);
    free(f);
}

const char *kiln_file_format(const kiln_file *f) {
    if (!f->st) return "gguf";
    return json_object_get(f->config, "quantization") ? "mlx" : "safetensors";
}

size_t kiln_file_n_meta(const kiln_file *f) { return f->st ? f->n_keys : (size_t)f->g.n_kv; }

/* A GGUF value as text. */
static void gguf_value(const kn_gguf_kv *kv, char *out, size_t cap) {
    static const char *const tn[KN_GGUF_TYPE_COUNT] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                       "bool", "string", "array", "u64", "i64", "f64"};
    switch (kv->type) {
        case KN_GGUF_STRING:
            if (kv->str.len > 200)
                snprintf(out, cap, "\"%.120s...\" (%llu bytes)", kv->str.ptr, (unsigned long long)kv->str.len);
            else snprintf(out, cap, "\"%.*s\"", (int)kv->str.len, kv->str.ptr);
            for (char *p = out; *p; p++)
                if ((unsigned char)*p < 0x20) *p = ' ';
            break;
        case KN_GGUF_ARRAY:
            snprintf(out, cap, "[%llu x %s]", (unsigned long long)kv->arr_n,
                     (unsigned)kv->arr_type < KN_GGUF_TYPE_COUNT ? tn[kv->arr_type] : "?");
            break;
        case KN_GGUF_FLOAT32:
        case KN_GGUF_FLOAT64: snprintf(out, cap, "%.9g", kv->v.f); break;
        case KN_GGUF_BOOL: snprintf(out, cap, "%s", kv->v.b ? "true" : "false"); break;
        case KN_GGUF_INT8:
        case KN_GGUF_INT16:
        case KN_GGUF_INT32:
        case KN_GGUF_INT64: snprintf(out, cap, "%lld", (long long)kv->v.i); break;
        default: snprintf(out, cap, "%llu", (unsigned long long)kv->v.u); break;
    }
}

const char *kiln_file_meta(const kiln_file *f, size_t i, char *value, size_t cap) {
    if (i >= kiln_file_n_meta(f) || !value || !cap) return NULL;
    if (!f->st) {
        const kn_gguf_kv *kv = &f->g.kv[i];
        gguf_value(kv, value, cap);
        static _Thread_local char key[256];
        snprintf(key, sizeof key, "%.*s", (int)KN_MIN(kv->key.len, 255), kv->key.ptr);
        return key;
    }
    char *s = json_dumps(json_object_get(f->config, f->keys[i]), JSON_COMPACT | JSON_ENCODE_ANY);
    if (s && strlen(s) > 200) snprintf(value, cap, "%.160s... (%zu bytes)", s, strlen(s));
    else snprintf(value, cap, "%s", s ? s : "?");
    free(s);
    return f->keys[i];
}

size_t kiln_file_n_tensors(const kiln_file *f) { return f->st ? f->st->n_tensors : (size_t)f->g.n_tensors; }

/* An MLX weight: the tensor is `base`.weight of U32 with `base`.scales beside it. */
static bool mlx_weight(const kiln_file *f, const kn_st_tensor *t, int *bits, int *group, const kn_st_tensor **s,
                       const kn_st_tensor **b) {
    const size_t n = strlen(t->name);
    if (t->dtype != KN_ST_U32 || n < 8 || strcmp(t->name + n - 7, ".weight") || n > 1100) return false;
    char base[1100], nm[1200];
    snprintf(base, sizeof base, "%.*s", (int)(n - 7), t->name);
    snprintf(nm, sizeof nm, "%s.scales", base);
    *s = kn_st_find(f->st, nm);
    snprintf(nm, sizeof nm, "%s.biases", base);
    *b = kn_st_find(f->st, nm);
    const char *hfbase = strncmp(base, "language_model.", 15) ? base : base + 15;
    return *s && *b && (kn_hf_mlx_params(&f->g, base, bits, group) || kn_hf_mlx_params(&f->g, hfbase, bits, group));
}

bool kiln_file_tensor_info(const kiln_file *f, size_t i, kiln_file_tensor *out) {
    if (i >= kiln_file_n_tensors(f) || !out) return false;
    memset(out, 0, sizeof *out);
    if (!f->st) {
        const kn_gguf_tensor *t = &f->g.tensors[i];
        static _Thread_local char name[1100];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        out->name = name;
        out->type = kn_dtype_name(t->type);
        out->n_dims = (int32_t)t->n_dims;
        out->n_values = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            out->shape[d] = t->ne[t->n_dims - 1 - d];
            out->n_values *= (uint64_t)t->ne[d];
        }
        out->n_bytes = t->nbytes;
        return true;
    }
    const kn_st_tensor *t = &f->st->tensors[i], *s, *b;
    out->name = t->name;
    out->type = kn_st_dtype_name(t->dtype);
    out->n_dims = t->n_dims;
    memcpy(out->shape, t->shape, sizeof out->shape);
    out->n_bytes = t->nbytes;
    out->n_values = t->n_elem;
    int bits, group;
    if (mlx_weight(f, t, &bits, &group, &s, &b)) {
        out->mlx_bits = bits;
        out->mlx_group = group;
        out->n_values = t->n_elem * 32 / (uint64_t)bits;
    }
    return true;
}

int64_t kiln_file_find(const kiln_file *f, const char *name) {
    for (size_t i = 0; i < kiln_file_n_tensors(f); i++) {
        kiln_file_tensor ti;
        kiln_file_tensor_info(f, i, &ti);
        if (!strcmp(ti.name, name)) return (int64_t)i;
    }
    return -1;
}

kiln_status kiln_file_dequant(const kiln_file *f, size_t i, float *out) {
    kn_error_clear();
    if (!f || i >= kiln_file_n_tensors(f) || !out)
        return kn_error(KILN_ERR_INVALID_ARG, "kiln_file_dequant: no tensor %zu", i);
    if (!f->st) {
        const kn_gguf_tensor *t = &f->g.tensors[i];
        const kn_type_traits *tr = kn_type_traits_get(t->type);
        if (!tr || !tr->to_float)
            return kn_error(KILN_ERR_UNSUPPORTED, "tensor '%.*s': type %s has no dequantizer", (int)t->name.len,
                            t->name.ptr, kn_dtype_name(t->type));
        tr->to_float(t->data, out, t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        return KILN_OK;
    }
    const kn_st_tensor *t = &f->st->tensors[i], *s, *b;
    if (kn_st_to_f32(t, out)) return KILN_OK;
    int bits, group;
    if (!mlx_weight(f, t, &bits, &group, &s, &b))
        return kn_error(KILN_ERR_UNSUPPORTED, "tensor '%s' has dtype %s and is not an MLX-quantized weight", t->name,
                        kn_st_dtype_name(t->dtype));
    const int nd = t->n_dims;
    if (nd < 1 || (bits != 2 && bits != 3 && bits != 4 && bits != 6 && bits != 8) || group <= 0)
        return kn_error(KILN_ERR_FORMAT, "tensor '%s': bad MLX quantization (%d bits, group %d)", t->name, bits, group);
    const int64_t cols = t->shape[nd - 1] * 32 / bits,
                  rows = (int64_t)(t->n_elem / (uint64_t)KN_MAX(t->shape[nd - 1], 1));
    const bool ok = cols % group == 0 && s->dtype == b->dtype &&
                    (s->dtype == KN_ST_F16 || s->dtype == KN_ST_BF16 || s->dtype == KN_ST_F32) &&
                    s->n_elem == (uint64_t)(rows * (cols / group)) && b->n_elem == s->n_elem;
    if (!ok)
        return kn_error(KILN_ERR_FORMAT,
                        "tensor '%s': its scales and biases do not match %lld rows of %lld values in "
                        "groups of %d",
                        t->name, (long long)rows, (long long)cols, group);
    kn_mlx_dequant(t->data, (size_t)t->shape[nd - 1] * 4, s->data, b->data, s->dtype, bits, group, rows, cols, out);
    return KILN_OK;
}
