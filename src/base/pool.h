/*
 * pool.h - a persistent pool of worker threads that run a set of independent tasks.
 *
 * A pool of n threads is the calling thread plus n - 1 workers started once. kn_pool_run hands out
 * the tasks 0 .. n_tasks-1 from one shared counter: the caller and every awake worker claim the next
 * unclaimed task until none is left. The caller never waits for a worker to wake up: if a worker is
 * descheduled (the other core is busy), the caller simply runs the remaining tasks itself; the only
 * wait is for tasks already claimed and still running. Idle workers spin briefly, then sleep on a
 * futex; a run costs one wake-up call at most (and none while the workers still spin).
 *
 * Determinism is the caller's side of the contract: which thread runs which task varies from run to
 * run, so a task must compute outputs that no other task of the same run writes or reads (weight
 * rows of a matmul, tokens, (token, head) pairs). Then every value is bit-identical for any thread
 * count and any task-to-thread assignment.
 *
 * One pool serves one executor (a session or an engine): runs on one pool must not overlap (one
 * caller at a time) and a task must not call kn_pool_run on its own pool.
 */
#ifndef KN_POOL_H
#define KN_POOL_H

#include "base/base.h"

typedef struct kn_pool kn_pool;

/* A task: runs task number `task` of the current run on behalf of thread `worker` (0 = the caller,
 * 1 .. n_threads-1 = the workers; usable to pick per-thread scratch). */
typedef void (*kn_task_fn)(void *ctx, int64_t task, int worker);

/* Creates a pool of n_threads threads in all (n_threads - 1 workers; 1 means no workers: every run
 * is inline). Returns KILN_ERR_INVALID_ARG for n_threads outside [1, 1024], KILN_ERR_NOMEM or
 * KILN_ERR_INTERNAL when memory or threads cannot be had (nothing is left behind). */
kiln_status kn_pool_new(int n_threads, kn_pool **out);

/* Stops and joins the workers and frees the pool. NULL is a no-op. No run may be in progress. */
void kn_pool_free(kn_pool *p);

/* Threads of the pool including the caller (1 for a NULL pool). */
int kn_pool_threads(const kn_pool *p);

/* Runs fn(ctx, i, worker) exactly once for every i in [0, n_tasks) and returns when all have
 * finished; every write of a task happens-before the return. n_tasks <= 0 returns at once; a NULL
 * pool, a pool of one thread or a single task run inline on the caller. Allocates nothing. */
void kn_pool_run(kn_pool *p, int64_t n_tasks, kn_task_fn fn, void *ctx);

#endif
