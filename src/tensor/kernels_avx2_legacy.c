/*
 * kernels_avx2_legacy.c - AVX2+FMA+F16C GEMM tile kernels (with AVX-VNNI where the CPU has it) for the
 * float weight formats (F32, F16, BF16 x F32 activations) and the block formats of 32 elements with one
 * scale (Q4_0, Q5_0, Q8_0 and the table formats IQ4_NL, MXFP4 x Q8_0 activations; Q4_1, Q5_1 x Q8_1
 * activations; MLX8, MLX8_F32 x Q8_0: scale and offset), and the Q8_0 / Q8_1 activation quantizers.
 * Every kernel is tested against the scalar reference (tests/unit/test_kernels_legacy.c); entries
 * left unset keep the previous set's kernel.
 *
 * Block formats. A row is processed in groups of 4 blocks (128 elements); a last partial group is
 * copied into a zero-padded stack buffer and processed like a full one (a zero block adds exactly 0).
 * The quants of a group are rearranged into 4 vectors Z0..Z3: qword k of Zj holds elements 8j .. 8j+7
 * of block ord[k], ord = (0, 2, 1, 3) (the order in-lane unpacks produce), weights and activations
 * alike, so int32 lanes 2k, 2k+1 of a byte dot product belong to block ord[k]. Per (row, token) the
 * 4 dot products of a group sum to one exact int32 vector: with AVX-VNNI a chain of vpdpbusd (unsigned
 * weight bytes: 4- and 5-bit codes are, Q8_0 weights get +128) started from the exact correction
 * -offset * sum(x) of each lane; without it vpmaddubsw + vpmaddwd, whose int16 intermediate sums
 * cannot saturate (4-/5-bit codes: 8 products of at most 31 * 128; Q8_0 and IQ4_NL use |w| and
 * sign(x, w), pairs of at most 128 * 127, as activation quants lie in -127 .. 127, which every Q8_0
 * quantizer writes; MXFP4 too, its pairs of at most 2 * 12 * 127 summed over the group in int16).
 * IQ4_NL and MXFP4 codes are their nibbles looked up in the format's table (vpshufb; plus 128 for
 * VNNI), MXFP4's scales the E8M0 values of its exponent bytes (kn_e8m0_half). Both variants give the
 * same integers, so the same floats.
 * The float part is, per group,
 *     acc = fma(float(lanes), fp32(dw) * fp32(dx), acc)          (scales expanded to lanes 2k, 2k+1)
 *     acc = fma(m, s, acc)                                       (Q4_1 / Q5_1 and MLX8; m in even lanes)
 * and the result is the horizontal sum of acc. MLX8's codes are Q8_0's (q - 128, or with VNNI q and
 * Q8_0's correction -128 sum(x)); its m the offset of the centred codes, fma(d, 128, m), and s the
 * block's sum(x) times dx (exact). Within a tile the weight group of a row is unpacked
 * once per pass of up to 2 tokens (16 ymm registers), the activation group of a token once per row
 * tile. With one token (decode) the kernels also prefetch the rows after the tile as one sequential
 * stream (see prefetch_next_tile).
 *
 * Float formats: per (row, token) one 8-lane fp32 accumulator, fma over chunks of 8 elements (the tail
 * through a zero-padded copy), horizontal sum at the end; decode prefetches the next tile only for rows
 * of at most FLOAT_PF_MAX_ROW bytes.
 *
 * Tile contract (kernels.h): each output's sequence of float operations depends only on n and the
 * row's and token's data, never on nr / nt, so a tile call equals 1x1 calls bit for bit. Only
 * intrinsics with explicit fma / mul are used on floats, so compiler contraction cannot change that.
 */
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include "tensor/quant.h"

#include <immintrin.h>
#include <string.h>

#define AI          static inline __attribute__((always_inline))
#define UNROLL      _Pragma("GCC unroll 4")
#define VNNI_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))

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

/* Unaligned little-endian loads of 2, 4 and 32 bytes. */
static inline uint64_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

AI __m256i ldu(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* fp16 values at p + k * stride (k < 4) as fp32 in the group's block order: lanes 2k, 2k + 1 hold
 * block ord[k]'s. */
AI __m256 scales4(const uint8_t *p, size_t stride) {
    const uint64_t h = ld16(p) | ld16(p + 2 * stride) << 16 | ld16(p + stride) << 32 | ld16(p + 3 * stride) << 48;
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(f), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}

/* As scales4 for fp32 values (MLX8_F32's). */
AI __m256 scales4_f32(const uint8_t *p, size_t stride) {
    float v[4];
    for (int k = 0; k < 4; k++) memcpy(&v[k], p + (size_t)(k == 1 ? 2 : k == 2 ? 1 : k) * stride, 4);
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(v)), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}

/* As scales4, but the value only in lane 2k (lane 2k + 1 is 0): a term added once per block. */
AI __m256 scales4_even(const uint8_t *p, size_t stride) {
    return _mm256_blend_ps(_mm256_setzero_ps(), scales4(p, stride), 0x55);
}

/* The 32 int8 quants of 4 blocks (block k's at p + k * stride) in the group layout. */
AI void group_q8(const uint8_t *p, size_t stride, __m256i Z[4]) {
    const __m256i X0 = ldu(p), X1 = ldu(p + stride), X2 = ldu(p + 2 * stride), X3 = ldu(p + 3 * stride);
    const __m256i U0 = _mm256_unpacklo_epi64(X0, X2), U1 = _mm256_unpacklo_epi64(X1, X3); /* q0, q2 */
    const __m256i V0 = _mm256_unpackhi_epi64(X0, X2), V1 = _mm256_unpackhi_epi64(X1, X3); /* q1, q3 */
    Z[0] = _mm256_permute2x128_si256(U0, U1, 0x20);
    Z[1] = _mm256_permute2x128_si256(V0, V1, 0x20);
    Z[2] = _mm256_permute2x128_si256(U0, U1, 0x31);
    Z[3] = _mm256_permute2x128_si256(V0, V1, 0x31);
}

/* The 4-bit codes of 4 blocks (16 bytes of nibbles each, block k's at p + k * stride) in the group
 * layout: element e < 16 is the low nibble of byte e, e >= 16 the high nibble of byte e - 16. */
AI void group_nib(const uint8_t *p, size_t stride, __m256i Z[4]) {
    const __m256i A = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)),
                                              _mm_loadu_si128((const __m128i *)(p + stride)), 1);
    const __m256i B =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + 2 * stride))),
                                _mm_loadu_si128((const __m128i *)(p + 3 * stride)), 1);
    const __m256i P0 = _mm256_unpacklo_epi64(A, B), P1 = _mm256_unpackhi_epi64(A, B);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    Z[0] = _mm256_and_si256(P0, m4);
    Z[1] = _mm256_and_si256(P1, m4);
    Z[2] = _mm256_and_si256(_mm256_srli_epi16(P0, 4), m4);
    Z[3] = _mm256_and_si256(_mm256_srli_epi16(P1, 4), m4);
}

/* Adds 16 to the codes in Z (group layout) whose bit 4 is set: bit e of the little-endian uint32 at
 * p + k * stride is bit 4 of element e of block k. */
AI void group_hbits(const uint8_t *p, size_t stride, __m256i Z[4]) {
    const __m256i qh = _mm256_set_epi64x((long long)ld32(p + 3 * stride), (long long)ld32(p + stride),
                                         (long long)ld32(p + 2 * stride), (long long)ld32(p));
    /* byte i of qword k of Z[j] is element 8j + i of block ord[k]: bit i of byte j of its qh */
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i c16 = _mm256_set1_epi8(16);
    UNROLL for (int j = 0; j < 4; j++) {
        const __m256i sel = _mm256_set_epi64x(0x0101010101010101ll * (8 + j), 0x0101010101010101ll * j,
                                              0x0101010101010101ll * (8 + j), 0x0101010101010101ll * j);
        const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(qh, sel), bit);
        Z[j] = _mm256_or_si256(Z[j], _mm256_andnot_si256(_mm256_cmpeq_epi8(b, _mm256_setzero_si256()), c16));
    }
}

/* Exact int32 sums, per lane, of a[i] * b[i] over the 4 vectors of a group (a unsigned, b signed),
 * without VNNI. a[i] <= 31 (4- and 5-bit codes): the int16 sums of 8 products cannot saturate. */
AI __m256i dot4_small(const __m256i a[4], const __m256i b[4]) {
    __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(a[0], b[0]), _mm256_maddubs_epi16(a[1], b[1]));
    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(a[2], b[2]));
    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(a[3], b[3]));
    return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

/* Signed a (any int8) times signed b (-127 .. 127) without VNNI: |a| * sign(b, a), pairs <= 32512. */
AI __m256i dot4_signed(const __m256i a[4], const __m256i b[4]) {
    const __m256i one = _mm256_set1_epi16(1);
    __m256i s[4];
    UNROLL for (int j = 0; j < 4; j++) s[j] =
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(a[j]), _mm256_sign_epi8(b[j], a[j])), one);
    return _mm256_add_epi32(_mm256_add_epi32(s[0], s[1]), _mm256_add_epi32(s[2], s[3]));
}

/* dot4_signed for |a| <= 12 (MXFP4): 4 vectors of pairs <= 3048 sum in int16. */
AI __m256i dot4_signed_small(const __m256i a[4], const __m256i b[4]) {
    __m256i s = _mm256_setzero_si256();
    UNROLL for (int j = 0; j < 4; j++) s =
        _mm256_add_epi16(s, _mm256_maddubs_epi16(_mm256_abs_epi8(a[j]), _mm256_sign_epi8(b[j], a[j])));
    return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

/* -off * (sum of the activation bytes of each int32 lane over Z[0..3]). */
AI __m256i neg_offset_sum(const __m256i Z[4], int off) {
    const __m256i ones = _mm256_set1_epi8(1);
    __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(ones, Z[0]), _mm256_maddubs_epi16(ones, Z[1]));
    s = _mm256_add_epi16(s, _mm256_add_epi16(_mm256_maddubs_epi16(ones, Z[2]), _mm256_maddubs_epi16(ones, Z[3])));
    return _mm256_madd_epi16(s, _mm256_set1_epi16((short)-off));
}

/* ---- one group of 4 blocks: weight and activation loaders ---- */

typedef struct wgrp {
    __m256i q[4]; /* codes, group layout: unsigned (Q8_0 with VNNI: w + 128), or signed (Q8_0) */
    __m256 d;     /* block scales, lanes 2k, 2k+1 */
    __m256 m;     /* block offsets (Q4_1, Q5_1), lane 2k */
} wgrp;

typedef struct xgrp {
    __m256i q[4]; /* signed quants, group layout */
    __m256i c;    /* exact correction added to the lanes */
    __m256 d;     /* block scales */
    __m256 s;     /* d * sum(qs) (Q8_1) */
} xgrp;

/* Weight loaders: unpack the group of 4 blocks at p into W (group layout). Q8_0 weights stay signed
 * for the non-VNNI kernels (w_q8_0) and get +128 for the VNNI ones (w_q8_0_u). */
AI void w_q4_0(const uint8_t *p, wgrp *W) {
    group_nib(p + 2, sizeof(kn_block_q4_0), W->q);
    W->d = scales4(p, sizeof(kn_block_q4_0));
}

AI void w_q5_0(const uint8_t *p, wgrp *W) {
    group_nib(p + 6, sizeof(kn_block_q5_0), W->q);
    group_hbits(p + 2, sizeof(kn_block_q5_0), W->q);
    W->d = scales4(p, sizeof(kn_block_q5_0));
}

AI void w_q8_0(const uint8_t *p, wgrp *W) {
    group_q8(p + 2, sizeof(kn_block_q8_0), W->q);
    W->d = scales4(p, sizeof(kn_block_q8_0));
}

AI void w_q8_0_u(const uint8_t *p, wgrp *W) {
    w_q8_0(p, W);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    UNROLL for (int j = 0; j < 4; j++) W->q[j] = _mm256_xor_si256(W->q[j], flip); /* w + 128 */
}

/* IQ4_NL, MXFP4: the nibbles (group layout) looked up in the format's table, signed or (vnni) plus 128. */
AI void group_table(const uint8_t *p, size_t stride, const int8_t *values, int vnni, __m256i Z[4]) {
    const __m128i v = _mm_loadu_si128((const __m128i *)values);
    const __m256i lut = _mm256_broadcastsi128_si256(vnni ? _mm_xor_si128(v, _mm_set1_epi8((char)0x80)) : v);
    group_nib(p, stride, Z);
    UNROLL for (int j = 0; j < 4; j++) Z[j] = _mm256_shuffle_epi8(lut, Z[j]);
}

/* Half the E8M0 values (kn_e8m0_half, exactly) of the exponent bytes at p + k * stride (k < 4) in the
 * group's block order, as scales4. */
AI __m256 e8m0_scales4(const uint8_t *p, size_t stride) {
    const int e0 = p[0], e1 = p[stride], e2 = p[2 * stride], e3 = p[3 * stride];
    const __m256i e = _mm256_setr_epi32(e0, e0, e2, e2, e1, e1, e3, e3);
    const __m256i big = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23); /* 2^(e - 128), e >= 2 */
    const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);            /* subnormal, e <= 1 */
    return _mm256_castsi256_ps(_mm256_blendv_epi8(small, big, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
}

/* IQ4_NL (fp16 d | qs) and MXFP4 (E8M0 e | qs) groups: table codes, signed or (vnni) plus 128. */
AI void w_table(const uint8_t *p, wgrp *W, int mx, int vnni) {
    const size_t bb = mx ? sizeof(kn_block_mxfp4) : sizeof(kn_block_iq4_nl);
    group_table(p + (mx ? 1 : 2), bb, mx ? kn_mxfp4_values : kn_iq4nl_values, vnni, W->q);
    W->d = mx ? e8m0_scales4(p, bb) : scales4(p, bb);
}
AI void w_iq4_nl(const uint8_t *p, wgrp *W) { w_table(p, W, 0, 0); }
AI void w_iq4_nl_u(const uint8_t *p, wgrp *W) { w_table(p, W, 0, 1); }
AI void w_mxfp4(const uint8_t *p, wgrp *W) { w_table(p, W, 1, 0); }
AI void w_mxfp4_u(const uint8_t *p, wgrp *W) { w_table(p, W, 1, 1); }

AI void w_q4_1(const uint8_t *p, wgrp *W) {
    group_nib(p + 4, sizeof(kn_block_q4_1), W->q);
    W->d = scales4(p, sizeof(kn_block_q4_1));
    W->m = scales4_even(p + 2, sizeof(kn_block_q4_1));
}

AI void w_q5_1(const uint8_t *p, wgrp *W) {
    group_nib(p + 8, sizeof(kn_block_q5_1), W->q);
    group_hbits(p + 4, sizeof(kn_block_q5_1), W->q);
    W->d = scales4(p, sizeof(kn_block_q5_1));
    W->m = scales4_even(p + 2, sizeof(kn_block_q5_1));
}

/* MLX8 (fp16 d, m | q) and MLX8_F32 (fp32) groups: the codes q (vnni: unsigned, as stored) or q - 128,
 * the scales d, and in lane 2k only the offset of the centred codes, fma(d, 128, m) (quant.h). */
AI void w_mlx(const uint8_t *p, wgrp *W, int f32, int vnni) {
    const size_t bb = f32 ? sizeof(kn_block_mlx8_f32) : sizeof(kn_block_mlx8);
    group_q8(p + (f32 ? 8 : 4), bb, W->q);
    if (!vnni) UNROLL for (int j = 0; j < 4; j++) W->q[j] = _mm256_xor_si256(W->q[j], _mm256_set1_epi8((char)0x80));
    W->d = f32 ? scales4_f32(p, bb) : scales4(p, bb);
    const __m256 m = f32 ? scales4_f32(p + 4, bb) : scales4(p + 2, bb);
    W->m = _mm256_blend_ps(_mm256_setzero_ps(), _mm256_fmadd_ps(W->d, _mm256_set1_ps(128.0f), m), 0x55);
}
AI void w_mlx8(const uint8_t *p, wgrp *W) { w_mlx(p, W, 0, 0); }
AI void w_mlx8_u(const uint8_t *p, wgrp *W) { w_mlx(p, W, 0, 1); }
AI void w_mlx8_f32(const uint8_t *p, wgrp *W) { w_mlx(p, W, 1, 0); }
AI void w_mlx8_f32_u(const uint8_t *p, wgrp *W) { w_mlx(p, W, 1, 1); }

/* Q8_0 activations for weights whose codes are (w + off), off = 8 (Q4_0), 16 (Q5_0), 128 (Q8_0 with
 * VNNI), 0 (Q8_0 without). */
AI void x_q8_0(const uint8_t *p, xgrp *X, int off) {
    group_q8(p + 2, sizeof(kn_block_q8_0), X->q);
    X->c = off ? neg_offset_sum(X->q, off) : _mm256_setzero_si256();
    X->d = scales4(p, sizeof(kn_block_q8_0));
}

/* Q8_1 activations (for Q4_1 / Q5_1 weights, whose codes carry no offset): no correction; s for m * s. */
AI void x_q8_1(const uint8_t *p, xgrp *X) {
    group_q8(p + 4, sizeof(kn_block_q8_1), X->q);
    X->c = _mm256_setzero_si256();
    X->d = scales4(p, sizeof(kn_block_q8_1));
    X->s = scales4(p + 2, sizeof(kn_block_q8_1));
}

/* Q8_0 activations for MLX8 weights: as for Q8_0 with VNNI (c = -128 sum(x) per lane: the unsigned codes
 * less 128), and s = sum(x) * d per block in lane 2k (exact) for the offset term. */
AI void x_mlx(const uint8_t *p, xgrp *X) {
    x_q8_0(p, X, 128);
    const __m256i s = _mm256_srai_epi32(X->c, 7);                                       /* -sum per lane */
    const __m256 b = _mm256_cvtepi32_ps(_mm256_add_epi32(s, _mm256_srli_epi64(s, 32))); /* lane 2k: the block's */
    X->s = _mm256_mul_ps(b, _mm256_sub_ps(_mm256_setzero_ps(), X->d));                  /* sum * d */
}

#define LOADX_Q4_0(p, X)   x_q8_0(p, X, 8)
#define LOADX_Q5_0(p, X)   x_q8_0(p, X, 16)
#define LOADX_Q8_0(p, X)   x_q8_0(p, X, 0)
#define LOADX_Q8_0_U(p, X) x_q8_0(p, X, 128)
#define LOADX_Q8_1(p, X)   x_q8_1(p, X)

/* A group's contribution to one (row, token) accumulator, from its exact lane sums. */
AI __m256 acc_grp(__m256i s, const wgrp *W, const xgrp *X, __m256 acc) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(W->d, X->d), acc);
}

/* Dot products of a group, each adding its float part to acc: dot_small (unsigned codes <= 31,
 * without VNNI), dot_signed (Q8_0, IQ4_NL weights, without VNNI; _small: MXFP4), dot_vnni (unsigned
 * codes, AVX-VNNI);
 * the _m variants add the offset term m * s of each block (Q4_1, Q5_1). */
AI __m256 dot_small(const wgrp *W, const xgrp *X, __m256 acc) {
    return acc_grp(_mm256_add_epi32(X->c, dot4_small(W->q, X->q)), W, X, acc);
}

AI __m256 dot_small_m(const wgrp *W, const xgrp *X, __m256 acc) {
    return _mm256_fmadd_ps(W->m, X->s, dot_small(W, X, acc));
}

AI __m256 dot_signed(const wgrp *W, const xgrp *X, __m256 acc) { return acc_grp(dot4_signed(W->q, X->q), W, X, acc); }

AI __m256 dot_signed_m(const wgrp *W, const xgrp *X, __m256 acc) {
    return _mm256_fmadd_ps(W->m, X->s, dot_signed(W, X, acc));
}

AI __m256 dot_signed_small(const wgrp *W, const xgrp *X, __m256 acc) {
    return acc_grp(dot4_signed_small(W->q, X->q), W, X, acc);
}

VNNI_TARGET AI __m256 dot_vnni(const wgrp *W, const xgrp *X, __m256 acc) {
    __m256i s = X->c;
    UNROLL for (int j = 0; j < 4; j++) s = _mm256_dpbusd_avx_epi32(s, W->q[j], X->q[j]);
    return acc_grp(s, W, X, acc);
}

VNNI_TARGET AI __m256 dot_vnni_m(const wgrp *W, const xgrp *X, __m256 acc) {
    return _mm256_fmadd_ps(W->m, X->s, dot_vnni(W, X, acc));
}

/* Horizontal sum of 8 lanes, always in the same order. */
AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

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

/* GEMM tile kernel NAME (target attributes ATTR) for a block weight format of WB bytes per block with
 * activations of XB bytes per block (kn_gemm_fn contract, kernels.h): n is a multiple of 32 (a
 * partial block is ignored). LOADW / LOADX unpack a group of 4 blocks, DOT adds a group's products to
 * an accumulator. The tokens are processed in passes of at most 2 (register budget). */
#define DEFINE_GEMM_BLOCKS(NAME, ATTR, WB, XB, LOADW, LOADX, DOT)                                                      \
    ATTR AI void NAME##_group(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, __m256 acc[4][2],              \
                              const int NR, const int NT) {                                                            \
        xgrp X[2];                                                                                                     \
        UNROLL for (int t = 0; t < NT; t++) LOADX(x + (size_t)t * xs, &X[t]);                                          \
        UNROLL for (int r = 0; r < NR; r++) {                                                                          \
            wgrp W;                                                                                                    \
            LOADW(w + (size_t)r * ws, &W);                                                                             \
            UNROLL for (int t = 0; t < NT; t++) acc[r][t] = DOT(&W, &X[t], acc[r][t]);                                 \
        }                                                                                                              \
    }                                                                                                                  \
    ATTR AI void NAME##_pass(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *out,          \
                             size_t ldo, const int NR, const int NT, const int PF) {                                   \
        __m256 acc[4][2];                                                                                              \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();       \
        const int64_t nb = n / 32, ng = nb / 4;                                                                        \
        const int rem = (int)(nb % 4);                                                                                 \
        for (int64_t g = 0; g < ng; g++) {                                                                             \
            const uint8_t *wg = w + (size_t)g * 4 * (WB);                                                              \
            if (PF) prefetch_next_tile(w, ws, NR, (size_t)g *NR * 4 * (WB), NR * 4 * (WB));                            \
            NAME##_group(wg, ws, x + (size_t)g * 4 * (XB), xs, acc, NR, NT);                                           \
        }                                                                                                              \
        if (rem) {                                                                                                     \
            uint8_t tw[4][4 * (WB)], tx[2][4 * (XB)];                                                                  \
            const size_t off = (size_t)ng * 4;                                                                         \
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
            hsum8(acc[r][t]);                                                                                          \
    }                                                                                                                  \
    ATTR AI void NAME##_tile(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *out,          \
                             size_t ldo, const int NR, const int NT) {                                                 \
        NAME##_pass(n, w, ws, x, xs, out, ldo, NR, NT < 2 ? NT : 2, NT == 1);                                          \
        if (NT > 2) NAME##_pass(n, w, ws, x + 2 * xs, xs, out + 2 * ldo, ldo, NR, NT - 2, 0);                          \
    }                                                                                                                  \
    ATTR static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt,         \
                          float *out, size_t ldo) {                                                                    \
        TILE_SWITCH(NAME##_CALL)                                                                                       \
    }

#define CALL(NAME, R, T)           NAME##_tile(n, w, ws, x, xs, out, ldo, R, T)
#define gemm_q4_0_CALL(R, T)       CALL(gemm_q4_0, R, T)
#define gemm_q5_0_CALL(R, T)       CALL(gemm_q5_0, R, T)
#define gemm_q8_0_CALL(R, T)       CALL(gemm_q8_0, R, T)
#define gemm_q4_1_CALL(R, T)       CALL(gemm_q4_1, R, T)
#define gemm_q5_1_CALL(R, T)       CALL(gemm_q5_1, R, T)
#define gemm_q4_0_vnni_CALL(R, T)  CALL(gemm_q4_0_vnni, R, T)
#define gemm_q5_0_vnni_CALL(R, T)  CALL(gemm_q5_0_vnni, R, T)
#define gemm_q8_0_vnni_CALL(R, T)  CALL(gemm_q8_0_vnni, R, T)
#define gemm_q4_1_vnni_CALL(R, T)  CALL(gemm_q4_1_vnni, R, T)
#define gemm_q5_1_vnni_CALL(R, T)  CALL(gemm_q5_1_vnni, R, T)
#define gemm_iq4_nl_CALL(R, T)     CALL(gemm_iq4_nl, R, T)
#define gemm_mxfp4_CALL(R, T)      CALL(gemm_mxfp4, R, T)
#define gemm_iq4_nl_v_CALL(R, T)   CALL(gemm_iq4_nl_v, R, T)
#define gemm_mxfp4_v_CALL(R, T)    CALL(gemm_mxfp4_v, R, T)
#define gemm_mlx8_CALL(R, T)       CALL(gemm_mlx8, R, T)
#define gemm_mlx8_f32_CALL(R, T)   CALL(gemm_mlx8_f32, R, T)
#define gemm_mlx8_v_CALL(R, T)     CALL(gemm_mlx8_v, R, T)
#define gemm_mlx8_f32_v_CALL(R, T) CALL(gemm_mlx8_f32_v, R, T)
#define NOATTR

DEFINE_GEMM_BLOCKS(gemm_q4_0, NOATTR, 18, 34, w_q4_0, LOADX_Q4_0, dot_small)
DEFINE_GEMM_BLOCKS(gemm_q5_0, NOATTR, 22, 34, w_q5_0, LOADX_Q5_0, dot_small)
DEFINE_GEMM_BLOCKS(gemm_q8_0, NOATTR, 34, 34, w_q8_0, LOADX_Q8_0, dot_signed)
DEFINE_GEMM_BLOCKS(gemm_q4_1, NOATTR, 20, 36, w_q4_1, LOADX_Q8_1, dot_small_m)
DEFINE_GEMM_BLOCKS(gemm_q5_1, NOATTR, 24, 36, w_q5_1, LOADX_Q8_1, dot_small_m)
DEFINE_GEMM_BLOCKS(gemm_q4_0_vnni, VNNI_TARGET, 18, 34, w_q4_0, LOADX_Q4_0, dot_vnni)
DEFINE_GEMM_BLOCKS(gemm_q5_0_vnni, VNNI_TARGET, 22, 34, w_q5_0, LOADX_Q5_0, dot_vnni)
DEFINE_GEMM_BLOCKS(gemm_q8_0_vnni, VNNI_TARGET, 34, 34, w_q8_0_u, LOADX_Q8_0_U, dot_vnni)
DEFINE_GEMM_BLOCKS(gemm_q4_1_vnni, VNNI_TARGET, 20, 36, w_q4_1, LOADX_Q8_1, dot_vnni_m)
DEFINE_GEMM_BLOCKS(gemm_q5_1_vnni, VNNI_TARGET, 24, 36, w_q5_1, LOADX_Q8_1, dot_vnni_m)
DEFINE_GEMM_BLOCKS(gemm_iq4_nl, NOATTR, 18, 34, w_iq4_nl, LOADX_Q8_0, dot_signed)
DEFINE_GEMM_BLOCKS(gemm_mxfp4, NOATTR, 17, 34, w_mxfp4, LOADX_Q8_0, dot_signed_small)
DEFINE_GEMM_BLOCKS(gemm_iq4_nl_v, VNNI_TARGET, 18, 34, w_iq4_nl_u, LOADX_Q8_0_U, dot_vnni)
DEFINE_GEMM_BLOCKS(gemm_mxfp4_v, VNNI_TARGET, 17, 34, w_mxfp4_u, LOADX_Q8_0_U, dot_vnni)
DEFINE_GEMM_BLOCKS(gemm_mlx8, NOATTR, 36, 34, w_mlx8, x_mlx, dot_signed_m)
DEFINE_GEMM_BLOCKS(gemm_mlx8_f32, NOATTR, 40, 34, w_mlx8_f32, x_mlx, dot_signed_m)
DEFINE_GEMM_BLOCKS(gemm_mlx8_v, VNNI_TARGET, 36, 34, w_mlx8_u, x_mlx, dot_vnni_m)
DEFINE_GEMM_BLOCKS(gemm_mlx8_f32_v, VNNI_TARGET, 40, 34, w_mlx8_f32_u, x_mlx, dot_vnni_m)

/* ---- float weights x F32 activations ---- */

/* Float weight loaders: the 8 elements at p as fp32 (exact). */
AI __m256 w_f32(const uint8_t *p) { return _mm256_loadu_ps((const float *)p); }
AI __m256 w_f16(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
AI __m256 w_bf16(const uint8_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* Float rows longer than this many bytes are left to the hardware prefetchers in decode: a tile of
 * 4 such rows is 16 KB or more, and prefetching the next one into L1 evicts the data in use (Zen 3,
 * `build/bench/kernels -T F32,F16`: F32 rows of 8-32 KB 1.17-1.4x faster without it, F16 rows of 8-16
 * KB 1.1-1.4x; rows of 1-2 KB, as in small models, 1.3-1.7x slower without it, 4 KB about level). */
#define FLOAT_PF_MAX_ROW 4096

/* GEMM tile kernel NAME for a float weight format of ES bytes per element (kn_gemm_fn contract,
 * kernels.h), any n >= 0: LOADW(p) gives the 8 weights at p as fp32. The tail of n % 8 elements goes
 * through zero-padded copies. The tokens are processed in passes of at most 2. */
#define DEFINE_GEMM_FLOAT(NAME, ES, LOADW)                                                                             \
    AI void NAME##_pass(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *out, size_t ldo,   \
                        const int NR, const int NT, const int PF) {                                                    \
        __m256 acc[4][2], X[2];                                                                                        \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();       \
        int64_t i = 0;                                                                                                 \
        for (; i + 8 <= n; i += 8) {                                                                                   \
            if (PF) prefetch_next_tile(w, ws, NR, (size_t)i *NR *(ES), NR * 8 * (ES));                                 \
            UNROLL for (int t = 0; t < NT; t++) X[t] = _mm256_loadu_ps((const float *)(x + (size_t)t * xs) + i);       \
            UNROLL for (int r = 0; r < NR; r++) {                                                                      \
                const __m256 W = LOADW(w + (size_t)r * ws + (size_t)i * (ES));                                         \
                UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm256_fmadd_ps(W, X[t], acc[r][t]);                   \
            }                                                                                                          \
        }                                                                                                              \
        if (i < n) {                                                                                                   \
            const size_t rem = (size_t)(n - i);                                                                        \
            float xt[8];                                                                                               \
            uint8_t wt[8 * (ES)];                                                                                      \
            UNROLL for (int t = 0; t < NT; t++) {                                                                      \
                memset(xt, 0, sizeof xt);                                                                              \
                memcpy(xt, (const float *)(x + (size_t)t * xs) + i, rem * sizeof(float));                              \
                X[t] = _mm256_loadu_ps(xt);                                                                            \
            }                                                                                                          \
            UNROLL for (int r = 0; r < NR; r++) {                                                                      \
                memset(wt, 0, sizeof wt);                                                                              \
                memcpy(wt, w + (size_t)r * ws + (size_t)i * (ES), rem * (ES));                                         \
                const __m256 W = LOADW(wt);                                                                            \
                UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm256_fmadd_ps(W, X[t], acc[r][t]);                   \
            }                                                                                                          \
        }                                                                                                              \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) out[(size_t)t * ldo + (size_t)r] =     \
            hsum8(acc[r][t]);                                                                                          \
    }                                                                                                                  \
    AI void NAME##_tile(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *out, size_t ldo,   \
                        const int NR, const int NT) {                                                                  \
        NAME##_pass(n, w, ws, x, xs, out, ldo, NR, NT < 2 ? NT : 2, NT == 1 && ws <= FLOAT_PF_MAX_ROW);                \
        if (NT > 2) NAME##_pass(n, w, ws, x + 2 * xs, xs, out + 2 * ldo, ldo, NR, NT - 2, 0);                          \
    }                                                                                                                  \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        TILE_SWITCH(NAME##_CALL)                                                                                       \
    }

#define gemm_f32_CALL(R, T)  CALL(gemm_f32, R, T)
#define gemm_f16_CALL(R, T)  CALL(gemm_f16, R, T)
#define gemm_bf16_CALL(R, T) CALL(gemm_bf16, R, T)

DEFINE_GEMM_FLOAT(gemm_f32, 4, w_f32)
DEFINE_GEMM_FLOAT(gemm_f16, 2, w_f16)
DEFINE_GEMM_FLOAT(gemm_bf16, 2, w_bf16)

/* ---- activation quantizers (quant.h conventions; same bytes as the reference quantizers) ---- */

/* The reference's kn_round_clamp(v, -127, 127) on 8 lanes: round half away from zero, clamp, NaN to
 * -127; the result as int32. */
AI __m256i round_clamp127(__m256 v) {
    v = _mm256_max_ps(v, _mm256_set1_ps(-127.0f)); /* vmaxps returns the second operand for NaN */
    v = _mm256_min_ps(v, _mm256_set1_ps(127.0f));
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 absf = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
    const __m256 half = _mm256_cmp_ps(absf, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    /* +-1 with the sign of v where |v - t| >= 0.5 */
    const __m256 step =
        _mm256_and_ps(half, _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f)));
    return _mm256_cvtps_epi32(_mm256_add_ps(t, step));
}

/* One block of 32: the stored fp16 scale (as the reference: absmax / 127, NaN skipped), the quants
 * into qs, and their sum into *sum. */
AI kn_half quant_block_q8(const float *x, int8_t *qs, int *sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], m = _mm256_setzero_ps();
    UNROLL for (int j = 0; j < 4; j++) {
        v[j] = _mm256_loadu_ps(x + 8 * j);
        m = _mm256_max_ps(_mm256_andnot_ps(sign, v[j]), m); /* keeps m where |v| is NaN */
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const kn_half dh = kn_fp32_to_fp16_scale(_mm_cvtss_f32(m4) / 127.0f);
    const float d = kn_fp16_to_fp32(dh);
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    UNROLL for (int j = 0; j < 4; j++) q[j] = round_clamp127(_mm256_mul_ps(v[j], id));
    /* int32 -> int8 in element order: packs work within 128-bit lanes, so fix the order after */
    const __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    _mm256_storeu_si256((__m256i *)qs, _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    *sum = _mm_cvtsi128_si32(s4);
    return dh;
}

KN_Q8_QUANTIZERS(quant_block_q8)

/* Test hook (tests/unit/test_kernels_legacy.c, test_kernels_mlx.c): selects the block-format kernels
 * (MLX8 included) of set k with
 * AVX-VNNI (use_vnni, honoured only on CPUs with AVX-VNNI) or without. Returns whether the VNNI ones
 * are selected. Both give bit-identical results. */
bool kn__avx2_legacy_vnni(kn_kernels *k, bool use_vnni);
bool kn__avx2_legacy_vnni(kn_kernels *k, bool use_vnni) {
    const bool v = use_vnni && kn_cpu_features()->avxvnni;
    k->gemm[KN_Q4_0] = v ? gemm_q4_0_vnni : gemm_q4_0;
    k->gemm[KN_Q4_1] = v ? gemm_q4_1_vnni : gemm_q4_1;
    k->gemm[KN_Q5_0] = v ? gemm_q5_0_vnni : gemm_q5_0;
    k->gemm[KN_Q5_1] = v ? gemm_q5_1_vnni : gemm_q5_1;
    k->gemm[KN_Q8_0] = v ? gemm_q8_0_vnni : gemm_q8_0;
    k->gemm[KN_IQ4_NL] = v ? gemm_iq4_nl_v : gemm_iq4_nl;
    k->gemm[KN_MXFP4] = v ? gemm_mxfp4_v : gemm_mxfp4;
    k->gemm[KN_MLX8] = v ? gemm_mlx8_v : gemm_mlx8;
    k->gemm[KN_MLX8_F32] = v ? gemm_mlx8_f32_v : gemm_mlx8_f32;
    return v;
}

/* Fills k with this file's kernels (kernels.h), the AVX-VNNI block kernels where the CPU has them.
 * Called only on CPUs with AVX2, FMA and F16C. */
void kn_avx2_init_legacy(kn_kernels *k) {
    k->gemm[KN_F32] = gemm_f32;
    k->gemm[KN_F16] = gemm_f16;
    k->gemm[KN_BF16] = gemm_bf16;
    kn__avx2_legacy_vnni(k, true);
    k->quantize[KN_Q8_0] = quantize_q8_0;
    k->quantize[KN_Q8_1] = quantize_q8_1;
}

#else /* not x86-64: the set is never selected */
void kn_avx2_init_legacy(kn_kernels *k) { (void)k; }
#endif
