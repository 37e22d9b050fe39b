/*
 * safetensors.h - a validating reader for safetensors files, single or sharded.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of JSON naming every tensor
 * with its dtype, shape and [begin, end) byte range in the data that follows, then the data. The
 * reader maps the file and checks everything before any view is handed out: the header length
 * against the file size and a cap, the JSON (duplicate names rejected), each dtype, each shape
 * (overflow), each range against its dtype and shape, and that the ranges tile the data exactly
 * (no overlap, no hole, nothing past the end). A directory with model.safetensors.index.json opens
 * every shard its weight_map names and checks that each tensor lives in the shard the map says.
 * Errors are KILN_ERR_FORMAT (KILN_ERR_IO for a missing or unreadable file) with a message naming
 * the file and the tensor.
 */
#ifndef KN_SAFETENSORS_H
#define KN_SAFETENSORS_H

#include "base/base.h"
#include "base/file.h"

/* Caps on hostile headers. */
#define KN_ST_MAX_HEADER ((uint64_t)100 << 20) /* the JSON header, bytes */
#define KN_ST_MAX_DIMS   8
#define KN_ST_MAX_SHARDS 4096

typedef enum kn_st_dtype {
    KN_ST_BOOL,
    KN_ST_U8,
    KN_ST_I8,
    KN_ST_F8_E4M3,
    KN_ST_F8_E5M2,
    KN_ST_U16,
    KN_ST_I16,
    KN_ST_F16,
    KN_ST_BF16,
    KN_ST_U32,
    KN_ST_I32,
    KN_ST_F32,
    KN_ST_U64,
    KN_ST_I64,
    KN_ST_F64,
    KN_ST_DTYPE_COUNT
} kn_st_dtype;

typedef struct kn_st_tensor {
    char *name; /* NUL-terminated, owned */
    kn_st_dtype dtype;
    int n_dims;                    /* 0 (a scalar) to KN_ST_MAX_DIMS */
    int64_t shape[KN_ST_MAX_DIMS]; /* row-major: shape[n_dims - 1] is the innermost (row length) */
    uint64_t n_elem;
    uint64_t nbytes;
    const uint8_t *data; /* inside the file's mapping, extent checked */
    int file;            /* index into kn_safetensors.paths */
} kn_st_tensor;

typedef struct kn_safetensors {
    int n_files;
    char **paths;     /* [n_files] */
    kn_mapping *maps; /* [n_files] */
    size_t n_tensors;
    kn_st_tensor *tensors; /* [n_tensors], sorted by name */
} kn_safetensors;

/* Opens one safetensors file (appending its tensors; pass a zeroed st). */
kiln_status kn_st_open_file(const char *path, kn_safetensors *st);
/* Opens the weights of a Hugging Face directory: model.safetensors.index.json and its shards when
 * present, else model.safetensors, else every *.safetensors file in it (sorted). *st is zeroed on
 * failure. */
kiln_status kn_st_open_dir(const char *dir, kn_safetensors *st);
void kn_st_close(kn_safetensors *st);

/* The tensor of that name, or NULL. */
const kn_st_tensor *kn_st_find(const kn_safetensors *st, const char *name);

/* "F32", "BF16", ... */
const char *kn_st_dtype_name(kn_st_dtype t);
/* Bytes per element. */
size_t kn_st_dtype_size(kn_st_dtype t);

/* Parses the safetensors bytes map (named path in messages) into st; the mapping stays the caller's
 * until kn_st_close (it is recorded in st). Used by kn_st_open_file and by tests on crafted bytes. */
kiln_status kn_st_parse(const char *path, kn_mapping map, kn_safetensors *st);

#endif
