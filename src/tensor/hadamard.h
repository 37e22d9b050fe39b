/*
 * hadamard.h - the randomized Hadamard rotation of KV head vectors: R x = H (D x) / sqrt(n) on each
 * block of n = kn_hadamard_size(hd) elements (the largest power of two dividing hd), D a diagonal of
 * random signs fixed by a seed, the layer and the KV head, H the n x n Walsh-Hadamard matrix. R is
 * orthogonal, so (R k) . (R q) = k . q: a cache that stores R k and R v attends with R q and turns
 * the output back with R^T; the rotation spreads outlier channels over the whole block, which is
 * what makes 4-bit keys usable. Scalar float steps in a fixed order (same bits on every CPU).
 */
#ifndef KN_HADAMARD_H
#define KN_HADAMARD_H

#include <stdint.h>

/* The rotation block of a head of hd elements: the largest power of two dividing hd. */
int kn_hadamard_size(int hd);

/* signs[hd] = the +-1 diagonal D of (seed, layer, head). */
void kn_hadamard_signs(uint64_t seed, int32_t layer, int32_t head, int hd, float *signs);

/* x[hd] = R x (forward) or R^T x (inverse), with the signs of kn_hadamard_signs. */
void kn_hadamard_fwd(float *x, const float *signs, int hd);
void kn_hadamard_inv(float *x, const float *signs, int hd);

#endif
