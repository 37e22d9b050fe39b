/*
 * test_spec.c - speculative decoding (engine/spec.h) on stories260K and kiln-gen models:
 *   - a position's logits are the same bits in a multi-token pass as alone, and lowering n_past
 *     (the rollback) leaves the logits exactly as if the rejected tokens were never decoded;
 *   - the n-gram lookup proposes the continuation of the longest recent match;
 *   - greedy output is identical with spec none / ngram / draft, in a session (batch 1) and in an
 *     engine of 8 rows with chunked prefill, prefix-cache hits, rows that opt out, constrained rows,
 *     stop strings, max_tokens and logprobs, and the methods really propose and accept tokens;
 *   - sampled output: the same tokens for every seed of a fixed set, and the distribution of a
 *     token position over the seeds passes a chi-square test against plain sampling;
 *   - the draft's cache after a generation with rejections holds exactly the K/V a fresh pass over
 *     the committed tokens computes (its rollback);
 *   - the policy: the pass-cost fit, the plan at batch 1 and 8 (a slow draft at 8 rows proposes
 *     nothing, high acceptance at batch 1 speculates), an engine of 8 rows whose draft is the model
 *     itself never proposes; the draft's prefix cache serves repeated prompts;
 *   - bad parameters (unknown method, spec_max 0 or beyond the limit, a draft with another
 *     vocabulary or none) give clear errors.
 */
#define KT_ENGINE_HELPERS
#include "harness.h"

#include "engine/engine.h"
#include "engine/session.h"
#include "engine/spec.h"
#include "kiln.h"
#include "model/forward.h"

#include <math.h>
#include <stdlib.h>

static const char *stories(void) { return kt_data("models/stories260K/stories260K.gguf"); }

/* A prompt that repeats itself (so the n-gram lookup finds matches) of n tokens below V. */
static void repetitive_prompt(kiln_token *p, int n, int V, int seed) {
    p[0] = 1;
    for (int i = 1; i < n; i++) p[i] = 2 + (int)((i % 11) * 37 + seed * 13) % (V - 2);
}

/* ---- the forward pass: multi-token = one at a time, rollback ----------------------------------- */

static void check_bits(const kiln_model *m, const char *name) {
    const int V = kiln_model_n_vocab(m), K = 6, P = 9;
    kn_scratch s;
    kn_kv a, b;
    CHECK(kn_scratch_init(&s, m, 16, 64, 1) == KILN_OK);
    const kn_hparams *hp = &m->hp;
    CHECK(kn_kv_init(&a, KN_F16, hp->n_layer, 64, hp->n_head_kv * hp->head_dim) == KILN_OK);
    CHECK(kn_kv_init(&b, KN_F16, hp->n_layer, 64, hp->n_head_kv * hp->head_dim) == KILN_OK);
    kiln_token prompt[9], t[6] = {5, 17, 3, 99 % V, 42 % V, 7};
    repetitive_prompt(prompt, P, V, 1);
    float *one = malloc(sizeof(float) * (size_t)V * K), *multi = malloc(sizeof(float) * (size_t)V * K);
    float *re = malloc(sizeof(float) * (size_t)V * 2);
    kn_batch_row r = {.kv = &a, .tokens = prompt, .n_tokens = P, .logits_from = P};
    kn_forward(m, &s, &r, 1, one, 1);
    r.kv = &b;
    kn_forward(m, &s, &r, 1, one, 1);
    for (int i = 0; i < K; i++) { /* a: one token per pass */
        r = (kn_batch_row){.kv = &a, .tokens = &t[i], .n_tokens = 1, .logits_from = 0};
        kn_forward(m, &s, &r, 1, one + (size_t)i * V, 1);
    }
    r = (kn_batch_row){.kv = &b, .tokens = t, .n_tokens = K, .logits_from = 0}; /* b: all in one pass */
    kn_forward(m, &s, &r, 1, multi, K);
    for (int i = 0; i < K; i++)
        CHECKF(memcmp(one + (size_t)i * V, multi + (size_t)i * V, sizeof(float) * (size_t)V) == 0,
               "%s: position %d differs between a %d-token pass and one-token decoding", name, P + i, K);
    /* rollback: b keeps t0, t1 and replaces t2.. by x; a decodes t0, t1, x from scratch */
    kn_kv_free(&a);
    CHECK(kn_kv_init(&a, KN_F16, hp->n_layer, 64, hp->n_head_kv * hp->head_dim) == KILN_OK);
    kiln_token seq[12];
    memcpy(seq, prompt, sizeof prompt);
    seq[P] = t[0], seq[P + 1] = t[1], seq[P + 2] = 11;
    r = (kn_batch_row){.kv = &a, .tokens = seq, .n_tokens = P + 3, .logits_from = P + 2};
    kn_forward(m, &s, &r, 1, re, 1);
    b.n_past = P + 2;
    r = (kn_batch_row){.kv = &b, .tokens = &seq[P + 2], .n_tokens = 1, .logits_from = 0};
    kn_forward(m, &s, &r, 1, re + V, 1);
    CHECKF(memcmp(re, re + V, sizeof(float) * (size_t)V) == 0, "%s: logits after a rollback differ", name);
    CHECK(b.n_past == P + 3);
    free(one);
    free(multi);
    free(re);
    kn_kv_free(&a);
    kn_kv_free(&b);
    kn_scratch_free(&s);
}

static void test_verify_bits_and_rollback(void) {
    kiln_model *m = kt_load(stories());
    if (m) check_bits(m, "stories260K");
    const char *types[] = {"F16", "Q8_0", "Q4_K"};
    for (int i = 0; i < 3; i++) {
        char name[64], args[128];
        snprintf(name, sizeof name, "spec-llama-%s", types[i]);
        snprintf(args, sizeof args, "--preset tiny-llama --type %s --seed 5", types[i]);
        kiln_model *g = kt_load(kt_gen(name, args));
        CHECKF(g != NULL, "kiln-gen %s", args);
        if (g) check_bits(g, name);
        kiln_model_free(g);
    }
    kiln_model_free(m);
}

/* ---- n-gram lookup --------------------------------------------------------------------------- */

static void test_ngram_lookup(void) {
    const kiln_token h[] = {1, 2, 3, 4, 5, 9, 2, 3, 4, 8, 7, 2, 3, 4};
    kiln_token out[8];
    /* suffix 2 3 4 (the longest, 3 of the 4 allowed): the latest earlier match is followed by 8 7 2 3 4,
     * then the period of 5 repeats */
    CHECK(kn_spec_ngram(h, 14, 8, out) == 8 && out[0] == 8 && out[1] == 7 && out[2] == 2 && out[4] == 4);
    CHECK(out[5] == 8 && out[6] == 7 && out[7] == 2);
    CHECK(kn_spec_ngram(h, 14, 1, out) == 1 && out[0] == 8);
    const kiln_token u[] = {1, 2, 3, 4};
    CHECK(kn_spec_ngram(u, 4, 4, out) == 0); /* no earlier occurrence */
    CHECK(kn_spec_ngram(u, 1, 4, out) == 0);
    const kiln_token r[] = {6, 6, 6};
    CHECK(kn_spec_ngram(r, 3, 4, out) == 4 && out[0] == 6 && out[3] == 6); /* a loop of one token */
    const kiln_token ab[] = {5, 1, 2, 1, 2};
    CHECK(kn_spec_ngram(ab, 5, 5, out) == 5 && out[0] == 1 && out[1] == 2 && out[2] == 1 && out[4] == 1);
}

/* ---- sessions (batch 1) ---------------------------------------------------------------------- */

typedef struct gen_out {
    kt_out o;
    float lp[512];
} gen_out;

static int on_tok(const kiln_token_event *ev, void *user) {
    gen_out *g = user;
    if (ev->token >= 0 && g->o.n < 512) {
        g->lp[g->o.n] = ev->logprob;
        g->o.toks[g->o.n++] = ev->token;
    }
    return 0;
}

/* The draft on these tiny models costs about what the model does, so its cost model would keep it
 * off (see test_policy): the tests of its verification give every row DRAFT_K proposals a step. */
#define DRAFT_K 3

/* Generates from p[n] in a session with the method (a draft: DRAFT_K proposals a step); tokens
 * and logprobs into *g. */
static kiln_status session_gen(kiln_model *m, kiln_spec_method method, kiln_model *draft, const kiln_token *p, int n,
                               const kiln_generate_params *gp0, gen_out *g, kiln_generate_result *res) {
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_batch = 16; /* the prompt in chunks */
    sp.n_threads = 1;
    sp.spec = method;
    sp.draft_model = draft;
    sp.spec_max = 6;
    kiln_session *s = NULL;
    kiln_status st = kiln_session_new(m, &sp, &s);
    if (st) return st;
    if (method == KILN_SPEC_DRAFT) s->spec.force_k = DRAFT_K;
    kiln_generate_params gp = *gp0;
    gp.on_token = on_tok;
    gp.user = g;
    g->o.n = 0;
    st = kiln_generate_tokens(s, p, (size_t)n, &gp, res);
    kiln_session_free(s);
    return st;
}

static bool same_gen(const gen_out *a, const gen_out *b) {
    return kt_same_out(&a->o, &b->o) && memcmp(a->lp, b->lp, sizeof(float) * (size_t)a->o.n) == 0;
}

static kiln_generate_params greedy(int max) {
    kiln_generate_params gp = kiln_generate_default_params();
    gp.sampling.temperature = 0;
    gp.sampling.repeat_penalty = 1.0f;
    gp.max_tokens = max;
    gp.ignore_eos = true;
    gp.logprobs = 3;
    return gp;
}

static void test_session_greedy(void) {
    kiln_model *m = kt_load(stories());
    if (!m) SKIP("no model");
    kiln_model *same = kt_load(stories()); /* a draft that always agrees */
    kiln_model *t16 = kt_load(kt_gen("spec-llama-F16", "--preset tiny-llama --type F16 --seed 5"));
    kiln_model *d8 = kt_load(kt_gen("spec-llama-Q8_0", "--preset tiny-llama --type Q8_0 --seed 5"));
    CHECK(t16 && d8);
    kiln_token p[40];
    repetitive_prompt(p, 40, 512, 0);
    const kiln_generate_params gp = greedy(90);
    gen_out ref, o;
    kiln_generate_result res;
    CHECK(session_gen(m, KILN_SPEC_NONE, NULL, p, 40, &gp, &ref, &res) == KILN_OK && ref.o.n == 90);
    CHECK(res.n_spec_proposed == 0);
    CHECK(session_gen(m, KILN_SPEC_NGRAM, NULL, p, 40, &gp, &o, &res) == KILN_OK);
    CHECK(same_gen(&o, &ref));
    /* how much is proposed, and where, follows the costs the plan times on this machine (a loaded
     * machine probes less): that proposals are made is certain, that some land is not */
    CHECKF(res.n_spec_proposed > 0, "ngram proposed %d, accepted %d", res.n_spec_proposed, res.n_spec_accepted);
    CHECK(session_gen(m, KILN_SPEC_DRAFT, same, p, 40, &gp, &o, &res) == KILN_OK);
    CHECK(same_gen(&o, &ref));
    /* an identical draft is always right */
    CHECKF(res.n_spec_accepted == res.n_spec_proposed && res.n_spec_proposed > 0,
           "an identical draft: proposed %d, accepted %d", res.n_spec_proposed, res.n_spec_accepted);
    /* opting out per generation */
    kiln_generate_params off = gp;
    off.speculative = false;
    CHECK(session_gen(m, KILN_SPEC_NGRAM, NULL, p, 40, &off, &o, &res) == KILN_OK);
    CHECK(same_gen(&o, &ref) && res.n_spec_proposed == 0);
    /* max_tokens and stop strings cut where plain decoding does */
    for (int max = 1; max < 12; max += 5) {
        kiln_generate_params g2 = greedy(max);
        gen_out a, b;
        CHECK(session_gen(m, KILN_SPEC_NONE, NULL, p, 40, &g2, &a, &res) == KILN_OK && a.o.n == max);
        CHECK(session_gen(m, KILN_SPEC_DRAFT, same, p, 40, &g2, &b, &res) == KILN_OK && same_gen(&a, &b));
        CHECK(session_gen(m, KILN_SPEC_NGRAM, NULL, p, 40, &g2, &b, &res) == KILN_OK && same_gen(&a, &b));
    }
    if (t16 && d8) { /* a draft at a lower weight type of the same weights */
        kiln_token q[30];
        repetitive_prompt(q, 30, 512, 3);
        CHECK(session_gen(t16, KILN_SPEC_NONE, NULL, q, 30, &gp, &ref, &res) == KILN_OK);
        CHECK(session_gen(t16, KILN_SPEC_DRAFT, d8, q, 30, &gp, &o, &res) == KILN_OK);
        CHECK(same_gen(&o, &ref));
        CHECKF(res.n_spec_accepted > 0, "Q8_0 draft: proposed %d, accepted %d", res.n_spec_proposed,
               res.n_spec_accepted);
        CHECK(session_gen(t16, KILN_SPEC_NGRAM, NULL, q, 30, &gp, &o, &res) == KILN_OK);
        CHECK(same_gen(&o, &ref));
    }
    kiln_model_free(t16);
    kiln_model_free(d8);
    kiln_model_free(same);
    kiln_model_free(m);
}

/* The draft's KV after generations with rejected proposals: positions [0, n_past) hold the bits a
 * fresh draft pass over the committed tokens (prompt, then output) computes. */
static void test_draft_kv_rollback(void) {
    kiln_model *t16 = kt_load(kt_gen("spec-llama-F16", "--preset tiny-llama --type F16 --seed 5"));
    kiln_model *d4 = kt_load(kt_gen("spec-llama-Q4_0", "--preset tiny-llama --type Q4_0 --seed 5"));
    CHECK(t16 && d4);
    if (!t16 || !d4) goto out;
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    sp.spec = KILN_SPEC_DRAFT;
    sp.draft_model = d4;
    sp.spec_max = 6;
    kiln_session *s = NULL;
    CHECK(kiln_session_new(t16, &sp, &s) == KILN_OK);
    if (!s) goto out;
    s->spec.force_k = 6;
    int rejected = 0;
    for (int seed = 0; seed < 4; seed++) {
        kiln_token all[256];
        repetitive_prompt(all, 30, 512, seed);
        kiln_generate_params gp = greedy(60);
        gen_out g = {0};
        gp.on_token = on_tok;
        gp.user = &g;
        kiln_generate_result res;
        CHECK(kiln_generate_tokens(s, all, 30, &gp, &res) == KILN_OK && g.o.n == 60);
        rejected += res.n_spec_proposed - res.n_spec_accepted;
        memcpy(all + 30, g.o.toks, sizeof(kiln_token) * 60);
        const kn_kv *dkv = &s->spec.dkv[0];
        const int32_t n = dkv->n_past;
        CHECK(n > 30 && n <= s->kv.n_past);
        kn_kv fresh;
        kn_scratch sc;
        const kn_hparams *hp = &d4->hp;
        CHECK(kn_kv_init_fmt(&fresh, &dkv->fmt, hp->n_layer, 256, hp->n_head_kv, hp->head_dim) == KILN_OK);
        CHECK(kn_scratch_init(&sc, d4, 256, 256, 1) == KILN_OK);
        float *lg = malloc(sizeof(float) * 512);
        kn_batch_row r = {.kv = &fresh, .tokens = all, .n_tokens = n, .logits_from = n};
        kn_forward(d4, &sc, &r, 1, lg, 1);
        CHECKF(kt_same_rows(&fresh, dkv, n), "seed %d: the draft's cache differs from a fresh pass", seed);
        free(lg);
        kn_scratch_free(&sc);
        kn_kv_free(&fresh);
    }
    CHECKF(rejected > 0, "no proposal was rejected: the rollback was not exercised");
    kiln_session_free(s);
out:
    kiln_model_free(t16);
    kiln_model_free(d4);
}

/* ---- sampled rows ---------------------------------------------------------------------------- */

#define N_SEEDS 240
#define POS     4 /* the generated token position whose distribution is compared */

static void test_sampled(void) {
    kiln_model *m = kt_load(stories());
    if (!m) SKIP("no model");
    kiln_model *same = kt_load(stories());
    kiln_token p[40];
    repetitive_prompt(p, 40, 512, 0);
    static int cnt[3][512];
    memset(cnt, 0, sizeof cnt);
    int identical = 0, accepted = 0;
    for (int seed = 0; seed < N_SEEDS; seed++) {
        kiln_generate_params gp = kiln_generate_default_params();
        gp.sampling.temperature = 0.8f;
        gp.sampling.top_k = 0;
        gp.sampling.top_p = 1.0f;
        gp.sampling.min_p = 0.0f;
        gp.sampling.repeat_penalty = 1.0f;
        gp.sampling.seed = (uint64_t)seed * 7919u + 1;
        gp.max_tokens = 12;
        gp.ignore_eos = true;
        gen_out o[3];
        kiln_generate_result res;
        CHECK(session_gen(m, KILN_SPEC_NONE, NULL, p, 40, &gp, &o[0], &res) == KILN_OK);
        CHECK(session_gen(m, KILN_SPEC_NGRAM, NULL, p, 40, &gp, &o[1], &res) == KILN_OK);
        accepted += res.n_spec_accepted;
        CHECK(session_gen(m, KILN_SPEC_DRAFT, same, p, 40, &gp, &o[2], &res) == KILN_OK);
        accepted += res.n_spec_accepted;
        identical += same_gen(&o[0], &o[1]) && same_gen(&o[0], &o[2]);
        for (int k = 0; k < 3; k++)
            if (o[k].o.n > POS) cnt[k][o[k].o.toks[POS]]++;
    }
    CHECKF(identical == N_SEEDS, "%d of %d seeds gave the same tokens", identical, N_SEEDS);
    CHECKF(accepted > 0, "sampled rows accepted no proposal");
    /* chi-square of each method's counts against plain sampling's (a 2 x C contingency table over
     * the tokens seen, cells of few counts pooled); the 0.999 quantile bounds it */
    for (int k = 1; k < 3; k++) {
        double chi = 0;
        int df = -1, pool_a = 0, pool_b = 0;
        for (int t = 0; t <= 512; t++) {
            int a = t < 512 ? cnt[0][t] : pool_a, b = t < 512 ? cnt[k][t] : pool_b;
            if (t < 512 && a + b < 10) {
                pool_a += a, pool_b += b;
                continue;
            }
            if (a + b == 0) continue;
            const double ea = (a + b) / 2.0; /* equal totals: N_SEEDS each */
            chi += (a - ea) * (a - ea) / ea + (b - ea) * (b - ea) / ea;
            df++;
        }
        const double bound = df > 0 ? df + 4.0 * sqrt(2.0 * df) + 10 : 10;
        CHECKF(chi < bound, "method %d: chi-square %.1f with %d degrees of freedom", k, chi, df);
    }
    kiln_model_free(same);
    kiln_model_free(m);
}

/* ---- the engine: batch of 8 ------------------------------------------------------------------ */

#define N_REQ 8
#define N_GEN 40

typedef struct req_set {
    gen_out out[2 * N_REQ];
    kiln_generate_result res[2 * N_REQ];
} req_set;

/* Runs 2 x N_REQ requests on an engine with the method: the first N_REQ together (8 rows, chunked
 * prefill of 7), then the same prompts extended (prefix-cache hits); request 1 opts out, request 2
 * is constrained by grammar g, request 3 has a stop string, request 4 is sampled (seeded). */
static void engine_run(kiln_model *m, kiln_spec_method method, kiln_model *draft, const kiln_grammar *g, req_set *rs,
                       uint64_t *proposed, uint64_t *accepted) {
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 192;
    ep.max_rows = N_REQ;
    ep.prefill_chunk = 7;
    ep.n_threads = 1;
    ep.spec = method;
    ep.draft_model = draft;
    ep.spec_max = 5;
    kiln_engine *e = NULL;
    CHECK(kiln_engine_new(m, &ep, &e) == KILN_OK);
    if (!e) return;
    /* before any request (the scheduler waits): DRAFT_K proposals a step, not the cost model's choice,
     * which reads measured pass times (on a loaded machine the n-gram rows once proposed 12 tokens
     * in all, none of them accepted) */
    if (method != KILN_SPEC_NONE) e->spec.force_k = DRAFT_K;
    static kiln_token p[2 * N_REQ][80];
    for (int round = 0; round < 2; round++) {
        kiln_request *r[N_REQ];
        for (int i = 0; i < N_REQ; i++) {
            const int k = round * N_REQ + i, n = round ? 70 : 30 + i;
            repetitive_prompt(p[k], 70, 512, i);
            kiln_generate_params gp = greedy(N_GEN);
            gp.on_token = on_tok;
            gp.user = &rs->out[k];
            rs->out[k].o.n = 0;
            if (i == 1) gp.speculative = false;
            if (i == 2) gp.grammar = g;
            if (i == 3) {
                static const char *stop[] = {"e"};
                gp.stop = stop;
                gp.n_stop = 1;
            }
            if (i == 4) {
                gp.sampling.temperature = 0.7f;
                gp.sampling.seed = 99;
            }
            CHECK(kiln_engine_submit(e, p[k], (size_t)n, &gp, &r[i]) == KILN_OK);
        }
        for (int i = 0; i < N_REQ; i++) {
            CHECK(kiln_request_wait(r[i], &rs->res[round * N_REQ + i]) == KILN_OK);
            kiln_request_free(r[i]);
        }
    }
    kiln_engine_stats st;
    kiln_engine_get_stats(e, &st);
    CHECK(st.cache_hits > 0);
    if (method == KILN_SPEC_DRAFT) { /* the second round's drafts restored their prompts from the draft's cache */
        kn_pc_stats ds;
        kn_pc_get_stats(&e->spec.dcache, &ds);
        CHECKF(ds.hits > 0 && ds.hit_tokens > 0, "the draft's prefix cache: %llu hits", (unsigned long long)ds.hits);
    }
    *proposed = st.spec_proposed[method];
    *accepted = st.spec_accepted[method];
    for (int k = 0; k < KILN_SPEC_METHODS; k++)
        if (k != (int)method) CHECK(st.spec_proposed[k] == 0);
    kiln_engine_free(e);
}

static void engine_batch(kiln_model *m, kiln_model *draft, bool draft_is_model) {
    kiln_grammar *g = NULL;
    static const char gbnf[] = "root ::= [a-z ]+ \".\"";
    CHECK(kiln_grammar_compile(gbnf, sizeof gbnf - 1, NULL, &g) == KILN_OK);
    static req_set ref, o;
    uint64_t prop, acc;
    engine_run(m, KILN_SPEC_NONE, NULL, g, &ref, &prop, &acc);
    CHECK(prop == 0);
    for (int k = 0; k < 2 * N_REQ; k++) CHECK(ref.out[k].o.n > 0);
    const kiln_spec_method methods[] = {KILN_SPEC_NGRAM, KILN_SPEC_DRAFT};
    for (int mi = 0; mi < 2; mi++) {
        engine_run(m, methods[mi], methods[mi] == KILN_SPEC_DRAFT ? draft : NULL, g, &o, &prop, &acc);
        for (int k = 0; k < 2 * N_REQ; k++) {
            CHECKF(same_gen(&o.out[k], &ref.out[k]), "%s, request %d: the output differs",
                   kiln_spec_method_name(methods[mi]), k);
            CHECK(o.res[k].stop == ref.res[k].stop && o.res[k].n_generated == ref.res[k].n_generated);
            CHECK(o.res[k].n_cached == ref.res[k].n_cached);
        }
        CHECK(o.res[1].n_spec_proposed == 0 && o.res[N_REQ + 1].n_spec_proposed == 0); /* opted out */
        if (methods[mi] == KILN_SPEC_DRAFT && draft_is_model) /* a restored draft cache proposes what the model says */
            for (int k = N_REQ; k < 2 * N_REQ; k++)
                if (k % N_REQ == 0 || k % N_REQ >= 5)
                    CHECKF(o.res[k].n_spec_accepted == o.res[k].n_spec_proposed && o.res[k].n_spec_proposed > 0,
                           "request %d: an identical draft had %d of %d proposals accepted", k,
                           o.res[k].n_spec_accepted, o.res[k].n_spec_proposed);
        CHECKF(acc > 0 && acc <= prop, "%s: proposed %llu, accepted %llu", kiln_spec_method_name(methods[mi]),
               (unsigned long long)prop, (unsigned long long)acc);
    }
    kiln_grammar_free(g);
}

static void test_engine_batch(void) {
    kiln_model *m = kt_load(stories());
    if (!m) SKIP("no model");
    kiln_model *same = kt_load(stories());
    engine_batch(m, same, true);
    kiln_model *t16 = kt_load(kt_gen("spec-llama-F16", "--preset tiny-llama --type F16 --seed 5"));
    kiln_model *d8 = kt_load(kt_gen("spec-llama-Q8_0", "--preset tiny-llama --type Q8_0 --seed 5"));
    CHECK(t16 && d8);
    if (t16 && d8) engine_batch(t16, d8, false);
    kiln_model_free(t16);
    kiln_model_free(d8);
    kiln_model_free(same);
    kiln_model_free(m);
}

/* ---- the policy ------------------------------------------------------------------------------- */

static void cands(kn_spec_cand *c, int n, float a, int32_t kmax, int32_t behind, int32_t left) {
    for (int i = 0; i < n; i++) c[i] = (kn_spec_cand){.a = a, .kmax = kmax, .behind = behind, .left = left, .k = -1};
}

/* The cost fit recovers a linear pass cost; the plan speculates where it pays and not where it does
 * not (in ms of a 1B F16 model with a Q4_0 draft on two cores: a pass reads the weights in 100 ms, a
 * token adds 4); an engine of 8 rows with a draft as large as the model never proposes. */
static void test_policy(void) {
    kn_spec_cost c = {.c0 = 1, .c1 = 0.05, .out_share = 0.3};
    const double xs[] = {1, 8, 64, 16, 2, 40};
    for (int i = 0; i < 60; i++) kn_spec_cost_add(&c, xs[i % 6], 10 + 0.5 * xs[i % 6]);
    CHECKF(c.fitted && fabs(c.c0 - 10) < 1e-6 && fabs(c.c1 - 0.5) < 1e-6, "fit %g + %g x", c.c0, c.c1);
    kn_spec_cost one = {.c0 = 1, .c1 = 0.05};
    for (int i = 0; i < 10; i++) kn_spec_cost_add(&one, 8, 14); /* one kind of pass: the ratio stays */
    CHECKF(!one.fitted && fabs(one.c0 + 8 * one.c1 - 14) < 1e-6 && fabs(one.c1 / one.c0 - 0.05) < 1e-9, "fit %g + %g x",
           one.c0, one.c1);

    const kn_spec_model fast = {.t0 = 100, .tv = 4, .d0 = 28, .dv = 5, .dc = 4};
    const kn_spec_model slow = {.t0 = 100, .tv = 4, .d0 = 28, .dv = 20, .dc = 16};
    const kn_spec_model ngram = {.t0 = 100, .tv = 4};
    kn_spec_cand c8[8];
    /* batch 1, high acceptance: a draft speculates several deep */
    cands(c8, 1, 0.8f, 6, 0, 64);
    CHECK(kn_spec_plan(&fast, 1, c8, 1) >= 2 && c8[0].k >= 2);
    /* batch 1, low acceptance: not */
    cands(c8, 1, 0.2f, 6, 0, 64);
    CHECK(kn_spec_plan(&fast, 1, c8, 1) == 0 && c8[0].k == 0);
    /* batch 1, but the draft is 2000 tokens behind a row with 4 tokens left: not */
    cands(c8, 1, 0.9f, 3, 2000, 4);
    CHECK(kn_spec_plan(&fast, 1, c8, 1) == 0 && c8[0].k == 0);
    /* 8 rows with a slow draft: a token of the plain step costs less than a proposal, even always accepted */
    cands(c8, 8, 1.0f, 6, 0, 64);
    CHECK(kn_spec_plan(&slow, 8, c8, 8) == 0);
    for (int i = 0; i < 8; i++) CHECK(c8[i].k == 0);
    /* 8 rows, the fast draft, high acceptance: it pays */
    cands(c8, 8, 0.9f, 6, 0, 64);
    CHECK(kn_spec_plan(&fast, 8, c8, 8) > 0 && c8[7].k > 0);
    /* 8 rows of ngram: the rows that match well speculate, the others do not */
    cands(c8, 8, 0.9f, 6, 0, 64);
    for (int i = 4; i < 8; i++) c8[i].a = 0.05f;
    CHECK(kn_spec_plan(&ngram, 8, c8, 8) > 0);
    for (int i = 0; i < 8; i++) CHECKF((c8[i].k > 0) == (i < 4), "row %d: k %d", i, c8[i].k);

    kiln_model *m = kt_load(stories());
    if (!m) SKIP("no model");
    kiln_model *same = kt_load(stories());
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 128;
    ep.max_rows = 8;
    ep.n_threads = 1;
    ep.spec = KILN_SPEC_DRAFT;
    ep.draft_model = same;
    kiln_engine *e = NULL;
    CHECK(kiln_engine_new(m, &ep, &e) == KILN_OK);
    kiln_request *r[8];
    kiln_token p[8][30];
    for (int i = 0; i < 8 && e; i++) {
        repetitive_prompt(p[i], 30, 512, i);
        kiln_generate_params gp = greedy(40);
        CHECK(kiln_engine_submit(e, p[i], 30, &gp, &r[i]) == KILN_OK);
    }
    for (int i = 0; i < 8 && e; i++) {
        kiln_generate_result res;
        CHECK(kiln_request_wait(r[i], &res) == KILN_OK && res.n_generated == 40);
        CHECKF(res.n_spec_proposed == 0, "request %d: %d proposals", i, res.n_spec_proposed);
        kiln_request_free(r[i]);
    }
    kiln_engine_free(e);
    kiln_model_free(same);
    kiln_model_free(m);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_errors(void) {
    kiln_model *m = kt_load(stories());
    if (!m) SKIP("no model");
    kiln_spec_method meth;
    CHECK(kiln_spec_method_parse("ngram", &meth) == KILN_OK && meth == KILN_SPEC_NGRAM);
    CHECK(kiln_spec_method_parse("draft", &meth) == KILN_OK && meth == KILN_SPEC_DRAFT);
    CHECK(kiln_spec_method_parse("fast", &meth) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "none, ngram or draft") != NULL);
    CHECK(strcmp(kiln_spec_method_name(KILN_SPEC_NONE), "none") == 0);
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 64;
    kiln_session *s = NULL;
    sp.spec = (kiln_spec_method)7;
    CHECK(kiln_session_new(m, &sp, &s) == KILN_ERR_INVALID_ARG && !s);
    CHECK(strstr(kiln_last_error(), "unknown speculative method") != NULL);
    sp.spec = KILN_SPEC_NGRAM;
    sp.spec_max = KILN_SPEC_MAX_LIMIT + 1;
    CHECK(kiln_session_new(m, &sp, &s) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "spec_max") != NULL);
    sp.spec_max = -1;
    CHECK(kiln_session_new(m, &sp, &s) == KILN_ERR_INVALID_ARG);
    sp.spec_max = 0; /* the default */
    CHECK(kiln_session_new(m, &sp, &s) == KILN_OK);
    kiln_session_free(s);
    s = NULL;
    sp.spec = KILN_SPEC_DRAFT;
    CHECK(kiln_session_new(m, &sp, &s) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "draft model") != NULL);
    kiln_model *other = kt_load(kt_gen("spec-llama-vocab600", "--preset tiny-llama --vocab 600 --type F16 --seed 5"));
    CHECK(other != NULL);
    sp.draft_model = other;
    CHECK(kiln_session_new(m, &sp, &s) == KILN_ERR_INVALID_ARG && !s);
    CHECKF(strstr(kiln_last_error(), "vocabulary") != NULL, "%s", kiln_last_error());
    kiln_model *bpe = kt_load(kt_gen("spec-llama-F16", "--preset tiny-llama --type F16 --seed 5")); /* 512, BPE */
    sp.draft_model = bpe;
    CHECK(kiln_session_new(m, &sp, &s) == KILN_ERR_INVALID_ARG && !s);
    CHECKF(strstr(kiln_last_error(), "tokenizer") != NULL, "%s", kiln_last_error());
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 64;
    ep.spec = KILN_SPEC_DRAFT;
    ep.draft_model = other;
    kiln_engine *e = NULL;
    CHECK(kiln_engine_new(m, &ep, &e) == KILN_ERR_INVALID_ARG && !e);
    ep.spec = KILN_SPEC_NGRAM;
    ep.spec_max = 1000;
    CHECK(kiln_engine_new(m, &ep, &e) == KILN_ERR_INVALID_ARG && !e);
    kiln_model_free(bpe);
    kiln_model_free(other);
    kiln_model_free(m);
}

int main(void) {
    RUN(test_ngram_lookup);
    RUN(test_verify_bits_and_rollback);
    RUN(test_session_greedy);
    RUN(test_draft_kv_rollback);
    RUN(test_sampled);
    RUN(test_engine_batch);
    RUN(test_policy);
    RUN(test_errors);
    return kt_summary();
}
