/*
 * kv.h - the active key/value cache of one row (one sequence).
 *
 * The cache is a table of blocks of bt positions each. A block holds every layer's K rows, then
 * (at k_blk bytes) every layer's V rows of its positions: [n_layer][bt][k_row], [n_layer][bt][v_row],
 * a position's row being its n_head_kv head vectors of
 * head_dim elements in the tensor's KV format (tensor/kvq.h: F16 by default, F32, BF16, Q8_0, Q4_0,
 * TQ4, TQ3; keys and values may differ), keys stored after RoPE. No quant block straddles a head or
 * a position, so a position's row is self-contained: dropping positions (lowering n_past) or
 * copying whole positions elsewhere keeps every other position valid. When a tensor is rotated, its
 * head vectors are stored as R x (tensor/hadamard.h, signs fixed by KN_KV_ROT_SEED, the layer and
 * the KV head); attention then rotates the query the same way (keys) and the output back (values),
 * see kn_kv_attend. A batch is several rows, each with its own KV and position.
 *
 * Contiguous (kn_kv_init_fmt): one block of n_ctx positions that the cache owns, i.e. the layout
 * [n_layer][n_ctx][row] per K and V. Paged (kn_kv_init_paged): blocks of KN_KVP_BLOCK positions from
 * a pool (kv_pool.h), mapped on demand; a block may be shared (reference-counted) with the prefix
 * cache and other rows, and is copied before this cache writes into it (kn_kv_prepare). Both give
 * the same bits everywhere: only the addresses of rows differ.
 */
#ifndef KN_KV_H
#define KN_KV_H

#include "base/base.h"
#include "cache/kv_pool.h"
#include "tensor/dtype.h"
#include "tensor/kernels.h"
#include "tensor/kvq.h"

/* The seed of the rotation signs (fixed, so cached and saved KV stays valid across runs). */
#define KN_KV_ROT_SEED 0x6b696c6e2d726f74ull /* "kiln-rot" */

/* Head sizes the rotated formats take at most (a query is rotated in a buffer on the stack). */
#define KN_KV_MAX_ROT_HD 1024

/* What a cache holds: the formats of K and V and whether each is rotated. */
typedef struct kn_kv_format {
    kn_kvt k, v;
    bool rot_k, rot_v;
} kn_kv_format;

typedef struct kn_kv {
    kn_kv_format fmt;
    int32_t n_layer;
    int32_t n_ctx; /* capacity in positions */
    int32_t kv_dim;
    int32_t n_head_kv, head_dim; /* kv_dim = n_head_kv * head_dim */
    int32_t n_past;              /* positions filled */
    size_t k_head, v_head;       /* bytes of one K (V) head vector */
    size_t k_elt, v_elt;         /* bytes per element of a plain format (F16/F32/BF16); 0 for the others */
    size_t k_row, v_row;         /* bytes of one position's K (V) row in one layer: n_head_kv head vectors */
    size_t bytes;                /* bytes allocated for k and v together (contiguous; 0 when paged) */
    float *signs;                /* [n_layer][n_head_kv][head_dim] rotation signs; NULL when nothing rotates */
    uint8_t *k, *v;              /* contiguous: [n_layer][n_ctx][k_row], [n_layer][n_ctx][v_row]; NULL when paged */
    int32_t bt;                  /* positions per block: n_ctx when contiguous */
    int32_t n_blk;               /* entries of the block table: ceil(n_ctx / bt) */
    size_t k_blk;                /* offset of a block's V rows (its K rows' bytes, rounded up to 64) */
    size_t blk_bytes;            /* bytes of one block */
    uint8_t **blk;               /* [n_blk] block addresses (NULL: not mapped yet) */
    int32_t *ids;                /* [n_blk] the blocks' pool ids (-1: none); NULL when contiguous */
    kn_kv_pool *pool;            /* the pool of its blocks; NULL when contiguous */
    int32_t quota;               /* blocks it may still take from the pool's reservations */
} kn_kv;

/* The format of public KV types k and v with rotation rot for heads of head_dim elements: rotation
 * follows each format's default (kvq.h) unless rot says on or off (always-rotated formats ignore
 * off). KILN_ERR_INVALID_ARG (message listing the types) for a value outside the enum. */
kiln_status kn_kv_format_of(kiln_kv_type k, kiln_kv_type v, kiln_kv_rotation rot, kn_kv_format *out);

/* The F16 or F32 format without rotation (for KN_F16 / KN_F32; F16 otherwise). */
kn_kv_format kn_kv_format_plain(kn_dtype type);

/* A 32-bit code of a format for heads of head_dim elements, equal for equal formats and different
 * otherwise (the SSD tier's key): 1 for plain F16, 2 for plain F32 (the codes of earlier files), else
 * (1 + K) | (1 + V) << 8 | rot_k << 16 | rot_v << 17 | head_dim << 18 (head_dim < 2^14). */
uint32_t kn_kv_format_code(const kn_kv_format *f, int32_t head_dim);
/* The inverse for rows of kv_dim elements: *f, and the bytes of a position's K and V rows; false for
 * a code no format has, a head_dim that does not divide kv_dim, or a size that overflows. */
bool kn_kv_format_decode(uint32_t code, uint32_t kv_dim, kn_kv_format *f, uint64_t *k_row, uint64_t *v_row);

/* Equal formats (same K and V formats and rotation). */
bool kn_kv_format_eq(const kn_kv_format *a, const kn_kv_format *b);

/* Bytes of one K (V) row of heads of head_dim elements in format f, n_head_kv heads per row. */
uint64_t kn_kv_row_bytes(kn_kvt t, int32_t n_head_kv, int32_t head_dim);

/* The one formula for KV memory: bytes one position takes in the cache of n_layer layers of n_head_kv
 * heads of head_dim elements, K and V together. 0 for an unknown format or a non-positive size;
 * UINT64_MAX when it overflows. kn_kv_init_fmt allocates n_ctx times this (K and V each rounded up to
 * 64 bytes); a paged cache takes it per position in blocks (kn_kv_block_bytes). */
uint64_t kn_kv_bytes_per_token_fmt(const kn_kv_format *f, int32_t n_layer, int32_t n_head_kv, int32_t head_dim);

/* Allocates a contiguous cache. KILN_ERR_NOMEM (with the size in the message) on failure. */
kiln_status kn_kv_init_fmt(kn_kv *kv, const kn_kv_format *f, int32_t n_layer, int32_t n_ctx, int32_t n_head_kv,
                           int32_t head_dim);
/* The plain F16 or F32 cache of one head of kv_dim elements per position (tests, tools). */
kiln_status kn_kv_init(kn_kv *kv, kn_dtype type, int32_t n_layer, int32_t n_ctx, int32_t kv_dim);
/* A paged cache of n_ctx positions over pool's blocks (whose size must be kn_kv_block_bytes of the
 * format with the pool's bt); no block is mapped yet. */
kiln_status kn_kv_init_paged(kn_kv *kv, kn_kv_pool *pool, const kn_kv_format *f, int32_t n_layer, int32_t n_ctx,
                             int32_t n_head_kv, int32_t head_dim);
/* Bytes of one block of bt positions of the given format and shape (what a pool's blocks hold). */
size_t kn_kv_block_bytes(const kn_kv_format *f, int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t bt);
/* Releases the cache (a paged one drops its blocks and hands back its unused quota). */
void kn_kv_free(kn_kv *kv);
/* Empties a cache: n_past = 0; a paged one drops its blocks (its quota stays). */
void kn_kv_reset(kn_kv *kv);
/* Sets the quota of a paged cache to n blocks the caller has reserved in its pool (kn_kvp_reserve),
 * handing back what is left of the previous quota; n = 0 just hands it back. No-op when contiguous. */
void kn_kv_set_quota(kn_kv *kv, int32_t n);
/* Makes positions [p0, p0 + n) writable: a paged cache maps a new block where none is, and copies a
 * block that it shares with another holder (copy-on-write) before it is written; blocks come out
 * of the cache's quota first. KILN_ERR_BUSY when the pool is out of blocks, KILN_ERR_INVALID_ARG
 * past n_ctx. Every write (kn_kv_store) must be to prepared positions; contiguous caches need
 * nothing (KILN_OK). */
kiln_status kn_kv_prepare(kn_kv *kv, int32_t p0, int32_t n);
/* Maps the pool blocks ids[ceil(m / bt)] (another holder's, e.g. a prefix-cache entry's) as
 * positions [0, m) of the paged cache kv, taking a reference to each; the blocks it held go; sets
 * n_past = m. */
void kn_kv_map(kn_kv *kv, const int32_t *ids, int32_t m);
/* Copies positions [0, m) of every layer between a cache and plain arrays [n_layer][..][k_row] with
 * layer l's rows at k + l * k_stride (V alike): get reads the cache, put writes it (preparing the
 * positions first; its status) and sets n_past = m. */
void kn_kv_get_rows(const kn_kv *kv, int32_t m, uint8_t *k, size_t k_stride, uint8_t *v, size_t v_stride);
kiln_status kn_kv_put_rows(kn_kv *kv, int32_t m, const uint8_t *k, size_t k_stride, const uint8_t *v, size_t v_stride);
/* Blocks mapped in a paged cache (0 when contiguous). */
int32_t kn_kv_blocks_mapped(const kn_kv *kv);
/* Bytes allocated for the cache (K and V together); 0 when not allocated. */
size_t kn_kv_bytes(const kn_kv *kv);

/* Stores k[kv_dim] and v[kv_dim] of layer l at position pos (rotating and converting to the cache
 * formats). */
void kn_kv_store(kn_kv *kv, int32_t l, int32_t pos, const float *k, const float *v);

/* Raw pointers to the K or V row of (l, pos), from the head holding element off (off a multiple of
 * head_dim for the quantized formats). */
static inline size_t kn_kv__off(size_t head, size_t elt, int32_t head_dim, int32_t off) {
    return (size_t)(off / head_dim) * head + (size_t)(off % head_dim) * elt;
}
static inline const void *kn_kv_k_at(const kn_kv *kv, int32_t l, int32_t pos, int32_t off) {
    return kv->blk[pos / kv->bt] + ((size_t)l * (size_t)kv->bt + (size_t)(pos % kv->bt)) * kv->k_row +
           kn_kv__off(kv->k_head, kv->k_elt, kv->head_dim, off);
}
static inline const void *kn_kv_v_at(const kn_kv *kv, int32_t l, int32_t pos, int32_t off) {
    return kv->blk[pos / kv->bt] + kv->k_blk + ((size_t)l * (size_t)kv->bt + (size_t)(pos % kv->bt)) * kv->v_row +
           kn_kv__off(kv->v_head, kv->v_elt, kv->head_dim, off);
}

/* Attention of nkv consecutive KV heads, the first one's elements at kv_off (a multiple of hd), each
 * with nq query heads (nq <= KN_ATTEND_MAX_Q, nkv * nq <= KN_ATTEND_MAX_HEADS), over positions
 * [p0, p0 + n) of layer l, in one sweep over the positions (kn_attend_rows): rotates the queries when K
 * is rotated, runs ks's kernel for the format (K and V of one format; the reference for mixed formats
 * and for soft-capped scores, cap > 0), and rotates the output back when V is rotated.
 * q[nkv][nq][hd] -> out[nkv][nq][hd]. hd must be the cache's head_dim unless the cache is a plain
 * unrotated F16 / F32 one (kn_kv_init), whose rows any head size can split. */
void kn_kv_attend(const kn_kernels *ks, const kn_kv *kv, int32_t l, int32_t p0, int32_t n, int32_t kv_off, int hd,
                  int nkv, const float *q, int nq, float scale, float cap, float *out);

/* q[hd] as the keys of the head at kv_off of layer l are stored: q itself, or (when K is rotated)
 * R q in dst[hd]; and the key of (l, pos) at kv_off dotted with it in element order (sum += k[i] *
 * q[i]). hd as for kn_kv_attend. */
const float *kn_kv_query(const kn_kv *kv, int32_t l, int32_t kv_off, int hd, const float *q, float *dst);
float kn_kv_key_dot(const kn_kv *kv, int32_t l, int32_t pos, int32_t kv_off, int hd, const float *q_stored);

#endif
