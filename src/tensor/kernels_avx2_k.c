/*
 * kernels_avx2_k.c - AVX2 (+FMA, F16C) kernels for the K weight formats (Q4_K, Q5_K, Q6_K) and their
 * activation quantizer (Q8_K), for x86-64 CPUs without AVX-512. Every output is bit-identical to the
 * scalar reference of quant_k.c (the source of truth), which fixes the order of every float operation
 * (the numerics contract at the top of quant.h); tests/unit/test_kernels_k.c checks it. Entries left
 * unset keep the reference kernel.
 *
 * GEMM tiles (up to 4 weight rows x 4 tokens), per 256-element super-block:
 *   1. each weight row is unpacked once for all tokens of the tile, one vector of 32 unsigned quant
 *      bytes (0..15, 0..31 or 0..63) at a time, vector v holding elements 32v .. 32v+31 in order (so
 *      the activations are used as stored), with its int16 sub-block scales; each vector is used by
 *      every token at once, so the working set stays in the 16 registers;
 *   2. for every (row, token): vpmaddubsw of quants x activations gives int16 sums of 2 products
 *      (exact: |sum| <= 2 * 63 * 128 < 2^15), vpmaddwd multiplies them by their sub-block scale into
 *      int32 (exact), and the products are added: 8 lanes adding up to S1 (quant.h). Q6_K's
 *      -32 * sum(sc * bsums) and Q4_K/Q5_K's S2 = sum(m * bsums) are vpmaddwd's of the Q8_K bsums;
 *   3. the 8-lane vectors of all pairs are reduced together (a transposing tree of vphaddd) into
 *      vectors with one lane per (row, token), exact integers;
 *   4. each lane then takes the reference's float steps with its own values only:
 *      sa = fma((float)S1, d * dy, sa), sm = fma((float)S2, dmin * dy, sm); out = sa - sm.
 * Outputs are therefore bit-identical to the reference whatever the tile shape (the tile contract of
 * kernels.h holds a fortiori). Decode (one token) streams the four weight rows front to back, four
 * rows in flight, with a software prefetch ahead (in each row, or through the next tile where rows
 * are short), no gathers.
 */
#include "tensor/kernels.h"
#include "tensor/quant.h"

#if defined(__x86_64__)
#include <float.h>
#include <math.h>
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#define KI static inline __attribute__((always_inline))

enum { K_Q4 = 0, K_Q5 = 1, K_Q6 = 2 };

/* Unpacks the 12 packed scale bytes of a Q4_K/Q5_K block (see kn_k_scale_min) into 16 bytes
 * sc[0..7], m[0..7]. Reads 16 bytes at `scales`: the caller guarantees 4 readable bytes after them
 * (in both block types the scales are followed by more of the block). */
KI __m128i k4_scales(const uint8_t *scales) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)scales);
    const __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(0x3F)); /* sc0..3 | m0..3 */
    const __m128i x2 = _mm_shuffle_epi32(raw, 0xAA);            /* bytes 8..11 everywhere */
    const __m128i t = _mm_and_si128(_mm_srlv_epi32(x2, _mm_setr_epi32(0, 4, 0, 0)), _mm_set1_epi8(0x0F));
    const __m128i u = _mm_and_si128(_mm_srli_epi32(raw, 2), _mm_set1_epi8(0x30)); /* top 2 bits -> bits 4,5 */
    return _mm_unpacklo_epi32(lo, _mm_or_si128(t, u));                            /* hi: sc4..7 | m4..7 */
}

/* One token's super-block: its quants are read as stored (vector v = qs[32v .. 32v+31]). */
typedef struct tok_k {
    const int8_t *qs;
    /* Q4_K/Q5_K: int32 lane j = bsums[2j] + bsums[2j+1], the sum of sub-block j;
     * Q6_K: int16 lane j = -bsums[j] */
    __m256i b;
} tok_k;

KI void prep_tok(int kind, const kn_block_q8_k *y, tok_k *T) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)y->bsums);
    T->qs = y->qs;
    T->b = kind == K_Q6 ? _mm256_sub_epi16(_mm256_setzero_si256(), bs) : _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
}

/* The quant vector v (elements 32v .. 32v+31, unsigned bytes) of a Q4_K/Q5_K block: nibble v & 1 of
 * z = qs[32(v/2) .. 32(v/2)+31]; for Q5_K plus bit v of qh[l] as bit 4 (16-bit shifts: the bits that
 * cross into the other byte are masked off). */
KI __m256i quants_k4(int kind, __m256i z, __m256i qh, int v) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i q = (v & 1) ? _mm256_and_si256(_mm256_srli_epi16(z, 4), m4) : _mm256_and_si256(z, m4);
    if (kind == K_Q5) {
        const __m256i hb = v <= 4 ? _mm256_slli_epi16(qh, 4 - v) : _mm256_srli_epi16(qh, v - 4); /* bit v -> bit 4 */
        q = _mm256_or_si256(q, _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
    }
    return q;
}

/* The quant vector v = 4h + k (elements 32v .. 32v+31 = half h, quarter k) of a Q6_K block: low bits
 * from nibble k / 2 of l (= ql[64h + 32(k & 1) ..]), high bits 2k, 2k+1 of qh[32h ..] moved to bits
 * 4, 5. */
KI __m256i quants_q6k(__m256i l, __m256i qh, int k) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i lo = (k >> 1) ? _mm256_and_si256(_mm256_srli_epi16(l, 4), m4) : _mm256_and_si256(l, m4);
    const __m256i hi = k == 0   ? _mm256_slli_epi16(qh, 4)
                       : k == 1 ? _mm256_slli_epi16(qh, 2)
                       : k == 2 ? qh
                                : _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(hi, m30));
}

/* acc[t] += quants v x token t's quants v, times the scale of each lane's sub-block (int16 lanes of
 * s), for t < nt: vpmaddubsw (exact int16 sums of 2 products, |sum| <= 2 * 63 * 128 < 2^15), then
 * vpmaddwd by the scale (exact int32). */
KI void dot_v(__m256i q, __m256i s, int v, const tok_k *T, int nt, __m256i acc[4]) {
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        if (t >= nt) break;
        const __m256i y = _mm256_loadu_si256((const __m256i *)(T[t].qs + 32 * v));
        acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), s));
    }
}

/*
 * One weight row's super-block (block blk) against nt <= 4 tokens: acc[t] = 8 int32 lanes adding up
 * to S1 of (row, token t) (quant.h): sum_j sc_j * dot_j, for Q6_K sum_j sc_j * (dot_j - 32 bsums_j).
 * The row is unpacked one 32-element vector at a time and used at once by every token (the working
 * set stays in registers). Q4_K/Q5_K: *mins = int32 lane j (low 16 bits): the min of sub-block j.
 * Returns the block's fp16 scales in int32 lane 0: d | dmin << 16 (Q4_K, Q5_K) or d (Q6_K).
 */
KI __m128i row_dots(int kind, const uint8_t *blk, const tok_k *T, int nt, __m256i acc[4], __m256i *mins) {
    for (int t = 0; t < 4; t++) acc[t] = _mm256_setzero_si256();
    if (kind == K_Q6) {
        const kn_block_q6_k *b = (const kn_block_q6_k *)blk;
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales)); /* int16 s0..15 */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i g = h ? _mm256_permute2x128_si256(sc, sc, 0x11) : _mm256_permute2x128_si256(sc, sc, 0x00);
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                /* sub-blocks 2v (bytes 0..15) and 2v+1 (bytes 16..31), v = 4h + k: entries 2k, 2k+1 of g */
                const short a = (short)(0x0100 * (4 * k + 1) + 4 * k), c = (short)(0x0100 * (4 * k + 3) + 4 * k + 2);
                const __m256i ctl = _mm256_setr_epi16(a, a, a, a, a, a, a, a, c, c, c, c, c, c, c, c);
                dot_v(quants_q6k(k & 1 ? l1 : l0, qh, k), _mm256_shuffle_epi8(g, ctl), 4 * h + k, T, nt, acc);
            }
        }
        const __m256i sc32 = _mm256_slli_epi16(sc, 5);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            if (t >= nt) break;
            acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(sc32, T[t].b)); /* -32 sum sc_j bsums_j */
        }
        uint16_t d;
        memcpy(&d, &b->d, sizeof d);
        return _mm_cvtsi32_si128(d);
    }
    const uint8_t *scales = kind == K_Q5 ? ((const kn_block_q5_k *)blk)->scales : ((const kn_block_q4_k *)blk)->scales;
    const uint8_t *qs = kind == K_Q5 ? ((const kn_block_q5_k *)blk)->qs : ((const kn_block_q4_k *)blk)->qs;
    const __m256i qh =
        kind == K_Q5 ? _mm256_loadu_si256((const __m256i *)((const kn_block_q5_k *)blk)->qh) : _mm256_setzero_si256();
    const __m128i scm = k4_scales(scales);
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm)); /* int16 sc0..7, twice */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m256i z = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
#pragma GCC unroll 2
        for (int hf = 0; hf < 2; hf++) {
            const int v = 2 * c + hf;
            const __m256i s = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0x0100 * (2 * v + 1) + 2 * v)));
            dot_v(quants_k4(kind, z, qh, v), s, v, T, nt, acc);
        }
    }
    *mins = _mm256_cvtepu8_epi32(_mm_srli_si128(scm, 8));
    int32_t u;
    memcpy(&u, blk, sizeof u);
    return _mm_cvtsi32_si128(u);
}

/* One int32 vector whose lane i is the sum of the 8 lanes of v[i] (exact integer adds). */
KI __m256i reduce8(const __m256i v[8]) {
    const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67); /* [v0..v3 low | v0..v3 high] */
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

KI size_t block_bytes(int kind) {
    return kind == K_Q4 ? sizeof(kn_block_q4_k) : kind == K_Q5 ? sizeof(kn_block_q5_k) : sizeof(kn_block_q6_k);
}

/* Decode's software prefetch. Four interleaved row streams get only about half the DRAM bandwidth of
 * one stream from the hardware prefetchers alone, so the decode tile prefetches what it reads next,
 * in one of two ways by the length of a row (measured on Zen 2 with bench/kernels at 2,048 to 8,192
 * columns, Q6_K):
 *   - long rows (a tile of 4 rows over PF_TILE_SHORT bytes): PREFETCH_AHEAD bytes ahead in each row,
 *     every line checked against the row's end (address wrap_at), past which it moves on by wrap_by
 *     bytes, to the row 4 rows down: the same place in the next tile when the caller walks the rows
 *     of a matrix in order, so a tile does not start cold;
 *   - short rows (a model's dim-wide matrices: 1,680 bytes a Q6_K row at 2,048 columns): the next
 *     tile front to back, 4 * bb bytes of it per block step of this tile (one tile ahead). Per-row
 *     prefetch at any distance read 20-50% slower here: each row's stream is too short for it.
 * Prefetches never fault, so a wrong guess (or running past the end of the weights) only costs
 * bandwidth. */
enum { PREFETCH_AHEAD = 1024, PF_TILE_SHORT = 20 * 1024 };
KI void prefetch_row(const uint8_t *blk, uintptr_t wrap_at, uintptr_t wrap_by) {
    for (uintptr_t l = 0; l < 192; l += 64) {              /* 3 lines cover any K block */
        uintptr_t a = (uintptr_t)blk + PREFETCH_AHEAD + l; /* an address, not a pointer past the object */
        if (a >= wrap_at) a += wrap_by;
        _mm_prefetch((const char *)a, _MM_HINT_T0);
    }
}

/* The lines of [a, a + n): the next tile's share of one row-step (see above). */
KI void prefetch_span(uintptr_t a, size_t n) {
    for (uintptr_t e = a + n; a < e; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T0);
}

/* Four int32 values (lane 0 of each argument) as one vector. */
KI __m128i gather4(__m128i a, __m128i b, __m128i c, __m128i d) {
    return _mm_unpacklo_epi64(_mm_unpacklo_epi32(a, b), _mm_unpacklo_epi32(c, d));
}

/*
 * Decode: nr <= 4 rows, one token. Per super-block one vector holds [S1 of rows 0..3, S2 of rows 0..3]
 * (Q6_K: S2 = 0) and the accumulator's lanes r and 4 + r are row r's sa and sm of the canonical order
 * (quant.h): sa = fma((float)S1, d * dy, sa); sm = fma((float)S2, dmin * dy, sm); out = sa - sm.
 * Missing rows compute zeros.
 */
KI void tile_dec(int kind, int64_t nb, const uint8_t *w, size_t ws, int nr, const uint8_t *x, float *out) {
    const size_t bb = block_bytes(kind);
    const __m256i zi = _mm256_setzero_si256();
    const __m128i z4 = _mm_setzero_si128();
    const __m256i idx_dm = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    const bool short_rows = 4 * ws <= PF_TILE_SHORT;
    __m256 acc = _mm256_setzero_ps();
    tok_k T;
    for (int64_t i = 0; i < nb; i++) {
        const kn_block_q8_k *y = (const kn_block_q8_k *)x + i;
        prep_tok(kind, y, &T);
        __m256i v[8] = {zi, zi, zi, zi, zi, zi, zi, zi}; /* S1 parts of rows 0..3, then S2 parts */
        __m128i dd[4] = {z4, z4, z4, z4};
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (r >= nr) break;
            const uint8_t *blk = w + (size_t)r * ws + bb * (size_t)i;
            if (short_rows) prefetch_span((uintptr_t)w + 4 * ws + bb * (size_t)(4 * i + r), bb);
            else prefetch_row(blk, (uintptr_t)(w + (size_t)r * ws) + bb * (size_t)nb, 4 * ws - bb * (size_t)nb);
            __m256i s1[4], mins = zi;
            dd[r] = row_dots(kind, blk, &T, 1, s1, &mins);
            v[r] = s1[0];
            if (kind != K_Q6) v[4 + r] = _mm256_madd_epi16(mins, T.b); /* m_j * B_j */
        }
        const __m256i q = reduce8(v);
        const __m256 dm = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(gather4(dd[0], dd[1], dd[2], dd[3])), idx_dm);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_mul_ps(dm, _mm256_set1_ps(y->d)), acc);
    }
    float res[8];
    _mm256_storeu_ps(res, acc);
    for (int r = 0; r < nr; r++) out[r] = kind == K_Q6 ? res[r] : res[r] - res[4 + r];
}

/*
 * Tiles of nr <= 4 rows and 2..4 tokens: lane 4t + r of a pair of vectors (tokens 0-1, then 2-3) holds
 * (row r, token t); sa and sm accumulators per pair, each lane following the canonical order of
 * quant.h with its own values only. Missing rows and tokens compute zeros.
 */
KI void tile_4(int kind, int64_t nb, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt,
               float *out, size_t ldo) {
    const size_t bb = block_bytes(kind);
    const __m256i zi = _mm256_setzero_si256();
    const __m128i z4 = _mm_setzero_si128();
    __m256 sa[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, sm[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    tok_k T[4];
    memset(T, 0, sizeof T); /* entries t >= nt are never read; this keeps -Wmaybe-uninitialized quiet */
    for (int64_t i = 0; i < nb; i++) {
        float dy[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            if (t >= nt) break;
            const kn_block_q8_k *y = (const kn_block_q8_k *)(x + (size_t)t * xs) + i;
            prep_tok(kind, y, &T[t]);
            dy[t] = y->d;
        }
        __m256i v1[16], v2[16]; /* index 4t + r: S1 parts, S2 parts (Q4_K/Q5_K) */
        for (int k = 0; k < 16; k++) v1[k] = v2[k] = zi;
        __m128i dd[4] = {z4, z4, z4, z4};
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (r >= nr) break;
            const uint8_t *blk = w + (size_t)r * ws + bb * (size_t)i;
            prefetch_row(blk, (uintptr_t)(w + (size_t)r * ws) + bb * (size_t)nb, 4 * ws - bb * (size_t)nb);
            __m256i s1[4], mins = zi;
            dd[r] = row_dots(kind, blk, T, nt, s1, &mins);
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                if (t >= nt) break;
                v1[4 * t + r] = s1[t];
                if (kind != K_Q6) v2[4 * t + r] = _mm256_madd_epi16(mins, T[t].b);
            }
        }
        /* per-lane scales: d_r (dmin_r) and dy_t of lane 4t + r, for tokens 0-1 and 2-3 */
        const __m256 dm = _mm256_cvtph_ps(gather4(dd[0], dd[1], dd[2], dd[3])); /* d0 m0 d1 m1 .. */
        const __m256 dv = _mm256_permutevar8x32_ps(dm, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
        const __m256 mv = _mm256_permutevar8x32_ps(dm, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7));
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            if (2 * h >= nt) break;
            const __m256 dyv = _mm256_setr_m128(_mm_set1_ps(dy[2 * h]), _mm_set1_ps(dy[2 * h + 1]));
            sa[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(v1 + 8 * h)), _mm256_mul_ps(dv, dyv), sa[h]);
            if (kind != K_Q6)
                sm[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(v2 + 8 * h)), _mm256_mul_ps(mv, dyv), sm[h]);
        }
    }
    float res[16];
    _mm256_storeu_ps(res, kind == K_Q6 ? sa[0] : _mm256_sub_ps(sa[0], sm[0]));
    _mm256_storeu_ps(res + 8, kind == K_Q6 ? sa[1] : _mm256_sub_ps(sa[1], sm[1]));
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
    const __m256 big = _mm256_set1_ps(FLT_MAX), nbig = _mm256_set1_ps(-FLT_MAX);
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f), half = _mm256_set1_ps(0.5f);
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / KN_QK_K; i++, src += KN_QK_K) {
        __m256 v[32];
        __m256 am = _mm256_setzero_ps();
        for (int g = 0; g < 32; g++) {
            __m256 x = _mm256_loadu_ps(src + 8 * g);
            x = _mm256_and_ps(x, _mm256_cmp_ps(x, x, _CMP_ORD_Q)); /* NaN -> 0 */
            x = _mm256_min_ps(_mm256_max_ps(x, nbig), big);        /* +-inf -> +-FLT_MAX */
            v[g] = x;
            am = _mm256_max_ps(am, _mm256_andnot_ps(sign, x));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        float d = amax / 127.0f;
        while (isinf(d * 127.0f)) d = nextafterf(d, 0.0f);
        b[i].d = d;
        const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        for (int g = 0; g < 16; g++) { /* 16 quants: two vectors of 8 */
            __m256i qi[2];
            for (int k = 0; k < 2; k++) {
                /* max first: MAXPS returns its second operand when the first is NaN */
                const __m256 q = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[2 * g + k], id), lo), hi);
                /* round half away from zero, as roundf: truncate, then step away from zero where the
                 * dropped fraction (exact: |q| < 2^23) is at least one half */
                __m256 t = _mm256_round_ps(q, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
                const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(q, t)), half, _CMP_GE_OQ);
                t = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(_mm256_and_ps(q, sign), one)));
                qi[k] = _mm256_cvttps_epi32(t);
            }
            /* int32 -> int16 (in order) -> int8; values are within -127..127, packing is exact */
            const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(qi[0], qi[1]), 0xD8);
            const __m128i q8 = _mm_packs_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
            _mm_storeu_si128((__m128i *)(b[i].qs + 16 * g), q8);
            __m128i s = _mm_add_epi32(_mm256_castsi256_si128(qi[0]), _mm256_extracti128_si256(qi[0], 1));
            s = _mm_add_epi32(s, _mm_add_epi32(_mm256_castsi256_si128(qi[1]), _mm256_extracti128_si256(qi[1], 1)));
            s = _mm_hadd_epi32(s, s);
            s = _mm_hadd_epi32(s, s);
            b[i].bsums[g] = (int16_t)_mm_cvtsi128_si32(s);
        }
    }
}

#pragma GCC pop_options
#endif /* __x86_64__ */

/* Fills the K-format entries of k (called by kn_kernels_init_avx2 only on CPUs with AVX2, FMA and
 * F16C; tests call it the same way). */
void kn_avx2_init_kquants(kn_kernels *k) {
#if defined(__x86_64__)
    k->gemm[KN_Q4_K] = gemm_q4_k;
    k->gemm[KN_Q5_K] = gemm_q5_k;
    k->gemm[KN_Q6_K] = gemm_q6_k;
    k->quantize[KN_Q8_K] = quantize_q8_k;
#else
    (void)k;
#endif
}
