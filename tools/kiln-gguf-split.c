/*
 * kiln-gguf-split.c - splits a GGUF model into parts by GGUF tooling's convention, for tests of split
 * loading and `kiln pull` of split quants:
 *
 *   kiln-gguf-split IN.gguf PREFIX N
 *
 * writes PREFIX-00001-of-0000N.gguf .. PREFIX-0000N-of-0000N.gguf: the first holds every metadata key of
 * IN, each part split.no (0-based, uint16), split.count (uint16) and split.tensors.count (int32), and
 * the tensors are dealt out in file order, about the same number per part (each part at least one).
 * Exit status 0, or 1 with a message on stderr.
 */
#include "base/base.h"
#include "gguf_write.h"
#include "model/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *what) {
    fprintf(stderr, "kiln-gguf-split: %s: %s\n", what, kn_error_msg());
    return 1;
}

/* Copies key/value kv of g into w. */
static kiln_status copy_kv(kn_gguf_writer *w, const kn_gguf_kv *kv) {
    char key[1024];
    snprintf(key, sizeof key, "%.*s", (int)KN_MIN(kv->key.len, sizeof key - 1), kv->key.ptr);
    switch (kv->type) {
        case KN_GGUF_STRING: return kn_gguf_writer_set_strn(w, key, kv->str.ptr, kv->str.len);
        case KN_GGUF_ARRAY:
            if (kv->arr_type == KN_GGUF_STRING) {
                const char **v = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof *v);
                char **own = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof *own);
                if (!v || !own) return KILN_ERR_NOMEM;
                const uint8_t *cur = kv->arr_data;
                for (uint64_t i = 0; i < kv->arr_n; i++) {
                    kn_str s = kn_gguf_next_str(&cur);
                    own[i] = malloc(s.len + 1);
                    memcpy(own[i], s.ptr, s.len);
                    own[i][s.len] = 0;
                    v[i] = own[i];
                }
                kiln_status st = kn_gguf_writer_set_arr_str(w, key, v, kv->arr_n);
                for (uint64_t i = 0; i < kv->arr_n; i++) free(own[i]);
                free(own);
                free(v);
                return st;
            }
            return kn_gguf_writer_set_arr(w, key, kv->arr_type, kv->arr_data, kv->arr_n);
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
        default: return kn_error(KILN_ERR_FORMAT, "key %s has an unknown type", key);
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: kiln-gguf-split IN.gguf PREFIX N\n");
        return 2;
    }
    const int n = atoi(argv[3]);
    kn_gguf g;
    if (kn_gguf_open_file(argv[1], &g)) return die(argv[1]);
    if (n < 1 || n > 99999 || (uint64_t)n > g.n_tensors) {
        fprintf(stderr, "kiln-gguf-split: N must be 1 .. %llu (the tensor count)\n", (unsigned long long)g.n_tensors);
        return 2;
    }
    uint64_t next = 0;
    for (int p = 0; p < n; p++) {
        kn_gguf_writer *w;
        if (kn_gguf_writer_create(&w)) return die("writer");
        kiln_status st = KILN_OK;
        for (uint64_t i = 0; i < g.n_kv && !st && p == 0; i++)
            if (!kn_str_eq(g.kv[i].key, "general.alignment")) st = copy_kv(w, &g.kv[i]);
        if (!st) st = kn_gguf_writer_set_u16(w, "split.no", (uint16_t)p);
        if (!st) st = kn_gguf_writer_set_u16(w, "split.count", (uint16_t)n);
        if (!st) st = kn_gguf_writer_set_i32(w, "split.tensors.count", (int32_t)g.n_tensors);
        const uint64_t end = g.n_tensors * (uint64_t)(p + 1) / (uint64_t)n;
        for (; next < end && !st; next++) {
            const kn_gguf_tensor *t = &g.tensors[next];
            char name[1024];
            snprintf(name, sizeof name, "%.*s", (int)KN_MIN(t->name.len, sizeof name - 1), t->name.ptr);
            st = kn_gguf_writer_add_tensor(w, name, t->n_dims, t->ne, t->type, t->data);
        }
        char path[4200];
        snprintf(path, sizeof path, "%s-%05d-of-%05d.gguf", argv[2], p + 1, n);
        if (!st) st = kn_gguf_writer_write(w, path);
        kn_gguf_writer_free(w);
        if (st) return die(path);
    }
    kn_gguf_close(&g);
    return 0;
}
