/*
 * arch.c - the table of model families kiln runs (see arch.h).
 */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

static const kn_arch_def arches[] = {
    {.name = "llama", .arch = KN_ARCH_LLAMA, .rope_style = KN_ROPE_NORM, .norm_eps = 1e-5f, .rope_base = 10000.0f},
    {.name = "qwen2",
     .arch = KN_ARCH_QWEN2,
     .rope_style = KN_ROPE_NEOX,
     .qkv_bias = true,
     .norm_eps = 1e-6f,
     .rope_base = 1000000.0f},
    {.name = "qwen3",
     .arch = KN_ARCH_QWEN3,
     .rope_style = KN_ROPE_NEOX,
     .qk_norm = true,
     .norm_eps = 1e-6f,
     .rope_base = 1000000.0f},
};

const kn_arch_def *kn_arch_find(const char *name, size_t len) {
    if (!name) return NULL;
    for (size_t i = 0; i < KN_ARRAY_LEN(arches); i++)
        if (strlen(arches[i].name) == len && memcmp(arches[i].name, name, len) == 0) return &arches[i];
    return NULL;
}

void kn_arch_names(char *buf, size_t cap) {
    if (!cap) return;
    size_t used = 0;
    buf[0] = 0;
    const size_t n = KN_ARRAY_LEN(arches);
    for (size_t i = 0; i < n && used < cap; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? " and " : ", ";
        const int w = snprintf(buf + used, cap - used, "%s%s", sep, arches[i].name);
        if (w < 0) break;
        used += (size_t)w;
    }
}
