/*
 * arch.h - the model families kiln runs, as rows of one table. A row names a general.architecture
 * value and holds what differs between families: the hyperparameter defaults and structural flags,
 * a hook that reads the family's own metadata keys, the tensor map (which GGUF tensors a layer has
 * and where they go in kn_layer) and the block function the forward pass runs per layer.
 *
 * Each family lives in one file under src/model/ (llama.c: llama, qwen2, qwen3, smollm3; gemma.c: gemma2,
 * gemma3; phi3.c: phi3; qwen3moe.c: qwen3moe; gptoss.c: gpt-oss; bert.c: bert, nomic-bert) that defines its
 * rows; arch.c lists them. Adding a family is one new file plus one line in that list. The shared
 * pieces of a decoder block (grouped-query attention with RoPE and sliding windows, norms, the FFN
 * of a layer, dense or otherwise) live in model/block.h, so a family composes them rather than
 * copying them. The loader (model.c) and the header-only reader (info.c, "runnable") both consult
 * the table; the graph code never tests a family's name.
 */
#ifndef KN_ARCH_H
#define KN_ARCH_H

#include "base/base.h"

/* How RoPE pairs dimensions: NORM rotates (x[2i], x[2i+1]); NEOX rotates (x[i], x[i + n_rot/2]). */
typedef enum kn_rope_style { KN_ROPE_NORM, KN_ROPE_NEOX } kn_rope_style;

struct kiln_model;
struct kn_loader;
struct kn_scratch;
struct kn_batch_row;

typedef struct kn_arch_def {
    const char *name; /* general.architecture */
    kn_rope_style rope_style;
    bool qkv_bias;   /* attn_{q,k,v}.bias tensors (llama family: qwen2) */
    bool qk_norm;    /* attn_{q,k}_norm.weight: per-head RMSNorm of q and k (qwen3, gemma3) */
    float norm_eps;  /* when {arch}.attention.layer_norm_rms_epsilon is absent */
    float rope_base; /* when {arch}.rope.freq_base is absent */
    /* The family's own metadata, after the common keys are in m->hp (model.c read_hparams): may
     * set hp fields and fail with a format error naming the key. NULL: nothing more. */
    kiln_status (*hparams)(struct kiln_model *m);
    /* The tensors of layer l (and, for l == -1, the family's model-wide tensors beyond token_embd,
     * output_norm, output and rope_freqs), loaded with model/load.h into m->layers[l]. Also sets the
     * layer's attention configuration (kn_layer.attn) and FFN kind. Called twice per load (see
     * load.h), so it must do the same thing both times. */
    kiln_status (*tensors)(struct kn_loader *L, int l);
    /* One decoder block over the N stacked tokens in s->x (forward.h), updating s->x in place. */
    void (*block)(const struct kiln_model *m, struct kn_scratch *s, struct kn_batch_row *rows, int l, int64_t N);
    /* The input embeddings beyond the token's row of token_embd: called on the N stacked tokens in
     * s->x after the lookup (encoders: token type and position embeddings, then a LayerNorm). NULL:
     * none. */
    void (*embed_input)(const struct kiln_model *m, struct kn_scratch *s, int64_t N);
} kn_arch_def;

/* The row for a general.architecture value of len bytes, or NULL when kiln does not run it. */
const kn_arch_def *kn_arch_find(const char *name, size_t len);

/* Writes the names kiln runs as an English list ("llama, qwen2 and qwen3") into buf[cap],
 * NUL-terminated (truncated when cap is too small), for error messages. */
void kn_arch_names(char *buf, size_t cap);

/* The rows, each defined in its family's file. */
extern const kn_arch_def kn_arch_llama, kn_arch_qwen2, kn_arch_qwen3, kn_arch_smollm3; /* llama.c */
extern const kn_arch_def kn_arch_gemma2, kn_arch_gemma3;                               /* gemma.c */
extern const kn_arch_def kn_arch_phi3;                                                 /* phi3.c */
extern const kn_arch_def kn_arch_qwen3moe;                                             /* qwen3moe.c */
extern const kn_arch_def kn_arch_gptoss;                                               /* gptoss.c */
extern const kn_arch_def kn_arch_bert, kn_arch_nomic_bert;                             /* bert.c */

/* The Llama family's tensor hook (llama.c): attention with the row's optional biases and q/k norms,
 * then a dense FFN, or a mixture of experts when m->hp.n_expert > 0 (also qwen3moe's). */
kiln_status kn_llama_tensors(struct kn_loader *L, int l);

#endif
