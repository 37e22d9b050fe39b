/*
 * kvq.h - the storage formats of one KV head vector (the K or V slice of one head at one position):
 * what a quantized KV cache holds, how a vector of head_dim floats is stored into it, and how each
 * element reads back. Every attention kernel (attend.c and the SIMD sets) reads these formats
 * directly, element by element in the order of kn_kvq_elem, so every set computes the same bits.
 *
 * Formats (hd = head_dim; B = kn_kvq_block(hd), the largest power of two dividing hd, at most 32):
 *   F16, F32, BF16  hd plain elements.
 *   Q8_0            hd / B blocks of {fp16 d; int8 q[B]}: x = d * q (GGUF's block_q8_0 when B = 32).
 *   Q4_0            hd / B blocks of {fp16 d; u8 qs[B / 2]}: element j < B/2 in the low nibble of
 *                   qs[j], element j + B/2 in its high nibble; x = d * (nibble - 8) (GGUF's block_q4_0
 *                   when B = 32).
 *   TQ4, TQ3        {fp16 s; indices}: x[i] = s * C[idx[i]], C the 16 (4 bits) or 8 (3 bits) Lloyd-Max
 *                   centroids of N(0, 1) (kn_tq4_centroids / kn_tq3_centroids, ascending) and
 *                   s about |x| / sqrt(hd) (refined to the least-squares scale of the codes), the
 *                   vector already rotated (kv.h) so that its coordinates are about N(0, |x|^2 / hd).
 *                   TQ4: idx[i] in byte i / 2, nibble i % 2 (low first); TQ3: idx[i] at bits
 *                   3i .. 3i+2 of the little-endian index bytes.
 * No block straddles a head, so a head vector (and a position's row of heads) is self-contained.
 */
#ifndef KN_KVQ_H
#define KN_KVQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The KV storage formats; the values are those of the public kiln_kv_type. */
typedef enum kn_kvt {
    KN_KVT_F16 = 0,
    KN_KVT_F32 = 1,
    KN_KVT_BF16 = 2,
    KN_KVT_Q8_0 = 3,
    KN_KVT_Q4_0 = 4,
    KN_KVT_TQ4 = 5,
    KN_KVT_TQ3 = 6,
    KN_KVT_COUNT
} kn_kvt;

/* Elements per quant block of a head of hd elements: the largest power of two dividing hd, at most
 * 32 (hd >= 1). */
static inline int kn_kvq_block(int hd) {
    int b = 1;
    while (b < 32 && hd % (2 * b) == 0) b *= 2;
    return b;
}

/* When a format's vectors are rotated (hadamard.h) before they are stored. */
typedef enum kn_kvq_rot {
    KN_KVQ_ROT_OFF = 0,   /* off unless asked for */
    KN_KVQ_ROT_ON = 1,    /* on unless turned off */
    KN_KVQ_ROT_ALWAYS = 2 /* part of the format (TurboQuant) */
} kn_kvq_rot;

/* The properties of one KV format: the one table entry a new format adds (with its kernels). */
typedef struct kn_kvq_traits {
    const char *name; /* as --kv-type takes it */
    const char *desc;
    kn_kvq_rot rot;
    size_t (*head_bytes)(int hd);                        /* bytes of one head vector of hd elements */
    void (*store)(const float *x, uint8_t *dst, int hd); /* x[hd] -> the head vector */
    float (*elem)(const uint8_t *head, int i, int hd);   /* element i as every kernel reads it */
} kn_kvq_traits;

/* The entry of format t; NULL for a value outside kn_kvt. */
const kn_kvq_traits *kn_kvq_traits_get(kn_kvt t);

/* Head sizes the TQ formats store at most. */
#define KN_KVQ_MAX_HD 4096

/* Bytes of one head vector of hd elements in format t (0 for an unknown format or hd < 1). */
size_t kn_kvq_head_bytes(kn_kvt t, int hd);

/* Stores x[hd] (already rotated where the cache rotates) into dst (kn_kvq_head_bytes bytes). */
void kn_kvq_store(kn_kvt t, const float *x, void *dst, int hd);

/* Element i of a head vector of hd elements stored in format t: the one definition of its value,
 * which every kernel reproduces bit for bit. */
float kn_kvq_elem(kn_kvt t, const void *head, int i, int hd);

/* The whole head vector: out[i] = kn_kvq_elem(t, head, i, hd). */
void kn_kvq_load(kn_kvt t, const void *head, float *out, int hd);

/* Lloyd-Max centroids of N(0, 1) for 4 and 3 bits, ascending (symmetric around 0). */
extern const float kn_tq4_centroids[16];
extern const float kn_tq3_centroids[8];

#endif
