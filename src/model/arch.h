/*
 * arch.h - the model families kiln runs, as rows of one table: the general.architecture name, the
 * structural flags the forward pass reads (RoPE pairing, QKV bias, per-head q/k norm) and the
 * hyperparameter defaults of the family for keys a file may leave out. The loader (model.c) and the
 * header-only reader (info.c, "runnable") both consult this table, so adding a family that fits the
 * shared decoder block is one row here; the graph code never tests a family's name.
 */
#ifndef KN_ARCH_H
#define KN_ARCH_H

#include "base/base.h"

typedef enum kn_arch { KN_ARCH_LLAMA, KN_ARCH_QWEN2, KN_ARCH_QWEN3 } kn_arch;

/* How RoPE pairs dimensions: NORM rotates (x[2i], x[2i+1]); NEOX rotates (x[i], x[i + n_rot/2]). */
typedef enum kn_rope_style { KN_ROPE_NORM, KN_ROPE_NEOX } kn_rope_style;

typedef struct kn_arch_def {
    const char *name; /* general.architecture */
    kn_arch arch;
    kn_rope_style rope_style;
    bool qkv_bias;   /* attn_{q,k,v}.bias tensors */
    bool qk_norm;    /* attn_{q,k}_norm.weight: per-head RMSNorm of q and k */
    float norm_eps;  /* when {arch}.attention.layer_norm_rms_epsilon is absent */
    float rope_base; /* when {arch}.rope.freq_base is absent */
} kn_arch_def;

/* The row for a general.architecture value of len bytes, or NULL when kiln does not run it. */
const kn_arch_def *kn_arch_find(const char *name, size_t len);

/* Writes the names kiln runs as an English list ("llama, qwen2 and qwen3") into buf[cap],
 * NUL-terminated (truncated when cap is too small), for error messages. */
void kn_arch_names(char *buf, size_t cap);

#endif
