/*
 * stop.c - stop-string matching with hold-back over streamed text (see stop.h).
 *
 * The buffer holds at most max_len - 1 bytes between calls (a longer tail cannot be a proper
 * prefix of any stop string), so each push costs O((max_len + piece) * n_stop) comparisons.
 */
#include "engine/stop.h"

#include <stdlib.h>
#include <string.h>

kiln_status kn_stopper_check(const char *const *stop, size_t n_stop, size_t *max_len) {
    *max_len = 0;
    if (n_stop > KILN_MAX_STOP)
        return kn_error(KILN_ERR_INVALID_ARG, "%zu stop strings; at most %d are allowed", n_stop, KILN_MAX_STOP);
    if (n_stop && !stop) return kn_error(KILN_ERR_INVALID_ARG, "stop strings are NULL");
    for (size_t i = 0; i < n_stop; i++) {
        size_t n = stop[i] ? strlen(stop[i]) : 0;
        if (n == 0) return kn_error(KILN_ERR_INVALID_ARG, "stop string %zu is empty", i);
        if (n > KILN_MAX_STOP_LEN)
            return kn_error(KILN_ERR_INVALID_ARG, "stop string %zu has %zu bytes; at most %d are allowed", i, n,
                            KILN_MAX_STOP_LEN);
        if (n > *max_len) *max_len = n;
    }
    return KILN_OK;
}

kiln_status kn_stopper_init(kn_stopper *s, const char *const *stop, size_t n_stop, size_t max_piece) {
    memset(s, 0, sizeof *s);
    s->matched = -1;
    kiln_status st = kn_stopper_check(stop, n_stop, &s->max_len);
    if (st) return st;
    s->stop = stop;
    s->n_stop = n_stop;
    if (n_stop == 0) return KILN_OK;
    s->stop_len = kn_calloc(n_stop, sizeof *s->stop_len);
    s->cap = s->max_len + max_piece;
    s->buf = malloc(s->cap);
    s->out = malloc(s->cap);
    if (!s->stop_len || !s->buf || !s->out) {
        kn_stopper_free(s);
        return kn_error(KILN_ERR_NOMEM, "out of memory for stop strings");
    }
    for (size_t i = 0; i < n_stop; i++) s->stop_len[i] = strlen(stop[i]);
    return KILN_OK;
}

void kn_stopper_free(kn_stopper *s) {
    free(s->stop_len);
    free(s->buf);
    free(s->out);
    s->stop_len = NULL;
    s->buf = s->out = NULL;
}

/* Length of the longest tail of buf[0..n) that is a proper prefix of some stop string. */
static size_t held_tail(const kn_stopper *s, size_t n) {
    size_t lim = KN_MIN(n, s->max_len - 1);
    for (size_t t = lim; t > 0; t--) {
        for (size_t i = 0; i < s->n_stop; i++)
            if (s->stop_len[i] > t && memcmp(s->buf + n - t, s->stop[i], t) == 0) return t;
    }
    return 0;
}

const char *kn_stopper_push(kn_stopper *s, const char *text, size_t len, size_t *out_len) {
    *out_len = 0;
    if (s->matched >= 0) return "";
    if (s->n_stop == 0) {
        *out_len = len;
        return text;
    }
    /* The buffer holds only the tail held back by the previous call. */
    if (len > s->cap - s->n_buf) len = s->cap - s->n_buf; /* cannot happen within the contract */
    memcpy(s->buf + s->n_buf, text, len);
    size_t n = s->n_buf + len;
    /* Earliest match; on equal positions the stop string listed first. */
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < s->n_stop; i++) {
        size_t sl = s->stop_len[i];
        for (size_t p = 0; p + sl <= n && p < best; p++) {
            if (s->buf[p] == s->stop[i][0] && memcmp(s->buf + p, s->stop[i], sl) == 0) {
                best = p;
                s->matched = (int)i;
                break;
            }
        }
    }
    if (s->matched >= 0) {
        s->n_buf = 0;
        *out_len = best;
        return s->buf;
    }
    size_t keep = held_tail(s, n);
    size_t out = n - keep;
    memcpy(s->out, s->buf, out);         /* released text, stable until the next push */
    memmove(s->buf, s->buf + out, keep); /* the held tail moves to the front */
    s->n_buf = keep;
    *out_len = out;
    return s->out;
}

const char *kn_stopper_flush(kn_stopper *s, size_t *out_len) {
    *out_len = s->matched >= 0 ? 0 : s->n_buf;
    s->n_buf = 0;
    return s->buf ? s->buf : "";
}
