/*
 * kernels_avx512_k.c - AVX-512 (F, BW, VL, VNNI) kernels for the K weight formats (Q4_K, Q5_K, Q6_K)
 * and their activation quantizer (Q8_K). Every output is bit-identical to the scalar reference of
 * quant_k.c (the source of truth), which fixes the order of every float operation (the numerics
 * contract at the top of quant.h); tests/unit/test_kernels_k.c checks it. Entries left unset keep
 * the previous set's kernel.
 *
 * GEMM tiles (up to 4 weight rows x 4 tokens), per 256-element super-block:
 *   1. each weight row is unpacked once for all tokens of the tile: its quants become four vectors of
 *      64 unsigned bytes (0..15, 0..31 or 0..63), and its sub-block scales four vectors with the scale
 *      of each int32 lane's sub-block in both int16 halves. Q6_K vector k holds elements 64k ..
 *      64k+63 in order (activations are used as stored); Q4_K/Q5_K vectors hold the nibbles of 64
 *      consecutive bytes (two half sub-blocks 64 elements apart), and each token's quants are
 *      permuted once per super-block to match (cheaper than permuting every weight row);
 *   2. for every (row, token): vpmaddubsw of quants x activations gives int16 sums of 2 products
 *      (exact: |sum| <= 2 * 63 * 128 < 2^15), vpdpwssd multiplies them by their sub-block scale and
 *      accumulates in int32: 16 lanes adding up to S1 (quant.h), exact integers;
 *   3. the 16-lane vectors of all (row, token) pairs are reduced together (a transposing tree of
 *      shuffles and adds) into one vector with one lane per pair; Q4_K/Q5_K's S2 (mins x bsums) is
 *      computed directly in that layout with vpdpwssd;
 *   4. each lane then takes the reference's float steps with its own values only:
 *      sa = fma((float)S1, d * dy, sa), sm = fma((float)S2, dmin * dy, sm); out = sa - sm.
 * Since every lane follows the reference's order exactly, outputs are bit-identical to the reference
 * whatever the tile shape (the tile contract of kernels.h holds a fortiori). Decode (one token) has
 * its own layout (block r of a vector for row r), reads each weight row sequentially, four rows in
 * flight, without gathers, with a software prefetch ahead in each row. The scales of the four rows'
 * Q4_K/Q5_K blocks are decoded together in one vector.
 */
#include "tensor/kernels.h"
#include "tensor/quant.h"

#if defined(__x86_64__)
#include <float.h>
#include <math.h>
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#include <immintrin.h>

#define KI static inline __attribute__((always_inline))

/* Unpacks the 12 packed scale bytes of four Q4_K/Q5_K blocks (see kn_k_scale_min) at once: 128-bit
 * block r of `raw` holds the 16 bytes starting at block r's scales (the 12 scale bytes, then 4 bytes
 * of the block that are ignored); block r of the result holds sc[0..7], m[0..7] of block r. */
KI __m512i k4_scales4(__m512i raw) {
    const __m512i lo = _mm512_and_si512(raw, _mm512_set1_epi8(0x3F));  /* sc0..3 | m0..3 */
    const __m512i x2 = _mm512_shuffle_epi32(raw, (_MM_PERM_ENUM)0xAA); /* bytes 8..11 */
    const __m512i cnt = _mm512_broadcast_i32x4(_mm_setr_epi32(0, 4, 0, 0));
    const __m512i t = _mm512_and_si512(_mm512_srlv_epi32(x2, cnt), _mm512_set1_epi8(0x0F));
    const __m512i u = _mm512_and_si512(_mm512_srli_epi32(raw, 2), _mm512_set1_epi8(0x30)); /* top 2 bits -> 4,5 */
    return _mm512_unpacklo_epi32(lo, _mm512_or_si512(t, u));                               /* hi: sc4..7 | m4..7 */
}

_Static_assert(offsetof(kn_block_q4_k, scales) == offsetof(kn_block_q5_k, scales), "Q4_K and Q5_K scales must line up");

/* The raw scale fields of the four rows' blocks for k4_scales4 (rows r >= nr repeat row 0). */
KI __m512i load_scales4(const uint8_t *w, size_t ws, int nr, size_t off) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(w + off)));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(w + (nr > 1 ? ws : 0) + off)), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(w + (nr > 2 ? 2 * ws : 0) + off)), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(w + (nr > 3 ? 3 * ws : 0) + off)), 3);
}

/* ---- the GEMM tiles of Q4_K, Q5_K and Q6_K ---- */

enum { K_Q4 = 0, K_Q5 = 1, K_Q6 = 2 };

/* One token's super-block, prepared once for all rows of the tile. */
typedef struct tok_k {
    __m512i y[4];     /* Q4_K/Q5_K: the quants in the element order of the weight vectors */
    const int8_t *qs; /* Q6_K: the quants as stored (vector k is qs[64k .. 64k+63]) */
    __m512i nbs;      /* Q6_K: int32 lane j = -bsums[j] */
    __m128i b;        /* Q4_K/Q5_K: int16 lane j = bsums[2j] + bsums[2j+1], the sum of sub-block j */
} tok_k;

KI void prep_tok(int kind, const kn_block_q8_k *y, tok_k *T) {
    if (kind == K_Q6) {
        T->qs = y->qs;
        T->nbs = _mm512_sub_epi32(_mm512_setzero_si512(),
                                  _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)y->bsums)));
    } else {
        const __m512i y0 = _mm512_loadu_si512(y->qs), y1 = _mm512_loadu_si512(y->qs + 64);
        const __m512i y2 = _mm512_loadu_si512(y->qs + 128), y3 = _mm512_loadu_si512(y->qs + 192);
        T->y[0] = _mm512_shuffle_i64x2(y0, y1, 0x44); /* elements 0..31, 64..95 */
        T->y[1] = _mm512_shuffle_i64x2(y0, y1, 0xEE); /* 32..63, 96..127 */
        T->y[2] = _mm512_shuffle_i64x2(y2, y3, 0x44); /* 128..159, 192..223 */
        T->y[3] = _mm512_shuffle_i64x2(y2, y3, 0xEE); /* 160..191, 224..255 */
        T->b =
            _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums), _mm_loadu_si128((const __m128i *)y->bsums + 1));
    }
}

/* One weight row's super-block, unpacked once for all tokens of the tile. */
typedef struct row_k {
    __m512i q[4]; /* quants as unsigned bytes, in the element order of tok_k (see unpack_*) */
    __m512i s[4]; /* int32 lane l of vector k: the scale of its sub-block, in both int16 halves */
    __m512i s32;  /* Q6_K: int32 lane j (low 16 bits, high 16 zero) = 32 * scales[j] */
    __m128i m;    /* Q4_K/Q5_K: int16 lane j = the min of sub-block j */
} row_k;

/* Q4_K/Q5_K: the scales and mins of the block (bc: its sc[0..7], m[0..7] from k4_scales4 in every
 * 128-bit block), and the 4-bit quants of qs[128]. Vector k holds the
 * low (k even) or high (k odd) nibbles of qs[64(k/2) .. 64(k/2)+63]: sub-block 4(k/2) + (k&1) in
 * bytes 0..31 and sub-block 4(k/2) + (k&1) + 2 in bytes 32..63 (the order of tok_k.y). */
KI void unpack_k4(__m512i bc, const uint8_t *qs, row_k *R) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i z0 = _mm512_loadu_si512(qs), z1 = _mm512_loadu_si512(qs + 64);
    R->q[0] = _mm512_and_si512(z0, m4);
    R->q[1] = _mm512_and_si512(_mm512_srli_epi16(z0, 4), m4);
    R->q[2] = _mm512_and_si512(z1, m4);
    R->q[3] = _mm512_and_si512(_mm512_srli_epi16(z1, 4), m4);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        /* int32 lanes 0..7: (sc_a, sc_a) as int16, lanes 8..15: (sc_a+2, sc_a+2); 0x80 selects zero */
        const int a = 4 * (k >> 1) + (k & 1);
        const __m512i ctl =
            _mm512_inserti64x4(_mm512_set1_epi32((int)(0x80008000u | (unsigned)a | (unsigned)a << 16)),
                               _mm256_set1_epi32((int)(0x80008000u | (unsigned)(a + 2) | (unsigned)(a + 2) << 16)), 1);
        R->s[k] = _mm512_shuffle_epi8(bc, ctl);
    }
    R->m = _mm_shuffle_epi8(_mm512_castsi512_si128(bc), _mm_setr_epi8(8, -128, 9, -128, 10, -128, 11, -128, 12, -128,
                                                                      13, -128, 14, -128, 15, -128));
}

/* Q5_K: adds 16 to the quants whose high bit (bit j of qh[l] for sub-block j) is set: bit j of each
 * byte is shifted to bit 4 (16-bit shifts: bits crossing into the other byte are masked off) and
 * or-ed in. Vectors 0, 1 hold sub-blocks j <= 3 (left shifts), vectors 2, 3 sub-blocks j >= 4. */
KI void add_high_q5k(const uint8_t *qh, row_k *R) {
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
    const __m512i b4 = _mm512_set1_epi8(0x10);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const int a = 4 * (k >> 1) + (k & 1); /* sub-block of bytes 0..31; a + 2 for bytes 32..63 */
        __m512i sh;
        if (a < 4)
            sh = _mm512_sllv_epi16(
                h, _mm512_inserti64x4(_mm512_set1_epi16((short)(4 - a)), _mm256_set1_epi16((short)(2 - a)), 1));
        else
            sh = _mm512_srlv_epi16(
                h, _mm512_inserti64x4(_mm512_set1_epi16((short)(a - 4)), _mm256_set1_epi16((short)(a - 2)), 1));
        R->q[k] = _mm512_ternarylogic_epi32(R->q[k], sh, b4, 0xF8); /* q | (sh & 0x10) */
    }
}

/* Q6_K: vector k = elements 64k .. 64k+63, i.e. half h = k / 2, quarters 2(k & 1) and 2(k & 1) + 1:
 * low bits from the low (k even) or high (k odd) nibbles of ql[64h .. 64h+63], high bits from
 * qh[32h .. 32h+31] (bits 0-1 / 2-3 for k even, 4-5 / 6-7 for k odd), moved to bits 4-5. */
KI void unpack_q6k(const kn_block_q6_k *b, row_k *R) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
        R->q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30));
        R->q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                          _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30));
    }
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales));
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    const __m512i s = _mm512_or_si512(_mm512_and_si512(sc, lo16), _mm512_slli_epi32(sc, 16)); /* (scale, scale) */
    R->s[0] = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), s);
    R->s[1] = _mm512_permutexvar_epi32(_mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7), s);
    R->s[2] = _mm512_permutexvar_epi32(_mm512_setr_epi32(8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11), s);
    R->s[3] =
        _mm512_permutexvar_epi32(_mm512_setr_epi32(12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15), s);
    R->s32 = _mm512_and_si512(_mm512_slli_epi32(sc, 5), lo16);
}

/* 16 int32 lanes whose sum is S1 of (row, token): sum_j sc_j * dot_j (Q4_K/Q5_K), or
 * sum_j sc_j * (dot_j - 32 bsums_j) (Q6_K). vpmaddubsw sums pairs of quant x activation products
 * into int16 lanes, exactly (|sum| <= 2 * 63 * 128 < 2^15: no saturation); vpdpwssd multiplies
 * them by their sub-block's scale and accumulates in int32. */
KI __m512i dot_k(int kind, const row_k *R, const tok_k *T) {
    __m512i y[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) y[k] = kind == K_Q6 ? _mm512_loadu_si512(T->qs + 64 * k) : T->y[k];
    __m512i ia = _mm512_madd_epi16(_mm512_maddubs_epi16(R->q[0], y[0]), R->s[0]);
    if (kind == K_Q6) ia = _mm512_dpwssd_epi32(ia, R->s32, T->nbs);
    ia = _mm512_dpwssd_epi32(ia, _mm512_maddubs_epi16(R->q[1], y[1]), R->s[1]);
    ia = _mm512_dpwssd_epi32(ia, _mm512_maddubs_epi16(R->q[2], y[2]), R->s[2]);
    ia = _mm512_dpwssd_epi32(ia, _mm512_maddubs_epi16(R->q[3], y[3]), R->s[3]);
    return ia;
}

/* The reduction tree. Integer adds are exact, so only where each sum ends up matters.
 * red_a: the partial sums of a in 128-bit blocks 0 and 2, those of b in blocks 1 and 3. */
KI __m512i red_a(__m512i a, __m512i b) {
    const __m512i t = _mm512_permutex2var_epi64(a, _mm512_setr_epi64(2, 3, 8, 9, 6, 7, 12, 13), b);
    return _mm512_add_epi32(t, _mm512_mask_blend_epi64(0xCC, a, b));
}

/* Block k holds 4 lanes adding up to the sum of all lanes of the k-th of a, b, c, d. */
KI __m512i reduce4(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m512i ab = red_a(a, b), cd = red_a(c, d);
    return _mm512_add_epi32(_mm512_shuffle_i64x2(ab, cd, 0x4E), _mm512_mask_blend_epi64(0xF0, ab, cd));
}

/* In every 128-bit block: lanes 0 and 2 add up to the block's sum in x0, lanes 1 and 3 to x1's. */
KI __m512i red_c(__m512i x0, __m512i x1) {
    const __m512i u = _mm512_mask_blend_epi32(0xAAAA, x0, x1); /* x0_0 x1_1 x0_2 x1_3 */
    const __m512i v = _mm512_mask_blend_epi32(0x5555, x0, x1); /* x1_0 x0_1 x1_2 x0_3 */
    return _mm512_add_epi32(u, _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)0xB1));
}

/* From x[r] (block t = 4 lanes adding up to the value of (r, t)): lane 4t + r = that value. */
KI __m512i transpose_add(__m512i x0, __m512i x1, __m512i x2, __m512i x3) {
    const __m512i p01 = red_c(x0, x1), p23 = red_c(x2, x3); /* lanes p0a p1a p0b p1b, p2a p3a p2b p3b */
    const __m512i t = _mm512_castps_si512(
        _mm512_shuffle_ps(_mm512_castsi512_ps(p01), _mm512_castsi512_ps(p23), _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_add_epi32(t, _mm512_mask_blend_epi32(0xCCCC, p01, p23));
}

/* Size of a block of weight type `kind`. */
KI size_t block_bytes(int kind) {
    return kind == K_Q4 ? sizeof(kn_block_q4_k) : kind == K_Q5 ? sizeof(kn_block_q5_k) : sizeof(kn_block_q6_k);
}

/* 128-bit block r of v in every block (a permute with an index vector: r need not be a constant). */
KI __m512i block_bcast(__m512i v, int r) {
    return _mm512_permutexvar_epi32(
        _mm512_add_epi32(_mm512_set1_epi32(4 * r), _mm512_broadcast_i32x4(_mm_setr_epi32(0, 1, 2, 3))), v);
}

/* Unpacks block `blk` of weight type `kind` (row r of the tile; sc4: the decoded scales of the tile's
 * Q4_K/Q5_K blocks, see k4_scales4) into R; returns its fp16 scales in int32 lane 0:
 * d | dmin << 16 (Q4_K, Q5_K) or d (Q6_K). */
KI __m128i unpack_row(int kind, const uint8_t *blk, __m512i sc4, int r, row_k *R) {
    if (kind == K_Q6) {
        unpack_q6k((const kn_block_q6_k *)blk, R);
        uint16_t h;
        memcpy(&h, blk + offsetof(kn_block_q6_k, d), sizeof h);
        return _mm_cvtsi32_si128(h);
    }
    if (kind == K_Q5) {
        const kn_block_q5_k *b = (const kn_block_q5_k *)blk;
        unpack_k4(block_bcast(sc4, r), b->qs, R);
        add_high_q5k(b->qh, R);
    } else {
        const kn_block_q4_k *b = (const kn_block_q4_k *)blk;
        unpack_k4(block_bcast(sc4, r), b->qs, R);
    }
    return _mm_loadu_si32(blk);
}

/* Software prefetch of the block PREFETCH_AHEAD bytes after blk (3 lines cover any K block). Four
 * interleaved row streams get only about half the DRAM bandwidth of one stream from the hardware
 * prefetchers alone; this gains 20-30% in decode. Past the end of its row (address wrap_at) the
 * prefetch moves on by wrap_by bytes, to the row 4 rows down: the same place in the next tile when
 * the caller walks the rows of a matrix in order, so a tile does not start cold. Prefetches never
 * fault, so a wrong guess (or running past the end of the weights) only costs bandwidth. */
enum { PREFETCH_AHEAD = 1024 };
KI void prefetch_ahead(const uint8_t *blk, uintptr_t wrap_at, uintptr_t wrap_by) {
    uintptr_t a = (uintptr_t)blk + PREFETCH_AHEAD; /* an address, not a pointer past the object */
    if (a >= wrap_at) a += wrap_by;
    _mm_prefetch((const char *)a, _MM_HINT_T0);
    _mm_prefetch((const char *)(a + 64), _MM_HINT_T0);
    _mm_prefetch((const char *)(a + 128), _MM_HINT_T0);
}

/* Four int32 values (lane 0 of each argument) as one vector. */
KI __m128i gather4(__m128i a, __m128i b, __m128i c, __m128i d) {
    return _mm_unpacklo_epi64(_mm_unpacklo_epi32(a, b), _mm_unpacklo_epi32(c, d));
}

/*
 * Decode: nr <= 4 rows, one token, over nb super-blocks. Per super-block, block r of one vector holds
 * row r's [S1, S2, S1, S2] (Q6_K: S1 everywhere), and lanes 4r and 4r+1 of the accumulator are row
 * r's sa and sm of the canonical order (quant.h):
 *   sa = fma((float)S1, d * dy, sa);  sm = fma((float)S2, dmin * dy, sm);  out = sa - sm (Q6_K: sa)
 * Missing rows compute zeros.
 */
KI void tile_dec(int kind, int64_t nb, const uint8_t *w, size_t ws, int nr, const uint8_t *x, float *out) {
    const size_t bb = block_bytes(kind);
    const __m512i zi = _mm512_setzero_si512();
    const __m128i z4 = _mm_setzero_si128();
    const __m512i idx_dm = _mm512_setr_epi32(0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7);
    __m512 acc = _mm512_setzero_ps();
    tok_k T;
    row_k R;
    for (int64_t i = 0; i < nb; i++) {
        const kn_block_q8_k *y = (const kn_block_q8_k *)x + i;
        prep_tok(kind, y, &T);
        __m512i ia[4] = {zi, zi, zi, zi};
        __m128i dd[4] = {z4, z4, z4, z4}, s2[4] = {z4, z4, z4, z4};
        const __m512i sc4 =
            kind == K_Q6 ? zi : k4_scales4(load_scales4(w + bb * (size_t)i, ws, nr, offsetof(kn_block_q4_k, scales)));
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (r >= nr) break;
            const uint8_t *blk = w + (size_t)r * ws + bb * (size_t)i;
            prefetch_ahead(blk, (uintptr_t)(w + (size_t)r * ws) + bb * (size_t)nb, 4 * ws - bb * (size_t)nb);
            dd[r] = unpack_row(kind, blk, sc4, r, &R);
            ia[r] = dot_k(kind, &R, &T);
            if (kind != K_Q6) s2[r] = _mm_madd_epi16(R.m, T.b); /* 4 lanes adding up to S2 */
        }
        const __m512i x1 = reduce4(ia[0], ia[1], ia[2], ia[3]); /* block r: 4 lanes adding up to S1 */
        __m512i q;
        if (kind == K_Q6) {
            q = _mm512_add_epi32(x1, _mm512_shuffle_epi32(x1, (_MM_PERM_ENUM)0xB1));
        } else {
            const __m512i x2 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(s2[1], s2[0])),
                                                  _mm256_set_m128i(s2[3], s2[2]), 1);
            q = red_c(x1, x2);
        }
        q = _mm512_add_epi32(q, _mm512_shuffle_epi32(q, (_MM_PERM_ENUM)0x4E));   /* block r: S1 S2 S1 S2 */
        const __m256 dm8 = _mm256_cvtph_ps(gather4(dd[0], dd[1], dd[2], dd[3])); /* d0 m0 d1 m1 .. */
        const __m512 dv = _mm512_permutexvar_ps(idx_dm, _mm512_castps256_ps512(dm8));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), _mm512_mul_ps(dv, _mm512_set1_ps(y->d)), acc);
    }
    float res[16];
    _mm512_storeu_ps(res, acc);
    for (int r = 0; r < nr; r++) out[r] = kind == K_Q6 ? res[4 * r] : res[4 * r] - res[4 * r + 1];
}

/*
 * Tiles of nr <= 4 rows and 2..4 tokens over nb super-blocks: lane 4t + r of the vectors holds
 * (row r, token t); sa and sm are two accumulators, each lane following the canonical order of
 * quant.h with its own values only. Missing rows and tokens compute zeros.
 */
KI void tile_4(int kind, int64_t nb, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt,
               float *out, size_t ldo) {
    const size_t bb = block_bytes(kind);
    const __m512i zi = _mm512_setzero_si512();
    const __m128i z4 = _mm_setzero_si128();
    const __m512i idx_d = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6);
    const __m512i idx_dmin = _mm512_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7, 1, 3, 5, 7, 1, 3, 5, 7);
    const __m512i idx_t = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i idx_m = _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12);
    __m512 sa = _mm512_setzero_ps(), sm = _mm512_setzero_ps();
    tok_k T[4];
    memset(T, 0, sizeof T); /* entries t >= nt are never read; this keeps -Wmaybe-uninitialized quiet */
    row_k R;
    for (int64_t i = 0; i < nb; i++) {
        __m128i dyt[4] = {z4, z4, z4, z4}, tb[4] = {z4, z4, z4, z4};
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            if (t >= nt) break;
            const kn_block_q8_k *y = (const kn_block_q8_k *)(x + (size_t)t * xs) + i;
            prep_tok(kind, y, &T[t]);
            if (kind != K_Q6) tb[t] = T[t].b;
            dyt[t] = _mm_loadu_si32(&y->d);
        }
        __m512i X[4] = {zi, zi, zi, zi};
        __m128i dd[4] = {z4, z4, z4, z4}, rm[4] = {z4, z4, z4, z4};
        const __m512i sc4 =
            kind == K_Q6 ? zi : k4_scales4(load_scales4(w + bb * (size_t)i, ws, nr, offsetof(kn_block_q4_k, scales)));
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (r >= nr) break;
            const uint8_t *blk = w + (size_t)r * ws + bb * (size_t)i;
            prefetch_ahead(blk, (uintptr_t)(w + (size_t)r * ws) + bb * (size_t)nb, 4 * ws - bb * (size_t)nb);
            dd[r] = unpack_row(kind, blk, sc4, r, &R);
            if (kind != K_Q6) rm[r] = R.m;
            __m512i v[4] = {zi, zi, zi, zi};
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                if (t >= nt) break;
                v[t] = dot_k(kind, &R, &T[t]);
            }
            X[r] = reduce4(v[0], v[1], v[2], v[3]); /* block t: 4 lanes adding up to S1 of (r, t) */
        }
        const __m512i s1 = transpose_add(X[0], X[1], X[2], X[3]);
        const __m512 dmz = _mm512_castps256_ps512(_mm256_cvtph_ps(gather4(dd[0], dd[1], dd[2], dd[3])));
        const __m512 dyv = _mm512_permutexvar_ps(
            idx_t, _mm512_castps128_ps512(_mm_castsi128_ps(gather4(dyt[0], dyt[1], dyt[2], dyt[3]))));
        sa = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(_mm512_permutexvar_ps(idx_d, dmz), dyv), sa);
        if (kind != K_Q6) {
            /* S2 of lane 4t + r = sum over pairs p of (m_2p, m_2p+1) . (B_2p, B_2p+1) of row r, token t */
            const __m512i rmz = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(rm[1], rm[0])),
                                                   _mm256_set_m128i(rm[3], rm[2]), 1);
            const __m512i tbz = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(tb[1], tb[0])),
                                                   _mm256_set_m128i(tb[3], tb[2]), 1);
            __m512i s2 =
                _mm512_madd_epi16(_mm512_permutexvar_epi32(idx_m, rmz), _mm512_shuffle_epi32(tbz, (_MM_PERM_ENUM)0x00));
            s2 = _mm512_dpwssd_epi32(s2, _mm512_permutexvar_epi32(_mm512_add_epi32(idx_m, _mm512_set1_epi32(1)), rmz),
                                     _mm512_shuffle_epi32(tbz, (_MM_PERM_ENUM)0x55));
            s2 = _mm512_dpwssd_epi32(s2, _mm512_permutexvar_epi32(_mm512_add_epi32(idx_m, _mm512_set1_epi32(2)), rmz),
                                     _mm512_shuffle_epi32(tbz, (_MM_PERM_ENUM)0xAA));
            s2 = _mm512_dpwssd_epi32(s2, _mm512_permutexvar_epi32(_mm512_add_epi32(idx_m, _mm512_set1_epi32(3)), rmz),
                                     _mm512_shuffle_epi32(tbz, (_MM_PERM_ENUM)0xFF));
            sm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s2), _mm512_mul_ps(_mm512_permutexvar_ps(idx_dmin, dmz), dyv), sm);
        }
    }
    float res[16];
    _mm512_storeu_ps(res, kind == K_Q6 ? sa : _mm512_sub_ps(sa, sm));
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) out[(size_t)t * ldo + (size_t)r] = res[4 * t + r];
}

/* Contract (kn_gemm_fn): Q4_K, Q5_K and Q6_K weight rows x Q8_K activation rows, n a multiple of 256
 * (a partial tail is ignored), 1 <= nr, nt <= 4; every output bit-identical to the type's scalar
 * kn_q*_k_vec_dot_q8_k. */
KN_K_GEMM(gemm_q4_k, K_Q4, tile_dec, tile_4)
KN_K_GEMM(gemm_q5_k, K_Q5, tile_dec, tile_4)
KN_K_GEMM(gemm_q6_k, K_Q6, tile_dec, tile_4)

/* ---- Q8_K quantizer ---- */

/* Contract (kn_from_float_fn): exactly kn_q8_k_from_float (the same bytes for every input, NaN and
 * infinities included): inputs sanitised (NaN -> 0, +-inf -> +-FLT_MAX), d = amax / 127 in fp32
 * (stepped down while 127 d overflows), quants x * (127 / amax) clamped to [-127, 127] and rounded to
 * nearest, ties away from zero (a NaN product, 0 * inf when 127 / amax overflows, gives -127 as
 * kn_round_clamp does), bsums the exact sums of 16 quants. */
static void quantize_q8_k(const float *src, void *dst, int64_t n) {
    kn_block_q8_k *b = dst;
    const __m512 big = _mm512_set1_ps(FLT_MAX), nbig = _mm512_set1_ps(-FLT_MAX);
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f), half = _mm512_set1_ps(0.5f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u), one = _mm512_castps_si512(_mm512_set1_ps(1.0f));
    for (int64_t i = 0; i < n / KN_QK_K; i++, src += KN_QK_K) {
        __m512 v[16];
        __m512 am = _mm512_setzero_ps();
        for (int g = 0; g < 16; g++) {
            __m512 x = _mm512_loadu_ps(src + 16 * g);
            x = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), x); /* NaN -> 0 */
            x = _mm512_min_ps(_mm512_max_ps(x, nbig), big);                   /* +-inf -> +-FLT_MAX */
            v[g] = x;
            am = _mm512_max_ps(am, _mm512_abs_ps(x));
        }
        const float amax = _mm512_reduce_max_ps(am);
        float d = amax / 127.0f;
        while (isinf(d * 127.0f)) d = nextafterf(d, 0.0f);
        b[i].d = d;
        const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        for (int g = 0; g < 16; g++) {
            /* max first: MAXPS returns its second operand when the first is NaN */
            const __m512 q = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v[g], id), lo), hi);
            /* round half away from zero, as roundf: truncate, then step away from zero where the
             * dropped fraction (exact: |q| < 2^23) is at least one half */
            __m512 t = _mm512_roundscale_ps(q, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(q, t)), half, _CMP_GE_OQ);
            t = _mm512_mask_add_ps(
                t, up, t, _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(q), sign), one)));
            const __m512i qi = _mm512_cvttps_epi32(t);
            _mm_storeu_si128((__m128i *)(b[i].qs + 16 * g), _mm512_cvtepi32_epi8(qi));
            b[i].bsums[g] = (int16_t)_mm512_reduce_add_epi32(qi);
        }
    }
}

#pragma GCC pop_options
#endif /* __x86_64__ */

/* Fills the K-format entries of k (called by kn_kernels_init_avx512 only on CPUs with AVX-512 F, BW,
 * VL and VNNI). */
void kn_avx512_init_kquants(kn_kernels *k) {
#if defined(__x86_64__)
    k->gemm[KN_Q4_K] = gemm_q4_k;
    k->gemm[KN_Q5_K] = gemm_q5_k;
    k->gemm[KN_Q6_K] = gemm_q6_k;
    k->quantize[KN_Q8_K] = quantize_q8_k;
#else
    (void)k;
#endif
}
