/*
 * test_policy.c - the library's shared policy, as front ends see it through kiln.h: the KV bytes
 * per token estimated from a header read equal what the engine allocates per position (generated
 * models with grouped-query attention and a head width other than n_embd / n_head, both KV types),
 * the default context and prompt-cache size, and the one table of sampling parameter ranges that
 * the library's validation, model metadata and the front ends share.
 */
#include "harness.h"

#include "kiln.h"
#include "sample/sampler.h"

#include <float.h>

/* Generates a tiny model with kiln-gen ($BUILD/kiln-gen) once per name; NULL when that fails. */
static const char *generate(const char *name, const char *args) {
    static char path[4][512];
    static int slot;
    char *out = path[slot++ & 3];
    const char *b = getenv("BUILD");
    snprintf(out, sizeof path[0], "%s/%s.gguf", kt_tmpdir(), name);
    if (kt_exists(out)) return out;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/kiln-gen %s --type F16 -o %s >/dev/null 2>&1", b && *b ? b : "build", args, out);
    return system(cmd) == 0 ? out : NULL;
}

/* Runs one greedy request of a few tokens on a one-row engine so its row's KV is allocated; returns
 * the engine's statistics after it. */
static kiln_status run_one(kiln_model *m, int32_t n_ctx, kiln_kv_type kv, kiln_engine_stats *st) {
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = n_ctx;
    ep.max_rows = 1;
    ep.kv_type = kv;
    ep.prompt_cache = 0;
    ep.n_threads = 1;
    kiln_engine *e = NULL;
    kiln_status s = kiln_engine_new(m, &ep, &e);
    if (s) return s;
    kiln_generate_params gp = kiln_generate_default_params();
    gp.sampling.temperature = 0;
    gp.max_tokens = 2;
    const kiln_token prompt[3] = {1, 2, 3};
    kiln_request *r = NULL;
    s = kiln_engine_submit(e, prompt, 3, &gp, &r);
    if (!s) s = kiln_request_wait(r, NULL);
    kiln_request_free(r);
    kiln_engine_get_stats(e, st);
    kiln_engine_free(e);
    return s;
}

typedef struct kv_case {
    const char *name;
    const char *args;
    int32_t n_layer, n_head_kv, head_dim;   /* what the preset has, for an independent count */
} kv_case;

/* The estimator from a header read = the engine's allocation per position = the count from the
 * shapes, for GQA (8 query heads over 2 KV heads) and a head width above n_embd / n_head. */
static void test_kv_estimate_matches_engine(void) {
    static const kv_case cases[] = {
        {"gqa-llama", "--preset tiny-llama", 2, 2, 32},
        {"wide-head-qwen3", "--preset tiny-qwen3", 2, 2, 128},
        {"gqa-qwen2-3l", "--preset tiny-qwen2 --layers 3 --kv-heads 4", 3, 4, 32},
    };
    static const kiln_kv_type types[] = {KILN_KV_F16, KILN_KV_F32};
    for (size_t c = 0; c < KN_ARRAY_LEN(cases); c++) {
        const char *path = generate(cases[c].name, cases[c].args);
        if (!path) SKIP("kiln-gen unavailable");
        kiln_model_info info;
        CHECK(kiln_model_info_read(path, &info) == KILN_OK);
        CHECKF(info.n_layer == cases[c].n_layer && info.n_head_kv == cases[c].n_head_kv &&
                   info.head_dim == cases[c].head_dim,
               "%s: %d layers, %d KV heads of %d", cases[c].name, info.n_layer, info.n_head_kv, info.head_dim);
        kiln_model *m = NULL;
        CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
        for (size_t t = 0; t < 2; t++) {
            const uint64_t elt = types[t] == KILN_KV_F16 ? 2 : 4;
            const uint64_t want = 2 * (uint64_t)cases[c].n_layer * (uint64_t)cases[c].n_head_kv *
                                  (uint64_t)cases[c].head_dim * elt;
            const uint64_t est = kiln_kv_bytes_per_token(&info, types[t]);
            CHECKF(est == want, "%s type %d: estimate %llu, shapes say %llu", cases[c].name, (int)types[t],
                   (unsigned long long)est, (unsigned long long)want);
            CHECK(kiln_model_kv_bytes_per_token(m, types[t]) == est);
            const int32_t n_ctx = 96;
            kiln_engine_stats st;
            CHECK(run_one(m, n_ctx, types[t], &st) == KILN_OK);
            CHECKF(st.kv_bytes == est * (uint64_t)n_ctx, "%s type %d: engine allocated %llu for %d positions, estimate %llu",
                   cases[c].name, (int)types[t], (unsigned long long)st.kv_bytes, n_ctx, (unsigned long long)est);
        }
        kiln_model_free(m);
    }
}

static void test_kv_estimate_edges(void) {
    kiln_model_info info;
    memset(&info, 0, sizeof info);
    CHECK(kiln_kv_bytes_per_token(NULL, KILN_KV_F16) == 0);
    CHECK(kiln_kv_bytes_per_token(&info, KILN_KV_F16) == 0);    /* no dimensions: unknown */
    info.n_layer = 4;
    info.n_head_kv = 2;
    info.head_dim = 16;
    CHECK(kiln_kv_bytes_per_token(&info, KILN_KV_F16) == 2 * 4 * 2 * 16 * 2);
    CHECK(kiln_kv_bytes_per_token(&info, KILN_KV_F32) == 2 * 4 * 2 * 16 * 4);
    CHECK(kiln_kv_bytes_per_token(&info, (kiln_kv_type)7) == 0);
    /* A hostile header saturates, never wraps: the KV width overflows, then the product does. */
    info.n_layer = 1 << 30;
    info.n_head_kv = 1 << 16;
    info.head_dim = 1 << 15;
    CHECK(kiln_kv_bytes_per_token(&info, KILN_KV_F32) == UINT64_MAX);
    info.n_layer = INT32_MAX;
    info.n_head_kv = 1 << 15;
    info.head_dim = (1 << 16) - 2;
    CHECK(kiln_kv_bytes_per_token(&info, KILN_KV_F32) == UINT64_MAX);
}

/* The families kiln runs are one table: for a generated model of each, the header read calls it
 * runnable and the loader runs it. */
static void test_arch_table_agrees(void) {
    static const char *const presets[][2] = {
        {"gqa-llama", "--preset tiny-llama"}, {"plain-qwen2", "--preset tiny-qwen2"}, {"wide-head-qwen3", "--preset tiny-qwen3"}};
    for (size_t i = 0; i < KN_ARRAY_LEN(presets); i++) {
        const char *path = generate(presets[i][0], presets[i][1]);
        if (!path) SKIP("kiln-gen unavailable");
        kiln_model_info info;
        CHECK(kiln_model_info_read(path, &info) == KILN_OK);
        CHECKF(info.runnable, "%s (%s) is not runnable by the header read", presets[i][0], info.arch);
        kiln_model *m = NULL;
        CHECKF(kiln_model_load(path, NULL, &m) == KILN_OK, "%s: %s", presets[i][0], kiln_last_error());
        CHECK(strcmp(kiln_model_arch(m), info.arch) == 0);
        kiln_model_free(m);
    }
}

/* The default context: the training length capped at KILN_N_CTX_DEFAULT_MAX, for the function
 * and for what a session and an engine resolve n_ctx = 0 to. */
static void test_default_ctx(void) {
    CHECK(kiln_default_n_ctx(0) == (KILN_N_CTX_TRAIN_ASSUMED < KILN_N_CTX_DEFAULT_MAX ? KILN_N_CTX_TRAIN_ASSUMED
                                                                                        : KILN_N_CTX_DEFAULT_MAX));
    CHECK(kiln_default_n_ctx(-5) == kiln_default_n_ctx(0));
    CHECK(kiln_default_n_ctx(100) == 100);
    CHECK(kiln_default_n_ctx(KILN_N_CTX_DEFAULT_MAX) == KILN_N_CTX_DEFAULT_MAX);
    CHECK(kiln_default_n_ctx(131072) == KILN_N_CTX_DEFAULT_MAX);
    static const struct { const char *name, *args; int32_t train; } cases[] = {
        {"ctx-short", "--preset tiny-llama-plain --ctx 1000", 1000},
        {"ctx-long", "--preset tiny-llama-plain --ctx 100000", 100000},
    };
    for (size_t c = 0; c < KN_ARRAY_LEN(cases); c++) {
        const char *path = generate(cases[c].name, cases[c].args);
        if (!path) SKIP("kiln-gen unavailable");
        kiln_model_info info;
        CHECK(kiln_model_info_read(path, &info) == KILN_OK && info.n_ctx_train == cases[c].train);
        kiln_model *m = NULL;
        CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
        kiln_session_params sp = kiln_session_default_params();
        sp.n_threads = 1;
        kiln_session *s = NULL;
        CHECK(kiln_session_new(m, &sp, &s) == KILN_OK);
        CHECK(kiln_session_n_ctx(s) == kiln_default_n_ctx(info.n_ctx_train));
        kiln_session_free(s);
        kiln_engine_params ep = kiln_engine_default_params();
        ep.max_rows = 1;
        ep.n_threads = 1;
        ep.prompt_cache = 0;
        kiln_engine *e = NULL;
        CHECK(kiln_engine_new(m, &ep, &e) == KILN_OK);
        CHECK(kiln_engine_n_ctx(e) == kiln_default_n_ctx(info.n_ctx_train));
        kiln_engine_free(e);
        kiln_model_free(m);
    }
}

/* The automatic prompt cache: 1/KILN_PROMPT_CACHE_MEMORY_SHARE of memory, capped; and an engine
 * with the default params gets exactly that budget for this machine. */
static void test_default_prompt_cache(void) {
    const uint64_t gib = (uint64_t)1 << 30;
    CHECK(kiln_default_prompt_cache(0) == 0);
    CHECK(kiln_default_prompt_cache(16 * gib) == 16 * gib / KILN_PROMPT_CACHE_MEMORY_SHARE);
    CHECK(kiln_default_prompt_cache(1024 * gib) == KILN_PROMPT_CACHE_MAX_AUTO);
    CHECK(kiln_engine_default_params().prompt_cache == KILN_PROMPT_CACHE_AUTO);
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no model");
    kiln_model *m = NULL;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    kiln_engine_params ep = kiln_engine_default_params();
    ep.max_rows = 1;
    ep.n_threads = 1;
    kiln_engine *e = NULL;
    CHECK(kiln_engine_new(m, &ep, &e) == KILN_OK);
    kiln_engine_stats st;
    kiln_engine_get_stats(e, &st);
    CHECK(st.cache_budget == kiln_default_prompt_cache(kiln_physical_memory()));
    kiln_engine_free(e);
    kiln_model_free(m);
}

int main(void) {
    kiln_set_log(NULL, NULL, KILN_LOG_ERROR);
    RUN(test_kv_estimate_matches_engine);
    RUN(test_kv_estimate_edges);
    RUN(test_arch_table_agrees);
    RUN(test_default_ctx);
    RUN(test_default_prompt_cache);
    return kt_summary();
}
