/*
 * kernels_lowbit.h - the GEMM tile driver of Q2_K, Q3_K and IQ4_XS weights (super-blocks of 256 against
 * Q8_K activations), shared by the AVX2 and AVX-512 low-bit files. Each weight super-block is decoded
 * once for all tokens of the tile; the float steps are the reference's, in its order (quant.h), so
 * every set agrees with the reference bit for bit.
 *
 * Included by a SIMD set's file, inside its target region, after it defines: KI (always-inline), the
 * kinds K_Q2, K_Q3, K_IQ4XS, TILE_NT (kernels_avx2_lowbit.c), the decoded row type row_lb (with float d,
 * dmin), decode_row(kind, block, &row) and dot_row(kind, &row, q8k_block, &s1, &s2), where s1 is the
 * scaled quant sum and s2 (Q2_K) the mins' sum. Defines gemm_q2_k, gemm_q3_k and gemm_iq4_xs
 * (kn_gemm_fn).
 */
KI void gemm_lb(int kind, int nt, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs,
                float *out, size_t ldo) {
    const int64_t nb = n / KN_QK_K;
    const size_t bb = kind == K_Q2   ? sizeof(kn_block_q2_k)
                      : kind == K_Q3 ? sizeof(kn_block_q3_k)
                                     : sizeof(kn_block_iq4_xs);
    for (int r = 0; r < nr; r++) {
        float sa[4] = {0}, sm[4] = {0}; /* canonical order: quant.h */
        for (int64_t i = 0; i < nb; i++) {
            row_lb R;
            decode_row(kind, w + (size_t)r * ws + (size_t)i * bb, &R);
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const kn_block_q8_k *y = (const kn_block_q8_k *)(x + (size_t)t * xs) + i;
                int32_t s1, s2 = 0;
                dot_row(kind, &R, y, &s1, &s2);
                sa[t] = fmaf((float)s1, R.d * y->d, sa[t]);
                if (kind == K_Q2) sm[t] = fmaf((float)s2, R.dmin * y->d, sm[t]);
            }
        }
        for (int t = 0; t < nt; t++) out[(size_t)t * ldo + (size_t)r] = kind == K_Q2 ? sa[t] - sm[t] : sa[t];
    }
}

static void gemm_q2_k(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                      size_t ldo) {
    TILE_NT(gemm_lb, K_Q2, n, w, ws, nr, x, xs, out, ldo);
}

static void gemm_q3_k(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                      size_t ldo) {
    TILE_NT(gemm_lb, K_Q3, n, w, ws, nr, x, xs, out, ldo);
}

static void gemm_iq4_xs(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                        size_t ldo) {
    TILE_NT(gemm_lb, K_IQ4XS, n, w, ws, nr, x, xs, out, ldo);
}
