/*
 * gguf_write.h - a GGUF v3 writer: metadata key/values and tensors in, a valid file out.
 *
 * Used by the synthetic model generator (tools/kiln-gen.c) and by tests that need GGUF files, so it
 * lives in tools/lib (built into libkiln-dev.a), outside the shipped library. The caller adds metadata
 * (every scalar type, strings, arrays of scalars or of strings) and tensors, then writes the file
 * once. Metadata is serialized as it is added, so the writer owns copies of every key, string and
 * array. Tensor data is either copied at add time (kn_gguf_writer_add_tensor) or produced in row
 * chunks by a caller callback while the file is written (kn_gguf_writer_add_tensor_fn), so a
 * multi-gigabyte model never has to be in memory at once.
 *
 * Layout written (little-endian, as every GGUF tool assumes): magic "GGUF", version 3, tensor count,
 * key/value count, the key/values in insertion order, the tensor infos in insertion order, zero
 * padding up to general.alignment (default 32), then each tensor's data at an aligned offset, each
 * followed by zero padding up to the alignment. The file is written to "<path>.tmp" and renamed over
 * path only once it is complete and flushed, so a reader never sees a half-written file.
 *
 * Errors: every function returns kiln_status and records a message with kn_error(): KILN_ERR_INVALID_ARG
 * for bad arguments (empty or duplicate key, duplicate tensor name, bad shape, a row length that is not
 * a multiple of the type's block size, unsupported type, a limit exceeded), KILN_ERR_NOMEM, and
 * KILN_ERR_IO for file errors. The writer never prints and never exits.
 */
#ifndef KN_GGUF_WRITE_H
#define KN_GGUF_WRITE_H

#include "model/gguf.h"

typedef struct kn_gguf_writer kn_gguf_writer;

/* Limits (checked; exceeding one is KILN_ERR_INVALID_ARG). */
#define KN_GGUFW_MAX_META_BYTES ((uint64_t)1 << 31) /* serialized metadata, all key/values together */
#define KN_GGUFW_MAX_KV         65536
#define KN_GGUFW_MAX_TENSORS    1048576
#define KN_GGUFW_MAX_KEY_LEN    65535
#define KN_GGUFW_MAX_NAME_LEN   1024

/* Produces rows [row0, row0 + n_rows) of a tensor into dst, which holds n_rows * row_bytes bytes (a
 * row is ne[0] elements in the tensor's type). Called in increasing row order during
 * kn_gguf_writer_write, from the calling thread. A non-OK return aborts the write with that status
 * (the callback records the message with kn_error). */
typedef kiln_status (*kn_gguf_fill_fn)(void *user, int64_t row0, int64_t n_rows, void *dst);

/* Creates an empty writer (no metadata, no tensors, alignment 32). */
kiln_status kn_gguf_writer_create(kn_gguf_writer **out);
/* Frees w and everything it owns; NULL is allowed. */
void kn_gguf_writer_free(kn_gguf_writer *w);

/* Scalar metadata. The key must be non-empty, at most KN_GGUFW_MAX_KEY_LEN bytes, and not yet set.
 * "general.alignment" is reserved for kn_gguf_writer_set_alignment (set_u32 forwards to it; every
 * other setter rejects the key), so the written key always matches the offsets the writer uses. */
kiln_status kn_gguf_writer_set_u8(kn_gguf_writer *w, const char *key, uint8_t v);
kiln_status kn_gguf_writer_set_i8(kn_gguf_writer *w, const char *key, int8_t v);
kiln_status kn_gguf_writer_set_u16(kn_gguf_writer *w, const char *key, uint16_t v);
kiln_status kn_gguf_writer_set_i16(kn_gguf_writer *w, const char *key, int16_t v);
kiln_status kn_gguf_writer_set_u32(kn_gguf_writer *w, const char *key, uint32_t v);
kiln_status kn_gguf_writer_set_i32(kn_gguf_writer *w, const char *key, int32_t v);
kiln_status kn_gguf_writer_set_f32(kn_gguf_writer *w, const char *key, float v);
kiln_status kn_gguf_writer_set_bool(kn_gguf_writer *w, const char *key, bool v);
kiln_status kn_gguf_writer_set_u64(kn_gguf_writer *w, const char *key, uint64_t v);
kiln_status kn_gguf_writer_set_i64(kn_gguf_writer *w, const char *key, int64_t v);
kiln_status kn_gguf_writer_set_f64(kn_gguf_writer *w, const char *key, double v);
/* String value: a NUL-terminated C string (kn_gguf_writer_set_strn: len bytes, may contain NUL). */
kiln_status kn_gguf_writer_set_str(kn_gguf_writer *w, const char *key, const char *s);
kiln_status kn_gguf_writer_set_strn(kn_gguf_writer *w, const char *key, const char *s, size_t len);

/* Array of n scalars of elem_type (any scalar kn_gguf_type; not STRING or ARRAY). data holds n
 * elements in their GGUF byte size (BOOL: one byte each, 0 or 1); it may be NULL when n == 0. */
kiln_status kn_gguf_writer_set_arr(kn_gguf_writer *w, const char *key, kn_gguf_type elem_type, const void *data,
                                   uint64_t n);
/* Array of n NUL-terminated strings. */
kiln_status kn_gguf_writer_set_arr_str(kn_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);

/* Sets general.alignment (a power of two from 1 to 2^20; written as a uint32 key/value). May be called
 * once, before or after tensors are added; tensor offsets are computed at write time. */
kiln_status kn_gguf_writer_set_alignment(kn_gguf_writer *w, uint32_t alignment);

/* Adds a tensor with n_dims (1..4) dimensions ne[0..n_dims-1] (ne[0] is the row length; each >= 1),
 * of a type kiln supports, whose ne[0] is a multiple of the type's block size. The data
 * (kn_gguf_writer_tensor_bytes bytes) is copied. Names must be non-empty, at most
 * KN_GGUFW_MAX_NAME_LEN bytes, and unique. */
kiln_status kn_gguf_writer_add_tensor(kn_gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne,
                                      kn_dtype type, const void *data);
/* Same, but the data is produced by fill(user, ...) during kn_gguf_writer_write, in chunks of whole
 * rows; user must stay valid until then. */
kiln_status kn_gguf_writer_add_tensor_fn(kn_gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne,
                                         kn_dtype type, kn_gguf_fill_fn fill, void *user);

/* Byte size of a tensor of that shape and type (0 when invalid). */
uint64_t kn_gguf_writer_tensor_bytes(uint32_t n_dims, const int64_t *ne, kn_dtype type);

/* Writes the file: to "<path>.tmp" first, then renamed to path. On failure the temporary file is
 * removed and path is untouched. May be called more than once (each call writes a complete file,
 * calling the fill callbacks again). */
kiln_status kn_gguf_writer_write(kn_gguf_writer *w, const char *path);

#endif
