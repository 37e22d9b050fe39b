/*
 * engine.h - kiln_engine internals shared by engine.c (public API, requests) and scheduler.c (the
 * thread that admits requests into rows and steps them).
 *
 * Locking: e->mu guards the queue, the slots' request pointers, the stopping flag and every
 * request's done/status/result. Row state (kn_row, KV) is touched only by the scheduler thread.
 * User callbacks run on the scheduler thread without e->mu held.
 */
#ifndef KN_ENGINE_H
#define KN_ENGINE_H

#include "cache/prefix.h"
#include "engine/row.h"
#include "engine/spec.h"

#include <pthread.h>
#include <stdatomic.h>

/* Logits rows the engine adds for the prompt chunks of requests with prompt logprobs (each of their
 * prompt tokens needs its position's logits): such a prompt advances this many tokens a step. */
#define KN_PROMPT_LOGITS 32

struct kiln_request {
    kiln_engine *engine; /* for waiting; a handle may be freed after its engine */
    atomic_int refs;     /* the caller's handle + the engine while not done */
    atomic_bool cancel;
    kiln_token *prompt; /* [n_prompt] owned copy */
    size_t n_prompt;
    kiln_generate_params gp; /* stop / logit_bias point at the owned copies below */
    char **stop;
    kiln_logit_bias *bias;
    char err[KN_ERRMSG_MAX]; /* why it failed to start (result.error points here) */
    bool done;               /* under e->mu */
    kiln_status status;
    kiln_generate_result result;
};

typedef struct kn_slot {
    kn_kv kv; /* allocated on first use, then kept for later requests */
    bool allocated;
    kiln_request *req; /* running request, or NULL */
    kn_row row;
    bool prompt_shared;   /* gp.share_prompt: the prompt's KV is published already */
    int32_t cached;       /* paged KV: prompt tokens restored from the prefix cache at admission */
    kiln_status admit_st; /* paged KV: an error readying the row at admission (its message in req->err) */
} kn_slot;

struct kiln_engine {
    kiln_model *model;
    kiln_engine_params p;  /* resolved */
    int32_t row_cap;       /* rows the KV budget allows (<= max_rows, >= 1) */
    uint64_t kv_per_token; /* KV bytes per position of a row (kn_kv_bytes_per_token_fmt) */
    kn_kv_format kv_fmt;   /* the rows' KV format */
    size_t row_kv_bytes;   /* kv_per_token * n_ctx */
    kn_scratch scratch;
    kn_prefix_cache cache; /* KV of earlier requests, by token prefix */
    bool paged;            /* rows and the cache hold KV in blocks of kv_pool (else one contiguous
                              cache per row, and the prefix cache copies) */
    kn_kv_pool kv_pool;    /* the blocks (paged): sized by kv_budget; rows reserve their worst case at
                              admission, the cache gives blocks back under pressure */
    int32_t blocked_avail; /* paged: blocks available when the queue's head last failed to fit; -1 */
    kn_ssd *ssd;           /* the cache's SSD tier, or NULL */
    float *logits;         /* [logits_rows][n_vocab] */
    int32_t logits_rows;   /* max_rows, and KN_PROMPT_LOGITS more once a request asks for prompt logprobs */
    kn_spec spec;          /* the speculative method (none: plain decoding) */
    kn_slot *slots;        /* [max_rows] */
    kiln_request **queue;  /* ring [max_queue] */
    void *sched_mem;       /* the scheduler's per-step lists (scheduler.c), made by kiln_engine_new so
                              that a scheduler thread never starts without them */
    int q_head, q_count;
    pthread_mutex_t mu;
    pthread_cond_t wake;    /* scheduler: new work or stopping */
    pthread_cond_t done_cv; /* waiters: some request ended */
    pthread_t thread;
    bool thread_started;
    bool stopping;
    bool joined;
    uint64_t steps;
    /* embeddings (embed.c): calls waiting or running, in arrival order (under mu); the scratch of
     * their passes, made on first use by the scheduler thread (which alone touches it) */
    struct kn_embed_job *embed_head, *embed_tail;
    kn_scratch embed_scratch;
    bool embed_ready;
};

void *kn_scheduler_main(void *engine);
/* Bytes of engine->sched_mem for max_rows rows and max_queue queued requests. */
size_t kn_scheduler_mem_size(int max_rows, int max_queue);
/* Whether an embedding call waits (lock held). */
bool kn_embed_pending_locked(const kiln_engine *e);
/* One embedding pass (scheduler thread, lock not held): some inputs of the first waiting call as
 * the rows of one encoder pass; the call completes when its last input has run. */
void kn_embed_step(kiln_engine *e);
/* The scheduler is leaving: frees the embedding scratch. */
void kn_embed_release(kiln_engine *e);
/* Marks a request ended (lock held by the caller): records status/result, wakes waiters. */
void kn_request_complete_locked(kiln_engine *e, kiln_request *r, kiln_status st, const kiln_generate_result *res);
void kn_request_unref(kiln_request *r);

#endif
