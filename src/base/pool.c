/*
 * pool.c - the persistent worker pool (see pool.h).
 *
 * Shared state, each hot field on its own cache line:
 *   next   the claim word of the current run: bits 63..32 = the run's task count n, bits 31..0 = the
 *          next unclaimed task i. A thread claims a task with one fetch_add; the old value says
 *          which task it got (i < n) or that none is left (i >= n). The count travels in the same
 *          word, so a claim never mixes two runs: whoever claims task i of a run holds that run open
 *          (the caller cannot return before task i is done), and only then reads fn/ctx.
 *   done   tasks finished by the workers in the current run (the caller counts its own); also the
 *          futex word the caller sleeps on when a task it waits for takes long.
 *   caller_waiting  set while the caller sleeps on `done`: a worker that finishes a task then
 *          wakes it (same sequentially consistent pairing as below).
 *   gen    run generation, the futex word: the caller bumps it after publishing a run; idle
 *          workers spin on it, then sleep on it.
 *   sleepers  workers inside (or about to enter) futex_wait; the caller issues one FUTEX_WAKE only
 *          when this is non-zero. Both sides use sequentially consistent operations (worker:
 *          sleepers++ then reread gen; caller: gen++ then read sleepers), so a wake-up is never lost.
 * Stale claims (a worker that wakes after its run ended) fetch_add an exhausted word and stop; each
 * thread does at most one such failed claim per wake-up, so the low half cannot overflow into n.
 */
#include "base/pool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* Pause iterations an idle worker spins before it sleeps. A pause takes about 120 ns on the
 * project's machine (a virtual machine), so this is about 0.25 ms: longer than the serial gaps
 * between the parallel regions of one forward pass (norms, residual adds, sampling), short enough
 * that an idle session stops burning a core at once. See docs/benchmarks.md for the measurement. */
#define SPIN_ITERS      2048
/* Pause iterations (about 50 us) the caller spins on tasks still in progress before it sleeps.
 * Sleeping matters when the machine is busy: a worker descheduled in the middle of a task waits in
 * another core's run queue, and the caller's core going idle is what lets the scheduler move the
 * worker there at once (a spinning or merely yielding caller would keep it waiting a time slice). */
#define WAIT_SPIN_ITERS 400
/* Largest task count of one published run (the claim word holds 32-bit halves). */
#define MAX_RUN_TASKS   ((int64_t)1 << 30)

typedef struct kn_worker {
    kn_pool *pool;
    int index;
    pthread_t thread;
} kn_worker;

struct kn_pool {
    _Alignas(64) _Atomic uint64_t next;
    _Alignas(64) _Atomic uint32_t done;
    _Atomic int caller_waiting;
    _Alignas(64) _Atomic uint32_t gen;
    _Atomic int sleepers;
    _Atomic bool stop;
    /* the current run; written by the caller before it publishes `next`, read after a claim */
    _Alignas(64) kn_task_fn fn;
    void *ctx;
    int64_t base; /* task number of claim index 0 (runs above MAX_RUN_TASKS go in slices) */
    int n_threads;
    int n_workers;      /* started workers */
    kn_worker *workers; /* [n_threads - 1] */
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t expect) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expect, NULL, NULL, 0);
#else
    (void)addr;
    (void)expect;
    sched_yield();
#endif
}

static void futex_wake_all(_Atomic uint32_t *addr) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)addr;
#endif
}

/* Claims and runs tasks of the current run until none is left; returns how many it ran. */
static int64_t work(kn_pool *p, int me) {
    int64_t ran = 0;
    for (;;) {
        const uint64_t w = atomic_fetch_add_explicit(&p->next, 1, memory_order_acquire);
        const uint32_t i = (uint32_t)w, n = (uint32_t)(w >> 32);
        if (i >= n) return ran;
        p->fn(p->ctx, p->base + i, me);
        ran++;
        if (me) {
            atomic_fetch_add(&p->done, 1);
            if (atomic_load(&p->caller_waiting)) futex_wake_all(&p->done);
        }
    }
}

static void *worker_main(void *arg) {
    kn_worker *wk = arg;
    kn_pool *p = wk->pool;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (spins < SPIN_ITERS) {
                cpu_relax();
                spins++;
                continue;
            }
            atomic_fetch_add(&p->sleepers, 1);
            if (atomic_load(&p->gen) == seen) futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
        work(p, wk->index);
    }
}

static void stop_workers(kn_pool *p) {
    atomic_store_explicit(&p->stop, true, memory_order_release);
    atomic_fetch_add(&p->gen, 1);
    futex_wake_all(&p->gen);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->workers[i].thread, NULL);
    p->n_workers = 0;
}

kiln_status kn_pool_new(int n_threads, kn_pool **out) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return kn_error(KILN_ERR_INVALID_ARG, "thread count %d is out of range", n_threads);
    kn_pool *p = kn_alloc_aligned(sizeof *p);
    if (!p) return KILN_ERR_NOMEM;
    memset(p, 0, sizeof *p);
    atomic_init(&p->next, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->caller_waiting, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->stop, false);
    p->n_threads = n_threads;
    if (n_threads > 1) {
        p->workers = kn_calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            kn_free_aligned(p);
            return KILN_ERR_NOMEM;
        }
    }
    /* Workers take no signals: the process's signal handling stays with the threads it started. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    kiln_status st = KILN_OK;
    for (int i = 0; i < n_threads - 1; i++) {
        p->workers[i].pool = p;
        p->workers[i].index = i + 1;
        if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
            st = kn_error(KILN_ERR_INTERNAL, "cannot start worker thread %d of %d", i + 1, n_threads - 1);
            break;
        }
        p->n_workers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (st) {
        kn_pool_free(p);
        return st;
    }
    *out = p;
    return KILN_OK;
}

void kn_pool_free(kn_pool *p) {
    if (!p) return;
    stop_workers(p);
    free(p->workers);
    kn_free_aligned(p);
}

int kn_pool_threads(const kn_pool *p) { return p ? p->n_threads : 1; }

/* Publishes tasks [base, base + n) (0 < n <= MAX_RUN_TASKS), takes part, waits for the rest. */
static void run_slice(kn_pool *p, int64_t base, int64_t n, kn_task_fn fn, void *ctx) {
    p->fn = fn;
    p->ctx = ctx;
    p->base = base;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->next, (uint64_t)n << 32, memory_order_release);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) futex_wake_all(&p->gen);
    const int64_t mine = work(p, 0);
    /* Only tasks a worker has claimed and not finished remain: wait for those. */
    const uint32_t want = (uint32_t)(n - mine);
    int spins = 0;
    uint32_t d;
    while ((d = atomic_load_explicit(&p->done, memory_order_acquire)) != want) {
        if (++spins < WAIT_SPIN_ITERS) {
            cpu_relax();
            continue;
        }
        atomic_store(&p->caller_waiting, 1);
        if ((d = atomic_load(&p->done)) != want) futex_wait(&p->done, d);
        atomic_store(&p->caller_waiting, 0);
    }
}

void kn_pool_run(kn_pool *p, int64_t n_tasks, kn_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n_workers == 0 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    for (int64_t base = 0; base < n_tasks; base += MAX_RUN_TASKS)
        run_slice(p, base, KN_MIN(MAX_RUN_TASKS, n_tasks - base), fn, ctx);
}
