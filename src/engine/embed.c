/*
 * embed.c - embeddings on the engine (kiln_engine_embed): one vector per input, made by the same
 * scheduler thread that advances the generations, so embedding calls and generation share one
 * model, one thread pool and one queue of work without two threads competing for the cores.
 *
 * A call is checked on the caller's thread and queued; the scheduler runs one embedding pass per
 * turn of its loop, between two generation steps (scheduler.c): a pass takes the next inputs of
 * the first waiting call, as many as fit kiln_engine_embed_max_tokens stacked tokens (at least
 * one), as the rows of one forward pass (kn_forward_embed: an encoder pass, or a decoder's prefill
 * without logits), each row with a KV of its own that lives for the pass only. The pooled vectors
 * are truncated to the requested dimensions and normalized into the caller's buffer; the call
 * completes when its last input has run. Generation thus waits at most one pass at a time.
 */
#include "engine/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kn_embed_job {
    const kiln_token *const *inputs;
    int32_t *len; /* [n] tokens of each input after truncation */
    size_t n;
    size_t next; /* the first input not yet run */
    int32_t dim; /* values kept per vector */
    bool normalize;
    float *out; /* [n][dim], the caller's */
    /* under e->mu */
    bool done;
    kiln_status status;
    char err[KN_ERRMSG_MAX];
    struct kn_embed_job *next_job;
};

kiln_embed_params kiln_embed_default_params(void) {
    kiln_embed_params p = {.normalize = true, .dimensions = 0, .truncate = false};
    return p;
}

bool kiln_model_is_embedding(const kiln_model *m) {
    const kn_pooling p = m->hp.pooling;
    return !m->vocab_only && (p == KN_POOL_MEAN || p == KN_POOL_CLS || p == KN_POOL_LAST);
}

bool kiln_model_can_generate(const kiln_model *m) { return !m->vocab_only && m->hp.causal; }

const char *kiln_model_pooling(const kiln_model *m) {
    switch (m->hp.pooling) {
        case KN_POOL_MEAN: return "mean";
        case KN_POOL_CLS: return "cls";
        case KN_POOL_LAST: return "last";
        case KN_POOL_RANK: return "rank";
        case KN_POOL_NONE: break;
    }
    return "none";
}

int32_t kiln_engine_embed_max_tokens(const kiln_engine *e) {
    const kiln_model *m = e->model;
    int32_t n = e->p.n_ctx;
    if (m->pos_embd.rows && m->pos_embd.rows < n) n = (int32_t)m->pos_embd.rows;
    return n;
}

bool kn_embed_pending_locked(const kiln_engine *e) { return e->embed_head != NULL; }

/* Ends job with st (message msg when failing): off the queue, waiters woken. */
static void finish(kiln_engine *e, struct kn_embed_job *job, kiln_status st, const char *msg) {
    pthread_mutex_lock(&e->mu);
    e->embed_head = job->next_job;
    if (!e->embed_head) e->embed_tail = NULL;
    job->status = st;
    if (st) snprintf(job->err, sizeof job->err, "%s", msg && *msg ? msg : kiln_status_str(st));
    job->done = true;
    pthread_cond_broadcast(&e->done_cv);
    pthread_mutex_unlock(&e->mu);
}

/* The pass's scratch: as many stacked tokens as one input may hold, sharing the generation
 * scratch's thread pool (both run on the scheduler thread, one after the other). */
static kiln_status ensure_scratch(kiln_engine *e) {
    if (e->embed_ready) return KILN_OK;
    const int32_t n = kiln_engine_embed_max_tokens(e);
    kiln_status st = kn_scratch_init(&e->embed_scratch, e->model, n, n, 1);
    if (st) return st;
    e->embed_scratch.pool = e->scratch.pool;
    e->embed_scratch.n_threads = e->scratch.n_threads;
    e->embed_ready = true;
    return KILN_OK;
}

void kn_embed_release(kiln_engine *e) {
    if (!e->embed_ready) return;
    e->embed_scratch.pool = NULL; /* the generation scratch's */
    kn_scratch_free(&e->embed_scratch);
    e->embed_ready = false;
}

/* out[dim] = the first dim values of v, scaled to unit length when normalize (a zero vector stays
 * zero). The norm is summed in double, in index order. */
static void finish_vector(const float *v, int32_t dim, bool normalize, float *out) {
    double sq = 0;
    for (int32_t i = 0; i < dim; i++) sq += (double)v[i] * v[i];
    const float f = normalize && sq > 0 ? (float)(1.0 / sqrt(sq)) : 1.0f;
    for (int32_t i = 0; i < dim; i++) out[i] = v[i] * f;
}

void kn_embed_step(kiln_engine *e) {
    pthread_mutex_lock(&e->mu);
    struct kn_embed_job *job = e->embed_head;
    pthread_mutex_unlock(&e->mu);
    if (!job) return;
    const kiln_model *m = e->model;
    const kn_hparams *hp = &m->hp;
    const int32_t budget = kiln_engine_embed_max_tokens(e);
    kiln_status st = ensure_scratch(e);
    if (st) {
        char msg[KN_ERRMSG_MAX];
        kn_error_save(msg);
        finish(e, job, st, msg);
        return;
    }
    /* the inputs of this pass: in order, while their tokens fit (at least one) */
    size_t k = 0;
    int64_t tokens = 0;
    while (job->next + k < job->n && (k == 0 || tokens + job->len[job->next + k] <= budget))
        tokens += job->len[job->next + k++];
    kn_kv *kv = calloc(k, sizeof *kv);
    kn_batch_row *rows = calloc(k, sizeof *rows);
    float *pooled = kn_alloc_aligned(k * (size_t)hp->n_embd * sizeof(float));
    size_t n_kv = 0;
    st = kv && rows && pooled ? KILN_OK : kn_error(KILN_ERR_NOMEM, "out of memory for an embedding pass");
    for (; !st && n_kv < k; n_kv++) {
        const size_t i = job->next + n_kv;
        st = kn_kv_init(&kv[n_kv], KN_F32, hp->n_layer, job->len[i], hp->n_head_kv * hp->head_dim);
        if (st) break;
        rows[n_kv] = (kn_batch_row){.kv = &kv[n_kv], .tokens = job->inputs[i], .n_tokens = job->len[i]};
    }
    if (!st) {
        kn_forward_embed(m, &e->embed_scratch, rows, (int)k, hp->pooling, pooled);
        for (size_t r = 0; r < k; r++)
            finish_vector(pooled + r * (size_t)hp->n_embd, job->dim, job->normalize,
                          job->out + (job->next + r) * (size_t)job->dim);
    }
    for (size_t r = 0; r < n_kv; r++) kn_kv_free(&kv[r]);
    free(kv);
    free(rows);
    kn_free_aligned(pooled);
    pthread_mutex_lock(&e->mu);
    e->steps++;
    pthread_mutex_unlock(&e->mu);
    if (st) {
        char msg[KN_ERRMSG_MAX];
        kn_error_save(msg);
        finish(e, job, st, msg);
        return;
    }
    job->next += k;
    if (job->next == job->n) finish(e, job, KILN_OK, NULL);
}

/* The checks of a call, on the caller's thread; the lengths after truncation into len[]. */
static kiln_status validate(const kiln_engine *e, const kiln_token *const *inputs, const size_t *n_tokens, size_t n,
                            const kiln_embed_params *p, int32_t *len, int32_t *n_truncated) {
    const kiln_model *m = e->model;
    if (m->hp.pooling == KN_POOL_RANK)
        return kn_error(KILN_ERR_UNSUPPORTED, "the model '%s' is a reranker (pooling 'rank'); kiln does not run it",
                        m->arch_name);
    if (!kiln_model_is_embedding(m))
        return kn_error(
            KILN_ERR_UNSUPPORTED,
            "the model '%s' is a text-generation model, not an embedding model: its file names no pooling "
            "(%s.pooling_type); serve an embedding model (bert, nomic-bert, Qwen3-Embedding) for embeddings",
            m->arch_name, m->arch_name);
    if (n == 0 || n > KILN_EMBED_MAX_INPUTS)
        return kn_error(KILN_ERR_INVALID_ARG, "%zu inputs: one call embeds 1 to %d", n, KILN_EMBED_MAX_INPUTS);
    if (!inputs || !n_tokens) return kn_error(KILN_ERR_INVALID_ARG, "the inputs are NULL");
    if (p->dimensions < 0 || p->dimensions > m->hp.n_embd)
        return kn_error(KILN_ERR_INVALID_ARG, "dimensions %d is outside [1, %d] (the model's width)", p->dimensions,
                        m->hp.n_embd);
    const int32_t limit = kiln_engine_embed_max_tokens(e), V = m->hp.n_vocab;
    *n_truncated = 0;
    for (size_t i = 0; i < n; i++) {
        if (n_tokens[i] == 0 || !inputs[i]) return kn_error(KILN_ERR_INVALID_ARG, "input %zu is empty", i);
        size_t l = n_tokens[i];
        if (l > (size_t)limit) {
            if (!p->truncate)
                return kn_error(KILN_ERR_CONTEXT_FULL, "input %zu has %zu tokens, more than the limit of %d tokens", i,
                                l, limit);
            l = (size_t)limit;
            ++*n_truncated;
        }
        for (size_t t = 0; t < l; t++)
            if (inputs[i][t] < 0 || inputs[i][t] >= V)
                return kn_error(KILN_ERR_INVALID_ARG,
                                "input %zu: token %d at index %zu is outside the vocabulary [0, %d)", i, inputs[i][t],
                                t, V);
        len[i] = (int32_t)l;
    }
    return KILN_OK;
}

kiln_status kiln_engine_embed(kiln_engine *e, const kiln_token *const *inputs, const size_t *n_tokens, size_t n_inputs,
                              const kiln_embed_params *params, float *out, size_t out_cap, kiln_embed_result *result) {
    kn_error_clear();
    if (!e) return kn_error(KILN_ERR_INVALID_ARG, "kiln_engine_embed: the engine is NULL");
    const kiln_embed_params p = params ? *params : kiln_embed_default_params();
    const int32_t dim = p.dimensions ? p.dimensions : e->model->hp.n_embd;
    struct kn_embed_job job;
    memset(&job, 0, sizeof job);
    int32_t n_truncated = 0;
    if (n_inputs > 0 && n_inputs <= KILN_EMBED_MAX_INPUTS && !(job.len = malloc(n_inputs * sizeof *job.len)))
        return kn_error(KILN_ERR_NOMEM, "out of memory");
    kiln_status st = validate(e, inputs, n_tokens, n_inputs, &p, job.len, &n_truncated);
    if (!st && (!out || out_cap < n_inputs * (size_t)dim))
        st = kn_error(KILN_ERR_BUFFER_SMALL, "the output holds %zu floats; %zu inputs of %d need %zu", out_cap,
                      n_inputs, dim, n_inputs * (size_t)dim);
    if (st) {
        free(job.len);
        return st;
    }
    job.inputs = inputs;
    job.n = n_inputs;
    job.dim = dim;
    job.normalize = p.normalize;
    job.out = out;
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        free(job.len);
        return kn_error(KILN_ERR_BUSY, "the engine is shutting down");
    }
    if (e->embed_tail) e->embed_tail->next_job = &job;
    else e->embed_head = &job;
    e->embed_tail = &job;
    pthread_cond_broadcast(&e->wake);
    while (!job.done) pthread_cond_wait(&e->done_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    int64_t total = 0;
    for (size_t i = 0; i < n_inputs; i++) total += job.len[i];
    free(job.len);
    if (job.status) return kn_error(job.status, "%s", job.err);
    if (result) *result = (kiln_embed_result){.dim = dim, .n_tokens = total, .n_truncated = n_truncated};
    return KILN_OK;
}
