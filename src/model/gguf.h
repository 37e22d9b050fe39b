/*
 * gguf.h - a validating reader for GGUF v2/v3 files.
 *
 * kn_gguf_open maps the file and parses the header, the metadata key/values and the tensor table,
 * checking every count, length, offset, alignment and tensor extent against the file size. After a
 * successful open every accessor is safe: string and array views point inside the mapping and their
 * lengths were checked. Nothing in the file is trusted before it is checked.
 */
#ifndef KN_GGUF_H
#define KN_GGUF_H

#include "base/base.h"
#include "base/file.h"
#include "tensor/dtype.h"

typedef enum kn_gguf_type {
    KN_GGUF_UINT8 = 0,
    KN_GGUF_INT8 = 1,
    KN_GGUF_UINT16 = 2,
    KN_GGUF_INT16 = 3,
    KN_GGUF_UINT32 = 4,
    KN_GGUF_INT32 = 5,
    KN_GGUF_FLOAT32 = 6,
    KN_GGUF_BOOL = 7,
    KN_GGUF_STRING = 8,
    KN_GGUF_ARRAY = 9,
    KN_GGUF_UINT64 = 10,
    KN_GGUF_INT64 = 11,
    KN_GGUF_FLOAT64 = 12,
    KN_GGUF_TYPE_COUNT
} kn_gguf_type;

typedef struct kn_str {
    const char *ptr; /* not NUL-terminated; points into the mapping */
    uint64_t len;
} kn_str;

typedef struct kn_gguf_kv {
    kn_str key;
    kn_gguf_type type;
    /* scalar value (for non-array, non-string types), widened */
    union {
        uint64_t u;
        int64_t i;
        double f;
        bool b;
    } v;
    kn_str str;              /* when type == STRING */
    kn_gguf_type arr_type;   /* when type == ARRAY */
    uint64_t arr_n;          /* element count */
    const uint8_t *arr_data; /* raw element data (for string arrays: first length prefix) */
} kn_gguf_kv;

#define KN_MAX_DIMS 4

typedef struct kn_gguf_tensor {
    kn_str name;
    uint32_t n_dims;
    int64_t ne[KN_MAX_DIMS]; /* ne[0] is the innermost (row length); unused dims are 1 */
    kn_dtype type;
    uint64_t offset; /* relative to the data section */
    uint64_t nbytes;
    const uint8_t *data; /* inside the mapping, extent checked */
} kn_gguf_tensor;

typedef struct kn_gguf {
    kn_mapping map;
    uint32_t version;
    uint64_t n_kv;
    kn_gguf_kv *kv; /* [n_kv] */
    uint64_t n_tensors;
    kn_gguf_tensor *tensors; /* [n_tensors] */
    uint64_t alignment;
    uint64_t data_offset; /* file offset of the data section */
    /* A model directory presented as GGUF (model/hf.h): what kv, tensors and their views point into,
     * released by kn_gguf_close through owner_free(owner). NULL for a GGUF file. */
    void *owner;
    void (*owner_free)(void *owner);
} kn_gguf;

/* Opens and validates path. On failure returns KILN_ERR_IO / KILN_ERR_FORMAT / KILN_ERR_UNSUPPORTED
 * / KILN_ERR_NOMEM with a message naming the problem and its file offset; *out is then zeroed.
 * A part of a split model (split.count > 1 in its metadata) opens the whole set (kn_gguf_join_split). */
kiln_status kn_gguf_open(const char *path, kn_gguf *out);
/* The same for one file only (a split part stays one part). */
kiln_status kn_gguf_open_file(const char *path, kn_gguf *out);
/* gguf_split.c: g, opened from path, is one part of a split model (PREFIX-0000i-of-0000N.gguf): opens
 * the other parts and makes g the whole model (the first part's metadata, every part's tensors; g owns
 * the parts, map is empty). Checks the set is complete and consistent; errors name the file (missing
 * part, a part that disagrees, a stray part of another split beside them). On failure g is closed. */
kiln_status kn_gguf_join_split(const char *path, kn_gguf *g);
/* Same, over an existing mapping (ownership of map passes to g). */
kiln_status kn_gguf_parse(kn_mapping map, kn_gguf *out);
void kn_gguf_close(kn_gguf *g);

/* Lookups by exact key; NULL when absent. */
const kn_gguf_kv *kn_gguf_find(const kn_gguf *g, const char *key);
const kn_gguf_tensor *kn_gguf_find_tensor(const kn_gguf *g, const char *name);

/* Typed getters: true and *out set when key exists and is convertible (any integer type to
 * integer, float32/64 to double, integer to double); false otherwise. */
bool kn_gguf_get_u64(const kn_gguf *g, const char *key, uint64_t *out);
bool kn_gguf_get_i64(const kn_gguf *g, const char *key, int64_t *out);
bool kn_gguf_get_f64(const kn_gguf *g, const char *key, double *out);
bool kn_gguf_get_bool(const kn_gguf *g, const char *key, bool *out);
bool kn_gguf_get_str(const kn_gguf *g, const char *key, kn_str *out);

/* Array access: *n set to the element count when key is an array of elem_type. */
bool kn_gguf_get_arr(const kn_gguf *g, const char *key, kn_gguf_type elem_type, uint64_t *n, const uint8_t **data);
/* Iterates a string array: call with *cursor = arr_data initially; returns the next string and
 * advances the cursor. Bounds were checked at open, so this cannot read outside the mapping. */
kn_str kn_gguf_next_str(const uint8_t **cursor);

/* True if s equals the C string c. */
bool kn_str_eq(kn_str s, const char *c);

/* Byte size of a scalar GGUF type (0 for STRING/ARRAY or invalid). */
size_t kn_gguf_type_size(kn_gguf_type t);

#endif
