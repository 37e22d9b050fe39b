/*
 * kernels_avx512_legacy.c - AVX-512 (F, BW, VL, VNNI; BF16 where present) GEMM tile kernels for the
 * float weight formats (F32, F16, BF16 x F32 activations) and the block formats of 32 elements with one
 * scale (Q4_0, Q5_0, Q8_0 and the table formats IQ4_NL, MXFP4 x Q8_0 activations; Q4_1, Q5_1 x Q8_1
 * activations), and the Q8_0 / Q8_1 activation quantizers.
 * Every kernel is tested against the scalar reference (tests/unit/test_kernels_legacy.c); entries left
 * unset keep the previous set's kernel.
 *
 * Block formats. A row is processed in groups of 8 blocks (256 elements); a last partial group is
 * copied into a zero-padded stack buffer and processed like a full one (a zero block adds exactly 0).
 * The quants of a group are rearranged into 4 vectors Z0..Z3 where qword b of Zj holds elements
 * 8j .. 8j+7 of block b (weights and activations alike), so int32 lanes 2b and 2b+1 of a vpdpbusd
 * belong to block b. Per (row, token) the 4 vpdpbusd of a group chain into one exact int32 vector:
 * vpdpbusd multiplies unsigned by signed bytes, so the weight side is made unsigned (4- and 5-bit codes
 * already are; Q8_0 weights get +128 by flipping the top bit, IQ4_NL / MXFP4 nibbles are looked up in
 * the format's table plus 128; MXFP4's scales are E8M0) and the chain starts from the exact
 * integer correction -offset * sum(x) of the activation bytes in that lane (computed once per token and
 * group). The float part is then, per group,
 *     acc = fma(float(lanes), fp32(dw) * fp32(dx), acc)          (scales expanded to lanes 2b, 2b+1)
 *     acc = fma(m, s, acc)                                       (Q4_1 / Q5_1 only; m in even lanes)
 * and the result is the horizontal sum of acc. Within a tile the weight group of a row is unpacked
 * once and reused for every token, and the activation group of a token once for every row. With one
 * token (decode) the kernels also prefetch the rows after the tile as one sequential stream (see
 * prefetch_next_tile).
 *
 * Float formats: per (row, token) one 16-lane fp32 accumulator, fma over chunks of 16 elements (a
 * masked chunk for the tail), horizontal sum at the end. BF16 weights are widened exactly (shift) and
 * use the same fma path. A vdpbf16ps kernel (AVX512-BF16 CPUs) exists but is not selected by default:
 * it rounds the F32 activations to bf16 (relative error up to 2^-9 per element) and measured no
 * faster here (decode is memory-bound, and prefill tiles are bound by reading the F32 activations);
 * kn__avx512_legacy_bf16_dot selects it (tests).
 *
 * Tile contract (kernels.h): each output's sequence of float operations depends only on n and the
 * row's and token's data, never on nr / nt (integer sums are exact, so how they are formed does not
 * matter), so a tile call equals 1x1 calls bit for bit. Only intrinsics with explicit fma / mul are
 * used on floats, so compiler contraction cannot change that.
 */
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#include "tensor/quant.h"

#include <immintrin.h>
#include <string.h>

#define AI     static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")

/* ---- loads and layout helpers ---- */

/* Decode (one token) streams each weight row once, and the rows of a tile are adjacent: reading the nr
 * rows side by side is several interleaved streams, which DRAM serves at ~60% of the rate of one
 * sequential stream here. So while a tile with one token is computed, the rows that follow it
 * (where the caller's next tile lies, w + nr * w_stride) are prefetched as one sequential stream:
 * bytes [off, off + len) of that region at each step, off proportional to progress (measured: +35%
 * decode throughput from DRAM for Q4_0 and Q8_0). Prefetches never fault; the addresses are formed as
 * integers, as they may lie past the end of the matrix. Always inlined: GCC deems a function that only
 * prefetches free of side effects and deletes calls to it. */
AI void prefetch_next_tile(const uint8_t *w, size_t ws, int nr, size_t off, int len) {
    const uintptr_t p = (uintptr_t)w + (uintptr_t)nr * ws + off;
    for (int l = 0; l < len; l += 64) _mm_prefetch((const char *)(p + (uintptr_t)l), _MM_HINT_T0);
}

/* Unaligned little-endian loads of 4 and 64 bytes. */
static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

AI __m512i ld64(const uint8_t *p) { return _mm512_loadu_si512(p); }

/* Block scales: the fp16 values at p + k * S + o (k < 8; S, o even constants) as fp32, each in lanes
 * 2k and 2k + 1, read without touching bytes outside the group's 8 * S bytes. Each value is picked by
 * vpermt2w from one of two 128-byte windows of the group: A = [0, 128) when it lies there, else
 * B = [SC_B, SC_B + 128). SC_IDX is its word index in its window, SC_KB the mask of lanes from B. */
#define SC_B(S, o)      ((8 * (S)-128) < (4 * (S) + (o)) ? (8 * (S)-128) : (4 * (S) + (o)))
#define SC_INA(S, o, k) ((k) * (S) + (o) + 2 <= 128)
#define SC_IDX(S, o, k) (SC_INA(S, o, k) ? ((k) * (S) + (o)) / 2 : ((k) * (S) + (o)-SC_B(S, o)) / 2)
#define SC_KB(S, o, k)  (SC_INA(S, o, k) ? 0u : 3u << (2 * (k)))
#define SC_TABLE(S, o)                                                                                                 \
    {                                                                                                                  \
        SC_IDX(S, o, 0), SC_IDX(S, o, 0), SC_IDX(S, o, 1), SC_IDX(S, o, 1), SC_IDX(S, o, 2), SC_IDX(S, o, 2),          \
            SC_IDX(S, o, 3), SC_IDX(S, o, 3), SC_IDX(S, o, 4), SC_IDX(S, o, 4), SC_IDX(S, o, 5), SC_IDX(S, o, 5),      \
            SC_IDX(S, o, 6), SC_IDX(S, o, 6), SC_IDX(S, o, 7), SC_IDX(S, o, 7)                                         \
    }
#define SC_MASK(S, o)                                                                                                  \
    (__mmask32)(SC_KB(S, o, 0) | SC_KB(S, o, 1) | SC_KB(S, o, 2) | SC_KB(S, o, 3) | SC_KB(S, o, 4) | SC_KB(S, o, 5) |  \
                SC_KB(S, o, 6) | SC_KB(S, o, 7))

/* The windows lie inside the group and hold every value they are used for. */
#define SC_FITS(S, o, k) (SC_INA(S, o, k) || ((k) * (S) + (o) >= SC_B(S, o) && (k) * (S) + (o) + 2 <= SC_B(S, o) + 128))
#define SC_OK(S, o)                                                                                                    \
    (8 * (S) >= 128 && SC_B(S, o) >= 0 && SC_B(S, o) % 2 == 0 && SC_B(S, o) + 128 <= 8 * (S) && SC_FITS(S, o, 0) &&    \
     SC_FITS(S, o, 1) && SC_FITS(S, o, 2) && SC_FITS(S, o, 3) && SC_FITS(S, o, 4) && SC_FITS(S, o, 5) &&               \
     SC_FITS(S, o, 6) && SC_FITS(S, o, 7))
_Static_assert(SC_OK(18, 0) && SC_OK(22, 0) && SC_OK(34, 0) && SC_OK(20, 0) && SC_OK(20, 2) && SC_OK(24, 0) &&
                   SC_OK(24, 2) && SC_OK(36, 0) && SC_OK(36, 2),
               "scale windows");

typedef struct sc_table {
    uint16_t idx[32];
} sc_table;

/* The tables of each block format: scales d (and m, Q8_1 s) of weights and activations. */
static const sc_table sc_q4_0_d = {SC_TABLE(18, 0)}, sc_q5_0_d = {SC_TABLE(22, 0)}, sc_q8_0_d = {SC_TABLE(34, 0)};
static const sc_table sc_q4_1_d = {SC_TABLE(20, 0)}, sc_q4_1_m = {SC_TABLE(20, 2)};
static const sc_table sc_q5_1_d = {SC_TABLE(24, 0)}, sc_q5_1_m = {SC_TABLE(24, 2)};
static const sc_table sc_q8_1_d = {SC_TABLE(36, 0)}, sc_q8_1_s = {SC_TABLE(36, 2)};

/* The block scales of the group at p (format with S-byte blocks, scale at offset o), see above. */
#define SCALES8(p, S, o, table) scales8(p, &(table), SC_B(S, o), SC_MASK(S, o))
AI __m512 scales8(const uint8_t *p, const sc_table *t, int b, __mmask32 kb) {
    const __m512i idx = _mm512_loadu_si512(t->idx);
    __m512i h = _mm512_permutex2var_epi16(ld64(p), idx, ld64(p + 64));
    if (kb) h = _mm512_mask_mov_epi16(h, kb, _mm512_permutex2var_epi16(ld64(p + b), idx, ld64(p + b + 64)));
    return _mm512_cvtph_ps(_mm512_castsi512_si256(h));
}

/* As SCALES8, but the value only in lane 2k (lane 2k + 1 is 0): a term added once per block. */
#define SCALES8_EVEN(p, S, o, table) _mm512_maskz_mov_ps((__mmask16)0x5555, SCALES8(p, S, o, table))

/* 32 bytes at a and 32 bytes at b as one vector. */
AI __m512i ld2x32(const uint8_t *a, const uint8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* 16 bytes at p + k * stride (k < 4) as one vector. */
AI __m512i ld4x16(const uint8_t *p, size_t stride) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + stride)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 * stride)), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 3 * stride)), 3);
}

/* The 32 int8 quants of 8 blocks (block k's at p + k * stride) in the group layout: qword b of Z[j]
 * holds quants 8j .. 8j+7 of block b. */
AI void group_q8(const uint8_t *p, size_t stride, __m512i Z[4]) {
    const __m512i A = ld2x32(p, p + stride), B = ld2x32(p + 2 * stride, p + 3 * stride);
    const __m512i C = ld2x32(p + 4 * stride, p + 5 * stride), D = ld2x32(p + 6 * stride, p + 7 * stride);
    const __m512i i01 = _mm512_set_epi64(13, 9, 5, 1, 12, 8, 4, 0);   /* qwords 0, 1 of 4 blocks */
    const __m512i i23 = _mm512_set_epi64(15, 11, 7, 3, 14, 10, 6, 2); /* qwords 2, 3 */
    const __m512i P = _mm512_permutex2var_epi64(A, i01, B), Q = _mm512_permutex2var_epi64(A, i23, B);
    const __m512i R = _mm512_permutex2var_epi64(C, i01, D), S = _mm512_permutex2var_epi64(C, i23, D);
    Z[0] = _mm512_shuffle_i64x2(P, R, 0x44);
    Z[1] = _mm512_shuffle_i64x2(P, R, 0xEE);
    Z[2] = _mm512_shuffle_i64x2(Q, S, 0x44);
    Z[3] = _mm512_shuffle_i64x2(Q, S, 0xEE);
}

/* The 4-bit codes of 8 blocks (16 bytes of nibbles each, block k's at p + k * stride) in the group
 * layout: element e < 16 is the low nibble of byte e, e >= 16 the high nibble of byte e - 16. */
AI void group_nib(const uint8_t *p, size_t stride, __m512i Z[4]) {
    const __m512i A = ld4x16(p, stride), B = ld4x16(p + 4 * stride, stride);
    const __m512i P0 = _mm512_permutex2var_epi64(A, _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0), B);
    const __m512i P1 = _mm512_permutex2var_epi64(A, _mm512_set_epi64(15, 13, 11, 9, 7, 5, 3, 1), B);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    Z[0] = _mm512_and_si512(P0, m4);
    Z[1] = _mm512_and_si512(P1, m4);
    Z[2] = _mm512_and_si512(_mm512_srli_epi16(P0, 4), m4);
    Z[3] = _mm512_and_si512(_mm512_srli_epi16(P1, 4), m4);
}

/* Adds 16 to the codes in Z (group layout) whose bit 4 is set: bit e of the little-endian uint32 at
 * p + k * stride is bit 4 of element e of block k. */
AI void group_hbits(const uint8_t *p, size_t stride, __m512i Z[4]) {
    const __m512i qh = _mm512_cvtepu32_epi64(_mm256_set_epi32(
        (int)ld32(p + 7 * stride), (int)ld32(p + 6 * stride), (int)ld32(p + 5 * stride), (int)ld32(p + 4 * stride),
        (int)ld32(p + 3 * stride), (int)ld32(p + 2 * stride), (int)ld32(p + stride), (int)ld32(p)));
    /* byte i of qword b of Z[j] is element 8j + i of block b: bit i of byte j of block b's qh */
    const __m512i bit = _mm512_set1_epi64((long long)0x8040201008040201ull);
    const __m512i c16 = _mm512_set1_epi8(16);
    UNROLL for (int j = 0; j < 4; j++) {
        const __m512i sel =
            _mm512_set_epi64(0x0101010101010101ll * (8 + j), 0x0101010101010101ll * j, 0x0101010101010101ll * (8 + j),
                             0x0101010101010101ll * j, 0x0101010101010101ll * (8 + j), 0x0101010101010101ll * j,
                             0x0101010101010101ll * (8 + j), 0x0101010101010101ll * j);
        const __mmask64 k = _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, sel), bit);
        Z[j] = _mm512_mask_add_epi8(Z[j], k, Z[j], c16);
    }
}

/* -off * (sum of the activation bytes of each int32 lane over Z[0..3]): the start of a chain of
 * vpdpbusd whose weight bytes carry an offset of +off. */
AI __m512i neg_offset_sum(const __m512i Z[4], char off) {
    const __m512i c = _mm512_set1_epi8(off);
    __m512i s = _mm512_setzero_si512();
    UNROLL for (int j = 0; j < 4; j++) s = _mm512_dpbusd_epi32(s, c, Z[j]);
    return _mm512_sub_epi32(_mm512_setzero_si512(), s);
}

/* ---- one group of 8 blocks: weight and activation loaders ---- */

typedef struct wgrp {
    __m512i q[4]; /* unsigned codes, group layout */
    __m512 d;     /* block scales, lanes 2b, 2b+1 */
    __m512 m;     /* block offsets (Q4_1, Q5_1), lane 2b */
} wgrp;

typedef struct xgrp {
    __m512i q[4]; /* signed quants, group layout */
    __m512i c;    /* start value of the vpdpbusd chain */
    __m512 d;     /* block scales */
    __m512 s;     /* d * sum(qs) (Q8_1) */
} xgrp;

/* Q4_0 groups are 144 bytes: the scales and the nibbles of blocks 0..6 lie in the first 128 bytes (two
 * vectors, picked by vpermt2w: quants of block b are words 9b+1 .. 9b+8); block 7's two nibble qwords
 * come by masked loads. */
static const uint16_t q4_0_lo[32] = {1,  2,  3,  4,  10, 11, 12, 13, 19, 20, 21, 22, 28, 29, 30, 31,
                                     37, 38, 39, 40, 46, 47, 48, 49, 55, 56, 57, 58, 0,  0,  0,  0};
static const uint16_t q4_0_hi[32] = {5,  6,  7,  8,  14, 15, 16, 17, 23, 24, 25, 26, 32, 33, 34, 35,
                                     41, 42, 43, 44, 50, 51, 52, 53, 59, 60, 61, 62, 0,  0,  0,  0};

/* Weight loaders: unpack the group of 8 blocks at p into W (codes unsigned, group layout). */
AI void w_q4_0(const uint8_t *p, wgrp *W) {
    const __m512i A0 = ld64(p), A1 = ld64(p + 64);
    __m512i P0 = _mm512_permutex2var_epi16(A0, _mm512_loadu_si512(q4_0_lo), A1);
    __m512i P1 = _mm512_permutex2var_epi16(A0, _mm512_loadu_si512(q4_0_hi), A1);
    P0 = _mm512_mask_loadu_epi64(P0, (__mmask8)0x80, p + 128 - 56); /* qword 7: bytes 128 .. 135 */
    P1 = _mm512_mask_loadu_epi64(P1, (__mmask8)0x80, p + 136 - 56); /* bytes 136 .. 143 */
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    W->q[0] = _mm512_and_si512(P0, m4);
    W->q[1] = _mm512_and_si512(P1, m4);
    W->q[2] = _mm512_and_si512(_mm512_srli_epi16(P0, 4), m4);
    W->q[3] = _mm512_and_si512(_mm512_srli_epi16(P1, 4), m4);
    const __m512i h = _mm512_permutex2var_epi16(A0, _mm512_loadu_si512(sc_q4_0_d.idx), A1);
    W->d = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    _Static_assert(SC_MASK(18, 0) == 0, "Q4_0 scales lie in the first 128 bytes");
}

AI void w_q5_0(const uint8_t *p, wgrp *W) {
    group_nib(p + 6, sizeof(kn_block_q5_0), W->q);
    group_hbits(p + 2, sizeof(kn_block_q5_0), W->q);
    W->d = SCALES8(p, 22, 0, sc_q5_0_d);
}

AI void w_q8_0(const uint8_t *p, wgrp *W) {
    group_q8(p + 2, sizeof(kn_block_q8_0), W->q);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    UNROLL for (int j = 0; j < 4; j++) W->q[j] = _mm512_xor_si512(W->q[j], flip); /* w + 128 */
    W->d = SCALES8(p, 34, 0, sc_q8_0_d);
}

AI void w_q4_1(const uint8_t *p, wgrp *W) {
    group_nib(p + 4, sizeof(kn_block_q4_1), W->q);
    W->d = SCALES8(p, 20, 0, sc_q4_1_d);
    W->m = SCALES8_EVEN(p, 20, 2, sc_q4_1_m);
}

AI void w_q5_1(const uint8_t *p, wgrp *W) {
    group_nib(p + 8, sizeof(kn_block_q5_1), W->q);
    group_hbits(p + 4, sizeof(kn_block_q5_1), W->q);
    W->d = SCALES8(p, 24, 0, sc_q5_1_d);
    W->m = SCALES8_EVEN(p, 24, 2, sc_q5_1_m);
}

/* IQ4_NL, MXFP4: the nibbles (group layout, in Z) looked up in the format's table plus 128. */
AI void table_codes(const int8_t *values, __m512i Z[4]) {
    const __m128i v = _mm_loadu_si128((const __m128i *)values);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_xor_si128(v, _mm_set1_epi8((char)0x80)));
    UNROLL for (int j = 0; j < 4; j++) Z[j] = _mm512_shuffle_epi8(lut, Z[j]);
}

/* IQ4_NL blocks are Q4_0's bytes with table codes. */
AI void w_iq4_nl(const uint8_t *p, wgrp *W) {
    _Static_assert(sizeof(kn_block_iq4_nl) == sizeof(kn_block_q4_0), "IQ4_NL groups are Q4_0's");
    w_q4_0(p, W);
    table_codes(kn_iq4nl_values, W->q);
}

/* MXFP4: e | qs (17 bytes); the scales are half the E8M0 values (kn_e8m0_half, exactly), lanes 2b, 2b+1. */
AI void w_mxfp4(const uint8_t *p, wgrp *W) {
    group_nib(p + 1, sizeof(kn_block_mxfp4), W->q);
    table_codes(kn_mxfp4_values, W->q);
    int32_t ev[16];
    for (int k = 0; k < 16; k++) ev[k] = p[(k / 2) * sizeof(kn_block_mxfp4)];
    const __m512i e = _mm512_loadu_si512(ev);
    const __m512i big = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23); /* 2^(e - 128), e >= 2 */
    const __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);            /* subnormal, e <= 1 */
    W->d = _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1)), small, big));
}

/* Q8_0 activations for weights whose codes are (w + off): off = 8 (Q4_0), 16 (Q5_0), 128 (Q8_0, IQ4_NL,
 * MXFP4). */
AI void x_q8_0(const uint8_t *p, xgrp *X, int off) {
    group_q8(p + 2, sizeof(kn_block_q8_0), X->q);
    X->c = neg_offset_sum(X->q, (char)off);
    X->d = SCALES8(p, 34, 0, sc_q8_0_d);
}

/* Q8_1 activations (for Q4_1 / Q5_1 weights, whose codes carry no offset): no correction; s for m * s. */
AI void x_q8_1(const uint8_t *p, xgrp *X) {
    group_q8(p + 4, sizeof(kn_block_q8_1), X->q);
    X->c = _mm512_setzero_si512();
    X->d = SCALES8(p, 36, 0, sc_q8_1_d);
    X->s = SCALES8(p, 36, 2, sc_q8_1_s);
}

/* The group's contribution to one (row, token) accumulator. */
AI __m512 dot_grp(const wgrp *W, const xgrp *X, __m512 acc) {
    __m512i s = X->c;
    UNROLL for (int j = 0; j < 4; j++) s = _mm512_dpbusd_epi32(s, W->q[j], X->q[j]);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(W->d, X->d), acc);
}

/* dot_grp plus the offset term m * s of each block (Q4_1, Q5_1). */
AI __m512 dot_grp_m(const wgrp *W, const xgrp *X, __m512 acc) {
    return _mm512_fmadd_ps(W->m, X->s, dot_grp(W, X, acc));
}

#define LOADX_Q4_0(p, X) x_q8_0(p, X, 8)
#define LOADX_Q5_0(p, X) x_q8_0(p, X, 16)
#define LOADX_Q8_0(p, X) x_q8_0(p, X, 128)
#define LOADX_Q8_1(p, X) x_q8_1(p, X)

/* The 16 (nr, nt) shapes, each a specialization with constant loop bounds. */
#define TILE_SWITCH(TILE)                                                                                              \
    switch ((nr - 1) * 4 + (nt - 1)) {                                                                                 \
        case 0: TILE(1, 1); break;                                                                                     \
        case 1: TILE(1, 2); break;                                                                                     \
        case 2: TILE(1, 3); break;                                                                                     \
        case 3: TILE(1, 4); break;                                                                                     \
        case 4: TILE(2, 1); break;                                                                                     \
        case 5: TILE(2, 2); break;                                                                                     \
        case 6: TILE(2, 3); break;                                                                                     \
        case 7: TILE(2, 4); break;                                                                                     \
        case 8: TILE(3, 1); break;                                                                                     \
        case 9: TILE(3, 2); break;                                                                                     \
        case 10: TILE(3, 3); break;                                                                                    \
        case 11: TILE(3, 4); break;                                                                                    \
        case 12: TILE(4, 1); break;                                                                                    \
        case 13: TILE(4, 2); break;                                                                                    \
        case 14: TILE(4, 3); break;                                                                                    \
        default: TILE(4, 4); break;                                                                                    \
    }

/* GEMM tile kernel NAME for a block weight format of WB bytes per block with activations of XB bytes
 * per block (kn_gemm_fn contract, kernels.h): n is a multiple of 32 (a partial block is ignored).
 * LOADW / LOADX unpack a group of 8 blocks, DOT adds a group's products to an accumulator. */
#define DEFINE_GEMM_BLOCKS(NAME, WB, XB, LOADW, LOADX, DOT)                                                            \
    AI void NAME##_group(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, __m512 acc[4][4], const int NR,     \
                         const int NT) {                                                                               \
        xgrp X[4];                                                                                                     \
        UNROLL for (int t = 0; t < NT; t++) LOADX(x + (size_t)t * xs, &X[t]);                                          \
        UNROLL for (int r = 0; r < NR; r++) {                                                                          \
            wgrp W;                                                                                                    \
            LOADW(w + (size_t)r * ws, &W);                                                                             \
            UNROLL for (int t = 0; t < NT; t++) acc[r][t] = DOT(&W, &X[t], acc[r][t]);                                 \
        }                                                                                                              \
    }                                                                                                                  \
    AI void NAME##_tile(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *out, size_t ldo,   \
                        const int NR, const int NT) {                                                                  \
        __m512 acc[4][4];                                                                                              \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();       \
        const int64_t nb = n / 32, ng = nb / 8;                                                                        \
        const int rem = (int)(nb % 8);                                                                                 \
        for (int64_t g = 0; g < ng; g++) {                                                                             \
            const uint8_t *wg = w + (size_t)g * 8 * (WB);                                                              \
            if (NT == 1) prefetch_next_tile(w, ws, NR, (size_t)g *NR * 8 * (WB), NR * 8 * (WB));                       \
            NAME##_group(wg, ws, x + (size_t)g * 8 * (XB), xs, acc, NR, NT);                                           \
        }                                                                                                              \
        if (rem) {                                                                                                     \
            uint8_t tw[4][8 * (WB)], tx[4][8 * (XB)];                                                                  \
            const size_t off = (size_t)ng * 8;                                                                         \
            UNROLL for (int r = 0; r < NR; r++) {                                                                      \
                memset(tw[r], 0, sizeof tw[r]);                                                                        \
                memcpy(tw[r], w + (size_t)r * ws + off * (WB), (size_t)rem * (WB));                                    \
            }                                                                                                          \
            UNROLL for (int t = 0; t < NT; t++) {                                                                      \
                memset(tx[t], 0, sizeof tx[t]);                                                                        \
                memcpy(tx[t], x + (size_t)t * xs + off * (XB), (size_t)rem * (XB));                                    \
            }                                                                                                          \
            NAME##_group(&tw[0][0], sizeof tw[0], &tx[0][0], sizeof tx[0], acc, NR, NT);                               \
        }                                                                                                              \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) out[(size_t)t * ldo + (size_t)r] =     \
            _mm512_reduce_add_ps(acc[r][t]);                                                                           \
    }                                                                                                                  \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        TILE_SWITCH(NAME##_CALL)                                                                                       \
    }

#define gemm_q4_0_CALL(R, T)   gemm_q4_0_tile(n, w, ws, x, xs, out, ldo, R, T)
#define gemm_q5_0_CALL(R, T)   gemm_q5_0_tile(n, w, ws, x, xs, out, ldo, R, T)
#define gemm_q8_0_CALL(R, T)   gemm_q8_0_tile(n, w, ws, x, xs, out, ldo, R, T)
#define gemm_q4_1_CALL(R, T)   gemm_q4_1_tile(n, w, ws, x, xs, out, ldo, R, T)
#define gemm_q5_1_CALL(R, T)   gemm_q5_1_tile(n, w, ws, x, xs, out, ldo, R, T)
#define gemm_iq4_nl_CALL(R, T) gemm_iq4_nl_tile(n, w, ws, x, xs, out, ldo, R, T)
#define gemm_mxfp4_CALL(R, T)  gemm_mxfp4_tile(n, w, ws, x, xs, out, ldo, R, T)

DEFINE_GEMM_BLOCKS(gemm_q4_0, 18, 34, w_q4_0, LOADX_Q4_0, dot_grp)
DEFINE_GEMM_BLOCKS(gemm_q5_0, 22, 34, w_q5_0, LOADX_Q5_0, dot_grp)
DEFINE_GEMM_BLOCKS(gemm_q8_0, 34, 34, w_q8_0, LOADX_Q8_0, dot_grp)
DEFINE_GEMM_BLOCKS(gemm_q4_1, 20, 36, w_q4_1, LOADX_Q8_1, dot_grp_m)
DEFINE_GEMM_BLOCKS(gemm_q5_1, 24, 36, w_q5_1, LOADX_Q8_1, dot_grp_m)
DEFINE_GEMM_BLOCKS(gemm_iq4_nl, 18, 34, w_iq4_nl, LOADX_Q8_0, dot_grp)
DEFINE_GEMM_BLOCKS(gemm_mxfp4, 17, 34, w_mxfp4, LOADX_Q8_0, dot_grp)

/* ---- float weights x F32 activations ---- */

/* Float weight loaders: elements i .. i+15 of the row at p as fp32 (exact); _m: masked (zeros). */
AI __m512 w_f32(const uint8_t *p, int64_t i) { return _mm512_loadu_ps((const float *)p + i); }
AI __m512 w_f32_m(const uint8_t *p, int64_t i, __mmask16 k) { return _mm512_maskz_loadu_ps(k, (const float *)p + i); }
AI __m512 w_f16(const uint8_t *p, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
}
AI __m512 w_f16_m(const uint8_t *p, int64_t i, __mmask16 k) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p + 2 * i));
}
AI __m512 bf16x16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
AI __m512 w_bf16(const uint8_t *p, int64_t i) { return bf16x16(_mm256_loadu_si256((const __m256i *)(p + 2 * i))); }
AI __m512 w_bf16_m(const uint8_t *p, int64_t i, __mmask16 k) { return bf16x16(_mm256_maskz_loadu_epi16(k, p + 2 * i)); }

/* GEMM tile kernel NAME for a float weight format (kn_gemm_fn contract, kernels.h), any n >= 0:
 * LOADW(p, i) gives weights i .. i+15 of the row at p (ES bytes per weight) as fp32, LOADWM the same
 * under a mask. */
#define DEFINE_GEMM_FLOAT(NAME, ES, LOADW, LOADWM)                                                                     \
    AI void NAME##_tile(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *out, size_t ldo,   \
                        const int NR, const int NT) {                                                                  \
        __m512 acc[4][4], X[4];                                                                                        \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();       \
        int64_t i = 0;                                                                                                 \
        for (; i + 16 <= n; i += 16) {                                                                                 \
            if (NT == 1) prefetch_next_tile(w, ws, NR, (size_t)i *NR *(ES), NR * 16 * (ES));                           \
            UNROLL for (int t = 0; t < NT; t++) X[t] = _mm512_loadu_ps((const float *)(x + (size_t)t * xs) + i);       \
            UNROLL for (int r = 0; r < NR; r++) {                                                                      \
                const __m512 W = LOADW(w + (size_t)r * ws, i);                                                         \
                UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm512_fmadd_ps(W, X[t], acc[r][t]);                   \
            }                                                                                                          \
        }                                                                                                              \
        if (i < n) {                                                                                                   \
            const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);                                                      \
            UNROLL for (int t = 0; t < NT; t++) X[t] =                                                                 \
                _mm512_maskz_loadu_ps(k, (const float *)(x + (size_t)t * xs) + i);                                     \
            UNROLL for (int r = 0; r < NR; r++) {                                                                      \
                const __m512 W = LOADWM(w + (size_t)r * ws, i, k);                                                     \
                UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm512_fmadd_ps(W, X[t], acc[r][t]);                   \
            }                                                                                                          \
        }                                                                                                              \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) out[(size_t)t * ldo + (size_t)r] =     \
            _mm512_reduce_add_ps(acc[r][t]);                                                                           \
    }                                                                                                                  \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        TILE_SWITCH(NAME##_CALL)                                                                                       \
    }

#define gemm_f32_CALL(R, T)  gemm_f32_tile(n, w, ws, x, xs, out, ldo, R, T)
#define gemm_f16_CALL(R, T)  gemm_f16_tile(n, w, ws, x, xs, out, ldo, R, T)
#define gemm_bf16_CALL(R, T) gemm_bf16_tile(n, w, ws, x, xs, out, ldo, R, T)

DEFINE_GEMM_FLOAT(gemm_f32, 4, w_f32, w_f32_m)
DEFINE_GEMM_FLOAT(gemm_f16, 2, w_f16, w_f16_m)
DEFINE_GEMM_FLOAT(gemm_bf16, 2, w_bf16, w_bf16_m)

/* BF16 weights with vdpbf16ps (CPUs with AVX512-BF16 only): chunks of 32 elements, the activations
 * rounded to bf16 (round to nearest even), one accumulator per (row, token) as above. */
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16,avx2,fma,f16c")))

/* F32 activations i .. i+31 of the row at x rounded to bf16 (nearest even); _m: under masks. */
BF16_TARGET AI __m512bh x_bf16(const uint8_t *x, int64_t i) {
    const float *p = (const float *)x + i;
    return _mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16), _mm512_loadu_ps(p));
}

BF16_TARGET AI __m512bh x_bf16_m(const uint8_t *x, int64_t i, __mmask16 klo, __mmask16 khi) {
    const float *p = (const float *)x + i;
    return _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(khi, p + 16), _mm512_maskz_loadu_ps(klo, p));
}

BF16_TARGET AI void gemm_bf16_dp_tile(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *out,
                                      size_t ldo, const int NR, const int NT) {
    __m512 acc[4][4];
    __m512bh X[4];
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        if (NT == 1) prefetch_next_tile(w, ws, NR, (size_t)i * NR * 2, NR * 64);
        UNROLL for (int t = 0; t < NT; t++) X[t] = x_bf16(x + (size_t)t * xs, i);
        UNROLL for (int r = 0; r < NR; r++) {
            const __m512bh W = (__m512bh)_mm512_loadu_si512(w + (size_t)r * ws + 2 * i);
            UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], W, X[t]);
        }
    }
    if (i < n) {
        const int rem = (int)(n - i); /* 1 .. 31 */
        const __mmask16 klo = (__mmask16)(rem >= 16 ? 0xFFFFu : (1u << rem) - 1);
        const __mmask16 khi = (__mmask16)(rem > 16 ? (1u << (rem - 16)) - 1 : 0u);
        const __mmask32 kw = (__mmask32)((1u << rem) - 1);
        UNROLL for (int t = 0; t < NT; t++) X[t] = x_bf16_m(x + (size_t)t * xs, i, klo, khi);
        UNROLL for (int r = 0; r < NR; r++) {
            const __m512bh W = (__m512bh)_mm512_maskz_loadu_epi16(kw, w + (size_t)r * ws + 2 * i);
            UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], W, X[t]);
        }
    }
    UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) out[(size_t)t * ldo + (size_t)r] =
        _mm512_reduce_add_ps(acc[r][t]);
}

#define gemm_bf16_dp_CALL(R, T) gemm_bf16_dp_tile(n, w, ws, x, xs, out, ldo, R, T)

BF16_TARGET static void gemm_bf16_dp(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs,
                                     int nt, float *out, size_t ldo){TILE_SWITCH(gemm_bf16_dp_CALL)}

/* ---- activation quantizers (quant.h conventions; same bytes as the reference quantizers) ---- */

/* The reference's kn_round_clamp(v, -127, 127) on 16 lanes: round half away from zero, clamp, NaN to
 * -127; the result as int32. */
AI __m512i round_clamp127(__m512 v) {
    v = _mm512_max_ps(v, _mm512_set1_ps(-127.0f)); /* vmaxps returns the second operand for NaN */
    v = _mm512_min_ps(v, _mm512_set1_ps(127.0f));
    __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 half = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __mmask16 pos = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ);
    t = _mm512_mask_add_ps(t, half & pos, t, _mm512_set1_ps(1.0f));
    t = _mm512_mask_sub_ps(t, half & (__mmask16)~pos, t, _mm512_set1_ps(1.0f));
    return _mm512_cvtps_epi32(t);
}

/* One block of 32: the stored fp16 scale (as the reference: absmax / 127, NaN skipped), the quants
 * into qs, and their sum into *sum. */
AI kn_half quant_block_q8(const float *x, int8_t *qs, int *sum) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    /* max(|v|, m) keeps m where |v| is NaN */
    const __m512 m = _mm512_max_ps(_mm512_abs_ps(v1), _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps()));
    const kn_half dh = kn_fp32_to_fp16_scale(_mm512_reduce_max_ps(m) / 127.0f);
    const float d = kn_fp16_to_fp32(dh);
    const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    const __m512i q0 = round_clamp127(_mm512_mul_ps(v0, id)), q1 = round_clamp127(_mm512_mul_ps(v1, id));
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(qs + 16), _mm512_cvtepi32_epi8(q1));
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    return dh;
}

KN_Q8_QUANTIZERS(quant_block_q8)

/* Selects the BF16 kernel of set k: the vdpbf16ps one (use_dot, honoured only on CPUs with
 * AVX512-BF16) or the exact shift-convert + fma one (the default). Returns whether the vdpbf16ps
 * kernel is selected. Used by tests/unit/test_kernels_legacy.c. */
bool kn__avx512_legacy_bf16_dot(kn_kernels *k, bool use_dot);
bool kn__avx512_legacy_bf16_dot(kn_kernels *k, bool use_dot) {
    const bool dot = use_dot && kn_cpu_features()->avx512bf16;
    k->gemm[KN_BF16] = dot ? gemm_bf16_dp : gemm_bf16;
    return dot;
}

/* Fills k with this file's kernels (kernels.h). Called only on CPUs with AVX-512 F/BW/VL/VNNI. */
void kn_avx512_init_legacy(kn_kernels *k) {
    k->gemm[KN_F32] = gemm_f32;
    k->gemm[KN_F16] = gemm_f16;
    kn__avx512_legacy_bf16_dot(k, false);
    k->gemm[KN_Q4_0] = gemm_q4_0;
    k->gemm[KN_Q4_1] = gemm_q4_1;
    k->gemm[KN_Q5_0] = gemm_q5_0;
    k->gemm[KN_Q5_1] = gemm_q5_1;
    k->gemm[KN_Q8_0] = gemm_q8_0;
    k->gemm[KN_IQ4_NL] = gemm_iq4_nl;
    k->gemm[KN_MXFP4] = gemm_mxfp4;
    k->quantize[KN_Q8_0] = quantize_q8_0;
    k->quantize[KN_Q8_1] = quantize_q8_1;
}

#else /* not x86-64: the set is never selected */
void kn_avx512_init_legacy(kn_kernels *k) { (void)k; }
#endif
