/*
 * hf.h - a Hugging Face model directory (config.json, safetensors weights, tokenizer.json), optionally
 * MLX-quantized, presented to the loader as the metadata and tensor table a GGUF file of the same
 * model would give.
 *
 * kn_hf_open reads config.json (and generation_config.json, tokenizer_config.json, chat_template.jinja)
 * into `{arch}.*` / `general.sampling.*` / `tokenizer.*` key/values and maps the safetensors tensors
 * to kiln's tensor names, so every family (model/arch.h), the fingerprint and the tokenizer hash work
 * unchanged on it:
 *   - names: model.layers.N.self_attn.q_proj.weight -> blk.N.attn_q.weight, and so on; per-expert
 *     tensors are stacked into the ffn_*_exps tensors GGUF has.
 *   - F32, F16 and BF16 tensors are viewed in place (no copy) unless they must change: the Q and K
 *     rows of families with the interleaved RoPE layout (KN_ROPE_NORM: llama) are permuted from the
 *     rotate-half order of Hugging Face checkpoints, and Gemma's norm weights get the +1 GGUF bakes in.
 *   - MLX affine quantization (w = scale * q + bias per group, q packed little-endian in uint32):
 *     4-bit weights whose scales and biases are exact in f16 become Q4_1 blocks (the same formula,
 *     the group's scale and bias repeated per 32 elements, so the values are unchanged); 8-bit weights
 *     become kiln's MLX8 blocks (quant.h: the same formula with q in 0..255; MLX8_F32 when a scale or
 *     bias is not an f16 value), also exact; every other width (2, 3, 6 bits), or 4 bits with a scale
 *     outside f16, is dequantized at load to F16.
 *   - gpt-oss (model_type gpt_oss): the experts' MXFP4 `*_blocks` / `*_scales` (two values a byte,
 *     element 2k in the low nibble) become GGUF's MXFP4 blocks (nibbles as quant.h lays them out), the
 *     interleaved gate_up rows the ffn_gate_exps / ffn_up_exps tensors, the biases F32; self_attn.sinks
 *     is attn_sinks; quantization_config's quant_method mxfp4 needs no other handling.
 *   - generation_config.json: eos_token_id (an id or a list) as tokenizer.huggingface.generation_eos
 *     ("1,106"), which kn_hf_tokenizer makes end-of-generation tokens; the sampling settings as
 *     general.sampling.*. Gemma's query_pre_attn_scalar becomes {arch}.attention.scale.
 * Converted tensors live in buffers g owns until kn_gguf_close, so while the loader copies them a
 * converted tensor is in memory twice (with use_mmap, for the model's life once).
 * The tokenizer is read from tokenizer.json by kn_hf_tokenizer; its bytes (and tokenizer_config.json
 * without its chat template) are `tokenizer.huggingface.*` strings, so the tokenizer hash covers them.
 */
#ifndef KN_HF_H
#define KN_HF_H

#include "model/gguf.h"
#include "model/safetensors.h"
#include "text/tokenizer.h"

#include <jansson.h>

/* True when path is a directory holding config.json. */
bool kn_hf_is_dir(const char *path);

/* Opens the directory into *g (ownership of everything in it passes to g: kn_gguf_close releases it).
 * Errors (KILN_ERR_FORMAT / IO / UNSUPPORTED) name the file and the key or tensor. */
kiln_status kn_hf_open(const char *dir, kn_gguf *g);
/* The same without converting any tensor (for listings and `kiln inspect`): every key/value, tensor name,
 * type and shape is what kn_hf_open gives (an MLX weight's type assumed Q4_1 at 4 bits, MLX8 at 8), but the
 * tensors' data views point at the unconverted bytes and must not be read as their type. */
kiln_status kn_hf_open_headers(const char *dir, kn_gguf *g);

/* Builds the tokenizer of a directory opened by kn_hf_open (from tokenizer.json and
 * tokenizer_config.json). */
kiln_status kn_hf_tokenizer(const kn_gguf *g, kn_tokenizer **out);

/* config.json as read (the whole file, not only text_config), or NULL when g is a GGUF file. */
json_t *kn_hf_config(const kn_gguf *g);

/* Hugging Face checkpoints often pad the embedding (and lm_head) past the tokenizer's vocabulary (to a
 * multiple of 64 or 128 rows); rows no token id reaches are dropped from g's view of both, so their
 * shapes match the vocabulary of n_vocab tokens as the loader requires. Nothing for a GGUF file. */
void kn_hf_fit_vocab(kn_gguf *g, int64_t n_vocab);

/* The safetensors files behind g, or NULL when g is a GGUF file. */
const kn_safetensors *kn_hf_safetensors(const kn_gguf *g);

/* MLX quantization of the linear layer whose weight is `base`.weight (base: the Hugging Face module
 * path): bits and group size from config.json's quantization (per-layer entries first). False when the
 * layer is not quantized. */
bool kn_hf_mlx_params(const kn_gguf *g, const char *base, int *bits, int *group);

/* Dequantizes rows of an MLX-quantized weight: q packed little-endian bits-wide (row r starts at
 * byte r * row_bytes of packed), scales and biases [rows][cols / group] of dtype sdt; out [rows][cols]
 * gets scale * q + bias in f32, exactly. */
void kn_mlx_dequant(const uint8_t *packed, size_t row_bytes, const uint8_t *scales, const uint8_t *biases,
                    kn_st_dtype sdt, int bits, int group, int64_t rows, int64_t cols, float *out);

/* The values of a safetensors tensor of a float dtype as f32 (n_elem values); false for other dtypes. */
bool kn_st_to_f32(const kn_st_tensor *t, float *out);

#endif
