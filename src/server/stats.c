/*
 * stats.c - the server's counters, exposed as Prometheus text at /metrics and JSON at /stats.
 *
 * Counters only grow; gauges (active rows, queue, KV) come from the engine. Throughput gauges are
 * derived from summed token counts and wall times: tokens per second over the server's life.
 */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The error classes of srv_error_class, in its order: the status each counts and its label in
 * /metrics (code="...") and /stats ("errors": {...}). */
static const struct {
    unsigned status; /* 0: the class of any other status of its hundred */
    const char *name;
} error_classes[SRV_ERR_CLASSES] = {
    [SRV_ERR_400] = {400, "400"}, [SRV_ERR_401] = {401, "401"}, [SRV_ERR_403] = {403, "403"},
    [SRV_ERR_404] = {404, "404"}, [SRV_ERR_405] = {405, "405"}, [SRV_ERR_413] = {413, "413"},
    [SRV_ERR_415] = {415, "415"}, [SRV_ERR_429] = {429, "429"}, [SRV_ERR_4XX] = {0, "4xx"},
    [SRV_ERR_5XX] = {0, "5xx"},
};

void srv_stats_init(srv_stats *s) {
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
}

void srv_stats_destroy(srv_stats *s) { pthread_mutex_destroy(&s->mu); }

void srv_stats_request(srv_stats *s) {
    pthread_mutex_lock(&s->mu);
    s->requests++;
    pthread_mutex_unlock(&s->mu);
}

void srv_stats_error(srv_stats *s, unsigned status) {
    srv_error_class k = status >= 500 ? SRV_ERR_5XX : SRV_ERR_4XX;
    for (int i = 0; i < SRV_ERR_CLASSES; i++)
        if (error_classes[i].status == status) k = (srv_error_class)i;
    pthread_mutex_lock(&s->mu);
    s->errors[k]++;
    pthread_mutex_unlock(&s->mu);
}

static json_t *cache_json(const kiln_engine_stats *es);
static json_t *ssd_json(const kiln_engine_stats *es);
static json_t *spec_json(const kiln_engine_stats *es);
static json_t *kv_json(const kiln_engine_stats *es);
static json_t *pool_json(const kiln_engine_stats *es);

static double rate(uint64_t n, double ms) { return ms > 0 ? (double)n * 1e3 / ms : 0.0; }

char *srv_stats_prometheus(srv_stats *s, const kiln_engine_stats *es, unsigned connections) {
    pthread_mutex_lock(&s->mu);
    srv_stats c = *s;
    pthread_mutex_unlock(&s->mu);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f) return NULL;
    fprintf(f,
            "# HELP kiln_requests_total HTTP requests received.\n# TYPE kiln_requests_total counter\n"
            "kiln_requests_total %llu\n"
            "# HELP kiln_completions_total Generations finished.\n# TYPE kiln_completions_total counter\n"
            "kiln_completions_total %llu\n"
            "# HELP kiln_prompt_tokens_total Prompt tokens processed.\n# TYPE kiln_prompt_tokens_total counter\n"
            "kiln_prompt_tokens_total %llu\n"
            "# HELP kiln_tokens_generated_total Tokens generated.\n# TYPE kiln_tokens_generated_total counter\n"
            "kiln_tokens_generated_total %llu\n"
            "# HELP kiln_prompt_tokens_per_second Prompt throughput over the server's life.\n"
            "# TYPE kiln_prompt_tokens_per_second gauge\nkiln_prompt_tokens_per_second %.3f\n"
            "# HELP kiln_generation_tokens_per_second Generation throughput over the server's life.\n"
            "# TYPE kiln_generation_tokens_per_second gauge\nkiln_generation_tokens_per_second %.3f\n"
            "# HELP kiln_requests_active Generations in the batch (rows in use).\n"
            "# TYPE kiln_requests_active gauge\nkiln_requests_active %d\n"
            "# HELP kiln_queue_depth Generations waiting for a row.\n# TYPE kiln_queue_depth gauge\n"
            "kiln_queue_depth %d\n"
            "# HELP kiln_batch_rows Rows the engine may run together.\n# TYPE kiln_batch_rows gauge\n"
            "kiln_batch_rows %d\n"
            "# HELP kiln_kv_bytes KV cache memory held by rows.\n# TYPE kiln_kv_bytes gauge\n"
            "kiln_kv_bytes %llu\n"
            "# HELP kiln_kv_bytes_used KV cache memory holding tokens of running generations.\n"
            "# TYPE kiln_kv_bytes_used gauge\nkiln_kv_bytes_used %llu\n"
            "# HELP kiln_prompt_cache_entries Prefix cache entries.\n# TYPE kiln_prompt_cache_entries gauge\n"
            "kiln_prompt_cache_entries %d\n"
            "# HELP kiln_prompt_cache_bytes Prefix cache memory.\n# TYPE kiln_prompt_cache_bytes gauge\n"
            "kiln_prompt_cache_bytes %llu\n"
            "# HELP kiln_prompt_cache_hits_total Requests that reused a cached prefix.\n"
            "# TYPE kiln_prompt_cache_hits_total counter\nkiln_prompt_cache_hits_total %llu\n"
            "# HELP kiln_prompt_cache_misses_total Requests that found no cached prefix.\n"
            "# TYPE kiln_prompt_cache_misses_total counter\nkiln_prompt_cache_misses_total %llu\n"
            "# HELP kiln_prompt_cache_tokens_total Prompt tokens taken from the cache.\n"
            "# TYPE kiln_prompt_cache_tokens_total counter\nkiln_prompt_cache_tokens_total %llu\n"
            "# HELP kiln_http_connections Open HTTP connections.\n# TYPE kiln_http_connections gauge\n"
            "kiln_http_connections %u\n"
            "# HELP kiln_errors_total Error responses by status code.\n# TYPE kiln_errors_total counter\n",
            (unsigned long long)c.requests, (unsigned long long)c.completions, (unsigned long long)c.prompt_tokens,
            (unsigned long long)c.gen_tokens, rate(c.prompt_tokens, c.prompt_ms), rate(c.gen_tokens, c.gen_ms),
            es->active, es->queued, es->max_rows, (unsigned long long)es->kv_bytes,
            (unsigned long long)es->kv_bytes_used, es->cache_entries, (unsigned long long)es->cache_bytes,
            (unsigned long long)es->cache_hits, (unsigned long long)es->cache_misses,
            (unsigned long long)es->cache_hit_tokens, connections);
    for (int i = 0; i < SRV_ERR_CLASSES; i++)
        fprintf(f, "kiln_errors_total{code=\"%s\"} %llu\n", error_classes[i].name, (unsigned long long)c.errors[i]);
    if (es->ssd_enabled)
        fprintf(f,
                "# HELP kiln_ssd_cache_entries SSD cache files of this model.\n# TYPE kiln_ssd_cache_entries gauge\n"
                "kiln_ssd_cache_entries %d\n"
                "# HELP kiln_ssd_cache_bytes Bytes of SSD cache files (every model in the directory).\n"
                "# TYPE kiln_ssd_cache_bytes gauge\nkiln_ssd_cache_bytes %llu\n"
                "# HELP kiln_ssd_cache_budget_bytes The SSD cache's byte cap.\n"
                "# TYPE kiln_ssd_cache_budget_bytes gauge\nkiln_ssd_cache_budget_bytes %llu\n"
                "# HELP kiln_ssd_cache_hits_total Requests whose prefix was restored from SSD.\n"
                "# TYPE kiln_ssd_cache_hits_total counter\nkiln_ssd_cache_hits_total %llu\n"
                "# HELP kiln_ssd_cache_hit_tokens_total Prompt tokens restored from SSD.\n"
                "# TYPE kiln_ssd_cache_hit_tokens_total counter\nkiln_ssd_cache_hit_tokens_total %llu\n"
                "# HELP kiln_ssd_cache_writes_total SSD cache files written.\n"
                "# TYPE kiln_ssd_cache_writes_total counter\nkiln_ssd_cache_writes_total %llu\n"
                "# HELP kiln_ssd_cache_pending_writes SSD cache writes queued or in progress.\n"
                "# TYPE kiln_ssd_cache_pending_writes gauge\nkiln_ssd_cache_pending_writes %d\n"
                "# HELP kiln_ssd_cache_evictions_total SSD cache files deleted to stay within the cap.\n"
                "# TYPE kiln_ssd_cache_evictions_total counter\nkiln_ssd_cache_evictions_total %llu\n"
                "# HELP kiln_ssd_cache_quarantined_total Damaged or mismatched SSD cache files set aside.\n"
                "# TYPE kiln_ssd_cache_quarantined_total counter\nkiln_ssd_cache_quarantined_total %llu\n"
                "# HELP kiln_ssd_cache_errors_total Failed SSD cache writes or reads.\n"
                "# TYPE kiln_ssd_cache_errors_total counter\nkiln_ssd_cache_errors_total %llu\n",
                es->ssd_entries, (unsigned long long)es->ssd_bytes, (unsigned long long)es->ssd_budget,
                (unsigned long long)es->ssd_hits, (unsigned long long)es->ssd_hit_tokens,
                (unsigned long long)es->ssd_writes, es->ssd_pending, (unsigned long long)es->ssd_evictions,
                (unsigned long long)es->ssd_quarantined, (unsigned long long)es->ssd_errors);
    fprintf(f, "# HELP kiln_spec_proposed_tokens_total Tokens proposed by speculative decoding, by method.\n"
               "# TYPE kiln_spec_proposed_tokens_total counter\n");
    for (int i = 1; i < KILN_SPEC_METHODS; i++)
        fprintf(f, "kiln_spec_proposed_tokens_total{method=\"%s\"} %llu\n", kiln_spec_method_name((kiln_spec_method)i),
                (unsigned long long)es->spec_proposed[i]);
    fprintf(f, "# HELP kiln_spec_accepted_tokens_total Proposed tokens the model accepted, by method.\n"
               "# TYPE kiln_spec_accepted_tokens_total counter\n");
    for (int i = 1; i < KILN_SPEC_METHODS; i++)
        fprintf(f, "kiln_spec_accepted_tokens_total{method=\"%s\"} %llu\n", kiln_spec_method_name((kiln_spec_method)i),
                (unsigned long long)es->spec_accepted[i]);
    fclose(f);
    return out;
}

json_t *srv_stats_json(srv_stats *s, const kiln_engine_stats *es, unsigned connections) {
    pthread_mutex_lock(&s->mu);
    srv_stats c = *s;
    pthread_mutex_unlock(&s->mu);
    json_t *errs = json_object();
    for (int i = 0; i < SRV_ERR_CLASSES; i++)
        json_object_set_new(errs, error_classes[i].name, json_integer((json_int_t)c.errors[i]));
    json_t *j =
        json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:o}", "requests",
                  (json_int_t)c.requests, "completions", (json_int_t)c.completions, "prompt_tokens",
                  (json_int_t)c.prompt_tokens, "generated_tokens", (json_int_t)c.gen_tokens, "prompt_tokens_per_second",
                  rate(c.prompt_tokens, c.prompt_ms), "generation_tokens_per_second", rate(c.gen_tokens, c.gen_ms),
                  "active", es->active, "queued", es->queued, "batch_rows", es->max_rows, "kv_bytes",
                  (json_int_t)es->kv_bytes, "kv_bytes_used", (json_int_t)es->kv_bytes_used, "steps",
                  (json_int_t)es->steps, "connections", (json_int_t)connections, "errors", errs);
    if (j) json_object_set_new(j, "kv", kv_json(es));
    if (j) json_object_set_new(j, "kv_pool", pool_json(es));
    if (j) json_object_set_new(j, "prompt_cache", cache_json(es));
    if (j) json_object_set_new(j, "ssd_cache", ssd_json(es));
    if (j) json_object_set_new(j, "speculative", spec_json(es));
    return j;
}

/* Speculative decoding's figures for /stats: {"ngram": {"proposed", "accepted"}, "draft": ...}. */
static json_t *spec_json(const kiln_engine_stats *es) {
    json_t *o = json_object();
    for (int i = 1; o && i < KILN_SPEC_METHODS; i++)
        json_object_set_new(o, kiln_spec_method_name((kiln_spec_method)i),
                            json_pack("{s:I, s:I}", "proposed", (json_int_t)es->spec_proposed[i], "accepted",
                                      (json_int_t)es->spec_accepted[i]));
    return o;
}

/* The KV format of the rows for /stats: types, rotation and bytes per token. */
static json_t *kv_json(const kiln_engine_stats *es) {
    const char *k = kiln_kv_type_name(es->kv_type_k), *v = kiln_kv_type_name(es->kv_type_v);
    return json_pack("{s:s, s:s, s:b, s:b, s:I}", "type_k", k ? k : "?", "type_v", v ? v : "?", "rotate_k",
                     es->kv_rotate_k, "rotate_v", es->kv_rotate_v, "bytes_per_token",
                     (json_int_t)es->kv_bytes_per_token);
}

/* Paged KV's block pool for /stats ({"enabled": false} with paging off). */
static json_t *pool_json(const kiln_engine_stats *es) {
    if (!es->kv_blocks_total) return json_pack("{s:b}", "enabled", 0);
    return json_pack("{s:b, s:i, s:i, s:i, s:i, s:I}", "enabled", 1, "blocks_total", es->kv_blocks_total, "blocks_used",
                     es->kv_blocks_used, "blocks_shared", es->kv_blocks_shared, "block_tokens", es->kv_block_tokens,
                     "block_bytes", (json_int_t)es->kv_block_bytes);
}

/* The prefix cache's figures for /stats. */
static json_t *cache_json(const kiln_engine_stats *es) {
    return json_pack("{s:i, s:I, s:I, s:I, s:I, s:I}", "entries", es->cache_entries, "bytes",
                     (json_int_t)es->cache_bytes, "budget", (json_int_t)es->cache_budget, "hits",
                     (json_int_t)es->cache_hits, "misses", (json_int_t)es->cache_misses, "hit_tokens",
                     (json_int_t)es->cache_hit_tokens);
}

/* The SSD tier's figures for /stats ({"enabled": false} without one). */
static json_t *ssd_json(const kiln_engine_stats *es) {
    if (!es->ssd_enabled) return json_pack("{s:b}", "enabled", 0);
    return json_pack("{s:b, s:i, s:I, s:I, s:I, s:I, s:I, s:i, s:I, s:I, s:I}", "enabled", 1, "entries",
                     es->ssd_entries, "bytes", (json_int_t)es->ssd_bytes, "budget", (json_int_t)es->ssd_budget, "hits",
                     (json_int_t)es->ssd_hits, "hit_tokens", (json_int_t)es->ssd_hit_tokens, "writes",
                     (json_int_t)es->ssd_writes, "pending", es->ssd_pending, "evictions", (json_int_t)es->ssd_evictions,
                     "quarantined", (json_int_t)es->ssd_quarantined, "errors", (json_int_t)es->ssd_errors);
}
