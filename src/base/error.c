/*
 * error.c - status strings and the thread-local last-error message.
 *
 * Every failing internal call records a human-readable message here (kn_error); callers add
 * context on the way up (kn_error_prefix), and handles copy the final text into their own buffer so
 * that kiln_model_last_error / kiln_session_last_error stay valid after other calls. A model is
 * shared between threads, so its slot (kn_errslot) has a lock and is read into a per-thread copy.
 */
#include "base/base.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char tl_msg[KN_ERRMSG_MAX];

#define STATUS_NAME_(name, description) [name] = description,
static const char *const status_names[KILN_STATUS_COUNT] = {KILN_STATUS_LIST(STATUS_NAME_)};
#undef STATUS_NAME_

const char *kiln_status_str(kiln_status status) {
    if ((unsigned)status >= KILN_STATUS_COUNT) return "unknown status";
    return status_names[status];
}

const char *kiln_last_error(void) { return tl_msg; }

const char *kiln_version(void) { return KILN_VERSION_STRING; }

kiln_status kn_error(kiln_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
    va_end(ap);
    return status;
}

void kn_error_prefix(const char *fmt, ...) {
    char prefix[KN_ERRMSG_MAX];
    char old[KN_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tl_msg, sizeof old);
    /* Both parts are bounded by the buffer; a combined message longer than it is cut. */
    size_t n = strlen(prefix);
    if (n > sizeof tl_msg - 3) n = sizeof tl_msg - 3;
    memcpy(tl_msg, prefix, n);
    memcpy(tl_msg + n, ": ", 2);
    size_t rest = sizeof tl_msg - n - 3;
    size_t m = strlen(old);
    if (m > rest) m = rest;
    memcpy(tl_msg + n + 2, old, m);
    tl_msg[n + 2 + m] = '\0';
}

const char *kn_error_msg(void) { return tl_msg; }

void kn_error_clear(void) { tl_msg[0] = '\0'; }

void kn_error_save(char dst[KN_ERRMSG_MAX]) { memcpy(dst, tl_msg, KN_ERRMSG_MAX); }

void kn_errslot_init(kn_errslot *s) {
    pthread_mutex_init(&s->mu, NULL);
    s->msg[0] = '\0';
}

void kn_errslot_destroy(kn_errslot *s) { pthread_mutex_destroy(&s->mu); }

kiln_status kn_errslot_record(kn_errslot *s, kiln_status st) {
    if (st == KILN_OK) return st;
    pthread_mutex_lock(&s->mu);
    snprintf(s->msg, sizeof s->msg, "%s", tl_msg[0] ? tl_msg : kiln_status_str(st));
    pthread_mutex_unlock(&s->mu);
    return st;
}

const char *kn_errslot_read(kn_errslot *s) {
    static _Thread_local char copy[KN_ERRMSG_MAX];
    pthread_mutex_lock(&s->mu);
    memcpy(copy, s->msg, KN_ERRMSG_MAX);
    pthread_mutex_unlock(&s->mu);
    return copy;
}
