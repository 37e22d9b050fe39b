/*
 * engine.c - kiln_engine's public API: creation, request submission, cancellation, waiting,
 * statistics and shutdown. The scheduling loop itself is in scheduler.c.
 */
#include "engine/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Defaults (documented in kiln.h). */
#define DEFAULT_MAX_ROWS          8
#define DEFAULT_MAX_QUEUE         64
#define DEFAULT_PREFILL_CHUNK     64             /* measured: bench/chunk.mjs in docs/benchmarks.md */
#define DEFAULT_SSD_MAX_BYTES     20000000000ull /* 20 GB */
#define DEFAULT_SSD_DEMOTE_IDLE_S 30

/* Limits of the params (beyond: KILN_ERR_INVALID_ARG). */
#define MAX_ROWS_LIMIT          1024
#define MAX_QUEUE_LIMIT         (1 << 20)
#define SSD_DEMOTE_IDLE_S_LIMIT 100000000 /* about three years */

/* Evicted entries waiting for the SSD writer live outside the prompt cache's RAM budget: at most
 * 1/SSD_PENDING_SHARE of it, and at least SSD_PENDING_MIN_BYTES. */
#define SSD_PENDING_SHARE     4
#define SSD_PENDING_MIN_BYTES ((size_t)256 << 20)

kiln_engine_params kiln_engine_default_params(void) {
    kiln_engine_params p = {.n_ctx = 0,
                            .max_rows = DEFAULT_MAX_ROWS,
                            .max_queue = DEFAULT_MAX_QUEUE,
                            .prefill_chunk = DEFAULT_PREFILL_CHUNK,
                            .n_threads = 0,
                            .kv_type = KILN_KV_F16,
                            .kv_budget = 0,
                            .prompt_cache = KILN_PROMPT_CACHE_AUTO,
                            .ssd_dir = NULL,
                            .ssd_max_bytes = DEFAULT_SSD_MAX_BYTES,
                            .ssd_demote_idle_s = DEFAULT_SSD_DEMOTE_IDLE_S,
                            .ssd_verify = true,
                            .kv_type_v = KILN_KV_SAME,
                            .kv_rotate = KILN_KV_ROTATE_AUTO};
    p.kv_paging = true;
    p.spec = KILN_SPEC_NONE;
    p.draft_model = NULL;
    p.spec_max = 0;
    return p;
}

/* Decodes 64 hex characters into 32 bytes; false on anything else. */
static bool hex32(const char *hex, uint8_t out[32]) {
    for (int i = 0; i < 64; i++) {
        const char c = hex[i];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        out[i / 2] = (uint8_t)(i & 1 ? out[i / 2] | d : d << 4);
    }
    return hex[64] == 0;
}

/* Opens the SSD tier on e->p.ssd_dir, keyed by the model's fingerprint, its tokenizer and the KV
 * format, and attaches it to the prefix cache. */
static kiln_status open_ssd(kiln_engine *e) {
    const kn_hparams *hp = &e->model->hp;
    kn_ssd_params sp;
    memset(&sp, 0, sizeof sp);
    sp.dir = e->p.ssd_dir;
    sp.max_bytes = e->p.ssd_max_bytes;
    sp.verify = e->p.ssd_verify;
    sp.max_pending = KN_MAX(SSD_PENDING_MIN_BYTES, (size_t)(e->p.prompt_cache / SSD_PENDING_SHARE));
    if (!hex32(e->model->fingerprint, sp.key.model)) return kn_error(KILN_ERR_INTERNAL, "bad model fingerprint");
    memcpy(sp.key.tokenizer, e->model->tok_hash, 32);
    sp.key.kv_type = kn_kv_format_code(&e->kv_fmt, hp->head_dim);
    sp.key.n_layer = (uint32_t)hp->n_layer;
    sp.key.kv_dim = (uint32_t)(hp->n_head_kv * hp->head_dim);
    kiln_status st = kn_ssd_open(&sp, &e->ssd);
    if (st) return st;
    kn_pc_attach_ssd(&e->cache, e->ssd, (double)e->p.ssd_demote_idle_s * 1000.0);
    return KILN_OK;
}

/* The block pool of a paged engine: kv_budget bytes of blocks, or (without a budget) max_rows full
 * rows plus the prompt cache's budget; at least one full row and the block a row may copy. */
static kiln_status init_pool(kiln_engine *e) {
    const kn_hparams *hp = &e->model->hp;
    const size_t bb = kn_kv_block_bytes(&e->kv_fmt, hp->n_layer, hp->n_head_kv, hp->head_dim, KN_KVP_BLOCK);
    if (!bb) return kn_error(KILN_ERR_NOMEM, "the KV block size overflows");
    const uint64_t per_row = (uint64_t)(e->p.n_ctx + KN_KVP_BLOCK - 1) / KN_KVP_BLOCK + 1;
    uint64_t cap = e->p.kv_budget
                       ? e->p.kv_budget / bb
                       : per_row * (uint64_t)e->p.max_rows + KN_MIN(e->p.prompt_cache / bb, (uint64_t)INT32_MAX);
    if (e->p.kv_budget && cap < per_row)
        KN_LOGW("a KV budget of %llu bytes is below one row (%llu bytes); running one row anyway",
                (unsigned long long)e->p.kv_budget, (unsigned long long)(per_row * bb));
    cap = KN_MIN(KN_MAX(cap, per_row), (uint64_t)INT32_MAX);
    return kn_kvp_init(&e->kv_pool, bb, (int32_t)cap);
}

kiln_status kiln_engine_new(kiln_model *m, const kiln_engine_params *params, kiln_engine **out) {
    kn_error_clear();
    if (!out) return kn_error(KILN_ERR_INVALID_ARG, "kiln_engine_new: out is NULL");
    *out = NULL;
    kiln_engine_params p = params ? *params : kiln_engine_default_params();
    kiln_status st = kn_exec_resolve(m, &p.n_ctx, &p.n_threads, p.kv_type);
    if (st) return st;
    const kn_hparams *hp = &m->hp;
    if (p.max_rows < 1 || p.max_rows > MAX_ROWS_LIMIT)
        return kn_error(KILN_ERR_INVALID_ARG, "max_rows %d is outside [1, %d]", p.max_rows, MAX_ROWS_LIMIT);
    if (p.max_queue < 0 || p.max_queue > MAX_QUEUE_LIMIT)
        return kn_error(KILN_ERR_INVALID_ARG, "max_queue %d is outside [0, %d]", p.max_queue, MAX_QUEUE_LIMIT);
    if (p.prefill_chunk < 1 || p.prefill_chunk > KILN_N_BATCH_MAX)
        return kn_error(KILN_ERR_INVALID_ARG, "prefill_chunk %d is outside [1, %d]", p.prefill_chunk, KILN_N_BATCH_MAX);
    p.prefill_chunk = KN_MIN(p.prefill_chunk, p.n_ctx);
    if (p.prompt_cache == KILN_PROMPT_CACHE_AUTO) p.prompt_cache = kiln_default_prompt_cache(kn_physical_memory());
    if (p.prompt_cache > SIZE_MAX) p.prompt_cache = SIZE_MAX;
    if (p.ssd_dir && !*p.ssd_dir) return kn_error(KILN_ERR_INVALID_ARG, "the SSD cache directory is an empty string");
    if (p.ssd_dir && p.ssd_max_bytes == 0) return kn_error(KILN_ERR_INVALID_ARG, "ssd_max_bytes must be positive");
    if (p.ssd_demote_idle_s < 0 || p.ssd_demote_idle_s > SSD_DEMOTE_IDLE_S_LIMIT)
        return kn_error(KILN_ERR_INVALID_ARG, "ssd_demote_idle_s %d is outside [0, %d]", p.ssd_demote_idle_s,
                        SSD_DEMOTE_IDLE_S_LIMIT);
    if ((st = kn_spec_check(p.spec, m, p.draft_model, &p.spec_max))) return st;
    kn_kv_format kv_fmt;
    st = kn_kv_format_of(p.kv_type, p.kv_type_v, p.kv_rotate, &kv_fmt);
    if (st) return st;
    const uint64_t kv_per_token = kn_kv_bytes_per_token_fmt(&kv_fmt, hp->n_layer, hp->n_head_kv, hp->head_dim);
    uint64_t row_kv_bytes;
    if (!kn_mul_ok(kv_per_token, (uint64_t)p.n_ctx, &row_kv_bytes) || row_kv_bytes > SIZE_MAX)
        return kn_error(KILN_ERR_NOMEM, "the KV of one row of %d tokens overflows", p.n_ctx);

    kiln_engine *e = kn_calloc(1, sizeof *e);
    if (!e) return KILN_ERR_NOMEM;
    e->model = m;
    e->p = p;
    e->kv_per_token = kv_per_token;
    e->kv_fmt = kv_fmt;
    e->row_kv_bytes = (size_t)row_kv_bytes;
    e->row_cap = p.max_rows;
    e->paged = p.kv_paging;
    e->blocked_avail = -1;
    if (e->paged && (st = init_pool(e))) {
        free(e);
        return st;
    }
    if (p.kv_budget && !e->paged) {
        uint64_t fit = p.kv_budget / e->row_kv_bytes;
        if (fit < 1)
            KN_LOGW("a KV budget of %llu bytes is below one row (%zu bytes); running one row anyway",
                    (unsigned long long)p.kv_budget, e->row_kv_bytes);
        e->row_cap = (int32_t)KN_MAX(1, KN_MIN((uint64_t)p.max_rows, fit));
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->wake, NULL);
    pthread_cond_init(&e->done_cv, NULL);
    kn_pc_init(&e->cache, (size_t)p.prompt_cache);
    st = p.ssd_dir ? open_ssd(e) : KILN_OK;
    e->p.ssd_dir = e->ssd ? kn_ssd_dir(e->ssd) : NULL; /* the caller's string may go */
    if (!st)
        st = kn_spec_init(&e->spec, p.spec, m, p.draft_model, p.spec_max, p.max_rows, p.n_ctx, p.prefill_chunk,
                          p.n_threads);
    if (!st) kn_spec_cache_init(&e->spec, (size_t)p.prompt_cache, kv_per_token); /* the draft's prompt cache */
    if (!st)
        st = kn_scratch_init(&e->scratch, m, kn_spec_scratch_tokens(&e->spec, p.max_rows, p.prefill_chunk), p.n_ctx,
                             p.n_threads);
    if (!st) {
        e->logits_rows = p.max_rows;
        e->logits = kn_alloc_aligned((size_t)p.max_rows * (size_t)hp->n_vocab * sizeof(float));
        e->slots = kn_calloc((size_t)p.max_rows, sizeof *e->slots);
        e->queue = kn_calloc((size_t)KN_MAX(p.max_queue, 1), sizeof *e->queue);
        e->sched_mem = kn_calloc(1, kn_scheduler_mem_size(p.max_rows, p.max_queue));
        if (!e->logits || !e->slots || !e->queue || !e->sched_mem) st = KILN_ERR_NOMEM;
    }
    if (!st && pthread_create(&e->thread, NULL, kn_scheduler_main, e) != 0)
        st = kn_error(KILN_ERR_INTERNAL, "cannot start the scheduler thread");
    e->thread_started = st == KILN_OK;
    if (st) {
        kiln_engine_free(e);
        return st;
    }
    *out = e;
    return KILN_OK;
}

/* Cancels every queued request and every running one (lock held). */
static void cancel_all_locked(kiln_engine *e, bool running) {
    for (int i = 0; i < e->q_count; i++) atomic_store(&e->queue[(e->q_head + i) % e->p.max_queue]->cancel, true);
    if (running)
        for (int i = 0; i < e->p.max_rows; i++)
            if (e->slots[i].req) atomic_store(&e->slots[i].req->cancel, true);
    pthread_cond_broadcast(&e->wake);
}

static int n_active_locked(const kiln_engine *e) {
    int n = 0;
    for (int i = 0; i < e->p.max_rows; i++) n += e->slots[i].req != NULL;
    return n;
}

void kiln_engine_shutdown(kiln_engine *e, int grace_ms) {
    if (!e || !e->thread_started) return;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    cancel_all_locked(e, false);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += grace_ms / 1000;
    ts.tv_nsec += (long)(grace_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while ((n_active_locked(e) || e->q_count) && pthread_cond_timedwait(&e->done_cv, &e->mu, &ts) == 0) {}
    cancel_all_locked(e, true);
    /* A concurrent call (e.g. a second signal cutting the grace short) may be joining already. */
    const bool join = !e->joined;
    e->joined = true;
    pthread_mutex_unlock(&e->mu);
    if (join) pthread_join(e->thread, NULL);
}

void kiln_engine_free(kiln_engine *e) {
    if (!e) return;
    kiln_engine_shutdown(e, 0);
    if (e->slots)
        for (int i = 0; i < e->p.max_rows; i++) kn_kv_free(&e->slots[i].kv);
    kn_scratch_free(&e->scratch);
    kn_spec_free(&e->spec);
    /* The SSD writer holds references to cache entries: stop it before the cache goes. */
    kn_ssd_close(e->ssd);
    kn_pc_detach_ssd(&e->cache);
    kn_pc_free(&e->cache);
    if (e->paged) kn_kvp_free(&e->kv_pool); /* after every holder of blocks */
    kn_free_aligned(e->logits);
    free(e->slots);
    free(e->queue);
    free(e->sched_mem);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->wake);
    pthread_cond_destroy(&e->done_cv);
    free(e);
}

kiln_status kiln_engine_flush_cache(kiln_engine *e, int timeout_ms) {
    kn_error_clear();
    if (!e) return kn_error(KILN_ERR_INVALID_ARG, "kiln_engine_flush_cache: engine is NULL");
    return kn_pc_flush(&e->cache, timeout_ms);
}

int32_t kiln_engine_n_ctx(const kiln_engine *e) { return e->p.n_ctx; }
int32_t kiln_engine_n_threads(const kiln_engine *e) { return e->p.n_threads; }

/* ---- requests ---------------------------------------------------------------------------------- */

void kn_request_unref(kiln_request *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    for (size_t i = 0; i < r->gp.n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->bias);
    free(r->prompt);
    kiln_grammar_free((kiln_grammar *)r->gp.grammar); /* the request's reference (copy_inputs) */
    free(r);
}

void kn_request_complete_locked(kiln_engine *e, kiln_request *r, kiln_status st, const kiln_generate_result *res) {
    r->status = st;
    if (res) r->result = *res;
    if (res && res->error && *res->error && res->error != r->err) { /* the row's message: keep a copy */
        snprintf(r->err, sizeof r->err, "%s", res->error);
        r->result.error = r->err;
    }
    r->done = true;
    pthread_cond_broadcast(&e->done_cv);
}

/* Everything about a request that can be checked before it is queued, so an accepted request
 * fails only by cancellation: prompt ids and length, logprobs, stop strings, sampler settings. */
static kiln_status validate(const kiln_engine *e, const kiln_token *prompt, size_t n, const kiln_generate_params *gp) {
    kiln_status st = kn_row_validate(e->model, e->p.n_ctx, prompt, n, gp);
    if (st) return st;
    size_t max_len;
    if ((st = kn_stopper_check(gp->stop, gp->n_stop, &max_len))) return st;
    if ((st = kn_sampler_check(&gp->sampling, e->model->hp.n_vocab))) return st;
    /* The vocabulary trie of constrained output is built here, on the caller's thread, the first
     * time a request has a grammar, not on the scheduler's while other rows wait. */
    if (gp->grammar && !(gp->render_special ? kn_model_vtrie_special(e->model) : kn_model_vtrie(e->model)))
        return kn_error(KILN_ERR_NOMEM, "out of memory building the vocabulary's trie for the grammar");
    return KILN_OK;
}

/* Copies prompt, stop strings and logit bias into r, and takes a reference to the grammar, so the
 * caller's buffers can go. */
static kiln_status copy_inputs(kiln_request *r, const kiln_token *prompt, size_t n, const kiln_generate_params *gp) {
    r->gp = *gp;
    r->gp.n_stop = 0;                                /* the stop strings r holds so far (kn_request_unref frees them) */
    if (gp->grammar) kn_grammar_retain(gp->grammar); /* the caller may free its grammar at once */
    r->n_prompt = n;
    r->prompt = malloc(n * sizeof *prompt);
    r->stop = kn_calloc(gp->n_stop + 1, sizeof *r->stop);
    r->bias = kn_calloc(gp->sampling.n_logit_bias + 1, sizeof *r->bias);
    if (!r->prompt || !r->stop || !r->bias) return KILN_ERR_NOMEM;
    memcpy(r->prompt, prompt, n * sizeof *prompt);
    for (size_t i = 0; i < gp->n_stop; i++) {
        if (!(r->stop[i] = kn_strdup(gp->stop[i]))) return KILN_ERR_NOMEM;
        r->gp.n_stop++;
    }
    r->gp.stop = (const char *const *)r->stop;
    if (gp->sampling.n_logit_bias)
        memcpy(r->bias, gp->sampling.logit_bias, gp->sampling.n_logit_bias * sizeof *r->bias);
    r->gp.sampling.logit_bias = r->bias;
    return KILN_OK;
}

kiln_status kiln_engine_submit(kiln_engine *e, const kiln_token *prompt, size_t n_prompt,
                               const kiln_generate_params *params, kiln_request **out) {
    kn_error_clear();
    if (!e || !out) return kn_error(KILN_ERR_INVALID_ARG, "kiln_engine_submit: NULL argument");
    *out = NULL;
    kiln_generate_params gp = params ? *params : kiln_generate_default_params();
    kiln_status st = validate(e, prompt, n_prompt, &gp);
    if (st) return st;
    kiln_request *r = kn_calloc(1, sizeof *r);
    if (!r) return kn_error(KILN_ERR_NOMEM, "out of memory copying a request");
    atomic_init(&r->refs, 2);
    atomic_init(&r->cancel, false);
    r->engine = e;
    if ((st = copy_inputs(r, prompt, n_prompt, &gp))) {
        atomic_store(&r->refs, 1);
        kn_request_unref(r);
        return kn_error(st, "out of memory copying a request");
    }
    pthread_mutex_lock(&e->mu);
    if (e->stopping) st = kn_error(KILN_ERR_BUSY, "the engine is shutting down");
    else if (e->q_count >= e->p.max_queue)
        st = kn_error(KILN_ERR_BUSY, "%d requests are already waiting (the queue limit)", e->q_count);
    if (!st) {
        e->queue[(e->q_head + e->q_count) % e->p.max_queue] = r;
        e->q_count++;
        pthread_cond_broadcast(&e->wake);
    }
    pthread_mutex_unlock(&e->mu);
    if (st) {
        atomic_store(&r->refs, 1);
        kn_request_unref(r);
        return st;
    }
    *out = r;
    return KILN_OK;
}

void kiln_request_cancel(kiln_request *r) {
    if (r) atomic_store(&r->cancel, true);
}

kiln_status kiln_request_wait(kiln_request *r, kiln_generate_result *result) {
    kiln_engine *e = r->engine;
    pthread_mutex_lock(&e->mu);
    while (!r->done) pthread_cond_wait(&e->done_cv, &e->mu);
    kiln_status st = r->status;
    if (result) *result = r->result;
    pthread_mutex_unlock(&e->mu);
    return st;
}

void kiln_request_free(kiln_request *r) {
    if (!r) return;
    atomic_store(&r->cancel, true); /* no effect once done */
    kn_request_unref(r);
}

void kiln_engine_get_stats(kiln_engine *e, kiln_engine_stats *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&e->mu);
    out->queued = e->q_count;
    out->max_rows = e->row_cap;
    out->steps = e->steps;
    out->kv_bytes_per_token = e->kv_per_token;
    out->kv_type_k = (kiln_kv_type)e->kv_fmt.k;
    out->kv_type_v = (kiln_kv_type)e->kv_fmt.v;
    out->kv_rotate_k = e->kv_fmt.rot_k;
    out->kv_rotate_v = e->kv_fmt.rot_v;
    for (int i = 0; i < e->p.max_rows; i++) {
        const kn_slot *s = &e->slots[i];
        if (s->allocated) out->kv_bytes += kn_kv_bytes(&s->kv); /* what the allocation holds */
        if (s->req) {
            out->active++;
            out->kv_bytes_used += e->kv_per_token * (uint64_t)s->kv.n_past;
        }
    }
    pthread_mutex_unlock(&e->mu);
    if (e->paged) {
        kn_kvp_stats ps;
        kn_kvp_get_stats(&e->kv_pool, &ps);
        out->kv_blocks_total = ps.total;
        out->kv_blocks_used = ps.used;
        out->kv_blocks_shared = ps.shared;
        out->kv_block_tokens = KN_KVP_BLOCK;
        out->kv_block_bytes = e->kv_pool.blk_bytes;
        out->kv_bytes = (uint64_t)ps.made * e->kv_pool.blk_bytes; /* the blocks' memory, made on first use and kept */
    }
    kn_pc_stats cs;
    kn_pc_get_stats(&e->cache, &cs);
    out->cache_entries = cs.entries;
    out->cache_bytes = cs.bytes;
    out->cache_budget = cs.budget;
    out->cache_hits = cs.hits;
    out->cache_misses = cs.misses;
    out->cache_hit_tokens = cs.hit_tokens;
    if (e->spec.method != KILN_SPEC_NONE) {
        out->spec_proposed[e->spec.method] = atomic_load(&e->spec.proposed);
        out->spec_accepted[e->spec.method] = atomic_load(&e->spec.accepted);
    }
    if (e->ssd) {
        kn_ssd_stats ss;
        kn_ssd_get_stats(e->ssd, &ss);
        out->ssd_enabled = true;
        out->ssd_entries = ss.entries;
        out->ssd_bytes = ss.bytes;
        out->ssd_budget = ss.budget;
        out->ssd_hits = ss.hits;
        out->ssd_hit_tokens = ss.hit_tokens;
        out->ssd_writes = ss.writes;
        out->ssd_pending = ss.pending;
        out->ssd_evictions = ss.evictions;
        out->ssd_quarantined = ss.quarantined;
        out->ssd_errors = ss.errors;
    }
}
