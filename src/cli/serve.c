/*
 * serve.c - `kiln serve` (and `kiln` with no command): choose a model and settings, load the
 * model and answer OpenAI-compatible HTTP requests until SIGINT or SIGTERM (see
 * src/server/server.h for the server itself).
 *
 * Every setting is resolved once, before anything is loaded, from (first match wins) a flag, an
 * environment variable, the model file, or the machine; `--print-config` prints each value with
 * where it came from and exits without serving. The model: -m, else KILN_MODEL, else the largest
 * discovered model (models.c) whose weights and one row of KV fit in CLI_MEMORY_PCT of the
 * machine's memory. Machine defaults: threads = physical cores; prompt cache = the library's
 * kiln_default_prompt_cache; context per row = the model's training length, at most AUTO_CTX_MAX,
 * halved (down to AUTO_CTX_MIN) until --batch rows of KV fit in what the planned memory leaves after
 * weights and prompt cache; rows = --batch (default: the engine's), fewer when even AUTO_CTX_MIN
 * does not fit. The engine's other settings default to kiln_engine_default_params().
 *
 * Port: --port is used as given (taken: exit 1 before loading). Otherwise KILN_PORT or 8080 is
 * tried first and, when taken, the next PORT_TRIES ports. When stdin and stdout are terminals and a
 * desktop session is present (DISPLAY or WAYLAND_DISPLAY), the server's URL is opened in the
 * browser (xdg-open, detached, output discarded) unless --no-open.
 *
 * Generation runs on one kiln_engine: up to --batch requests advance together (continuous
 * batching); more wait in a queue of --max-queue, beyond which requests get 429. Connections are
 * bounded by --timeout, --max-connections and --max-connections-per-ip (see server/http.c); the
 * open-file limit is raised to fit them.
 *
 * Isolation (server/isolate.h): unless --no-isolation, everything from loading the model on runs in
 * a child process (engine_child), under the supervisor of the parent, which keeps the listening
 * socket and restarts the child when it crashes; the child serves exactly as the single process
 * does. --debug-crash lets a request abort the engine (for tests).
 *
 * Models (server/pool.c): a request may name any model `kiln ls` finds (or a --model-alias); models
 * load on first use, each with its own plan (context, rows, prompt cache: as above, from its own
 * file and the machine) and engine (in its own child process under isolation), and the least
 * recently used idle one is unloaded when --max-models or --models-memory (default: CLI_MEMORY_PCT
 * of the machine's memory, as the plan above) would be passed. The chat template file, the tool
 * format and speculative decoding flags apply to the default model only.
 *
 * Shutdown: the first signal stops accepting connections, cancels queued generations, lets the
 * running ones finish for up to SHUTDOWN_GRACE_MS (a second signal cancels them at once), closes the
 * remaining connections, flushes the SSD cache (--ssd-cache: every cached prefix not on disk yet is
 * written, for up to SHUTDOWN_GRACE_MS more) and exits 0. A signal while the model loads cancels the
 * load (exit 1).
 *
 * Memory: before the port is taken, the default model's weights, the KV of its rows and a step's
 * compute buffers are checked against the memory available (hub_fit.c); a model that does not fit
 * is refused (exit 1) with the figures and what would fit, unless --fit off. So that the automatic
 * choices pass it, the planned memory is lowered to 100 - CLI_FIT_SLACK_PCT percent of what is
 * available now when that is less (and the model choice plans within it too, models.c).
 */
#include "cli.h"
#include "hub_fit.h"
#include "isolate.h"
#include "pool.h"
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_PORT      8080
#define PORT_TRIES        20 /* further ports tried when the default one is taken */
#define DEFAULT_ROWS      (kiln_engine_default_params().max_rows) /* the engine's */
/* The automatic context per row: the model's training length, at most AUTO_CTX_MAX (longer: -c),
 * halved down to AUTO_CTX_MIN while the KV of the rows does not fit. It is larger than the library's
 * KILN_N_CTX_DEFAULT_MAX on purpose: the library picks a context without knowing the machine, while
 * this plan checks the KV against the machine's memory first. */
#define AUTO_CTX_MAX      16384
#define AUTO_CTX_MIN      2048
#define SHUTDOWN_GRACE_MS 10000 /* at the first signal: for running generations, then for the SSD flush */

/* The HTTP server's defaults. */
#define DEFAULT_HOST             "127.0.0.1"
#define DEFAULT_MAX_BODY_MB      8
#define DEFAULT_TIMEOUT_S        5  /* above the 4-5 s clients keep idle connections, below a hang */
#define DEFAULT_ENGINE_TIMEOUT_S 60 /* an engine with work and no step for this long is hung */
#define DEFAULT_MAX_CONNS        1024
#define DEFAULT_MAX_CONNS_PER_IP 256 /* a batch client's parallel connections, the page and more */
#define FD_RESERVE               64  /* file descriptors kept for other than connections */
#define DEFAULT_LOAD_TIMEOUT_S   300 /* a request waits this long for its model to load */

extern char **environ;

/* The model id clients see: the file name without directories and a .gguf suffix, as valid
 * UTF-8 (it goes into every response). */
static char *model_id(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 5 && strcmp(b + n - 5, ".gguf") == 0) n -= 5;
    const size_t cap = 4 * n + 1;
    char *id = malloc(cap);
    if (id) srv_text_sanitize(id, cap, b, n, false);
    return id;
}

/* The server's list of local models (srv_config.list_models): what `kiln ls` finds, without the
 * served file. */
static json_t *list_models(const char *served_path) {
    cli_model_list l;
    cli_models_find(&l, false);
    char *served = served_path ? realpath(served_path, NULL) : NULL;
    json_t *a = json_array();
    for (size_t i = 0; a && i < l.n; i++) {
        const cli_model_entry *e = &l.v[i];
        if (served && e->real && strcmp(served, e->real) == 0) continue;
        struct stat st;
        const long long modified = e->real && stat(e->real, &st) == 0 ? (long long)st.st_mtime : 0;
        json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:s, s:I, s:s, s:i}", "name", e->name, "path", e->path, "size",
                              (json_int_t)e->info.file_bytes, "modified", (json_int_t)modified, "arch", e->info.arch,
                              "n_params", (json_int_t)e->info.n_params, "weight_type", e->info.weight_type,
                              "n_ctx_train", e->info.n_ctx_train);
        if (o) json_array_append_new(a, o); /* (a name that is not UTF-8 is left out) */
    }
    free(served);
    cli_models_free(&l);
    return a;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct shutdown_ctx {
    atomic_bool finished;
} shutdown_ctx;

/* Shuts down the engine of s with *(int *)arg ms of grace (srv_pool_each). */
static void shutdown_one(srv *s, void *arg) { kiln_engine_shutdown(s->engine, *(const int *)arg); }

/* Flushes the SSD cache of s's engine, bounded in time, with a line saying how it went. */
static void flush_one(srv *s, void *arg) {
    kiln_engine_stats es;
    kiln_engine_get_stats(s->engine, &es);
    if (!es.ssd_enabled) return;
    const double t0 = now_ms();
    if (kiln_engine_flush_cache(s->engine, SHUTDOWN_GRACE_MS) == KILN_OK)
        fprintf(stderr, "kiln serve: SSD cache flushed in %.0f ms\n", now_ms() - t0);
    else fprintf(stderr, "kiln serve: SSD cache flush incomplete: %s\n", kiln_last_error());
}

/* Every loaded model's engine gets SHUTDOWN_GRACE_MS (all at once, each on its own). */
static void *shutdown_main(void *arg) {
    shutdown_ctx *sc = arg;
    const int grace = SHUTDOWN_GRACE_MS;
    srv_pool_each(shutdown_one, (void *)&grace);
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

/* Whether an address is a loopback one: 127.0.0.0/8, ::1 or 127.x mapped into IPv6. */
static bool loopback_addr(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET) return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family != AF_INET6) return false;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

/* Whether host resolves to addresses other than loopback ones (then anyone who can reach them
 * can use the server). False when it does not resolve: the server fails to start anyway. */
static bool reachable_from_outside(const char *host) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    if (getaddrinfo(host, NULL, &hints, &ai) || !ai) return false;
    bool outside = false;
    for (const struct addrinfo *x = ai; x; x = x->ai_next) outside |= !loopback_addr(x->ai_addr);
    freeaddrinfo(ai);
    return outside;
}

/* ---- flags ----------------------------------------------------------------------------------- */

/* The value flags of `kiln serve` beyond the common ones, one entry each in opt_defs. */
typedef enum opt_id {
    OPT_HOST,
    OPT_PORT,
    OPT_API_KEY,
    OPT_MAX_TOKENS,
    OPT_MAX_TOKENS_LIMIT,
    OPT_BATCH,
    OPT_MAX_QUEUE,
    OPT_PREFILL_CHUNK,
    OPT_KV_BUDGET,
    OPT_PROMPT_CACHE,
    OPT_SSD_MAX,
    OPT_SSD_IDLE,
    OPT_MAX_BODY,
    OPT_TIMEOUT,
    OPT_MAX_CONNS,
    OPT_MAX_CONNS_PER_IP,
    OPT_CORS,
    OPT_ALLOW_HOST,
    OPT_MAX_MODELS,
    OPT_MODELS_MEMORY,
    OPT_LOAD_TIMEOUT,
    OPT_ENGINE_TIMEOUT,
    OPT_COUNT
} opt_id;

/* Their values, starting at the defaults (opts_init), and which of them the command line gave:
 * --print-config names a value's source from given[], never by comparing it with a default. */
typedef struct serve_opts {
    const char *host, *api_key, *cors, *allow_hosts;
    int port, max_tokens, max_tokens_limit, batch, max_queue, prefill_chunk, ssd_idle, max_body_mb, timeout;
    int max_conns, max_conns_per_ip;
    float kv_budget_gb, prompt_cache_gb, ssd_max_gb;
    int max_models, load_timeout; /* --max-models (0: no count limit), --model-load-timeout */
    float models_memory_gb;       /* --models-memory (-1: the machine's share) */
    const char *alias_name[SRV_POOL_ALIASES], *alias_target[SRV_POOL_ALIASES]; /* --model-alias */
    size_t n_aliases;
    int engine_timeout; /* --engine-timeout: the watchdog's limit in seconds (0: off; isolate.h) */
    bool given[OPT_COUNT];
    /* flags without a value (or with an optional one) */
    bool ssd_on, print_cfg, no_open;
    bool no_isolation, debug_crash; /* --no-isolation, --debug-crash (server/isolate.h) */
    bool kv_paging_off;             /* --kv-paging off: one contiguous KV cache per row */
    const char *ssd_dir;
} serve_opts;

static const struct opt_def {
    const char *flag;
    char kind;     /* 's' a string, 'i' an int, 'f' a float */
    size_t off;    /* of the value in serve_opts */
    double lo, hi; /* the range of a number */
} opt_defs[OPT_COUNT] = {
    [OPT_HOST] = {"--host", 's', offsetof(serve_opts, host), 0, 0},
    [OPT_PORT] = {"--port", 'i', offsetof(serve_opts, port), 0, 65535},
    [OPT_API_KEY] = {"--api-key", 's', offsetof(serve_opts, api_key), 0, 0},
    [OPT_MAX_TOKENS] = {"--max-tokens", 'i', offsetof(serve_opts, max_tokens), -1, 1 << 30},
    [OPT_MAX_TOKENS_LIMIT] = {"--max-tokens-limit", 'i', offsetof(serve_opts, max_tokens_limit), 0, 1 << 30},
    [OPT_BATCH] = {"--batch", 'i', offsetof(serve_opts, batch), 1, 1024},
    [OPT_MAX_QUEUE] = {"--max-queue", 'i', offsetof(serve_opts, max_queue), 1, 1 << 20},
    [OPT_PREFILL_CHUNK] = {"--prefill-chunk", 'i', offsetof(serve_opts, prefill_chunk), 1, 65536},
    [OPT_KV_BUDGET] = {"--kv-budget", 'f', offsetof(serve_opts, kv_budget_gb), 0, 1 << 20},
    [OPT_PROMPT_CACHE] = {"--prompt-cache", 'f', offsetof(serve_opts, prompt_cache_gb), 0, 1 << 20},
    [OPT_SSD_MAX] = {"--ssd-cache-max", 'f', offsetof(serve_opts, ssd_max_gb), 0.001, 1 << 20},
    [OPT_SSD_IDLE] = {"--ssd-demote-idle", 'i', offsetof(serve_opts, ssd_idle), 0, 100000000},
    [OPT_MAX_BODY] = {"--max-body-mb", 'i', offsetof(serve_opts, max_body_mb), 1, 4096},
    [OPT_TIMEOUT] = {"--timeout", 'i', offsetof(serve_opts, timeout), 0, 86400},
    [OPT_MAX_CONNS] = {"--max-connections", 'i', offsetof(serve_opts, max_conns), 1, 1 << 20},
    [OPT_MAX_CONNS_PER_IP] = {"--max-connections-per-ip", 'i', offsetof(serve_opts, max_conns_per_ip), 1, 1 << 20},
    [OPT_CORS] = {"--cors", 's', offsetof(serve_opts, cors), 0, 0},
    [OPT_ALLOW_HOST] = {"--allow-host", 's', offsetof(serve_opts, allow_hosts), 0, 0},
    [OPT_MAX_MODELS] = {"--max-models", 'i', offsetof(serve_opts, max_models), 0, SRV_POOL_MAX},
    [OPT_MODELS_MEMORY] = {"--models-memory", 'f', offsetof(serve_opts, models_memory_gb), 0.001, 1 << 20},
    [OPT_LOAD_TIMEOUT] = {"--model-load-timeout", 'i', offsetof(serve_opts, load_timeout), 1, 86400},
    [OPT_ENGINE_TIMEOUT] = {"--engine-timeout", 'i', offsetof(serve_opts, engine_timeout), 0, 86400},
};

static void opts_init(serve_opts *o) {
    const kiln_engine_params ep = kiln_engine_default_params();
    memset(o, 0, sizeof *o);
    o->host = DEFAULT_HOST;
    o->port = DEFAULT_PORT;
    o->max_tokens = -1;
    o->batch = ep.max_rows;
    o->max_queue = ep.max_queue;
    o->prefill_chunk = ep.prefill_chunk;
    o->kv_budget_gb = (float)((double)ep.kv_budget / 1e9);
    o->prompt_cache_gb = -1; /* the machine's share (plan_machine) */
    o->ssd_max_gb = (float)((double)ep.ssd_max_bytes / 1e9);
    o->ssd_idle = ep.ssd_demote_idle_s;
    o->max_body_mb = DEFAULT_MAX_BODY_MB;
    o->timeout = DEFAULT_TIMEOUT_S;
    o->engine_timeout = DEFAULT_ENGINE_TIMEOUT_S;
    o->max_conns = DEFAULT_MAX_CONNS;
    o->max_conns_per_ip = DEFAULT_MAX_CONNS_PER_IP;
    o->max_models = 0;
    o->models_memory_gb = -1;
    o->load_timeout = DEFAULT_LOAD_TIMEOUT_S;
}

/* Consumes argv flag a with value v when it is one of opt_defs: 1 when it was (v used), 0 when
 * it is not one of them, -1 after printing why the value is bad. */
static int parse_opt(const char *a, const char *v, serve_opts *o) {
    for (int k = 0; k < OPT_COUNT; k++) {
        const struct opt_def *d = &opt_defs[k];
        if (strcmp(a, d->flag) != 0) continue;
        char *dst = (char *)o + d->off;
        bool ok;
        if (d->kind == 'i') {
            ok = cli_int(a, v, (long)d->lo, (long)d->hi, (int *)(void *)dst);
        } else if (d->kind == 'f') {
            ok = cli_float(a, v, d->lo, d->hi, (float *)(void *)dst);
        } else {
            ok = v && *v;
            if (ok) *(const char **)(void *)dst = v;
            else fprintf(stderr, "kiln serve: %s needs a non-empty value\n", a);
        }
        if (!ok) return -1;
        o->given[k] = true;
        return 1;
    }
    return 0;
}

/* The source --print-config names for the value of flag k: "flag --NAME" when the command line
 * gave it (the text lasts until the next call), else otherwise. */
static const char *opt_src(const serve_opts *o, opt_id k, const char *otherwise) {
    static char buf[64];
    if (!o->given[k]) return otherwise;
    snprintf(buf, sizeof buf, "flag %s", opt_defs[k].flag);
    return buf;
}

/* Checks the values of --cors: each origin is scheme://host[:port], "null" or "*". */
static bool valid_origins(const char *list) {
    for (const char *p = list; *p;) {
        const size_t n = strcspn(p, ",");
        const char *sep = strstr(p, "://");
        const bool star = n == 1 && *p == '*', null = n == 4 && strncmp(p, "null", 4) == 0;
        if (!star && !null && (!sep || sep >= p + n || sep == p || sep + 3 == p + n)) {
            fprintf(stderr,
                    "kiln serve: --cors takes origins such as http://localhost:3000 (comma-separated), "
                    "'null' or '*'; got '%.*s'\n",
                    (int)n, p);
            return false;
        }
        p += n + (p[n] == ',');
    }
    return true;
}

/* ---- settings: values and where they came from ----------------------------------------------- */

/* Every value `kiln serve` runs with, resolved once; each *_src says where it came from. */
typedef struct plan {
    char *model; /* the file to load (malloc'd) */
    char model_src[256];
    kiln_model_info info;
    uint64_t mem;      /* machine memory (or KILN_TEST_MEMORY; 8 GiB when unknown) */
    uint64_t budget;   /* CLI_MEMORY_PCT of it, less when less is available now (--fit on) */
    bool budget_avail; /* lowered to the memory available now */
    int threads;
    char threads_src[64];
    int ctx;
    char ctx_src[160];
    int rows;
    char rows_src[160];
    int64_t prompt_cache; /* bytes */
    char cache_src[96];
    int port;
    char port_src[96];
    bool port_fixed; /* given by --port: no fallback */
    bool open_browser;
    char open_src[64];
    kiln_sampler_params sp;       /* the sampling defaults served: the flags over the model's */
    kiln_sampler_params model_sp; /* the model's recommended settings (its metadata) */
} plan;

/* Resolves the model to serve into p (model, model_src, info). Returns 0, or an exit status after
 * printing why (nothing found: where kiln looked and how to get a model). */
static int plan_model(const cli_common *c, plan *p) {
    if (!(p->model = cli_models_choose(c->model, c->verbose, p->mem, p->model_src, sizeof p->model_src)))
        return CLI_EXIT_FAIL;
    kiln_status st = kiln_model_info_read(p->model, &p->info);
    if (st) {
        fprintf(stderr, "kiln: cannot load model: %s (%s)\n", kiln_last_error(), kiln_status_str(st));
        return CLI_EXIT_FAIL;
    }
    return 0;
}

/* Threads, prompt cache, context per row and rows from the flags, the model and the machine. */
static void plan_machine(const cli_common *c, plan *p, int batch_flag, float prompt_cache_gb) {
    char mem[32], avail_s[32];
    cli_fmt_bytes(p->mem, mem, sizeof mem);
    if (c->threads) {
        p->threads = c->threads;
        snprintf(p->threads_src, sizeof p->threads_src, "flag -t");
    } else {
        p->threads = kiln_physical_cores();
        snprintf(p->threads_src, sizeof p->threads_src, "machine: physical cores");
    }
    if (prompt_cache_gb >= 0) {
        p->prompt_cache = (int64_t)((double)prompt_cache_gb * 1e9);
        snprintf(p->cache_src, sizeof p->cache_src, "flag --prompt-cache");
    } else {
        p->prompt_cache = (int64_t)kiln_default_prompt_cache(p->mem);
        snprintf(p->cache_src, sizeof p->cache_src, "machine: 1/%d of %s, at most %llu GiB",
                 KILN_PROMPT_CACHE_MEMORY_SHARE, mem, (unsigned long long)(KILN_PROMPT_CACHE_MAX_AUTO >> 30));
    }
    /* KV may use what the planned memory leaves after the weights and the prompt cache. */
    const kiln_model_info *in = &p->info;
    const uint64_t kv_tok = kiln_kv_bytes_per_token_kv(in, c->kv_type, c->kv_type_v);
    uint64_t used = in->tensor_bytes + (uint64_t)p->prompt_cache;
    const uint64_t avail = p->budget > used ? p->budget - used : 0;
    cli_fmt_bytes(avail, avail_s, sizeof avail_s);
    const int want_rows = batch_flag > 0 ? batch_flag : DEFAULT_ROWS;
    if (c->ctx) {
        p->ctx = c->ctx;
        snprintf(p->ctx_src, sizeof p->ctx_src, "flag -c");
    } else {
        const int train = in->n_ctx_train > 0 ? in->n_ctx_train : KILN_N_CTX_TRAIN_ASSUMED;
        int ctx = train < AUTO_CTX_MAX ? train : AUTO_CTX_MAX;
        bool capped = false;
        while (ctx > AUTO_CTX_MIN && (uint64_t)want_rows * kv_tok * (uint64_t)ctx > avail) {
            ctx = ctx / 2 > AUTO_CTX_MIN ? ctx / 2 : AUTO_CTX_MIN;
            capped = true;
        }
        p->ctx = ctx;
        if (in->n_ctx_train <= 0)
            snprintf(p->ctx_src, sizeof p->ctx_src, "model: no context_length, %d assumed%s", KILN_N_CTX_TRAIN_ASSUMED,
                     capped ? "; capped by machine RAM" : "");
        else if (capped)
            snprintf(p->ctx_src, sizeof p->ctx_src, "model n_ctx_train %d, capped by machine RAM: %d rows of KV in %s",
                     in->n_ctx_train, want_rows, avail_s);
        else if (ctx < train)
            snprintf(p->ctx_src, sizeof p->ctx_src, "model n_ctx_train %d, automatic limit %d (longer: -c)",
                     in->n_ctx_train, AUTO_CTX_MAX);
        else snprintf(p->ctx_src, sizeof p->ctx_src, "model n_ctx_train %d", in->n_ctx_train);
    }
    if (batch_flag > 0) {
        p->rows = batch_flag;
        snprintf(p->rows_src, sizeof p->rows_src, "flag --batch");
    } else {
        const uint64_t row = kv_tok * (uint64_t)p->ctx;
        const uint64_t fit = row ? avail / row : (uint64_t)DEFAULT_ROWS;
        if (fit >= (uint64_t)DEFAULT_ROWS) {
            p->rows = DEFAULT_ROWS;
            snprintf(p->rows_src, sizeof p->rows_src, "default");
        } else {
            p->rows = fit > 1 ? (int)fit : 1;
            snprintf(p->rows_src, sizeof p->rows_src, "machine: the KV of %d row(s) fits in %s", p->rows, avail_s);
        }
    }
}

/* What loading the default model will need (hub_fit.c): its weights, the KV of its rows (or
 * --kv-budget; a draft model's weights and KV), the compute buffers of a step (a prompt chunk and a
 * token per row), and the prompt cache, which fills as it is used (warned about only). */
static void serve_need(const cli_common *c, const plan *p, const serve_opts *o, const cli_spec *spec,
                       cli_fit_need *need) {
    cli_fit_estimate(p->model, &p->info, p->ctx, p->rows, c->kv_type, c->kv_type_v, o->prefill_chunk + p->rows, p->rows,
                     need);
    if (o->kv_budget_gb > 0) need->kv = (uint64_t)((double)o->kv_budget_gb * 1e9);
    cli_fit_add_draft(spec->draft, c->kv_type, c->kv_type_v, need);
    need->cache = p->prompt_cache > 0 ? (uint64_t)p->prompt_cache : 0;
}

/* The check before loading: false after printing why the default model does not fit. */
static bool fit_default(const cli_common *c, const plan *p, const serve_opts *o, const cli_spec *spec, bool on) {
    cli_fit_need need;
    serve_need(c, p, o, spec, &need);
    const char *base = strrchr(p->model, '/');
    return cli_fit_check("serve", base ? base + 1 : p->model, &need, "--batch", on);
}

/* Whether the server may open a browser, and why (or why not). */
static void plan_open(plan *p, bool no_open) {
    const char *d = getenv("DISPLAY"), *w = getenv("WAYLAND_DISPLAY");
    p->open_browser = false;
    if (no_open) snprintf(p->open_src, sizeof p->open_src, "flag --no-open");
    else if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
        snprintf(p->open_src, sizeof p->open_src, "not a terminal");
    else if (!(d && *d) && !(w && *w))
        snprintf(p->open_src, sizeof p->open_src, "no desktop (DISPLAY, WAYLAND_DISPLAY)");
    else {
        p->open_browser = true;
        snprintf(p->open_src, sizeof p->open_src, "terminal and desktop present; --no-open to disable");
    }
}

/* Where a sampling value came from: a flag, the model's metadata, or the library default. */
static const char *sp_src(const cli_common *c, unsigned bit, bool differs) {
    return (c->sp_set & bit) ? "flag" : differs ? "model" : "default";
}

/* Prints every resolved value with its source (--print-config), to stdout. */
static void print_config(const cli_common *c, const plan *p, const serve_opts *o, const cli_spec *spec, bool fit) {
    const kiln_sampler_params def = kiln_sampler_default_params();
    const kiln_sampler_params *sp = &p->sp, *msp = &p->model_sp;
    const kiln_model_info *in = &p->info;
    char a[32], b[32], cbuf[32];
    const char *tm = getenv("KILN_TEST_MEMORY");
    printf("%-15s %s   (%s)\n", "model", p->model, p->model_src);
    cli_fmt_count(in->n_params, a, sizeof a);
    cli_fmt_bytes(in->tensor_bytes, b, sizeof b);
    printf("%-15s %s, %s parameters, %s, %s of weights\n", "", in->arch, a, in->weight_type[0] ? in->weight_type : "-",
           b);
    cli_fmt_bytes(p->mem, a, sizeof a);
    cli_fmt_bytes(p->budget, b, sizeof b);
    printf("%-15s %s, planning within %s%s   (%s)\n", "memory", a, b,
           p->budget_avail ? ", lowered to what is available now" : "",
           tm && *tm                ? "env KILN_TEST_MEMORY, for tests only"
           : kiln_physical_memory() ? "machine: physical memory"
                                    : "unknown: 8 GiB assumed");
    cli_fit_need need;
    serve_need(c, p, o, spec, &need);
    char avail_src[96], nb[32], ab[32];
    const uint64_t avail = cli_memory_available(avail_src, sizeof avail_src);
    cli_fmt_bytes(need.weights + need.kv + need.compute, nb, sizeof nb);
    cli_fmt_bytes(avail, ab, sizeof ab);
    cli_fmt_bytes(need.compute, cbuf, sizeof cbuf);
    printf("%-15s needs %s%s%s%s: weights, KV and %s of compute buffers   (%s; %s)", "fit", nb, avail ? " of the " : "",
           avail ? ab : "", avail ? " available" : "", cbuf, avail ? avail_src : "available memory unknown",
           fit ? "checked before loading; --fit off skips it" : "flag --fit off: not checked");
    putchar('\n');
    printf("%-15s %d   (%s)\n", "threads", p->threads, p->threads_src);
    printf("%-15s %d   (%s)\n", "ctx", p->ctx, p->ctx_src);
    printf("%-15s %d   (%s)\n", "batch", p->rows, p->rows_src);
    const kiln_kv_type kv_v = c->kv_type_v == KILN_KV_SAME ? c->kv_type : c->kv_type_v;
    const uint64_t kv_per_tok = kiln_kv_bytes_per_token_kv(in, c->kv_type, kv_v);
    printf("%-15s K %s, V %s, rotation %s; %llu bytes per token   (%s)\n", "kv-type", kiln_kv_type_name(c->kv_type),
           kiln_kv_type_name(kv_v),
           c->kv_rotate == KILN_KV_ROTATE_ON    ? "on"
           : c->kv_rotate == KILN_KV_ROTATE_OFF ? "off"
                                                : "auto",
           (unsigned long long)kv_per_tok,
           c->kv_type == KILN_KV_F16 && kv_v == KILN_KV_F16 ? "default" : "flag --kv-type");
    cli_fmt_bytes(kv_per_tok * (uint64_t)p->ctx, a, sizeof a);
    if (o->kv_budget_gb > 0)
        printf("%-15s %.3g GB   (flag --kv-budget; one row holds %s)\n", "kv-budget", (double)o->kv_budget_gb, a);
    else
        printf("%-15s %d full rows   (%s; one row holds %s)\n", "kv-budget", p->rows,
               opt_src(o, OPT_KV_BUDGET, "default"), a);
    printf("%-15s %s   (%s)\n", "kv-paging", o->kv_paging_off ? "off" : "on, blocks of 16 positions",
           o->kv_paging_off ? "flag --kv-paging" : "default");
    cli_fmt_bytes((uint64_t)p->prompt_cache, cbuf, sizeof cbuf);
    printf("%-15s %s   (%s)\n", "prompt-cache", cbuf, p->cache_src);
    if (o->ssd_on)
        printf("%-15s %s, at most %.3g GB   (flag --ssd-cache; the size %s)\n", "ssd-cache", o->ssd_dir,
               (double)o->ssd_max_gb, opt_src(o, OPT_SSD_MAX, "default"));
    else printf("%-15s off   (default)\n", "ssd-cache");
    printf("%-15s %d   (%s)\n", "prefill-chunk", o->prefill_chunk, opt_src(o, OPT_PREFILL_CHUNK, "default"));
    printf("%-15s %d   (%s)\n", "max-queue", o->max_queue, opt_src(o, OPT_MAX_QUEUE, "default"));
    printf("%-15s %d   (%s)\n", "max-tokens", o->max_tokens, opt_src(o, OPT_MAX_TOKENS, "default: to the end"));
    printf("%-15s %d   (%s)\n", "max-tokens-limit", o->max_tokens_limit,
           opt_src(o, OPT_MAX_TOKENS_LIMIT, "default: none"));
    printf("%-15s %d MiB   (%s)\n", "max-body", o->max_body_mb, opt_src(o, OPT_MAX_BODY, "default"));
    printf("%-15s %s   (%s)\n", "host", o->host, opt_src(o, OPT_HOST, "default: loopback only"));
    printf("%-15s %d   (%s)\n", "port", p->port, p->port_src);
    printf("%-15s %s   (%s)\n", "api-key", o->api_key ? "set" : "none", opt_src(o, OPT_API_KEY, "default"));
    printf("%-15s %d s   (%s)\n", "timeout", o->timeout, opt_src(o, OPT_TIMEOUT, "default"));
    printf("%-15s %d   (%s)\n", "max-conns", o->max_conns, opt_src(o, OPT_MAX_CONNS, "default"));
    printf("%-15s %d   (%s)\n", "max-conns-ip", o->max_conns_per_ip, opt_src(o, OPT_MAX_CONNS_PER_IP, "default"));
    printf("%-15s %s   (%s)\n", "cors", o->cors ? o->cors : "none",
           opt_src(o, OPT_CORS, "default: same-origin callers only"));
    printf("%-15s %s   (%s)\n", "allow-host", o->allow_hosts ? o->allow_hosts : "none",
           opt_src(o, OPT_ALLOW_HOST, "default: IP addresses, localhost and --host"));
    printf("%-15s %s   (%s)\n", "open browser", p->open_browser ? "yes" : "no", p->open_src);
    if (o->max_models) printf("%-15s %d   (flag --max-models)\n", "max-models", o->max_models);
    else printf("%-15s no count limit   (default: --models-memory decides)\n", "max-models");
    cli_fmt_bytes(o->models_memory_gb >= 0 ? (uint64_t)((double)o->models_memory_gb * 1e9) : p->budget, a, sizeof a);
    printf("%-15s %s   (%s)\n", "models-memory", a, opt_src(o, OPT_MODELS_MEMORY, "machine: the planned memory above"));
    printf("%-15s %d s   (%s)\n", "load-timeout", o->load_timeout, opt_src(o, OPT_LOAD_TIMEOUT, "default"));
    for (size_t k = 0; k < o->n_aliases; k++)
        printf("%-15s %s = %s   (flag --model-alias)\n", "model-alias", o->alias_name[k], o->alias_target[k]);
    printf("%-15s %s   (%s)\n", "isolation", o->no_isolation ? "off" : "engine in a child process",
           o->no_isolation ? "flag --no-isolation" : "default");
    printf("%-15s %g   (%s)\n", "temp", (double)sp->temperature,
           sp_src(c, CLI_SP_TEMP, msp->temperature != def.temperature));
    printf("%-15s %d   (%s)\n", "top-k", sp->top_k, sp_src(c, CLI_SP_TOP_K, msp->top_k != def.top_k));
    printf("%-15s %g   (%s)\n", "top-p", (double)sp->top_p, sp_src(c, CLI_SP_TOP_P, msp->top_p != def.top_p));
    printf("%-15s %g   (%s)\n", "min-p", (double)sp->min_p, sp_src(c, CLI_SP_MIN_P, msp->min_p != def.min_p));
    printf("%-15s %g   (%s)\n", "repeat-penalty", (double)sp->repeat_penalty,
           sp_src(c, CLI_SP_REPEAT, msp->repeat_penalty != def.repeat_penalty));
    printf("%-15s %d   (%s)\n", "repeat-last-n", sp->penalty_last_n,
           sp_src(c, CLI_SP_REPEAT_N, msp->penalty_last_n != def.penalty_last_n));
    printf("%-15s %g   (%s)\n", "presence", (double)sp->presence_penalty, sp_src(c, CLI_SP_PRESENCE, false));
    printf("%-15s %g   (%s)\n", "frequency", (double)sp->frequency_penalty, sp_src(c, CLI_SP_FREQUENCY, false));
    if (sp->seed == KILN_SEED_RANDOM) printf("%-15s random   (%s)\n", "seed", sp_src(c, CLI_SP_SEED, false));
    else
        printf("%-15s %llu   (%s)\n", "seed", (unsigned long long)sp->seed,
               sp_src(c, CLI_SP_SEED, msp->seed != def.seed));
}

/* The port to try first and where it came from (p->port, port_src, port_fixed); false after
 * printing why KILN_PORT is bad. */
static bool plan_port(plan *p, const serve_opts *o) {
    const char *env_port = getenv("KILN_PORT");
    if (o->given[OPT_PORT]) {
        p->port = o->port;
        p->port_fixed = true;
        snprintf(p->port_src, sizeof p->port_src, "flag --port%s", o->port == 0 ? ": any free port" : "");
    } else if (env_port && *env_port) {
        if (!cli_int("KILN_PORT", env_port, 1, 65535, &p->port)) return false;
        snprintf(p->port_src, sizeof p->port_src, "env KILN_PORT; the next %d are tried when taken", PORT_TRIES);
    } else {
        p->port = DEFAULT_PORT;
        snprintf(p->port_src, sizeof p->port_src, "default; the next %d are tried when taken", PORT_TRIES);
    }
    return true;
}

/* Raises the open-file limit so that every allowed connection can have its socket (each is a
 * thread and a descriptor); when the hard limit is too low for that, lowers the connection limit
 * to what fits, with a note. */
static void fit_fd_limit(serve_opts *o) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    const rlim_t need = (rlim_t)o->max_conns + FD_RESERVE;
    if (rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    }
    if (rl.rlim_cur < need) {
        const int fit = rl.rlim_cur > 2 * FD_RESERVE ? (int)(rl.rlim_cur - FD_RESERVE) : FD_RESERVE;
        fprintf(stderr, "kiln serve: the open-file limit (%llu) allows %d connections, not %d\n",
                (unsigned long long)rl.rlim_cur, fit, o->max_conns);
        o->max_conns = fit;
    }
}

/* ---- port and browser ------------------------------------------------------------------------ */

/* Whether host:port can be bound now: 0 when it can, else the errno of bind (EADDRINUSE when
 * another socket listens there); -1 when host does not resolve (srv_http_start reports that). */
static int port_probe(const char *host, int port) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    if (getaddrinfo(host, ps, &hints, &ai) || !ai) return -1;
    int rc = 0, fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = errno;
    } else {
        const int one = 1; /* as the server's own socket: a port in TIME_WAIT is free */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) rc = errno;
        close(fd);
    }
    freeaddrinfo(ai);
    return rc;
}

/* Picks the port to listen on (p->port on success). A fixed port that is taken fails; otherwise
 * the next PORT_TRIES ports are tried. Returns false after printing why. */
static bool choose_port(const char *host, plan *p) {
    if (p->port == 0) return true;
    const int first = p->port, tries = p->port_fixed ? 0 : PORT_TRIES;
    for (int k = 0; k <= tries && first + k <= 65535; k++) {
        const int rc = port_probe(host, first + k);
        if (rc == EADDRINUSE) continue;
        if (k > 0) fprintf(stderr, "kiln serve: port %d is in use; using port %d\n", first, first + k);
        p->port = first + k;
        return true; /* free, or another problem srv_http_start will report */
    }
    if (p->port_fixed)
        fprintf(stderr,
                "kiln serve: port %d on %s is already in use (choose another with --port, or --port 0 for any "
                "free port)\n",
                first, host);
    else
        fprintf(stderr, "kiln serve: ports %d to %d on %s are all in use; choose one with --port\n", first,
                first + tries > 65535 ? 65535 : first + tries, host);
    return false;
}

/* Opens url in the desktop's browser through xdg-open, detached (its own session, output
 * discarded) so that neither its messages nor its lifetime touch the server. Best effort. */
static void open_browser(const char *url) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    if (posix_spawn_file_actions_init(&fa)) return;
    if (posix_spawnattr_init(&at)) {
        posix_spawn_file_actions_destroy(&fa);
        return;
    }
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&at, &none); /* the server blocks SIGINT/SIGTERM */
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
    /* sh starts xdg-open in the background and exits at once, so nothing is left to reap */
    char *argv[] = {"sh", "-c", "xdg-open \"$1\" &", "sh", (char *)url, NULL};
    pid_t pid;
    if (posix_spawnp(&pid, "sh", &fa, &at, argv, environ) == 0) waitpid(pid, NULL, 0);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
}

/* ---- the command ----------------------------------------------------------------------------- */

/* Prints where the server listens, opens the browser when planned, then serves until SIGINT or
 * SIGTERM and shuts down as the file comment says. */
static void serve_until_signal(srv *s, const plan *p, const serve_opts *o, const sigset_t *sigs) {
    kiln_engine *engine = s->engine;
    const bool v6 = strchr(s->cfg.host, ':') != NULL;
    kiln_engine_stats es;
    kiln_engine_get_stats(engine, &es);
    fprintf(stderr, "kiln serve: %s, context %d per row, %d rows, %d threads, prompt cache %.2f GB\n",
            kiln_model_desc(s->model), s->n_ctx, es.max_rows, kiln_engine_n_threads(engine),
            (double)es.cache_budget / 1e9);
    if (es.ssd_enabled)
        fprintf(stderr, "kiln serve: SSD cache %s: %d entries of this model, %.2f of %.2f GB used%s\n", o->ssd_dir,
                es.ssd_entries, (double)es.ssd_bytes / 1e9, (double)es.ssd_budget / 1e9,
                es.ssd_quarantined ? " (damaged files quarantined)" : "");
    fprintf(stderr, "kiln serve: listening on http://%s%s%s:%d (model id '%s')\n", v6 ? "[" : "", s->cfg.host,
            v6 ? "]" : "", s->bound_port, s->model_id);
    if (p->open_browser) {
        /* a wildcard address is reached through loopback */
        const bool any = strcmp(s->cfg.host, "0.0.0.0") == 0 || strcmp(s->cfg.host, "::") == 0;
        char *url = NULL;
        if (asprintf(&url, "http://%s%s%s:%d/", v6 ? "[" : "", any ? (v6 ? "::1" : "127.0.0.1") : s->cfg.host,
                     v6 ? "]" : "", s->bound_port) >= 0) {
            fprintf(stderr, "kiln serve: opening %s in the browser (--no-open to skip)\n", url);
            open_browser(url);
            free(url);
        }
    }
    int sig = 0;
    sigwait(sigs, &sig);
    fprintf(stderr, "kiln serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    atomic_store(&s->stopping, true);
    srv_http_quiesce(s);
    /* Running generations get up to SHUTDOWN_GRACE_MS; a second signal cancels them at once. */
    shutdown_ctx sc;
    atomic_init(&sc.finished, false);
    pthread_t th;
    const int now = 0;
    if (pthread_create(&th, NULL, shutdown_main, &sc) != 0) {
        srv_pool_each(shutdown_one, (void *)&now);
    } else {
        const struct timespec tick = {0, 100 * 1000000L};
        while (!atomic_load(&sc.finished)) {
            if (sigtimedwait(sigs, NULL, &tick) > 0) {
                fprintf(stderr, "kiln serve: second signal, cancelling running generations\n");
                srv_pool_each(shutdown_one, (void *)&now);
            }
        }
        pthread_join(th, NULL);
    }
    /* The engines have stopped (the last requests' prefixes are cached): make the SSD cache
     * durable, bounded in time. */
    srv_pool_each(flush_one, NULL);
}

/* What running the server needs of cli_serve's resolved settings (read-only here). */
typedef struct serve_run {
    const cli_common *c, *lc;
    const plan *p;
    const serve_opts *o;
    const char *template_file, *tool_format;
    bool ssd_verify;
    const cli_spec *spec;     /* speculative decoding, resolved */
    const sigset_t *sigs;     /* SIGINT, SIGTERM: blocked, taken by sigwait */
    const char *default_real; /* the default model's file, resolved */
} serve_run;

/* ---- the models of the pool ------------------------------------------------------------------ */

static const serve_run *g_run; /* the server's settings, for the pool's callbacks */

/* What a loaded model owns besides its srv fields (freed by unload_engine). */
typedef struct loaded_model {
    srv *s; /* NULL: a free slot */
    kiln_model *draft;
    char *id, *path;
} loaded_model;
static loaded_model g_loaded[SRV_POOL_MAX];
static pthread_mutex_t g_loaded_mu = PTHREAD_MUTEX_INITIALIZER;

/* The plan of the model at path: the server's plan with that file's own context, rows and prompt
 * cache (out->model points to path). False when its header cannot be read. */
static bool plan_for(const serve_run *run, const char *path, plan *out) {
    *out = *run->p;
    out->model = (char *)path;
    if (kiln_model_info_read(path, &out->info) != KILN_OK) return false;
    plan_machine(run->c, out, run->o->given[OPT_BATCH] ? run->o->batch : 0,
                 run->o->given[OPT_PROMPT_CACHE] ? run->o->prompt_cache_gb : -1);
    return true;
}

/* The memory a plan holds: weights, the KV of its rows, its prompt cache. */
static uint64_t plan_bytes(const cli_common *c, const plan *p) {
    const uint64_t kv_tok = kiln_kv_bytes_per_token_kv(&p->info, c->kv_type, c->kv_type_v);
    return p->info.tensor_bytes + (uint64_t)p->prompt_cache + (uint64_t)p->rows * (uint64_t)p->ctx * kv_tok;
}

/* Whether name may be looked up as ORG/NAME[:QUANT] in the Hugging Face cache: one '/', no "..",
 * not a path (a request's name never reaches the file system as a path of its own). */
static bool hub_name(const char *name) {
    const char *sl = strchr(name, '/');
    return name[0] != '/' && name[0] != '.' && name[0] != '~' && sl && !strchr(sl + 1, '/') && !strstr(name, "..");
}

#define LIST_FRESH_MS 2000 /* the pool looks at the models on disk again after this long */

/* srv_pool_config.resolve: a name `kiln ls` knows (its friendly name, a discovered file's path or
 * id, or ORG/NAME[:QUANT] of the Hugging Face cache) to the model's id (its friendly name), file
 * (resolved) and planned bytes. Only discovered models answer: a name is never opened as a path.
 * The discovered list is kept for LIST_FRESH_MS, so that names cost no directory scan each. */
static bool pool_resolve(const char *name, char *id, size_t idc, char *path, size_t pathc, uint64_t *bytes) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static cli_model_list l;
    static double at;
    static bool have;
    pthread_mutex_lock(&mu);
    if (!have || now_ms() - at > LIST_FRESH_MS) {
        if (have) cli_models_free(&l);
        cli_models_find(&l, false);
        have = true;
        at = now_ms();
    }
    const cli_model_entry *hit = NULL;
    for (size_t i = 0; i < l.n && !hit; i++)
        if (strcmp(l.v[i].name, name) == 0 || strcmp(l.v[i].path, name) == 0 || strcmp(l.v[i].real, name) == 0)
            hit = &l.v[i];
    for (size_t i = 0; i < l.n && !hit; i++) {
        char *fid = model_id(l.v[i].real);
        if (fid && strcmp(fid, name) == 0) hit = &l.v[i];
        free(fid);
    }
    if (!hit && hub_name(name)) {
        char *f = cli_model_resolve(name, false), *real = f ? realpath(f, NULL) : NULL;
        for (size_t i = 0; i < l.n && !hit && real; i++)
            if (strcmp(l.v[i].real, real) == 0) hit = &l.v[i];
        free(real);
        free(f);
    }
    plan pl;
    const bool ok = hit && hit->info.runnable && plan_for(g_run, hit->real, &pl);
    if (ok) {
        snprintf(id, idc, "%s", hit->name);
        snprintf(path, pathc, "%s", hit->real);
        *bytes = plan_bytes(g_run->c, &pl);
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

/* Loads the model at path and starts its engine into s (model, engine, model_id, model_path,
 * n_ctx, fingerprint, and the model's sampling defaults in s->cfg). The default model (is_default)
 * also gets --chat-template-file, --tool-format and speculative decoding. False after printing why
 * (s unchanged). */
static bool load_engine(const serve_run *run, bool is_default, const char *path, const char *id, srv *s) {
    const cli_common c = *run->c;
    const serve_opts o = *run->o;
    plan p;
    if (!plan_for(run, path, &p)) {
        fprintf(stderr, "kiln serve: cannot read model %s: %s\n", path, kiln_last_error());
        return false;
    }
    cli_common lc = *run->lc;
    lc.model = path;
    const char *template_file = is_default ? run->template_file : NULL;
    cli_spec spec = is_default ? *run->spec : (cli_spec){0};
    kiln_model *m = NULL, *draft = NULL;
    kiln_engine *engine = NULL;
    bool draft_ok = true;
    if (!(m = cli_load_model(&lc, false)) || !cli_use_chat_template(template_file, m)) goto fail;
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = p.ctx;
    ep.n_threads = p.threads;
    ep.kv_type = c.kv_type;
    ep.kv_type_v = c.kv_type_v;
    ep.kv_rotate = c.kv_rotate;
    ep.max_rows = p.rows;
    ep.max_queue = o.max_queue;
    ep.prefill_chunk = o.prefill_chunk;
    ep.kv_budget = (uint64_t)((double)o.kv_budget_gb * 1e9);
    ep.prompt_cache = p.prompt_cache;
    ep.kv_paging = !o.kv_paging_off;
    ep.ssd_dir = o.ssd_on ? o.ssd_dir : NULL;
    ep.ssd_max_bytes = (uint64_t)((double)o.ssd_max_gb * 1e9);
    ep.ssd_demote_idle_s = o.ssd_idle;
    ep.ssd_verify = run->ssd_verify;
    if (!(draft = cli_load_draft(&spec, &lc, "serve", &draft_ok)) && !draft_ok) goto fail;
    ep.spec = spec.method;
    ep.draft_model = draft;
    ep.spec_max = spec.max;
    if (kiln_engine_new(m, &ep, &engine)) {
        fprintf(stderr, "kiln serve: cannot start the engine: %s\n", kiln_last_error());
        goto fail;
    }
    loaded_model lm = {.s = s, .draft = draft, .id = id ? strdup(id) : model_id(path), .path = strdup(path)};
    s->cfg.sampling = cli_sampler_params(&c, m);
    s->cfg.chat_template = template_file ? cli_chat_template(m) : NULL;
    s->cfg.tool_format = is_default ? run->tool_format : NULL; /* another model's template says */
    s->model_path = lm.path;
    s->model = m;
    s->model_id = lm.id ? lm.id : "model";
    s->engine = engine;
    s->n_ctx = kiln_engine_n_ctx(engine);
    snprintf(s->fingerprint, sizeof s->fingerprint, "fp_%.12s", kiln_model_fingerprint(m));
    pthread_mutex_lock(&g_loaded_mu);
    for (size_t i = 0; i < SRV_POOL_MAX; i++)
        if (!g_loaded[i].s) {
            g_loaded[i] = lm;
            break;
        }
    pthread_mutex_unlock(&g_loaded_mu);
    return true;
fail:
    kiln_engine_free(engine);
    kiln_model_free(draft);
    kiln_model_free(m);
    return false;
}

/* Frees what load_engine made for s (its engine shut down first). */
static void unload_engine(srv *s) {
    kiln_engine_free(s->engine);
    kiln_model_free(s->model);
    s->engine = NULL;
    s->model = NULL;
    pthread_mutex_lock(&g_loaded_mu);
    for (size_t i = 0; i < SRV_POOL_MAX; i++) {
        if (g_loaded[i].s != s) continue;
        /* nothing quotes the id or path any more: the engine is idle and no handler holds s */
        kiln_model_free(g_loaded[i].draft);
        free(g_loaded[i].id);
        free(g_loaded[i].path);
        g_loaded[i] = (loaded_model){0};
    }
    pthread_mutex_unlock(&g_loaded_mu);
}

/* Frees the engine of a model other than main's own (srv_pool_each, at exit). */
static void unload_other(srv *s, void *main) {
    if (s != main) unload_engine(s);
}

/* srv_pool_config.load and .unload without isolation (the default model too, when it is loaded
 * again after an unload). */
static bool pool_load(srv *s, const char *path) {
    char id[192] = "", p2[1024];
    uint64_t bytes;
    const bool is_default = srv_pool_resolve(path, id, sizeof id, p2, sizeof p2, &bytes) == SRV_NAME_DEFAULT;
    return load_engine(g_run, is_default, path, id[0] && !is_default ? id : NULL, s);
}

/* The pool's settings: the default model (its realpath) and the flags. */
static srv_pool_config pool_config(const serve_run *run, const char *default_id) {
    const serve_opts *o = run->o;
    srv_pool_config pc = {.default_id = default_id,
                          .default_path = run->default_real,
                          .default_bytes = plan_bytes(run->c, run->p),
                          .n_aliases = o->n_aliases,
                          .max_models = (unsigned)o->max_models,
                          .memory =
                              o->models_memory_gb >= 0 ? (uint64_t)((double)o->models_memory_gb * 1e9) : run->p->budget,
                          .load_timeout_s = (unsigned)o->load_timeout,
                          .resolve = pool_resolve,
                          .load = pool_load,
                          .unload = unload_engine};
    for (size_t i = 0; i < o->n_aliases; i++) {
        pc.alias_name[i] = o->alias_name[i];
        pc.alias_target[i] = o->alias_target[i];
    }
    return pc;
}

/* Loads the model (entry `model` of the pool), starts the engine and the HTTP server, and serves
 * until a signal (the whole server without isolation, one model's engine child process with it).
 * Returns the exit status. */
static int run_server(const serve_run *run, size_t model) {
    const serve_opts o = *run->o;
    sigset_t sigs = *run->sigs;
    int rc = 0;
    srv s;
    memset(&s, 0, sizeof s);
    bool stats_ready = false;
    const srv_pool_table *tab = srv_pool_table_get();
    const char *path = model && tab ? tab->e[model].path : run->p->model;
    char id[192];
    snprintf(id, sizeof id, "%s", model && tab ? tab->e[model].id : "");

    s.cfg = (srv_config){
        .host = o.host,
        .port = run->p->port,
        .api_key = o.api_key,
        .max_tokens = o.max_tokens,
        .max_tokens_limit = o.max_tokens_limit,
        .max_body = (size_t)o.max_body_mb << 20,
        .max_queue = o.max_queue,
        .timeout_s = (unsigned)o.timeout,
        .max_conns = (unsigned)o.max_conns,
        .max_conns_per_ip = (unsigned)o.max_conns_per_ip,
        .cors = o.cors,
        .allow_hosts = o.allow_hosts,
        .tool_format = run->tool_format,
        .list_models = list_models,
        .verbose = run->c->verbose,
        .ssd_dir = o.ssd_on ? o.ssd_dir : NULL,
    };
    s.started = (long)time(NULL);
    atomic_init(&s.stopping, false);
    if (!load_engine(run, model == 0, path, id[0] ? id : NULL, &s)) {
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    srv_stats_init(&s.stats);
    stats_ready = true;
    if (tab) srv_pool_set_child(model, &s); /* an engine child of the supervisor's pool */
    else {
        srv_pool_config pc = pool_config(run, s.model_id);
        if (!srv_pool_init(&pc, &s)) {
            fprintf(stderr, "kiln serve: out of memory\n");
            rc = CLI_EXIT_FAIL;
            goto out;
        }
    }
    if (!srv_http_start(&s)) {
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    plan p;
    if (!plan_for(run, path, &p)) p = *run->p;
    p.port = run->p->port;
    p.open_browser = run->p->open_browser && model == 0;
    serve_until_signal(&s, &p, &o, &sigs);

out:
    if (s.engine) kiln_engine_shutdown(s.engine, 0);
    if (!tab) {
        const int now = 0;
        srv_pool_each(shutdown_one, (void *)&now);
    }
    srv_http_stop(&s);
    if (!tab) srv_pool_each(unload_other, &s);
    if (s.engine) unload_engine(&s);
    if (!tab) srv_pool_free();
    if (stats_ready) srv_stats_destroy(&s.stats);
    if (!rc && s.bound_port) fprintf(stderr, "kiln serve: stopped\n");
    return rc;
}
/* The engine's child process of an isolated server (srv_supervisor.child_main): the server as
 * without isolation, for one model of the pool, on the connections the supervisor hands over
 * through ctl, on its port. The browser is opened by the default model's first child only. */
static int engine_child(int ctl, int port, unsigned restarts, size_t model, void *arg) {
    serve_run run = *(const serve_run *)arg;
    plan p = *run.p;
    p.port = port;
    p.open_browser = p.open_browser && restarts == 0 && model == 0;
    run.p = &p;
    g_run = &run;
    srv_iso_set_ctl(ctl, restarts);
    const int rc = run_server(&run, model);
    fflush(NULL);
    return rc;
}

int cli_serve(int argc, char **argv) {
    cli_common c;
    cli_common_init(&c);
    serve_opts o;
    opts_init(&o);
    bool ssd_verify = kiln_engine_default_params().ssd_verify;
    const char *template_file = NULL, *tool_format = NULL;
    cli_spec spec = {0};
    bool fit = true; /* --fit: check the memory before loading */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_usage("serve", false);
            return 0;
        }
        const int taken = parse_opt(a, v, &o);
        if (taken < 0) return CLI_EXIT_USAGE;
        if (taken) {
            i++;
            continue;
        }
        if (strcmp(a, "--ssd-cache") == 0) { /* the directory is optional */
            o.ssd_on = true;
            if (v && v[0] != '-') {
                o.ssd_dir = v;
                i++;
            }
            continue;
        }
        if (strcmp(a, "--ssd-cache-verify") == 0 || strcmp(a, "--no-ssd-cache-verify") == 0) {
            ssd_verify = a[2] == 's';
            continue;
        }
        if (strcmp(a, "--print-config") == 0) {
            o.print_cfg = true;
            continue;
        }
        if (strcmp(a, "--kv-paging") == 0) {
            if (!v || (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)) {
                fprintf(stderr, "kiln serve: --kv-paging must be on or off\n");
                return CLI_EXIT_USAGE;
            }
            o.kv_paging_off = strcmp(v, "off") == 0;
            i++;
            continue;
        }
        if (strcmp(a, "--no-open") == 0) {
            o.no_open = true;
            continue;
        }
        if (strcmp(a, "--model-alias") == 0) { /* NAME=MODEL, repeatable */
            const char *eq = v ? strchr(v, '=') : NULL;
            if (!eq || eq == v || !eq[1] || o.n_aliases == SRV_POOL_ALIASES) {
                fprintf(stderr, "kiln serve: --model-alias takes NAME=MODEL (a model `kiln ls` lists; at most %d)\n",
                        SRV_POOL_ALIASES);
                return CLI_EXIT_USAGE;
            }
            char *name = strndup(v, (size_t)(eq - v));
            if (!name) return CLI_EXIT_FAIL;
            o.alias_name[o.n_aliases] = name; /* lives as long as the process */
            o.alias_target[o.n_aliases++] = eq + 1;
            i++;
            continue;
        }
        if (strcmp(a, "--no-isolation") == 0 || strcmp(a, "--debug-crash") == 0) {
            *(a[2] == 'n' ? &o.no_isolation : &o.debug_crash) = true;
            continue;
        }
        int r = cli_parse_fit(argc, argv, &i, &fit);
        if (r == 0) r = cli_parse_template_flags(argc, argv, &i, &template_file, &tool_format);
        if (r == 0) r = cli_parse_spec(argc, argv, &i, &spec, "serve");
        if (r == 0) r = cli_parse_common(argc, argv, &i, &c);
        if (r == 1) continue;
        if (r == 0)
            fprintf(stderr, "kiln serve: unknown option '%s'%s\n", a, (a[0] == '-' && !v) ? " (or missing value)" : "");
        cli_usage("serve", true);
        return CLI_EXIT_USAGE;
    }
    if (o.cors && !valid_origins(o.cors)) return CLI_EXIT_USAGE;
    if (!cli_spec_resolve(&spec, "serve")) return CLI_EXIT_USAGE;
    cli_setup_log(c.verbose);

    /* Everything below is released at `out`, whatever was reached. */
    int rc = 0;
    plan p;
    memset(&p, 0, sizeof p);
    kiln_model *m = NULL; /* --print-config only */
    char *ssd_default = NULL, *default_real = NULL;
    cli_common lc = c; /* the flags, loading the resolved file */
    sigset_t sigs;

    /* ---- resolve every setting once ---- */
    p.mem = cli_machine_memory();
    const bool mem_unknown = p.mem == 0;
    if (mem_unknown) p.mem = CLI_MEMORY_ASSUMED; /* the machine does not say: plan for a modest one */
    p.budget = p.mem / 100 * CLI_MEMORY_PCT;
    if (fit) { /* automatic context and rows fit what is available now, so the check does not refuse them */
        char avail_src[96];
        const uint64_t avail = cli_memory_available(avail_src, sizeof avail_src);
        const uint64_t usable = avail / 100 * (100 - CLI_FIT_SLACK_PCT);
        if (avail && usable < p.budget) {
            p.budget = usable;
            p.budget_avail = true;
        }
    }
    if ((rc = plan_model(&c, &p))) goto out;
    plan_machine(&c, &p, o.given[OPT_BATCH] ? o.batch : 0, o.given[OPT_PROMPT_CACHE] ? o.prompt_cache_gb : -1);
    plan_open(&p, o.no_open);
    if (!plan_port(&p, &o)) {
        rc = CLI_EXIT_USAGE;
        goto out;
    }
    if (o.ssd_on && !o.ssd_dir && !(o.ssd_dir = ssd_default = default_ssd_dir())) {
        fprintf(stderr, "kiln serve: --ssd-cache needs a directory when HOME is not set\n");
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    lc.model = p.model;
    default_real = realpath(p.model, NULL);
    if (o.print_cfg) { /* the sampling defaults come from the model's metadata: load it vocab-only */
        if (!(m = cli_load_model(&lc, true))) {
            rc = CLI_EXIT_FAIL;
            goto out;
        }
        p.model_sp = kiln_model_sampler_params(m);
        p.sp = cli_sampler_params(&c, m);
        print_config(&c, &p, &o, &spec, fit);
        goto out;
    }
    if (!fit_default(&c, &p, &o, &spec, fit)) { /* before the port is taken and anything is loaded */
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    if (!o.api_key && reachable_from_outside(o.host))
        fprintf(stderr,
                "kiln serve: warning: listening on %s without --api-key: anyone who can reach this address can "
                "use the model\n",
                o.host);
    if (!choose_port(o.host, &p)) {
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    fit_fd_limit(&o);
    if (c.verbose || !c.model) fprintf(stderr, "kiln serve: model %s (%s)\n", p.model, p.model_src);

    /* Signals are taken by sigwait (or the supervisor's signalfd); every thread and process started
     * from here inherits the mask. A signal that arrives while the model loads cancels the load
     * (cli_load_model polls for it). */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* a file-size limit (ulimit -f) fails an SSD cache write like a full disk */
    srv_iso_debug_crash(o.debug_crash);

    serve_run run = {.c = &c,
                     .lc = &lc,
                     .p = &p,
                     .o = &o,
                     .template_file = template_file,
                     .tool_format = tool_format,
                     .ssd_verify = ssd_verify,
                     .spec = &spec,
                     .sigs = &sigs,
                     .default_real = default_real ? default_real : p.model};
    g_run = &run;
    if (o.no_isolation) {
        rc = run_server(&run, 0);
    } else {
        char *did = model_id(p.model);
        srv_pool_config pc = pool_config(&run, did ? did : "model");
        if (!srv_pool_init(&pc, NULL)) {
            fprintf(stderr, "kiln serve: out of memory\n");
            rc = CLI_EXIT_FAIL;
        } else {
            const srv_supervisor sv = {.host = o.host,
                                       .port = p.port,
                                       .max_conns = (unsigned)o.max_conns,
                                       .timeout_s = (unsigned)o.timeout,
                                       .max_conns_per_ip = (unsigned)o.max_conns_per_ip,
                                       .max_body = (size_t)o.max_body_mb << 20,
                                       .engine_timeout_s = (unsigned)o.engine_timeout,
                                       .child_main = engine_child,
                                       .arg = &run};
            rc = srv_supervise(&sv);
        }
        srv_pool_free();
        free(did);
    }

out:
    kiln_model_free(m);
    free(ssd_default);
    free(default_real);
    free(p.model);
    for (size_t k = 0; k < o.n_aliases; k++) free((char *)o.alias_name[k]);
    return rc;
}