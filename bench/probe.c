/*
 * probe.c - measures this machine's ceilings for kiln's benchmarks: DRAM read bandwidth on 1 and
 * 2 threads (a buffer far larger than the caches), and the peak int8 dot-product and fp32 FMA rates
 * of one core for each kernel level the CPU has: AVX-512 (512-bit vpdpbusd / vfmadd), AVX-VNNI
 * (256-bit vpdpbusd) and plain AVX2 (vpmaddubsw + vpaddw, the step of the AVX2 kernels: 32
 * multiply-adds per pair; 256-bit vfmadd). A level the CPU lacks reports 0. Prints one JSON object;
 * int8_gops_1core / fp32_gflops_1core are the best level's.
 *
 * Each figure is the median of several runs; bandwidth uses 512-bit (or 256-bit) loads summed into
 * independent registers so the loop is bound by memory, not by the adds.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

__attribute__((target("avx2"))) static uint64_t read_range(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(s, 0) ^ (uint64_t)_mm256_extract_epi64(s, 3);
}

/* GB/s reading `size` bytes with `threads` threads, median of `reps`. */
static double bandwidth(const uint8_t *buf, size_t size, int threads, int reps) {
    double r[16];
    volatile uint64_t sink = 0;
    for (int k = 0; k < reps; k++) {
        double t0 = now_s();
        uint64_t acc = 0;
#pragma omp parallel num_threads(threads) reduction(^ : acc)
        {
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            size_t chunk = size / (size_t)nt / 128 * 128;
            acc ^= read_range(buf + (size_t)t * chunk, chunk);
        }
        r[k] = (double)size / (now_s() - t0) / 1e9;
        sink ^= acc;
    }
    (void)sink;
    return median(r, reps);
}

/* int8 dot-product ops (2 per multiply-add) per second on one core with vpdpbusd on 512 bits. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double int8_peak(void) {
    double r[5];
    const long iters = 20000000;
    for (int k = 0; k < 5; k++) {
        __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
        __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0,
                c9 = c0, c10 = c0, c11 = c0;
        double t0 = now_s();
        for (long i = 0; i < iters; i++) {
            c0 = _mm512_dpbusd_epi32(c0, a, b);
            c1 = _mm512_dpbusd_epi32(c1, a, b);
            c2 = _mm512_dpbusd_epi32(c2, a, b);
            c3 = _mm512_dpbusd_epi32(c3, a, b);
            c4 = _mm512_dpbusd_epi32(c4, a, b);
            c5 = _mm512_dpbusd_epi32(c5, a, b);
            c6 = _mm512_dpbusd_epi32(c6, a, b);
            c7 = _mm512_dpbusd_epi32(c7, a, b);
            c8 = _mm512_dpbusd_epi32(c8, a, b);
            c9 = _mm512_dpbusd_epi32(c9, a, b);
            c10 = _mm512_dpbusd_epi32(c10, a, b);
            c11 = _mm512_dpbusd_epi32(c11, a, b);
            /* every chain through the barrier: identical chains would otherwise be merged into one */
            __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5));
            __asm__ volatile("" : "+v"(c6), "+v"(c7), "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));
        }
        double dt = now_s() - t0;
        __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                                     _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7)));
        s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)));
        volatile int sink = _mm512_reduce_add_epi32(s);
        (void)sink;
        r[k] = (double)iters * 12 * 64 * 2 / dt;
    }
    return median(r, 5);
}

/* fp32 FLOP/s (2 per FMA) on one core with 512-bit FMAs. */
__attribute__((target("avx512f"))) static double fp32_peak(void) {
    double r[5];
    const long iters = 20000000;
    for (int k = 0; k < 5; k++) {
        __m512 a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
        __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0,
               c9 = c0, c10 = c0, c11 = c0;
        double t0 = now_s();
        for (long i = 0; i < iters; i++) {
            c0 = _mm512_fmadd_ps(a, b, c0);
            c1 = _mm512_fmadd_ps(a, b, c1);
            c2 = _mm512_fmadd_ps(a, b, c2);
            c3 = _mm512_fmadd_ps(a, b, c3);
            c4 = _mm512_fmadd_ps(a, b, c4);
            c5 = _mm512_fmadd_ps(a, b, c5);
            c6 = _mm512_fmadd_ps(a, b, c6);
            c7 = _mm512_fmadd_ps(a, b, c7);
            c8 = _mm512_fmadd_ps(a, b, c8);
            c9 = _mm512_fmadd_ps(a, b, c9);
            c10 = _mm512_fmadd_ps(a, b, c10);
            c11 = _mm512_fmadd_ps(a, b, c11);
            /* every chain through the barrier: identical chains would otherwise be merged into one */
            __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5));
            __asm__ volatile("" : "+v"(c6), "+v"(c7), "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));
        }
        double dt = now_s() - t0;
        __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                                 _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
        s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
        volatile float sink = _mm512_reduce_add_ps(s);
        (void)sink;
        r[k] = (double)iters * 12 * 16 * 2 / dt;
    }
    return median(r, 5);
}

/* Peak of one core for the instruction step STEP(c) on 12 independent 256-bit chains: OPS operations
 * per step. */
#define PEAK256(NAME, TARGET, TYPE, INIT, STEP, OPS)                                                                   \
    __attribute__((target(TARGET))) static double NAME(void) {                                                         \
        const __m256i a8 = _mm256_set1_epi8(3), b8 = _mm256_set1_epi8(5); /* small values */                           \
        const __m256 af = _mm256_set1_ps(1.0000001f), bf = _mm256_set1_ps(0.9999999f);                                 \
        (void)a8, (void)b8, (void)af, (void)bf;                                                                        \
        double r[5];                                                                                                   \
        const long iters = 20000000;                                                                                   \
        for (int k = 0; k < 5; k++) {                                                                                  \
            TYPE c[12];                                                                                                \
            for (int i = 0; i < 12; i++) c[i] = INIT;                                                                  \
            TYPE c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3], c4 = c[4], c5 = c[5], c6 = c[6], c7 = c[7], c8 = c[8],    \
                 c9 = c[9], c10 = c[10], c11 = c[11];                                                                  \
            double t0 = now_s();                                                                                       \
            for (long i = 0; i < iters; i++) {                                                                         \
                STEP(c0);                                                                                              \
                STEP(c1);                                                                                              \
                STEP(c2);                                                                                              \
                STEP(c3);                                                                                              \
                STEP(c4);                                                                                              \
                STEP(c5);                                                                                              \
                STEP(c6);                                                                                              \
                STEP(c7);                                                                                              \
                STEP(c8);                                                                                              \
                STEP(c9);                                                                                              \
                STEP(c10);                                                                                             \
                STEP(c11);                                                                                             \
                __asm__ volatile("" : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5));                     \
                __asm__ volatile("" : "+x"(c6), "+x"(c7), "+x"(c8), "+x"(c9), "+x"(c10), "+x"(c11));                   \
            }                                                                                                          \
            double dt = now_s() - t0;                                                                                  \
            c[0] = c0, c[1] = c1, c[2] = c2, c[3] = c3, c[4] = c4, c[5] = c5, c[6] = c6, c[7] = c7, c[8] = c8,         \
            c[9] = c9, c[10] = c10, c[11] = c11;                                                                       \
            volatile char sink = 0;                                                                                    \
            for (int i = 0; i < 12; i++) sink ^= ((volatile char *)&c[i])[0];                                          \
            (void)sink;                                                                                                \
            r[k] = (double)iters * 12 * (OPS) / dt;                                                                    \
        }                                                                                                              \
        return median(r, 5);                                                                                           \
    }

/* The product takes the chain's own value: maddubs(a8, b8) of two constants would be computed once and
 * hoisted out of the loop, leaving only the vpaddw (this probe read 555 GOPS on a Zen 2 core that way,
 * 3x its real vpmaddubsw rate). */
#define AVX2_I8(c)  c = _mm256_add_epi16(c, _mm256_maddubs_epi16(a8, c))
#define VNNI_I8(c)  c = _mm256_dpbusd_avx_epi32(c, a8, b8)
#define AVX2_F32(c) c = _mm256_fmadd_ps(af, bf, c)
PEAK256(int8_peak_avx2, "avx2", __m256i, _mm256_setzero_si256(), AVX2_I8, 32 * 2)
PEAK256(int8_peak_avxvnni, "avx2,avxvnni", __m256i, _mm256_setzero_si256(), VNNI_I8, 32 * 2)
PEAK256(fp32_peak_avx2, "avx2,fma", __m256, _mm256_setzero_ps(), AVX2_F32, 8 * 2)

int main(void) {
    const size_t size = (size_t)1 << 30;
    uint8_t *buf = aligned_alloc(64, size);
    if (!buf) {
        fprintf(stderr, "probe: cannot allocate 1 GiB\n");
        return 1;
    }
    memset(buf, 1, size);
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int vnni = avx2 && __builtin_cpu_supports("avxvnni");
    double bw1 = bandwidth(buf, size, 1, 7), bw2 = bandwidth(buf, size, 2, 7);
    double i8 = avx512 ? int8_peak() : 0.0, f32 = avx512 ? fp32_peak() : 0.0;
    double i8a = avx2 ? int8_peak_avx2() : 0.0, i8v = vnni ? int8_peak_avxvnni() : 0.0;
    double f32a = avx2 ? fp32_peak_avx2() : 0.0;
    double i8best = i8 > 0 ? i8 : i8v > 0 ? i8v : i8a, f32best = f32 > 0 ? f32 : f32a;
    printf("{\"read_gbs_1t\": %.1f, \"read_gbs_2t\": %.1f, \"int8_gops_1core\": %.0f, \"fp32_gflops_1core\": %.0f, "
           "\"int8_avx512_gops_1core\": %.0f, \"int8_avxvnni_gops_1core\": %.0f, \"int8_avx2_gops_1core\": %.0f, "
           "\"fp32_avx512_gflops_1core\": %.0f, \"fp32_avx2_gflops_1core\": %.0f}\n",
           bw1, bw2, i8best / 1e9, f32best / 1e9, i8 / 1e9, i8v / 1e9, i8a / 1e9, f32 / 1e9, f32a / 1e9);
    free(buf);
    return 0;
}
