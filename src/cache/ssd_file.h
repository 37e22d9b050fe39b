/*
 * ssd_file.h - one SSD cache file: the K/V of a token sequence, written and read back with every
 * length, offset and checksum checked (the format is documented at the top of ssd_file.c, its
 * parser). The SSD tier (ssd.c) decides which entries to write and where; this file only encodes
 * and decodes one file through a file descriptor.
 */
#ifndef KN_SSD_FILE_H
#define KN_SSD_FILE_H

#include "base/base.h"
#include "tensor/dtype.h"

#include <stdatomic.h>

#define KN_SSDF_MAX_TOKENS (1 << 24)
#define KN_SSDF_MAX_LAYERS 4096
#define KN_SSDF_MAX_KV_DIM (1 << 20)

/* What an entry's KV is only valid for: the model, its tokenizer and the KV format. */
typedef struct kn_ssdf_key {
    uint8_t model[32];     /* model fingerprint (raw SHA-256) */
    uint8_t tokenizer[32]; /* tokenizer hash (raw SHA-256) */
    uint32_t kv_type;      /* KV format code (kn_kv_format_code): KN_SSDF_F16, KN_SSDF_F32, or another */
    uint32_t n_layer;
    uint32_t kv_dim;
} kn_ssdf_key;

enum { KN_SSDF_F16 = 1, KN_SSDF_F32 = 2 };

/* A parsed, checked header. tokens and sums are owned (kn_ssdf_header_free). */
typedef struct kn_ssdf_header {
    kn_ssdf_key key;
    uint32_t n_tokens;
    int32_t *tokens;         /* [n_tokens] */
    uint64_t *sums;          /* [2 * n_layer]: K0, V0, K1, V1, ... */
    uint64_t tensor_bytes;   /* of a K tensor: n_tokens * K row bytes */
    uint64_t v_tensor_bytes; /* of a V tensor: n_tokens * V row bytes */
    uint64_t data_offset;
    uint64_t file_size;
} kn_ssdf_header;

/* Why a file was refused. Everything but IO and NOMEM means the file must not be used again. */
typedef enum kn_ssdf_result {
    KN_SSDF_OK = 0,
    KN_SSDF_IO, /* a read failed (the file may be fine) */
    KN_SSDF_NOMEM,
    KN_SSDF_TRUNCATED,     /* shorter than its header says */
    KN_SSDF_CORRUPT,       /* bad magic, lengths, header or tensor checksum, or unexpected tokens */
    KN_SSDF_MISMATCH,      /* a sound file for another model, tokenizer or KV format */
    KN_SSDF_OTHER_VERSION, /* another version of the format (e.g. written by an earlier kiln) */
} kn_ssdf_result;

const char *kn_ssdf_result_str(kn_ssdf_result r);

/* The bytes of one position's K and V rows of a layer under key; false for an unknown format code
 * or a kv_dim out of range or not a multiple of the code's head_dim. */
bool kn_ssdf_rows(const kn_ssdf_key *key, uint64_t *k_row, uint64_t *v_row);

/* Total bytes of the file for n tokens under key (header, padding and tensors); 0 on overflow. */
uint64_t kn_ssdf_file_size(const kn_ssdf_key *key, uint32_t n);

/* Writes a complete file to fd (from its current position, which must be 0): the header for
 * tokens[n] under key, then the K and V tensors of every layer, k and v being
 * [n_layer][n][k_row] and [n_layer][n][v_row] bytes (kn_ssdf_rows). stop (may be NULL) is polled between tensors: when
 * it turns true the write gives up. KILN_ERR_IO with the reason (errno text, e.g. disk full) on failure,
 * KILN_ERR_CANCELLED when stopped; the caller removes the partial file. Does not fsync. */
kiln_status kn_ssdf_write(int fd, const kn_ssdf_key *key, const int32_t *tokens, uint32_t n, const uint8_t *k,
                          const uint8_t *v, const atomic_bool *stop);

/* Reads and checks fd's header: size, magic, version (KN_SSDF_OTHER_VERSION), every count and
 * offset, the header checksum, and then (when expect is not NULL) that the key equals *expect. On
 * KN_SSDF_OK *out owns the token ids and tensor checksums; on any other result *out holds nothing. */
kn_ssdf_result kn_ssdf_read_header(int fd, const kn_ssdf_key *expect, kn_ssdf_header *out);
void kn_ssdf_header_free(kn_ssdf_header *h);

/* Reads the K and V rows of positions [0, m) of every layer (m <= h->n_tokens) into
 * k + l * k_stride and v + l * v_stride (bytes). With verify, the rest of every tensor is read too
 * and each tensor's checksum is compared (KN_SSDF_CORRUPT on a difference); without it, damaged
 * tensor data goes unseen. The destination rows may hold partial data after a failure. */
kn_ssdf_result kn_ssdf_read_rows(int fd, const kn_ssdf_header *h, uint32_t m, uint8_t *k, size_t k_stride, uint8_t *v,
                                 size_t v_stride, bool verify);

#endif
