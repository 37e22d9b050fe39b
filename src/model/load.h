/*
 * load.h - what a family's file (model/arch.h) uses to read its metadata and map its tensors.
 *
 * The loader walks the tensors twice: pass 1 checks every tensor's presence, type and shape and
 * counts bytes; pass 2 copies (or maps) the matrices and converts the vectors. A family's tensor
 * hook makes the same calls in both passes; the views it gets in pass 1 are placeholders. Every
 * failure returns a status with a message naming the tensor or key.
 */
#ifndef KN_LOAD_H
#define KN_LOAD_H

#include "model/model.h"

typedef struct kn_loader kn_loader;

/* The model being loaded. */
kiln_model *kn_loader_model(kn_loader *L);

/* Whether the file has a tensor of this name. */
bool kn_load_has(kn_loader *L, const char *name);

/* A weight matrix [rows][cols] (stored with ne = {cols, rows}) into *w. */
kiln_status kn_load_matrix(kn_loader *L, const char *name, int64_t cols, int64_t rows, kn_weight *w);

/* A fused weight matrix of n_parts stacked matrices [rows[i]][cols] (e.g. q, k and v in one tensor):
 * one tensor of sum(rows) rows, whose parts become the views out[i] over the same memory (no copy).
 * The matrix is repacked into panels only when every part's rows are a multiple of the panel height. */
kiln_status kn_load_matrix_parts(kn_loader *L, const char *name, int64_t cols, int n_parts, const int64_t *rows,
                                 kn_weight *out);

/* A vector of n elements (any float or quantized type), converted to F32 in model memory; absent
 * and not required: *out = NULL. */
kiln_status kn_load_vector(kn_loader *L, const char *name, int64_t n, bool required, const float **out);

/* A GGUF expert tensor of n_expert matrices [rows][cols] (stored with ne = {cols, rows, n_expert}) as
 * one stacked matrix [n_expert * rows][cols] into *w (one copy; expert e is rows [e*rows, (e+1)*rows)). */
kiln_status kn_load_experts(kn_loader *L, const char *name, int64_t cols, int64_t rows, int64_t n_expert, kn_weight *w);

/* count vectors of n elements stored as one tensor with ne = {n, count} (per-expert biases),
 * converted to F32 [count][n] in model memory; absent and not required: *out = NULL. */
kiln_status kn_load_vectors(kn_loader *L, const char *name, int64_t n, int64_t count, bool required, const float **out);

/* The rotation the file's hyperparameters give every layer (RoPE style, dims, base, linear, llama3,
 * YaRN or LongRoPE scaling); a family changes what differs per layer. Call it from the tensor hook
 * (the model-wide factors are loaded by then). */
kn_rope_cfg kn_rope_default(const kiln_model *m);

/* "blk.<l>.<suffix>" in buf[96]; returns buf. */
const char *kn_blk_name(char buf[96], int l, const char *suffix);

/* `{arch}.{suffix}` as an integer in [lo, hi] into *out (absent and not required: *out unchanged). */
kiln_status kn_meta_int(const kiln_model *m, const char *suffix, bool required, int64_t lo, int64_t hi, int32_t *out);

/* `{arch}.{suffix}` as a positive number into *out (absent: *out unchanged). */
kiln_status kn_meta_float(const kiln_model *m, const char *suffix, float *out);

#endif
