/*
 * moe.h - the mixture-of-experts FFN (kn_ffn_kind KN_FFN_MOE, model.h kn_moe): per token, router
 * logits -> the top n_used experts and their weights; then per expert, over only the tokens routed
 * to it, the expert's gated FFN as GEMMs, so a step reads each active expert's matrices once
 * whatever the number of tokens (prefill, batched decode).
 *
 * Batch invariance: a token's routing depends only on its own row; each (expert, token) product is
 * a kn_matmul output (the tile contract of tensor/kernels.h: independent of the other rows); and a
 * token's output sums its experts' weighted outputs in ascending expert order. So a token's output
 * is bit-identical whichever tokens share the step, for any thread count.
 */
#ifndef KN_MOE_H
#define KN_MOE_H

#include "model/forward.h"
#include "model/load.h"

/* Routing of one token: from its router logits[moe->n_expert] (bias included), the moe->n_used
 * experts with the largest logits (ties: the lower index first) into ids[n_used], in ascending
 * expert order, with their weights[n_used] by moe->gating (model.h kn_moe_gating). */
void kn_moe_route(const kn_moe *moe, const float *logits, int32_t *ids, float *weights);

/* The view of expert e's matrix of `rows` rows inside a stacked expert matrix (model.h kn_moe). */
kn_weight kn_moe_expert(const kn_weight *stack, int32_t e, int64_t rows);

/* xb2[N][n_embd] = the MoE FFN of layer l applied to xb[N][n_embd] (the scratch's moe_* buffers,
 * hb, hb2 and qbuf as working space). The step's (token, expert) rows in grouped order, n_max at a
 * time: every expert's gate and up as one parallel run, then every expert's down as one (decode:
 * two runs per layer whatever the number of experts). */
void kn_moe_ffn(const kiln_model *m, kn_scratch *s, int l, int64_t N);

/* The same values bit for bit, the plain way: one expert at a time (two parallel runs each; what
 * kn_moe_ffn does when an expert's gate and up read different activation formats). */
void kn_moe_ffn_plain(const kiln_model *m, kn_scratch *s, int l, int64_t N);

/* Loads the MoE FFN of layer l of a family that stores it the GGUF way (blk.l.ffn_gate_inp, and
 * ffn_{gate,up,down}_exps, with their .bias tensors when `biases`), with n_expert, n_used and the
 * expert width from m->hp, and sets the layer's FFN kind, activation and gating. */
kiln_status kn_moe_load(kn_loader *L, int l, kn_ffn_act act, kn_moe_gating gating, bool norm_topk, bool biases);

/* The MoE hyperparameters every family names alike ({arch}.expert_count, expert_used_count,
 * expert_feed_forward_length) into m->hp; expert_count absent: a dense model (n_expert 0).
 * ff_default: the expert width when expert_feed_forward_length is absent. */
kiln_status kn_moe_hparams(kiln_model *m, int32_t ff_default);

#endif
