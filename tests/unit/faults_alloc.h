/*
 * faults_alloc.h - the failing allocator of the allocation-failure tests (test_faults_alloc.c, the
 * library; test_faults_alloc_server.c, the server's code over it).
 *
 * The code under test calls malloc, calloc, realloc, posix_memalign and strdup directly in many
 * places, so a test program links with them wrapped (-Wl,--wrap=..., ALLOC_WRAP in the Makefile):
 * every call from the program's own objects and the static libraries it links passes through
 * __wrap_*, which counts the calls while `fa_armed` and fails the fa_fail_at-th. Allocations inside
 * shared libraries (libc's own, jansson, pcre2, sqlite, libmicrohttpd) are not wrapped; jansson's
 * can be routed through the wrapper with json_set_alloc_funcs.
 *
 * Leaks are measured by the heap's bytes in use (fa_heap_in_use: mallinfo2). fa_setup makes that
 * count exact: glibc's per-thread cache and fast bins hold freed chunks that mallinfo2 counts as in
 * use, so they are turned off (the cache by an environment variable read at start: the program
 * starts itself again), and one arena holds every thread's allocations. Under AddressSanitizer the
 * wrappers still fail, and LeakSanitizer checks at exit instead.
 */
#ifndef KT_FAULTS_ALLOC_H
#define KT_FAULTS_ALLOC_H

#include "kiln.h"

#include <errno.h>
#include <execinfo.h>
#include <malloc.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
char *__real_strdup(const char *s);

static bool fa_armed;
static long fa_calls, fa_fail_at; /* calls counted while armed; the one that fails (0: none) */
static long fa_failed;            /* failures injected */

/* Starts counting from zero with the fail-th call failing (0: none). */
static inline void fa_arm(long fail) {
    __atomic_store_n(&fa_calls, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fa_fail_at, fail, __ATOMIC_RELAXED);
    __atomic_store_n(&fa_armed, true, __ATOMIC_RELEASE);
}

static inline void fa_disarm(void) { __atomic_store_n(&fa_armed, false, __ATOMIC_RELEASE); }

/* Whether this call fails: the fa_fail_at-th call while armed. With KILN_FAULT_BT set, the stack
 * of each failure goes to stderr (addresses: `addr2line -f -e PROGRAM` names them). */
static bool fa_fail_now(void) {
    if (!__atomic_load_n(&fa_armed, __ATOMIC_ACQUIRE)) return false;
    const long k = __atomic_add_fetch(&fa_calls, 1, __ATOMIC_RELAXED);
    if (k != __atomic_load_n(&fa_fail_at, __ATOMIC_RELAXED)) return false;
    __atomic_add_fetch(&fa_failed, 1, __ATOMIC_RELAXED);
    if (getenv("KILN_FAULT_BT")) {
        void *pc[32];
        backtrace_symbols_fd(pc, backtrace(pc, 32), 2);
    }
    return true;
}

void *__wrap_malloc(size_t n) { return fa_fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return fa_fail_now() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return fa_fail_now() ? NULL : __real_realloc(p, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) {
    return fa_fail_now() ? ENOMEM : __real_posix_memalign(p, a, n);
}
char *__wrap_strdup(const char *s) {
    if (fa_fail_now()) {
        errno = ENOMEM;
        return NULL;
    }
    return __real_strdup(s);
}

static inline size_t fa_heap_in_use(void) { return mallinfo2().uordblks; }

static void fa_quiet(kiln_log_level level, const char *msg, void *user) {
    (void)level;
    (void)msg;
    (void)user;
}

/* Makes fa_heap_in_use exact (see the top of this file), and keeps the library's log quiet (the
 * failures' messages are expected): call first in main. */
static inline void fa_setup(char **argv) {
    kiln_set_log(fa_quiet, NULL, KILN_LOG_ERROR);
#ifndef __SANITIZE_ADDRESS__
    if (!getenv("KILN_FAULTS_REEXEC")) {
        setenv("KILN_FAULTS_REEXEC", "1", 1);
        setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
        execv("/proc/self/exe", argv);
    }
    mallopt(M_MXFAST, 0);    /* no fast bins either */
    mallopt(M_ARENA_MAX, 1); /* every thread's allocations in the arena mallinfo2 reports */
#else
    (void)argv;
#endif
}

#endif
