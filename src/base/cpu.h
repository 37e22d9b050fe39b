/*
 * cpu.h - what the operating system says about the instruction-set extensions of an ARM64 CPU, for
 * the kernel sets (tensor/kernels.c) to choose from. The x86 side needs no OS help (cpuid and xgetbv
 * are instructions, read in kernels.c); on ARM64 the feature registers are privileged, so the
 * question goes to the OS: getauxval(AT_HWCAP / AT_HWCAP2) on Linux, sysctlbyname("hw.optional.arm.
 * FEAT_*") on macOS. Everything platform-specific about it lives in cpu.c.
 */
#ifndef KN_CPU_H
#define KN_CPU_H

#include <stdbool.h>

typedef struct kn_arm_caps {
    bool neon;    /* Advanced SIMD (always present on ARM64) */
    bool dotprod; /* SDOT/UDOT: 4-way int8 dot products into int32 lanes (ARMv8.2 FEAT_DotProd) */
    bool i8mm;    /* SMMLA: 2x8 by 8x2 int8 matrix multiply into int32 (ARMv8.6 FEAT_I8MM) */
} kn_arm_caps;

/* The extensions of the running CPU (all false when not built for ARM64). Cheap enough to call once
 * at start-up; the caller caches the answer. */
void kn_arm_caps_get(kn_arm_caps *c);

#endif
