/*
 * base.h - internal foundation shared by every kiln component: error reporting, logging,
 * checked arithmetic, allocation wrappers and small utilities. Internal names use the kn_ prefix.
 *
 * Error convention: a function that can fail returns kiln_status and, on failure, has recorded a
 * message with kn_error(); the thread-local message is what kiln_last_error() returns and what a
 * handle copies into its own last-error buffer.
 */
#ifndef KN_BASE_H
#define KN_BASE_H

#include "kiln.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KN_ERRMSG_MAX 512

/* Records a formatted message for the current thread and returns status (for `return kn_error(...)`). */
kiln_status kn_error(kiln_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current thread's message with a formatted context ("loading x.gguf: ..."). */
void kn_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The current thread's message ("" if none). */
const char *kn_error_msg(void);
void kn_error_clear(void);
/* Copies the thread's message into a handle's buffer of KN_ERRMSG_MAX bytes. */
void kn_error_save(char dst[KN_ERRMSG_MAX]);

/* The last-error slot of a handle that several threads use at once (a model): the message of the
 * most recent failed call on the handle, from whichever thread made it, under the slot's own lock. */
typedef struct kn_errslot {
    pthread_mutex_t mu;
    char msg[KN_ERRMSG_MAX];
} kn_errslot;
void kn_errslot_init(kn_errslot *s);
void kn_errslot_destroy(kn_errslot *s);
/* When st is a failure, copies the calling thread's message into the slot. Returns st, so a public
 * call ends with `return kn_errslot_record(&slot, st);`. */
kiln_status kn_errslot_record(kn_errslot *s, kiln_status st);
/* The slot's message ("" when nothing failed yet), copied to a buffer of the calling thread that
 * stays valid until this thread reads a slot again. */
const char *kn_errslot_read(kn_errslot *s);

/* Logging through the sink installed with kiln_set_log. */
void kn_log(kiln_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define KN_LOGE(...) kn_log(KILN_LOG_ERROR, __VA_ARGS__)
#define KN_LOGW(...) kn_log(KILN_LOG_WARN, __VA_ARGS__)
#define KN_LOGI(...) kn_log(KILN_LOG_INFO, __VA_ARGS__)
#define KN_LOGD(...) kn_log(KILN_LOG_DEBUG, __VA_ARGS__)

/* Checked arithmetic: false on overflow. */
static inline bool kn_mul_ok(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool kn_add_ok(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }

/* Allocation: sizes are checked for overflow; alignment is 64 bytes for kn_alloc_aligned. Both
 * return NULL (with a recorded KILN_ERR_NOMEM message) on failure. */
void *kn_calloc(size_t n, size_t size);
void *kn_alloc_aligned(size_t size);
void kn_free_aligned(void *p);
char *kn_strdup(const char *s);

/* Monotonic wall clock in milliseconds. */
double kn_now_ms(void);

/* Number of physical cores (at least 1). */
int kn_physical_cores(void);
/* Bytes of physical memory of the machine (0 if unknown). */
uint64_t kn_physical_memory(void);

#define KN_MIN(a, b)    ((a) < (b) ? (a) : (b))
#define KN_MAX(a, b)    ((a) > (b) ? (a) : (b))
#define KN_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif /* KN_BASE_H */
