/*
 * qwen3moe.c - Qwen3-MoE (general.architecture "qwen3moe", e.g. Qwen3-30B-A3B: 128 experts, 8 per
 * token): Qwen3's attention (per-head RMSNorm of q and k, NEOX RoPE) and in every layer a mixture of
 * experts (model/moe.h) whose router takes the softmax over all experts and renormalizes the top-k
 * probabilities; each expert is a SiLU-gated FFN of width {arch}.expert_feed_forward_length.
 */
#include "model/block.h"
#include "model/load.h"
#include "model/moe.h"

/* Every layer is a MoE layer: expert_count and expert_used_count are required. */
static kiln_status qwen3moe_hparams(kiln_model *m) {
    kiln_status st = kn_moe_hparams(m, m->hp.n_ff);
    if (st) return st;
    if (m->hp.n_expert == 0) return kn_error(KILN_ERR_FORMAT, "missing metadata '%s.expert_count'", m->arch_name);
    return KILN_OK;
}

const kn_arch_def kn_arch_qwen3moe = {.name = "qwen3moe",
                                      .rope_style = KN_ROPE_NEOX,
                                      .qk_norm = true,
                                      .norm_eps = 1e-6f,
                                      .rope_base = 1000000.0f,
                                      .hparams = qwen3moe_hparams,
                                      .tensors = kn_llama_tensors,
                                      .block = kn_block_decoder};
