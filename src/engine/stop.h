/*
 * stop.h - stop strings over a stream of decoded text.
 *
 * Generated text arrives in pieces of whole UTF-8 characters. The matcher releases text as soon as
 * it cannot be the beginning of a stop string, holds back the longest tail that still could be,
 * and reports the first stop string that appears (earliest position; the first listed on a tie).
 * Text from the match on is never released. Buffers are allocated once at init: pushing allocates
 * nothing, so the token loop stays allocation-free.
 */
#ifndef KN_STOP_H
#define KN_STOP_H

#include "base/base.h"

typedef struct kn_stopper {
    const char *const *stop; /* borrowed */
    size_t *stop_len;        /* [n_stop] */
    size_t n_stop;
    size_t max_len;    /* longest stop string */
    char *buf;         /* held-back text followed by the newest piece */
    char *out;         /* text released by the last push */
    size_t n_buf, cap; /* cap = max_len + max piece */
    int matched;       /* index of the matched stop string, or -1 */
} kn_stopper;

/* Validates stop strings (at most KILN_MAX_STOP, each 1..KILN_MAX_STOP_LEN bytes) without
 * allocating; *max_len gets the longest one's length. */
kiln_status kn_stopper_check(const char *const *stop, size_t n_stop, size_t *max_len);

/* Validates the stop strings (kn_stopper_check) and
 * allocates room for pieces of up to max_piece bytes. KILN_ERR_INVALID_ARG names a bad one. */
kiln_status kn_stopper_init(kn_stopper *s, const char *const *stop, size_t n_stop, size_t max_piece);
void kn_stopper_free(kn_stopper *s);

/* Feeds len bytes (len <= max_piece) and returns the text now safe to release (pointer into the
 * stopper, valid until the next call) with its length in *out_len. After a match, s->matched >= 0
 * and the returned text ends where the stop string begins; later pushes release nothing. */
const char *kn_stopper_push(kn_stopper *s, const char *text, size_t len, size_t *out_len);

/* End of the stream without a match: releases everything held back. */
const char *kn_stopper_flush(kn_stopper *s, size_t *out_len);

#endif
