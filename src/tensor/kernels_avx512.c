/*
 * kernels_avx512.c - assembles the AVX-512 kernel set (F, BW, VL, VNNI; BF16 where present) from its
 * parts: the legacy and float formats (kernels_avx512_legacy.c) and the K formats
 * (kernels_avx512_k.c), the panel kernels of repacked Q4_0 / Q8_0 matrices (kernels_avx512_p16.c) and
 * attention (kernels_avx512_attn.c).
 * Entries a part leaves unset keep the AVX2 kernel.
 */
#include "tensor/kernels.h"

void kn_kernels_init_avx512(kn_kernels *k) {
    k->name = "avx512";
    k->glu = kn_glu_avx512;                   /* act.c */
    k->sumexp = kn_sumexp_avx512;             /* sumexp.c */
    k->logits_clean = kn_logits_clean_avx512; /* logit_scan.c */
    k->argmax = kn_argmax_avx512;
    k->above = kn_above_avx512;
    kn_avx512_init_legacy(k);
    kn_avx512_init_kquants(k);
    kn_avx512_init_lowbit(k);
    kn_avx512_init_p16(k);
    kn_avx512_init_attn(k);
}
