/*
 * rng.h - the per-generation random number generator: xoshiro256** seeded through splitmix64.
 * Deterministic across platforms, so the same seed gives the same text everywhere.
 */
#ifndef KN_RNG_H
#define KN_RNG_H

#include <stdint.h>

typedef struct kn_rng {
    uint64_t s[4];
} kn_rng;

void kn_rng_seed(kn_rng *r, uint64_t seed);
uint64_t kn_rng_next(kn_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double kn_rng_uniform(kn_rng *r);

#endif
