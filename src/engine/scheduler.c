/*
 * scheduler.c - the engine's scheduling loop: WHEN and WHICH rows advance.
 *
 * Iteration-level scheduling. Each turn of the loop, under the engine lock: queued requests that
 * were cancelled are dropped, and waiting requests take free rows (up to the KV budget's row cap)
 * in arrival order; with paged KV a request takes a row only once the block pool can hold its
 * worst case (reserve_row: the prefix cache gives blocks back first), else it waits at the head of
 * the queue (kiln_engine_submit answers KILN_ERR_BUSY only when the queue is full). Then, without the lock: new rows
 * get their KV (allocated on a slot's first use and kept), restore the longest cached prefix of their prompt from the
 * prefix cache (which alone decides whether it comes from RAM or from its SSD tier), and begin; rows whose request was
 * cancelled leave; one embedding pass runs when an embedding call waits (embed.c); one executor
 * step advances all active rows together (kn_spec_step, the method's step: decode tokens first,
 * with their proposals under a speculative method, joining prompts in
 * chunks); finished rows end and free their slot at once. The
 * scheduler never touches tensors itself: the numeric work is the method's (row.c), the KV layout
 * the cache's.
 */
#include "engine/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Ends a request that never got a row (cancelled while queued, or failed to begin: r->err then
 * holds the reason). */
static void end_unstarted(kiln_engine *e, kiln_request *r, kiln_status st) {
    kiln_generate_result res = {.stop = KILN_STOP_CANCELLED, .stop_index = -1, .error = r->err};
    if (st == KILN_ERR_CANCELLED) snprintf(r->err, sizeof r->err, "the request was cancelled before it started");
    else res.stop = KILN_STOP_NONE;
    if (r->gp.on_done) r->gp.on_done(st, &res, r->gp.user);
    pthread_mutex_lock(&e->mu);
    kn_request_complete_locked(e, r, st, &res);
    pthread_mutex_unlock(&e->mu);
    kn_request_unref(r);
}

/* Removes cancelled requests from the queue into out[] (lock held); returns how many. */
static int drop_cancelled_locked(kiln_engine *e, kiln_request **out) {
    int n = 0, kept = 0;
    const int cap = e->p.max_queue;
    for (int i = 0; i < e->q_count; i++) {
        kiln_request *r = e->queue[(e->q_head + i) % cap];
        if (atomic_load(&r->cancel)) out[n++] = r;
        else e->queue[(e->q_head + kept++) % cap] = r;
    }
    e->q_count = kept;
    if (n) e->blocked_avail = -1; /* the head may have changed */
    return n;
}

/* Paged KV: readies slot s for request r before it is admitted (lock not held): restores the
 * longest cached prefix of the prompt into the slot's KV (mapping the cache's blocks), then
 * reserves the blocks the row may still need at most: its positions up to the prompt plus
 * max_tokens (capped by the context) not covered by whole shared blocks, plus one for copying a
 * block it shares when it writes there. Under pressure the prefix cache gives blocks back first
 * (least recently used first; to the SSD tier when attached). KILN_OK when the row is ready;
 * KILN_ERR_BUSY, with the slot's KV emptied, when the pool cannot hold the row now (the request
 * waits for blocks to be freed); any other status is an allocation failure that waiting would not
 * cure (the request is admitted and start_row ends it with that error). */
static kiln_status reserve_row(kiln_engine *e, kn_slot *s, kiln_request *r) {
    const kn_hparams *hp = &e->model->hp;
    if (!s->allocated) {
        const kiln_status st =
            kn_kv_init_paged(&s->kv, &e->kv_pool, &e->kv_fmt, hp->n_layer, e->p.n_ctx, hp->n_head_kv, hp->head_dim);
        if (st) return st;
        s->allocated = true;
    }
    s->cached = r->gp.prompt_logprobs >= 0 /* every position's logits: nothing restored */
                    ? 0
                    : kn_pc_restore(&e->cache, r->prompt, (int32_t)r->n_prompt, (int32_t)r->n_prompt - 1, &s->kv);
    const int64_t gen = r->gp.max_tokens >= 0 ? r->gp.max_tokens : e->p.n_ctx;
    const int64_t limit = KN_MIN((int64_t)e->p.n_ctx, (int64_t)r->n_prompt + gen);
    const int32_t bt = e->kv_pool.bt;
    const int32_t need = (int32_t)((limit + bt - 1) / bt) - s->cached / bt + 1;
    kiln_status st;
    while ((st = kn_kvp_reserve(&e->kv_pool, need)) == KILN_ERR_BUSY && kn_pc_evict_lru(&e->cache)) {}
    if (!st) kn_kv_set_quota(&s->kv, need);
    else kn_kv_reset(&s->kv);
    return st;
}

/* Gives free slots (within the row cap) to waiting requests in arrival order (lock held; a paged
 * engine drops it while it reserves a row's blocks); the slots that got one are listed in
 * fresh[]. Returns how many; *blocked tells whether the first waiting request lacks KV blocks. */
static int admit_locked(kiln_engine *e, int *fresh, bool *blocked) {
    int n = 0;
    *blocked = false;
    for (int i = 0; i < e->row_cap && e->q_count; i++) {
        if (e->slots[i].req) continue;
        kiln_request *r = e->queue[e->q_head];
        if (e->paged) { /* only this thread takes requests from the queue: r stays its head */
            const int32_t avail = kn_kvp_available(&e->kv_pool);
            if (e->blocked_avail >= 0 && avail <= e->blocked_avail) { /* nothing was freed since */
                *blocked = true;
                break;
            }
            pthread_mutex_unlock(&e->mu);
            const kiln_status st = reserve_row(e, &e->slots[i], r);
            if (st && st != KILN_ERR_BUSY) kn_error_save(r->err); /* for start_row to end it with */
            pthread_mutex_lock(&e->mu);
            const bool wait = st == KILN_ERR_BUSY;
            e->blocked_avail = wait ? kn_kvp_available(&e->kv_pool) : -1;
            if (wait) {
                *blocked = true;
                break;
            }
            e->slots[i].admit_st = st;
        }
        e->slots[i].req = r;
        e->q_head = (e->q_head + 1) % e->p.max_queue;
        e->q_count--;
        fresh[n++] = i;
    }
    return n;
}

/* A paged row's KV goes back to the pool (blocks the prefix cache shares stay with it). */
static void release_kv(kiln_engine *e, kn_slot *s) {
    if (!e->paged) return;
    kn_kv_reset(&s->kv);
    kn_kv_set_quota(&s->kv, 0);
}

/* A request with prompt logprobs is starting: the step's logits buffer grows (once) by
 * KN_PROMPT_LOGITS rows for its prompt chunks. Without the memory it stays as it is, and such
 * prompts advance a token a step. */
static void grow_logits(kiln_engine *e) {
    const int32_t want = e->p.max_rows + KN_PROMPT_LOGITS;
    if (e->logits_rows >= want) return;
    float *l = kn_alloc_aligned((size_t)want * (size_t)e->model->hp.n_vocab * sizeof(float));
    if (!l) return;
    kn_free_aligned(e->logits);
    e->logits = l;
    e->logits_rows = want;
}

/* Prepares a slot's KV and begins its row; on failure the request ends with the error. */
static void start_row(kiln_engine *e, kn_slot *s) {
    const kn_hparams *hp = &e->model->hp;
    kiln_status st = s->admit_st;
    s->admit_st = KILN_OK;
    if (!st && !s->allocated && !e->paged) {
        st = kn_kv_init_fmt(&s->kv, &e->kv_fmt, hp->n_layer, e->p.n_ctx, hp->n_head_kv, hp->head_dim);
        s->allocated = st == KILN_OK;
    }
    kiln_request *r = s->req;
    if (!st) {
        /* The longest cached prefix (leaving at least one prompt token to compute) goes into the
         * slot's KV (paged: at admission); prefill starts after it. Prompt logprobs need every
         * position's logits: nothing is restored for them. */
        int32_t cached = s->cached;
        if (!e->paged)
            cached = r->gp.prompt_logprobs >= 0
                         ? 0
                         : kn_pc_restore(&e->cache, r->prompt, (int32_t)r->n_prompt, (int32_t)r->n_prompt - 1, &s->kv);
        if (r->gp.prompt_logprobs >= 0) grow_logits(e);
        st = kn_row_begin(&s->row, e->model, &s->kv, r->prompt, r->n_prompt, cached, &r->gp);
        s->prompt_shared = false;
    }
    if (!st) {
        kn_spec_row_begin(&e->spec, &s->row, (int)(s - e->slots)); /* without its draft cache: plain decoding */
        return;
    }
    if (!r->err[0]) kn_error_save(r->err); /* an admission error saved its message already */
    KN_LOGE("a request could not start: %s", r->err);
    release_kv(e, s);
    pthread_mutex_lock(&e->mu);
    s->req = NULL;
    pthread_mutex_unlock(&e->mu);
    end_unstarted(e, r, st);
}

/* Ends a finished row: its tokens (prompt and generated, as far as their K/V were computed) are
 * published to the prefix cache before on_done runs, so a client's next request can hit; then the
 * request completes and the slot frees. */
static void end_row(kiln_engine *e, kn_slot *s) {
    if (s->row.seq) kn_pc_publish(&e->cache, s->row.seq, s->kv.n_past, &s->kv, 2);
    kn_spec_row_end(&e->spec, &s->row); /* and the draft's, to the draft's cache */
    kiln_generate_result res;
    kiln_status st = kn_row_end(&s->row, &res);
    release_kv(e, s);
    kiln_request *r = s->req;
    pthread_mutex_lock(&e->mu);
    kn_request_complete_locked(e, r, st, &res);
    s->req = NULL;
    pthread_cond_broadcast(&e->wake);
    pthread_mutex_unlock(&e->mu);
    kn_request_unref(r);
}

size_t kn_scheduler_mem_size(int max_rows, int max_queue) {
    return (size_t)KN_MAX(max_queue, 1) * sizeof(kiln_request *) + (size_t)max_rows * sizeof(kn_row *) +
           (size_t)max_rows * sizeof(kn_slot *) + (size_t)max_rows * sizeof(int);
}

void *kn_scheduler_main(void *arg) {
    kiln_engine *e = arg;
    const int R = e->p.max_rows;
    /* the lists of one step, in e->sched_mem (pointers first, then the ints) */
    kiln_request **dropped = e->sched_mem;
    kn_row **rows = (kn_row **)(dropped + KN_MAX(e->p.max_queue, 1));
    kn_slot **row_slot = (kn_slot **)(rows + R);
    int *fresh = (int *)(row_slot + R);
    pthread_mutex_lock(&e->mu);
    for (;;) {
        const int n_drop = drop_cancelled_locked(e, dropped);
        bool blocked;
        const int n_fresh = admit_locked(e, fresh, &blocked);
        int n_active = 0;
        for (int i = 0; i < R; i++) n_active += e->slots[i].req != NULL;
        const bool embed = kn_embed_pending_locked(e);
        if (!n_drop && !n_active && !embed) {
            if (e->stopping && !e->q_count) break;
            if (blocked) { /* blocks are still held by entries on their way to SSD: look again soon */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 20 * 1000000L;
                if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
                pthread_cond_timedwait(&e->wake, &e->mu, &ts);
            } else {
                pthread_cond_wait(&e->wake, &e->mu);
            }
            continue;
        }
        pthread_mutex_unlock(&e->mu);

        for (int i = 0; i < n_drop; i++) end_unstarted(e, dropped[i], KILN_ERR_CANCELLED);
        for (int i = 0; i < n_fresh; i++) start_row(e, &e->slots[fresh[i]]);
        if (embed) kn_embed_step(e); /* one embedding pass between two generation steps */
        int n = 0;
        for (int i = 0; i < R; i++) {
            kn_slot *s = &e->slots[i];
            if (!s->req) continue; /* only the scheduler clears req, so no lock is needed here */
            if (atomic_load(&s->req->cancel)) kn_row_cancel(&s->row);
            if (!s->row.finished) {
                rows[n] = &s->row;
                row_slot[n++] = s;
            } else {
                end_row(e, s);
            }
        }
        if (n) {
            kn_spec_step(&e->spec, e->model, &e->scratch, rows, n, e->scratch.n_max, e->p.prefill_chunk, e->logits,
                         e->logits_rows);
            for (int i = 0; i < n; i++) /* share_prompt: the prompt's KV as soon as it is whole */
                if (rows[i]->gp.share_prompt && rows[i]->decoding && !row_slot[i]->prompt_shared && rows[i]->seq) {
                    kn_pc_publish(&e->cache, rows[i]->seq, (int32_t)rows[i]->n_prompt, &row_slot[i]->kv, 2);
                    row_slot[i]->prompt_shared = true;
                }
            for (int i = 0; i < n; i++)
                if (rows[i]->finished) end_row(e, row_slot[i]);
        }
        pthread_mutex_lock(&e->mu);
        if (n) e->steps++;
    }
    pthread_mutex_unlock(&e->mu);
    kn_embed_release(e);
    return NULL;
}
