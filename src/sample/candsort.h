/*
 * candsort.h - sampling candidates and the order the sampler walks them in.
 */
#ifndef KN_CANDSORT_H
#define KN_CANDSORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct kn_cand {
    float logit;
    float p;
    int32_t id;
} kn_cand;

/* Sorts c[n] by logit descending, id ascending on equal logits (-0.0 equals +0.0), given c in
 * ascending id order with no NaN logit. tmp[n] is scratch. Allocates nothing. */
void kn_cand_sort(kn_cand *c, size_t n, kn_cand *tmp);

#endif
