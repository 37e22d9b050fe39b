/*
 * cpu.c - ARM64 instruction-set extensions as the operating system reports them (see cpu.h).
 *
 * Linux: the HWCAP bits of the auxiliary vector (the values of <asm/hwcap.h>, spelled out here so
 * that an older C library's headers still build). macOS: the hw.optional.arm.FEAT_* sysctl keys
 * (written to the documented names; not built or run on a Mac yet). Other systems: NEON only.
 */
#include "base/cpu.h"

#include <string.h>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>

#define KN_HWCAP_ASIMD   (1ul << 1)
#define KN_HWCAP_ASIMDDP (1ul << 20)
#define KN_HWCAP2_I8MM   (1ul << 13)

void kn_arm_caps_get(kn_arm_caps *c) {
    memset(c, 0, sizeof *c);
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    c->neon = hw & KN_HWCAP_ASIMD;
    c->dotprod = c->neon && (hw & KN_HWCAP_ASIMDDP);
    c->i8mm = c->neon && (hw2 & KN_HWCAP2_I8MM);
}
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>

static bool sysctl_flag(const char *name) {
    int v = 0;
    size_t len = sizeof v;
    return sysctlbyname(name, &v, &len, NULL, 0) == 0 && v != 0;
}

void kn_arm_caps_get(kn_arm_caps *c) {
    memset(c, 0, sizeof *c);
    c->neon = true;
    c->dotprod = sysctl_flag("hw.optional.arm.FEAT_DotProd");
    c->i8mm = sysctl_flag("hw.optional.arm.FEAT_I8MM");
}
#else
void kn_arm_caps_get(kn_arm_caps *c) {
    memset(c, 0, sizeof *c);
#if defined(__aarch64__)
    c->neon = true;
#endif
}
#endif
