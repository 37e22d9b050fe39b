/*
 * arch.c - the table of model families kiln runs (see arch.h): one line per family, whose row is
 * defined in the family's own file.
 */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

/* Every family kiln runs, in the order error messages name them. */
static const kn_arch_def *const arches[] = {&kn_arch_llama,  &kn_arch_qwen2, &kn_arch_qwen3,     &kn_arch_gemma2,
                                            &kn_arch_gemma3, &kn_arch_phi3,  &kn_arch_smollm3,   &kn_arch_qwen3moe,
                                            &kn_arch_gptoss, &kn_arch_bert,  &kn_arch_nomic_bert};

const kn_arch_def *kn_arch_find(const char *name, size_t len) {
    if (!name) return NULL;
    for (size_t i = 0; i < KN_ARRAY_LEN(arches); i++)
        if (strlen(arches[i]->name) == len && memcmp(arches[i]->name, name, len) == 0) return arches[i];
    return NULL;
}

void kn_arch_names(char *buf, size_t cap) {
    if (!cap) return;
    size_t used = 0;
    buf[0] = 0;
    const size_t n = KN_ARRAY_LEN(arches);
    for (size_t i = 0; i < n && used < cap; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? " and " : ", ";
        const int w = snprintf(buf + used, cap - used, "%s%s", sep, arches[i]->name);
        if (w < 0) break;
        used += (size_t)w;
    }
}
