/*
 * hadamard.c - the randomized Hadamard rotation of KV head vectors (see hadamard.h).
 */
#include "tensor/hadamard.h"

#include <math.h>

int kn_hadamard_size(int hd) {
    int n = 1;
    while (hd > 0 && hd % (2 * n) == 0) n *= 2;
    return n;
}

static uint64_t mix(uint64_t z) { /* splitmix64's finalizer */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void kn_hadamard_signs(uint64_t seed, int32_t layer, int32_t head, int hd, float *signs) {
    const uint64_t base = mix(seed ^ mix((uint64_t)(uint32_t)layer << 32 | (uint32_t)head));
    for (int i = 0; i < hd; i++) signs[i] = (mix(base + (uint64_t)i) >> 63) ? -1.0f : 1.0f;
}

/* In-place unnormalized Walsh-Hadamard transform of x[n], n a power of two, times 1/sqrt(n). */
static void fwht(float *x, int n) {
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const float s = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++) x[i] *= s;
}

void kn_hadamard_fwd(float *x, const float *signs, int hd) {
    const int n = kn_hadamard_size(hd);
    for (int i = 0; i < hd; i++) x[i] *= signs[i];
    for (int b = 0; b < hd; b += n) fwht(x + b, n);
}

void kn_hadamard_inv(float *x, const float *signs, int hd) {
    const int n = kn_hadamard_size(hd);
    for (int b = 0; b < hd; b += n) fwht(x + b, n);
    for (int i = 0; i < hd; i++) x[i] *= signs[i];
}
