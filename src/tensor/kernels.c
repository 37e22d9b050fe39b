/*
 * kernels.c - CPU feature detection, the reference kernel set and the choice of the best set.
 */
#include "tensor/kernels.h"

#include "tensor/quant.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect(kn_cpu *c) {
    unsigned a, b, cx, d;
    if (__get_cpuid(0, &a, &b, &cx, &d)) c->amd = b == 0x68747541u && d == 0x69746e65u && cx == 0x444d4163u;
    if (!__get_cpuid(1, &a, &b, &cx, &d)) return;
    c->family = (int)((a >> 8) & 0xF) + ((a >> 8 & 0xF) == 0xF ? (int)((a >> 20) & 0xFF) : 0);
    bool osxsave = cx & (1u << 27);
    c->fma = cx & (1u << 12);
    c->f16c = cx & (1u << 29);
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool ymm_ok = (xcr0 & 0x6) == 0x6;   /* XMM and YMM state */
    bool zmm_ok = (xcr0 & 0xe6) == 0xe6; /* plus opmask and ZMM state */
    if (!ymm_ok) {
        c->fma = c->f16c = false;
        return;
    }
    if (!__get_cpuid_count(7, 0, &a, &b, &cx, &d)) return;
    c->avx2 = b & (1u << 5);
    if (zmm_ok) {
        c->avx512f = b & (1u << 16);
        c->avx512bw = b & (1u << 30);
        c->avx512vl = b & (1u << 31);
        c->avx512vnni = cx & (1u << 11);
    }
    unsigned a1, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
        c->avxvnni = a1 & (1u << 4);
        c->avx512bf16 = zmm_ok && (a1 & (1u << 5));
    }
}
#else
#include "base/cpu.h"

static void detect(kn_cpu *c) {
    kn_arm_caps a;
    kn_arm_caps_get(&a);
    c->neon = a.neon;
    c->dotprod = a.dotprod;
    c->i8mm = a.i8mm;
}
#endif

static kn_cpu g_cpu;
/* The sets this CPU can run (name NULL: not this CPU), weakest first, and the one AUTO returns. */
static kn_kernels g_ref, g_avx2, g_avx2vnni, g_avx512, g_neon;
static const kn_kernels *g_best;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT, g_once = PTHREAD_ONCE_INIT;

static void detect_cpu(void) { detect(&g_cpu); }

/* The reference GEMM: the scalar vec_dot of the type-traits table for each (row, token). */
#define REF_GEMM(NAME, TYPE)                                                                                           \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        const kn_vec_dot_fn dot = kn_type_traits_get(TYPE)->vec_dot;                                                   \
        for (int t = 0; t < nt; t++)                                                                                   \
            for (int r = 0; r < nr; r++)                                                                               \
                out[(size_t)t * ldo + (size_t)r] = dot(n, w + (size_t)r * ws, x + (size_t)t * xs);                     \
    }
REF_GEMM(gemm_ref_f32, KN_F32)
REF_GEMM(gemm_ref_f16, KN_F16)
REF_GEMM(gemm_ref_bf16, KN_BF16)
REF_GEMM(gemm_ref_q4_0, KN_Q4_0)
REF_GEMM(gemm_ref_q4_1, KN_Q4_1)
REF_GEMM(gemm_ref_q5_0, KN_Q5_0)
REF_GEMM(gemm_ref_q5_1, KN_Q5_1)
REF_GEMM(gemm_ref_q8_0, KN_Q8_0)
REF_GEMM(gemm_ref_q4_k, KN_Q4_K)
REF_GEMM(gemm_ref_q5_k, KN_Q5_K)
REF_GEMM(gemm_ref_q6_k, KN_Q6_K)
REF_GEMM(gemm_ref_q2_k, KN_Q2_K)
REF_GEMM(gemm_ref_q3_k, KN_Q3_K)
REF_GEMM(gemm_ref_iq4_nl, KN_IQ4_NL)
REF_GEMM(gemm_ref_iq4_xs, KN_IQ4_XS)
REF_GEMM(gemm_ref_mxfp4, KN_MXFP4)
REF_GEMM(gemm_ref_mlx8, KN_MLX8)
REF_GEMM(gemm_ref_mlx8_f32, KN_MLX8_F32)

static void init_ref(kn_kernels *k) {
    memset(k, 0, sizeof *k);
    k->name = "ref";
    k->attend_f16 = kn_attend_f16_ref;
    k->attend_f32 = kn_attend_f32_ref;
    k->glu = kn_glu_ref;
    k->sumexp = kn_sumexp_ref;
    k->logits_clean = kn_logits_clean_ref;
    k->argmax = kn_argmax_ref;
    k->above = kn_above_ref;
    k->tile_r = 4;
    k->tile_t = 4;
    k->gemm[KN_F32] = gemm_ref_f32;
    k->gemm[KN_F16] = gemm_ref_f16;
    k->gemm[KN_BF16] = gemm_ref_bf16;
    k->gemm[KN_Q4_0] = gemm_ref_q4_0;
    k->gemm[KN_Q4_1] = gemm_ref_q4_1;
    k->gemm[KN_Q5_0] = gemm_ref_q5_0;
    k->gemm[KN_Q5_1] = gemm_ref_q5_1;
    k->gemm[KN_Q8_0] = gemm_ref_q8_0;
    k->gemm[KN_Q4_K] = gemm_ref_q4_k;
    k->gemm[KN_Q5_K] = gemm_ref_q5_k;
    k->gemm[KN_Q6_K] = gemm_ref_q6_k;
    k->gemm[KN_Q2_K] = gemm_ref_q2_k;
    k->gemm[KN_Q3_K] = gemm_ref_q3_k;
    k->gemm[KN_IQ4_NL] = gemm_ref_iq4_nl;
    k->gemm[KN_IQ4_XS] = gemm_ref_iq4_xs;
    k->gemm[KN_MXFP4] = gemm_ref_mxfp4;
    k->gemm[KN_MLX8] = gemm_ref_mlx8;
    k->gemm[KN_MLX8_F32] = gemm_ref_mlx8_f32;
    const kn_dtype acts[] = {KN_Q8_0, KN_Q8_1, KN_Q8_K};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        k->quantize[acts[i]] = kn_type_traits_get(acts[i])->from_float;
}

static void init_all(void) {
    pthread_once(&g_cpu_once, detect_cpu); /* its own once: the set inits may ask for features */
    init_ref(&g_ref);
    g_best = &g_ref;
#if defined(__x86_64__)
    if (g_cpu.avx2 && g_cpu.fma && g_cpu.f16c) {
        g_avx2 = g_ref;
        kn_kernels_init_avx2_vnni(&g_avx2, false);
        kn_avx2_init_p16_lowbit(&g_avx2, false);
        g_best = &g_avx2;
        if (g_cpu.avxvnni) {
            g_avx2vnni = g_ref;
            kn_kernels_init_avx2_vnni(&g_avx2vnni, true);
            kn_avx2_init_p16_lowbit(&g_avx2vnni, true);
            g_best = &g_avx2vnni;
        }
        if (g_cpu.avx512f && g_cpu.avx512bw && g_cpu.avx512vl && g_cpu.avx512vnni) {
            g_avx512 = *g_best; /* the AVX-512 set starts from the best AVX2 one */
            kn_kernels_init_avx512(&g_avx512);
            kn_avx512_init_p16_lowbit(&g_avx512);
            g_best = &g_avx512;
        }
    }
#elif defined(__aarch64__)
    if (g_cpu.neon) {
        g_neon = g_ref;
        kn_kernels_init_neon(&g_neon);
        g_best = &g_neon;
    }
#endif
    const char *env = getenv("KILN_KERNELS");
    if (env && *env && strcmp(env, "auto") != 0) {
        const kn_kernels *k = strcmp(env, "ref") == 0        ? &g_ref
                              : strcmp(env, "avx2") == 0     ? &g_avx2
                              : strcmp(env, "avx2vnni") == 0 ? &g_avx2vnni
                              : strcmp(env, "avx512") == 0   ? &g_avx512
                                                             : NULL;
        if (k && k->name) g_best = k;
        else
            fprintf(stderr, "kiln: KILN_KERNELS=%s: not a kernel set this CPU runs (ref, avx2, avx2vnni, avx512)\n",
                    env);
    }
}

const kn_cpu *kn_cpu_features(void) {
    pthread_once(&g_cpu_once, detect_cpu);
    return &g_cpu;
}

const kn_kernels *kn_kernels_get(kn_kernel_choice choice) {
    pthread_once(&g_once, init_all);
    return choice == KN_KERNELS_REF ? &g_ref : g_best;
}

const kn_kernels *kn_kernels_named(const char *name) {
    pthread_once(&g_once, init_all);
    const kn_kernels *sets[] = {&g_ref, &g_avx2, &g_avx2vnni, &g_avx512, &g_neon};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        if (sets[i]->name && strcmp(sets[i]->name, name) == 0) return sets[i];
    return NULL;
}

kn_gemm_fn kn_kernels_gemm(const kn_kernels *k, kn_dtype t) {
    if ((unsigned)t < KN_DTYPE_COUNT && k->gemm[t]) return k->gemm[t];
    return kn_kernels_get(KN_KERNELS_REF)->gemm[t];
}

kn_from_float_fn kn_kernels_quantize(const kn_kernels *k, kn_dtype t) {
    if ((unsigned)t < KN_DTYPE_COUNT && k->quantize[t]) return k->quantize[t];
    return kn_type_traits_get(t)->from_float;
}
