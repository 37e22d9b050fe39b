/*
 * test_policy.c - the library's shared policy, as front ends see it through kiln.h: the KV bytes
 * per token estimated from a header read equal what the engine allocates per position (generated
 * models with grouped-query attention and a head width other than n_embd / n_head, both KV types),
 * the default context and prompt-cache size, and the one table of sampling parameter ranges that
 * the library's validation, model metadata and the front ends share.
 */
#include "harness.h"

#include "gguf_write.h"
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
static kiln_status run_one(kiln_model *m, int32_t n_ctx, kiln_kv_type kv, bool paging, kiln_engine_stats *st) {
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = n_ctx;
    ep.max_rows = 1;
    ep.kv_type = kv;
    ep.prompt_cache = 0;
    ep.n_threads = 1;
    ep.kv_paging = paging;
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
    int32_t n_layer, n_head_kv, head_dim; /* what the preset has, for an independent count */
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
            const uint64_t want =
                2 * (uint64_t)cases[c].n_layer * (uint64_t)cases[c].n_head_kv * (uint64_t)cases[c].head_dim * elt;
            const uint64_t est = kiln_kv_bytes_per_token(&info, types[t]);
            CHECKF(est == want, "%s type %d: estimate %llu, shapes say %llu", cases[c].name, (int)types[t],
                   (unsigned long long)est, (unsigned long long)want);
            CHECK(kiln_model_kv_bytes_per_token(m, types[t]) == est);
            const int32_t n_ctx = 96;
            kiln_engine_stats st;
            /* contiguous: a whole row of n_ctx positions */
            CHECK(run_one(m, n_ctx, types[t], false, &st) == KILN_OK);
            CHECKF(st.kv_bytes == est * (uint64_t)n_ctx,
                   "%s type %d: engine allocated %llu for %d positions, estimate %llu", cases[c].name, (int)types[t],
                   (unsigned long long)st.kv_bytes, n_ctx, (unsigned long long)est);
            /* paged: blocks of kv_block_tokens positions, only those the request reserved (5 positions:
             * one block, plus the spare for a copy on write) */
            CHECK(run_one(m, n_ctx, types[t], true, &st) == KILN_OK);
            CHECKF(st.kv_block_tokens > 0 && st.kv_block_bytes == est * (uint64_t)st.kv_block_tokens &&
                       st.kv_bytes == 2 * st.kv_block_bytes,
                   "%s type %d paged: %llu bytes in blocks of %llu (%d positions), estimate %llu per position",
                   cases[c].name, (int)types[t], (unsigned long long)st.kv_bytes, (unsigned long long)st.kv_block_bytes,
                   st.kv_block_tokens, (unsigned long long)est);
        }
        kiln_model_free(m);
    }
}

static void test_kv_estimate_edges(void) {
    kiln_model_info info;
    memset(&info, 0, sizeof info);
    CHECK(kiln_kv_bytes_per_token(NULL, KILN_KV_F16) == 0);
    CHECK(kiln_kv_bytes_per_token(&info, KILN_KV_F16) == 0); /* no dimensions: unknown */
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
    static const char *const presets[][2] = {{"gqa-llama", "--preset tiny-llama"},
                                             {"plain-qwen2", "--preset tiny-qwen2"},
                                             {"wide-head-qwen3", "--preset tiny-qwen3"},
                                             {"swa-gemma2", "--preset tiny-gemma2"},
                                             {"swa-gemma3", "--preset tiny-gemma3"},
                                             {"fused-phi3", "--preset tiny-phi3"},
                                             {"nope-smollm3", "--preset tiny-llama-plain --arch smollm3"},
                                             {"moe-qwen3moe", "--preset tiny-qwen3moe"},
                                             {"moe-mixtral", "--preset tiny-mixtral"},
                                             {"moe-gptoss", "--preset tiny-gptoss"}};
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
    CHECK(kiln_default_n_ctx(0) ==
          (KILN_N_CTX_TRAIN_ASSUMED < KILN_N_CTX_DEFAULT_MAX ? KILN_N_CTX_TRAIN_ASSUMED : KILN_N_CTX_DEFAULT_MAX));
    CHECK(kiln_default_n_ctx(-5) == kiln_default_n_ctx(0));
    CHECK(kiln_default_n_ctx(100) == 100);
    CHECK(kiln_default_n_ctx(KILN_N_CTX_DEFAULT_MAX) == KILN_N_CTX_DEFAULT_MAX);
    CHECK(kiln_default_n_ctx(131072) == KILN_N_CTX_DEFAULT_MAX);
    static const struct {
        const char *name, *args;
        int32_t train;
    } cases[] = {
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

/* ---- sampling parameter ranges ------------------------------------------------------------------ */

typedef struct range_want {
    kiln_sampler_param param;
    const char *name;
    double min, max, def;
    bool integer;
} range_want;

/* The ranges kiln.h documents, restated here so a change of the table is a deliberate one. */
static const range_want wanted[] = {
    {KILN_SAMPLER_TEMPERATURE, "temperature", 0, 2, 0.8, false},
    {KILN_SAMPLER_TOP_K, "top_k", 0, 1 << 30, 40, true},
    {KILN_SAMPLER_TOP_P, "top_p", 0, 1, 0.95, false},
    {KILN_SAMPLER_MIN_P, "min_p", 0, 1, 0.05, false},
    {KILN_SAMPLER_REPEAT_PENALTY, "repeat_penalty", 0.001, 100, 1, false},
    {KILN_SAMPLER_PRESENCE_PENALTY, "presence_penalty", -2, 2, 0, false},
    {KILN_SAMPLER_FREQUENCY_PENALTY, "frequency_penalty", -2, 2, 0, false},
    {KILN_SAMPLER_PENALTY_LAST_N, "penalty_last_n", 0, 1 << 20, 64, true},
};

/* The field of param in p, as a double. */
static double field(const kiln_sampler_params *p, kiln_sampler_param param) {
    switch (param) {
        case KILN_SAMPLER_TEMPERATURE: return p->temperature;
        case KILN_SAMPLER_TOP_K: return p->top_k;
        case KILN_SAMPLER_TOP_P: return p->top_p;
        case KILN_SAMPLER_MIN_P: return p->min_p;
        case KILN_SAMPLER_REPEAT_PENALTY: return p->repeat_penalty;
        case KILN_SAMPLER_PRESENCE_PENALTY: return p->presence_penalty;
        case KILN_SAMPLER_FREQUENCY_PENALTY: return p->frequency_penalty;
        case KILN_SAMPLER_PENALTY_LAST_N: return p->penalty_last_n;
        default: return NAN;
    }
}

/* The smallest step outside a bound: the next float beyond it for float fields, 1 for integers. */
static double just_below(const range_want *w) { return w->integer ? w->min - 1 : nextafterf((float)w->min, -INFINITY); }
static double just_above(const range_want *w) { return w->integer ? w->max + 1 : nextafterf((float)w->max, INFINITY); }

/* The table says what kiln.h documents, and the defaults are its defaults. */
static void test_sampler_table(void) {
    CHECK(KN_ARRAY_LEN(wanted) == KILN_SAMPLER_PARAM_COUNT);
    const kiln_sampler_params def = kiln_sampler_default_params();
    for (size_t i = 0; i < KN_ARRAY_LEN(wanted); i++) {
        const range_want *w = &wanted[i];
        const kiln_sampler_range *r = kiln_sampler_param_range(w->param);
        CHECK(r != NULL);
        CHECKF(strcmp(r->name, w->name) == 0 && r->min == w->min && r->max == w->max && r->def == w->def &&
                   r->integer == w->integer,
               "%s: [%g, %g] default %g", r->name, r->min, r->max, r->def);
        CHECKF(field(&def, w->param) == (double)(float)w->def, "default %s", w->name);
    }
    CHECK(kiln_sampler_param_range(KILN_SAMPLER_PARAM_COUNT) == NULL);
    CHECK(kiln_sampler_param_range((kiln_sampler_param)-1) == NULL);
    CHECK(def.seed == KILN_SEED_RANDOM && def.logit_bias == NULL && def.n_logit_bias == 0);
}

/* The library's validation (kn_sampler_check, which kiln_generate and kiln_engine_submit run) and
 * the checked setter accept every bound and refuse the smallest step beyond it. */
static void test_sampler_bounds(void) {
    for (size_t i = 0; i < KN_ARRAY_LEN(wanted); i++) {
        const range_want *w = &wanted[i];
        const double in[2] = {w->min, w->max}, out[2] = {just_below(w), just_above(w)};
        for (int k = 0; k < 2; k++) {
            kiln_sampler_params p = kiln_sampler_default_params();
            CHECKF(kiln_sampler_param_set(&p, w->param, in[k]) == KILN_OK, "%s = %.10g: %s", w->name, in[k],
                   kiln_last_error());
            CHECK(field(&p, w->param) == (double)(float)in[k]);
            CHECKF(kn_sampler_check(&p, 100) == KILN_OK, "check %s = %.10g: %s", w->name, in[k], kiln_last_error());
            const kiln_sampler_params before = p;
            CHECK(kiln_sampler_param_set(&p, w->param, out[k]) == KILN_ERR_INVALID_ARG);
            CHECKF(strstr(kiln_last_error(), w->name) != NULL, "message '%s'", kiln_last_error());
            CHECK(memcmp(&p, &before, sizeof p) == 0);
            /* the same value written straight into the struct fails the library's check */
            if (w->integer) {
                if (w->param == KILN_SAMPLER_TOP_K) p.top_k = (int32_t)out[k];
                else p.penalty_last_n = (int32_t)out[k];
            } else {
                float *f = w->param == KILN_SAMPLER_TEMPERATURE        ? &p.temperature
                           : w->param == KILN_SAMPLER_TOP_P            ? &p.top_p
                           : w->param == KILN_SAMPLER_MIN_P            ? &p.min_p
                           : w->param == KILN_SAMPLER_REPEAT_PENALTY   ? &p.repeat_penalty
                           : w->param == KILN_SAMPLER_PRESENCE_PENALTY ? &p.presence_penalty
                                                                       : &p.frequency_penalty;
                *f = (float)out[k];
            }
            CHECKF(kn_sampler_check(&p, 100) == KILN_ERR_INVALID_ARG, "check accepted %s = %.10g", w->name, out[k]);
            CHECKF(strstr(kiln_last_error(), w->name) != NULL, "message '%s'", kiln_last_error());
        }
        kiln_sampler_params p = kiln_sampler_default_params();
        CHECK(kiln_sampler_param_set(&p, w->param, NAN) == KILN_ERR_INVALID_ARG);
        if (w->integer) CHECK(kiln_sampler_param_set(&p, w->param, w->min + 0.5) == KILN_ERR_INVALID_ARG);
    }
    kiln_sampler_params p = kiln_sampler_default_params();
    CHECK(kiln_sampler_param_set(NULL, KILN_SAMPLER_TOP_P, 0.5) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_sampler_param_set(&p, KILN_SAMPLER_PARAM_COUNT, 0.5) == KILN_ERR_INVALID_ARG);
}

/* Through the public engine: a request with a value just outside a range is refused at submit, one
 * at the bound is accepted. */
static void test_sampler_bounds_engine(void) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no model");
    kiln_model *m = NULL;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 32;
    ep.max_rows = 1;
    ep.n_threads = 1;
    ep.prompt_cache = 0;
    kiln_engine *e = NULL;
    CHECK(kiln_engine_new(m, &ep, &e) == KILN_OK);
    const kiln_token prompt[2] = {1, 2};
    for (size_t i = 0; i < KN_ARRAY_LEN(wanted); i++) {
        const range_want *w = &wanted[i];
        kiln_generate_params gp = kiln_generate_default_params();
        gp.max_tokens = 1;
        CHECK(kiln_sampler_param_set(&gp.sampling, w->param, w->max) == KILN_OK);
        kiln_request *r = NULL;
        CHECKF(kiln_engine_submit(e, prompt, 2, &gp, &r) == KILN_OK, "%s = max: %s", w->name, kiln_last_error());
        CHECK(kiln_request_wait(r, NULL) == KILN_OK);
        kiln_request_free(r);
        if (w->integer) {
            if (w->param == KILN_SAMPLER_TOP_K) gp.sampling.top_k = (int32_t)just_above(w);
            else gp.sampling.penalty_last_n = (int32_t)just_above(w);
        } else {
            gp.sampling = kiln_sampler_default_params();
            const float bad = (float)just_above(w);
            switch (w->param) {
                case KILN_SAMPLER_TEMPERATURE: gp.sampling.temperature = bad; break;
                case KILN_SAMPLER_TOP_P: gp.sampling.top_p = bad; break;
                case KILN_SAMPLER_MIN_P: gp.sampling.min_p = bad; break;
                case KILN_SAMPLER_REPEAT_PENALTY: gp.sampling.repeat_penalty = bad; break;
                case KILN_SAMPLER_PRESENCE_PENALTY: gp.sampling.presence_penalty = bad; break;
                default: gp.sampling.frequency_penalty = bad; break;
            }
        }
        r = NULL;
        CHECKF(kiln_engine_submit(e, prompt, 2, &gp, &r) == KILN_ERR_INVALID_ARG, "%s just above max accepted",
               w->name);
        CHECK(r == NULL);
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Writes a vocabulary-only GGUF (four SPM tokens) whose general.sampling.* keys hold the given
 * values (NAN: key absent); returns 0 on success. */
static int write_sampling_model(const char *path, const double vals[6]) {
    static const char *const keys[6] = {"general.sampling.temp",           "general.sampling.top_k",
                                        "general.sampling.top_p",          "general.sampling.min_p",
                                        "general.sampling.penalty_repeat", "general.sampling.penalty_last_n"};
    static const char *const tokens[4] = {"<unk>", "<s>", "</s>", "a"};
    kn_gguf_writer *w = NULL;
    if (kn_gguf_writer_create(&w)) return -1;
    int rc = kn_gguf_writer_set_str(w, "general.architecture", "llama") ||
             kn_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama") ||
             kn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 4);
    for (int i = 0; i < 6 && !rc; i++) {
        if (isnan(vals[i])) continue;
        if (i == 1 || i == 5) rc = kn_gguf_writer_set_i64(w, keys[i], (int64_t)vals[i]) != KILN_OK;
        else rc = kn_gguf_writer_set_f64(w, keys[i], vals[i]) != KILN_OK;
    }
    if (!rc) rc = kn_gguf_writer_write(w, path) != KILN_OK;
    kn_gguf_writer_free(w);
    return rc ? -1 : 0;
}

/* A model file's recommended settings use the same table: values at the bounds are taken, values
 * just beyond them are ignored (the library defaults stay). */
static void test_sampler_bounds_metadata(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/sampling.gguf", kt_tmpdir());
    kiln_model_params mp = kiln_model_default_params();
    mp.vocab_only = true;
    const double at_max[6] = {2, 1 << 30, 1, 1, 100, 1 << 20}, at_min[6] = {0, 0, 0, 0, 0.001, 0};
    const double above[6] = {nextafter(2, 3), (1 << 30) + 1.0,     nextafter(1, 2),
                             nextafter(1, 2), nextafter(100, 101), (1 << 20) + 1.0};
    const double below[6] = {nextafter(0, -1), -1, nextafter(0, -1), nextafter(0, -1), nextafter(0.001, 0), -1};
    const kiln_sampler_param order[6] = {KILN_SAMPLER_TEMPERATURE,    KILN_SAMPLER_TOP_K,
                                         KILN_SAMPLER_TOP_P,          KILN_SAMPLER_MIN_P,
                                         KILN_SAMPLER_REPEAT_PENALTY, KILN_SAMPLER_PENALTY_LAST_N};
    const double *sets[4] = {at_max, at_min, above, below};
    const kiln_sampler_params def = kiln_sampler_default_params();
    for (int s = 0; s < 4; s++) {
        CHECK(write_sampling_model(path, sets[s]) == 0);
        kiln_model *m = NULL;
        CHECKF(kiln_model_load(path, &mp, &m) == KILN_OK, "%s", kiln_last_error());
        const kiln_sampler_params got = kiln_model_sampler_params(m);
        for (int i = 0; i < 6; i++) {
            const double want = s < 2 ? (double)(float)sets[s][i] : field(&def, order[i]);
            CHECKF(field(&got, order[i]) == want, "set %d key %d: %.10g, wanted %.10g", s, i, field(&got, order[i]),
                   want);
        }
        kiln_model_free(m);
    }
}

int main(void) {
    kiln_set_log(NULL, NULL, KILN_LOG_ERROR);
    RUN(test_kv_estimate_matches_engine);
    RUN(test_kv_estimate_edges);
    RUN(test_arch_table_agrees);
    RUN(test_default_ctx);
    RUN(test_default_prompt_cache);
    RUN(test_sampler_table);
    RUN(test_sampler_bounds);
    RUN(test_sampler_bounds_engine);
    RUN(test_sampler_bounds_metadata);
    return kt_summary();
}
