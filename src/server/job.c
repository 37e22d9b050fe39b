/*
 * job.c - a generation job of `kiln serve`: what one chat or completions request hands to the
 * engine, and the state its connection thread waits on (see server.h).
 *
 * A job is shared by the connection that made it and the engine (while its request runs), with a
 * reference count. The engine's thread reports every token through job->on_event under the job's
 * lock and wakes the connection thread; when the client goes away the connection cancels the
 * engine request, which leaves the batch at the next step.
 */
#include "isolate.h"
#include "server.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

srv_job *srv_job_new(void) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->gp = kiln_generate_default_params();
    atomic_init(&j->cancel, false);
    return j;
}

void srv_job_ref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    kiln_request_free(j->req);
    free(j->prompt);
    for (size_t i = 0; i < j->gp.n_stop; i++) free(j->stop[i]);
    free(j->stop);
    free(j->bias);
    srv_grammar_release(j->grammar); /* the engine holds its own reference while it runs */
    free(j->out);
    if (j->free_user) j->free_user(j->user);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

bool srv_job_append(srv_job *j, const char *s, size_t n) {
    if (j->n_out + n > j->cap_out) {
        size_t cap = j->cap_out ? j->cap_out : 1024;
        while (cap < j->n_out + n) cap *= 2;
        char *o = realloc(j->out, cap);
        if (!o) {
            j->lost = true;
            return false;
        }
        j->out = o;
        j->cap_out = cap;
    }
    memcpy(j->out + j->n_out, s, n);
    j->n_out += n;
    return true;
}

/* --debug-crash (isolate.h): aborts the process, once a stream has handed its client what came
 * before (waiting up to 2 s), so that the crash falls mid-stream. */
static void debug_abort(srv_job *j) {
    for (int k = 0; k < 200; k++) {
        pthread_mutex_lock(&j->mu);
        const size_t left = j->n_out;
        pthread_mutex_unlock(&j->mu);
        if (!left) break;
        usleep(10000);
    }
    usleep(50000); /* for the bytes taken to reach the socket */
    abort();
}

/* --debug-crash's hang (isolate.h): the engine's thread stops here for good, as a deadlocked or
 * endless step would; the supervisor's watchdog kills the process. */
static void debug_hang(void) {
    for (;;) sleep(60);
}

static int on_token(const kiln_token_event *ev, void *user) {
    srv_job *j = user;
    if (j->abort_at && ++j->n_events >= j->abort_at) {
        if (j->hang) debug_hang();
        debug_abort(j);
    }
    pthread_mutex_lock(&j->mu);
    const unsigned failures = srv_json_alloc_failures();
    j->on_event(j, ev);
    if (srv_json_alloc_failures() != failures) j->lost = true;
    const bool lost = j->lost;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return atomic_load(&j->cancel) || lost ? 1 : 0; /* lost: stops at once, ends as failed (on_done) */
}

static void on_done(kiln_status st, const kiln_generate_result *res, void *user) {
    srv_job *j = user;
    srv_stats *stats = j->stats;
    pthread_mutex_lock(&stats->mu);
    stats->completions++;
    stats->prompt_tokens += (uint64_t)res->n_prompt;
    stats->gen_tokens += (uint64_t)res->n_generated;
    stats->prompt_ms += res->prompt_ms;
    stats->gen_ms += res->gen_ms;
    pthread_mutex_unlock(&stats->mu);
    pthread_mutex_lock(&j->mu);
    j->status = st;
    j->result = *res;
    /* the message goes into a stream's error event as it is: valid UTF-8, cut at a character */
    const char *why = res->error && res->error[0] ? res->error : kiln_status_str(st);
    if (j->lost) { /* the client would get a reply with a part missing: it gets an error instead */
        j->status = KILN_ERR_NOMEM;
        why = "out of memory: part of the output could not be made";
        j->lost = false;
    }
    srv_text_sanitize(j->error, sizeof j->error, why, strlen(why), true);
    const unsigned failures = srv_json_alloc_failures();
    const size_t kept = j->n_out;
    j->on_event(j, NULL);
    if (srv_json_alloc_failures() != failures) j->lost = true;
    if (j->lost) j->n_out = kept; /* the end is incomplete: none of it goes out, and the stream is cut off */
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    srv_job_unref(j); /* the engine's reference */
}

kiln_status srv_job_submit(srv *s, srv_job *j) {
    kiln_generate_params gp = j->gp;
    const int limit = s->cfg.max_tokens_limit;
    if (limit > 0 && (gp.max_tokens < 0 || gp.max_tokens > limit)) gp.max_tokens = limit;
    gp.on_token = on_token;
    gp.on_done = on_done;
    gp.user = j;
    j->stats = &s->stats;
    j->abort_at = srv_iso_abort_at;
    j->hang = srv_iso_hang;
    srv_job_ref(j);
    kiln_request *req = NULL;
    kiln_status st = kiln_engine_submit(s->engine, j->prompt, j->n_prompt, &gp, &req);
    if (st) {
        srv_job_unref(j);
        return st;
    }
    pthread_mutex_lock(&j->mu);
    j->req = req;
    pthread_mutex_unlock(&j->mu);
    return KILN_OK;
}

void srv_job_cancel(srv_job *j) {
    atomic_store(&j->cancel, true);
    pthread_mutex_lock(&j->mu);
    if (j->req) kiln_request_cancel(j->req);
    pthread_mutex_unlock(&j->mu);
}
