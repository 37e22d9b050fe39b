/*
 * serve.c - `kiln serve`: load a model and answer OpenAI-compatible HTTP requests until SIGINT or
 * SIGTERM (see src/server/server.h for the server itself).
 *
 * Generation runs on one kiln_engine: up to --batch requests advance together (continuous
 * batching); more wait in a queue of --max-queue, beyond which requests get 429.
 *
 * Shutdown: the first signal stops accepting connections, cancels queued generations, lets the
 * running ones finish for up to 10 s (a second signal cancels them at once), closes the remaining
 * connections, flushes the SSD cache (--ssd-cache: every cached prefix not on disk yet is written,
 * for up to 10 s more) and exits 0.
 */
#include "cli.h"
#include "server/server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The model id clients see: the file name without directories and a .gguf suffix. */
static char *model_id(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    char *id = strdup(b);
    size_t n = id ? strlen(id) : 0;
    if (n > 5 && strcmp(id + n - 5, ".gguf") == 0) id[n - 5] = 0;
    return id;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct shutdown_ctx {
    kiln_engine *engine;
    atomic_bool finished;
} shutdown_ctx;

static void *shutdown_main(void *arg) {
    shutdown_ctx *sc = arg;
    kiln_engine_shutdown(sc->engine, 10000);
    atomic_store(&sc->finished, true);
    return NULL;
}

/* --ssd-cache without a directory: ~/.cache/kiln/kv (malloc'd; NULL when HOME is unset). */
static char *default_ssd_dir(void) {
    const char *home = getenv("HOME");
    if (!home || !*home) return NULL;
    char *d = NULL;
    return asprintf(&d, "%s/.cache/kiln/kv", home) < 0 ? NULL : d;
}

static bool is_loopback(const char *host) {
    return strcmp(host, "127.0.0.1") == 0 || strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0 ||
           strncmp(host, "127.", 4) == 0;
}

int cli_serve(int argc, char **argv) {
    cli_common c;
    cli_common_init(&c);
    srv s;
    memset(&s, 0, sizeof s);
    s.cfg.host = "127.0.0.1";
    s.cfg.port = 8080;
    s.cfg.max_tokens = -1;
    s.cfg.max_body = 8u << 20;
    s.cfg.max_queue = 64;
    int max_body_mb = 8, batch = 8, prefill_chunk = 64;
    float kv_budget_gb = 0, prompt_cache_gb = -1, ssd_max_gb = 20;
    int ssd_idle = 30;
    bool ssd_on = false, ssd_verify = false;
    const char *ssd_dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_usage("serve", false);
            return 0;
        }
        if (strcmp(a, "--host") == 0 && v) { s.cfg.host = v; i++; continue; }
        if (strcmp(a, "--api-key") == 0 && v) { s.cfg.api_key = v; i++; continue; }
        if (strcmp(a, "--port") == 0) { if (!cli_int(a, v, 0, 65535, &s.cfg.port)) return CLI_EXIT_USAGE; i++; continue; }
        if (strcmp(a, "--max-tokens") == 0) { if (!cli_int(a, v, -1, 1 << 30, &s.cfg.max_tokens)) return CLI_EXIT_USAGE; i++; continue; }
        if (strcmp(a, "--max-queue") == 0) { if (!cli_int(a, v, 1, 1 << 20, &s.cfg.max_queue)) return CLI_EXIT_USAGE; i++; continue; }
        if (strcmp(a, "--batch") == 0) { if (!cli_int(a, v, 1, 1024, &batch)) return CLI_EXIT_USAGE; i++; continue; }
        if (strcmp(a, "--prefill-chunk") == 0) { if (!cli_int(a, v, 1, 65536, &prefill_chunk)) return CLI_EXIT_USAGE; i++; continue; }
        if (strcmp(a, "--kv-budget") == 0) { if (!cli_float(a, v, 0, 1 << 20, &kv_budget_gb)) return CLI_EXIT_USAGE; i++; continue; }
        if (strcmp(a, "--prompt-cache") == 0) { if (!cli_float(a, v, 0, 1 << 20, &prompt_cache_gb)) return CLI_EXIT_USAGE; i++; continue; }
        if (strcmp(a, "--ssd-cache") == 0) {   /* the directory is optional */
            ssd_on = true;
            if (v && v[0] != '-') { ssd_dir = v; i++; }
            continue;
        }
        if (strcmp(a, "--ssd-cache-max") == 0) { if (!cli_float(a, v, 0.001, 1 << 20, &ssd_max_gb)) return CLI_EXIT_USAGE; i++; continue; }
        if (strcmp(a, "--ssd-demote-idle") == 0) { if (!cli_int(a, v, 0, 100000000, &ssd_idle)) return CLI_EXIT_USAGE; i++; continue; }
        if (strcmp(a, "--ssd-cache-verify") == 0) { ssd_verify = true; continue; }
        if (strcmp(a, "--max-body-mb") == 0) { if (!cli_int(a, v, 1, 4096, &max_body_mb)) return CLI_EXIT_USAGE; i++; continue; }
        int r = cli_parse_common(argc, argv, &i, &c);
        if (r == 1) continue;
        if (r == 0) fprintf(stderr, "kiln serve: unknown option '%s'%s\n", a, (a[0] == '-' && !v) ? " (or missing value)" : "");
        cli_usage("serve", true);
        return CLI_EXIT_USAGE;
    }
    s.cfg.max_body = (size_t)max_body_mb << 20;
    s.cfg.verbose = c.verbose;
    if (s.cfg.api_key && !*s.cfg.api_key) {
        fprintf(stderr, "kiln serve: --api-key must not be empty\n");
        return CLI_EXIT_USAGE;
    }
    cli_setup_log(c.verbose);
    if (!is_loopback(s.cfg.host) && !s.cfg.api_key)
        fprintf(stderr, "kiln serve: warning: listening on %s without --api-key: anyone who can reach this address can "
                        "use the model\n", s.cfg.host);

    /* Signals are taken by sigwait below; every thread started from here inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    char *ssd_default = NULL;
    if (ssd_on && !ssd_dir && !(ssd_dir = ssd_default = default_ssd_dir())) {
        fprintf(stderr, "kiln serve: --ssd-cache needs a directory when HOME is not set\n");
        return CLI_EXIT_FAIL;
    }
    kiln_model *m = cli_load_model(&c, false);
    if (!m) {
        free(ssd_default);
        return CLI_EXIT_FAIL;
    }
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = c.ctx;
    ep.n_threads = c.threads;
    ep.kv_type = c.kv_type;
    ep.max_rows = batch;
    ep.max_queue = s.cfg.max_queue;
    ep.prefill_chunk = prefill_chunk;
    ep.kv_budget = (uint64_t)((double)kv_budget_gb * 1e9);
    ep.prompt_cache = prompt_cache_gb < 0 ? -1 : (int64_t)((double)prompt_cache_gb * 1e9);
    ep.ssd_dir = ssd_on ? ssd_dir : NULL;
    ep.ssd_max_bytes = (uint64_t)((double)ssd_max_gb * 1e9);
    ep.ssd_demote_idle_s = ssd_idle;
    ep.ssd_verify = ssd_verify;
    kiln_engine *engine = NULL;
    if (kiln_engine_new(m, &ep, &engine)) {
        fprintf(stderr, "kiln serve: cannot start the engine: %s\n", kiln_last_error());
        free(ssd_default);
        kiln_model_free(m);
        return CLI_EXIT_FAIL;
    }
    char *id = model_id(c.model);
    s.model = m;
    s.model_id = id ? id : "model";
    s.engine = engine;
    s.n_ctx = kiln_engine_n_ctx(engine);
    snprintf(s.fingerprint, sizeof s.fingerprint, "fp_%.12s", kiln_model_fingerprint(m));
    s.started = (long)time(NULL);
    s.cfg.sampling = cli_sampler_params(&c, m);
    atomic_init(&s.stopping, false);
    srv_stats_init(&s.stats);
    int rc = 0;
    if (!srv_http_start(&s)) {
        rc = CLI_EXIT_FAIL;
    } else {
        const bool v6 = strchr(s.cfg.host, ':') != NULL;
        kiln_engine_stats es;
        kiln_engine_get_stats(engine, &es);
        fprintf(stderr, "kiln serve: %s, context %d per row, %d rows, %d threads, prompt cache %.2f GB\n",
                kiln_model_desc(m), s.n_ctx, es.max_rows, kiln_engine_n_threads(engine), (double)es.cache_budget / 1e9);
        if (es.ssd_enabled)
            fprintf(stderr, "kiln serve: SSD cache %s: %d entries of this model, %.2f of %.2f GB used%s\n",
                    ssd_dir, es.ssd_entries, (double)es.ssd_bytes / 1e9, (double)es.ssd_budget / 1e9,
                    es.ssd_quarantined ? " (damaged files quarantined)" : "");
        fprintf(stderr, "kiln serve: listening on http://%s%s%s:%d (model id '%s')\n", v6 ? "[" : "", s.cfg.host,
                v6 ? "]" : "", s.bound_port, s.model_id);
        int sig = 0;
        sigwait(&sigs, &sig);
        fprintf(stderr, "kiln serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        atomic_store(&s.stopping, true);
        srv_http_quiesce(&s);
        /* Running generations get up to 10 s; a second signal cancels them at once. */
        shutdown_ctx sc = {.engine = engine};
        atomic_init(&sc.finished, false);
        pthread_t th;
        if (pthread_create(&th, NULL, shutdown_main, &sc) != 0) {
            kiln_engine_shutdown(engine, 0);
        } else {
            const struct timespec tick = {0, 100 * 1000000L};
            while (!atomic_load(&sc.finished)) {
                if (sigtimedwait(&sigs, NULL, &tick) > 0) {
                    fprintf(stderr, "kiln serve: second signal, cancelling running generations\n");
                    kiln_engine_shutdown(engine, 0);
                }
            }
            pthread_join(th, NULL);
        }
        /* The engine has stopped (the last requests' prefixes are cached): make the SSD cache
         * durable, bounded in time. */
        kiln_engine_get_stats(engine, &es);
        if (es.ssd_enabled) {
            const double t0 = now_ms();
            if (kiln_engine_flush_cache(engine, 10000) == KILN_OK)
                fprintf(stderr, "kiln serve: SSD cache flushed in %.0f ms\n", now_ms() - t0);
            else
                fprintf(stderr, "kiln serve: SSD cache flush incomplete: %s\n", kiln_last_error());
        }
    }
    kiln_engine_shutdown(engine, 0);
    srv_http_stop(&s);
    kiln_engine_free(engine);
    srv_stats_destroy(&s.stats);
    kiln_model_free(m);
    free(id);
    free(ssd_default);
    if (!rc) fprintf(stderr, "kiln serve: stopped\n");
    return rc;
}
