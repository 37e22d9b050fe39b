/*
 * model.h - the loaded model: hyperparameters, weight views and tokenizer behind kiln_model.
 *
 * One struct describes every family kiln runs (the rows of model/arch.h): decoder blocks of
 * grouped-query attention and a feed-forward network, whose variations are data: optional tensors
 * (biases, q/k norms, post-norms), a per-layer attention configuration (RoPE, sliding window, score
 * scale) and a per-layer FFN kind. Weights are views: matrices keep their file type (quantized or
 * float) and are read by the kernels in place; vectors (norms, biases, RoPE factors) are converted to
 * F32 at load.
 */
#ifndef KN_MODEL_H
#define KN_MODEL_H

#include "base/base.h"
#include "model/arch.h"
#include "model/gguf.h"
#include "tensor/dtype.h"
#include "tensor/kernels.h"
#include "text/tokenizer.h"

#include <stdatomic.h>

/* How an embedding model pools the states of an input's tokens into one vector, numbered as GGUF's
 * {arch}.pooling_type: MEAN (the average), CLS (the first token's), LAST (the last token's; decoder
 * embedders such as Qwen3-Embedding), RANK (a reranker's score; kiln does not run it). */
typedef enum kn_pooling {
    KN_POOL_NONE = 0,
    KN_POOL_MEAN = 1,
    KN_POOL_CLS = 2,
    KN_POOL_LAST = 3,
    KN_POOL_RANK = 4
} kn_pooling;

typedef struct kn_hparams {
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd; /* model width (dim) */
    int32_t n_layer;
    int32_t n_head;    /* query heads */
    int32_t n_head_kv; /* key/value heads (GQA: n_head % n_head_kv == 0) */
    int32_t head_dim;  /* per-head width of q, k and v */
    int32_t n_ff;      /* FFN hidden width */
    int32_t n_rot;     /* rotated dims per head (<= head_dim, even) */
    float norm_eps;
    float rope_base;
    float rope_scale;        /* linear position scale (1 = none) */
    float rope_mscale;       /* rope magnitude scale ({arch}.rope.scaling.attn_factor; YaRN adds its own) */
    float yarn_ext;          /* YaRN extrapolation mix: 1 with YaRN scaling, else 0 */
    float yarn_lo, yarn_hi;  /* YaRN correction range (frequency pairs) */
    int32_t rope_n_ctx_orig; /* {arch}.rope.scaling.original_context_length (default n_ctx_train) */
    kn_rope_style rope_style;
    float embd_scale;      /* token embeddings are multiplied by this (1: none) */
    float logit_softcap;   /* final logits become c * tanh(logits / c) (0: none) */
    float attn_softcap;    /* attention scores become c * tanh(score / c) (0: none) */
    float attn_scale;      /* score = attn_scale * q . k */
    int32_t n_swa;         /* the window of the family's sliding-window layers (0: none) */
    bool tied_output;      /* output projection shares token_embd */
    int32_t n_expert;      /* experts per MoE layer (0: dense FFN) */
    int32_t n_expert_used; /* experts each token is routed to (top-k) */
    int32_t n_ff_exp;      /* FFN hidden width of one expert */
    kn_pooling pooling;    /* how an embedding pools the token states ({arch}.pooling_type); NONE: the file
                              does not say it is an embedding model */
    bool causal;           /* false: every token attends to every token of its input (encoders such as
                              bert); such a model has no output head and does not generate */
} kn_hparams;

/* A weight matrix W [rows = out features][cols = in features], each row in `type`: row-major, or
 * (packed) in the 16-row panel layout of tensor/pack.h, which holds the same bytes per 16 rows. */
typedef struct kn_weight {
    kn_dtype type;
    int64_t rows;
    int64_t cols;
    size_t row_bytes;
    const uint8_t *data;
    bool packed;
} kn_weight;

/* The widest attention head a model may have (the loader refuses wider ones). */
#define KN_MAX_HEAD_DIM 4096

/* How one layer rotates q and k (tensor/ops.h kn_rope). */
typedef struct kn_rope_cfg {
    kn_rope_style style;
    int n_rot;                  /* rotated dims per head (even, <= head_dim); 0: no RoPE in this layer */
    float base;                 /* frequency base */
    float pos_scale;            /* linear position scale (1 = none; YaRN: 1 / factor) */
    const float *freq_div;      /* [n_rot/2] per-frequency divisors (llama3, LongRoPE short), or NULL */
    const float *freq_div_long; /* LongRoPE: the divisors of rows whose context exceeds n_ctx_orig, or NULL */
    int32_t n_ctx_orig;         /* LongRoPE: the context the short divisors serve */
    float mscale;               /* cos and sin are multiplied by this (1: none; LongRoPE and YaRN magnitude) */
    float yarn_ext;             /* YaRN: extrapolation mix (0: no YaRN) */
    float yarn_lo, yarn_hi;     /* YaRN: the frequency pairs where the ramp from extrapolated to
                                   interpolated angles starts and ends */
} kn_rope_cfg;

/* One layer's attention, beyond its weights. */
typedef struct kn_layer_attn {
    int32_t window;     /* 0: a token attends to every earlier position; else to the last `window` positions
                           (pos - window, pos] of its row (sliding-window layers) */
    float scale;        /* score = scale * q . k */
    float softcap;      /* score = softcap * tanh(score / softcap) before the softmax (0: none) */
    kn_rope_cfg rope;   /* the rotation of q and k */
    const float *sinks; /* [n_head] per-head sink logits (gpt-oss): each head's softmax denominator gets
                           exp(sink) added, a position no value stands for; NULL: none */
    bool bidir;         /* encoders: a token attends to every position of its row's call, later ones too
                           (the row's whole input is in one forward call, from position 0) */
} kn_layer_attn;

/* What a layer's feed-forward network is. DENSE: down(act(gate . x) * (up . x)) with w_gate, w_up,
 * w_down. PLAIN (bert): down(act(up . x + b_up)) + b_down, no gate (a NULL bias adds nothing). MOE: a mixture of
 * experts (kn_moe, model/moe.h): a router picks n_used of n_expert gated FFNs per token and the output is their
 * weighted sum. A new kind adds its weights to kn_layer and its case to kn_block_ffn (block.h); the family table does
 * not change. */
typedef enum kn_ffn_kind { KN_FFN_DENSE, KN_FFN_MOE, KN_FFN_PLAIN } kn_ffn_kind;

/* The activation of a gated FFN: SILU (SwiGLU: silu(g) * u); GELU_TANH (GeGLU: GELU with the tanh
 * approximation); SWIGLU_CLAMP (gpt-oss): g clamped to at most 7, u to [-7, 7], then
 * g * sigmoid(1.702 g) * (u + 1). GELU: the exact x * Phi(x) (through erf), of a PLAIN FFN. */
typedef enum kn_ffn_act { KN_ACT_SILU, KN_ACT_GELU_TANH, KN_ACT_SWIGLU_CLAMP, KN_ACT_GELU } kn_ffn_act;

/* How a MoE router turns the logits of the experts into the weights of the chosen ones:
 * SOFTMAX: softmax over all n_expert logits, the top n_used kept (renormalized to sum 1 when
 * kn_moe.norm_topk); SOFTMAX_TOPK: the top n_used logits chosen, softmax over those alone. */
typedef enum kn_moe_gating { KN_MOE_SOFTMAX, KN_MOE_SOFTMAX_TOPK } kn_moe_gating;

/* A mixture-of-experts FFN. The expert matrices are the GGUF 3-D tensors [n_expert][rows][cols] as
 * one stacked matrix of n_expert * rows rows (one copy); expert e's matrix is rows [e*rows, (e+1)*rows)
 * (kn_moe_expert). Ties between equal router logits go to the lower expert index. */
typedef struct kn_moe {
    int32_t n_expert, n_used, n_ff; /* n_ff: hidden width of one expert */
    kn_moe_gating gating;
    bool norm_topk;
    kn_weight router;         /* [n_expert][n_embd] (ffn_gate_inp) */
    const float *router_bias; /* [n_expert] or NULL */
    kn_weight gate, up;       /* [n_expert * n_ff][n_embd] (ffn_gate_exps, ffn_up_exps) */
    kn_weight down;           /* [n_expert * n_embd][n_ff] (ffn_down_exps) */
    const float *gate_bias;   /* [n_expert][n_ff] or NULL */
    const float *up_bias;     /* [n_expert][n_ff] or NULL */
    const float *down_bias;   /* [n_expert][n_embd] or NULL */
} kn_moe;

typedef struct kn_layer {
    const float *attn_norm;       /* [n_embd] */
    kn_weight wq;                 /* [n_head*head_dim][n_embd] */
    kn_weight wk;                 /* [n_head_kv*head_dim][n_embd] */
    kn_weight wv;                 /* [n_head_kv*head_dim][n_embd] */
    kn_weight wo;                 /* [n_embd][n_head*head_dim] */
    const float *bq, *bk, *bv;    /* q/k/v biases [q_dim], [kv_dim], [kv_dim] (qwen2); else NULL */
    const float *q_norm, *k_norm; /* per-head RMSNorm weights of q and k [head_dim] (qwen3); else NULL */
    kn_layer_attn attn;
    const float *post_attn_norm; /* [n_embd] RMSNorm of the attention output before the residual add, or NULL */
    const float *ffn_norm;       /* [n_embd] */
    const float *post_ffn_norm;  /* [n_embd] RMSNorm of the FFN output before the residual add, or NULL */
    kn_ffn_kind ffn;
    kn_ffn_act act;
    kn_weight w_gate; /* DENSE: [n_ff][n_embd] */
    kn_weight w_up;   /* DENSE: [n_ff][n_embd] */
    kn_weight w_down; /* DENSE: [n_embd][n_ff] */
    kn_moe moe;       /* MOE */
    const float *bo;  /* attn_output bias [n_embd] (gpt-oss, bert); else NULL */
    /* encoders (bert.c): post_attn_norm and post_ffn_norm are LayerNorms with these biases [n_embd]
     * (NULL: none); the PLAIN FFN's biases b_up [n_ff] and b_down [n_embd] (NULL: none) */
    const float *post_attn_norm_b, *post_ffn_norm_b;
    const float *b_up, *b_down;
} kn_layer;

struct kiln_model {
    kn_hparams hp;
    const kn_arch_def *arch; /* the family's row (NULL with vocab_only) */
    kn_gguf gguf;            /* open only while loading, or for the model's life with use_mmap */
    uint8_t *weight_mem;     /* anonymous copy of the matrices (NULL with use_mmap) */
    size_t weight_bytes;
    float *vec_mem;               /* F32 vectors (norms, biases, rope factors) */
    kn_weight tok_embd;           /* [n_vocab][n_embd] */
    kn_weight output;             /* [n_vocab][n_embd]; = tok_embd when tied */
    const float *output_norm;     /* [n_embd]; NULL for an encoder (hp.causal false) */
    const float *rope_freqs;      /* [n_rot/2] llama3 or LongRoPE (short) frequency divisors, or NULL */
    const float *rope_freqs_long; /* [n_rot/2] LongRoPE long-context divisors, or NULL */
    kn_layer *layers;             /* [n_layer] */
    /* encoders (bert.c): the input embeddings beyond token_embd */
    kn_weight tok_types;                  /* [n_types][n_embd] token-type embeddings; rows 0: none */
    kn_weight pos_embd;                   /* [n_pos][n_embd] absolute position embeddings; rows 0: none */
    const float *embd_norm, *embd_norm_b; /* [n_embd] LayerNorm of the input embeddings, or NULL */
    kn_tokenizer *tok;
    char *chat_template;          /* tokenizer.chat_template (NUL-terminated copy), or NULL */
    kiln_sampler_params sampling; /* library defaults overridden by general.sampling.* */
    const kn_kernels *kernels;    /* compute kernels chosen at load */
    bool vocab_only;
    uint64_t n_params;
    char arch_name[32];
    char desc[160];
    char fingerprint[65];
    uint8_t tok_hash[32];           /* SHA-256 of the tokenizer.* metadata (see compute_tokenizer_hash) */
    char tokenizer_hash[65];        /* the same in hex */
    kn_errslot err;                 /* last failed call on the model (the one mutable part, own lock) */
    struct kn_vtrie *_Atomic vtrie; /* the vocabulary trie of constrained output (sample/gmask.h):
                                       built on first use by kn_model_vtrie, freed with the model */
    /* the same with special tokens' texts (render_special), built by kn_model_vtrie_special */
    struct kn_vtrie *_Atomic vtrie_special;
};

/* Records a failed public call on the model in its error slot (st == KILN_OK records nothing) and
 * returns st. The model is shared read-only; only this slot changes, under its lock. */
static inline kiln_status kn_model_fail(const kiln_model *m, kiln_status st) {
    return kn_errslot_record((kn_errslot *)&m->err, st);
}

/* kiln_model_load, optionally dequantizing every weight matrix to F32 at load: the F32 reference
 * path that quantized kernels are compared against. */
kiln_status kn_model_load_ex(const char *path, const kiln_model_params *params, bool force_f32, kiln_model **out);

/* The weight matrices of layer ly (for sizing scratch), into out[cap]; returns their count. */
#define KN_LAYER_MAX_WEIGHTS 16
int kn_layer_weights(const kn_layer *ly, const kn_weight **out, int cap);

/* Dequantizes row `r` of w into out[w->cols]. */
void kn_weight_row_f32(const kn_weight *w, int64_t r, float *out);

#endif
