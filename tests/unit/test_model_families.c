/*
 * test_model_families.c - the architectures beyond the Llama family (gemma2, gemma3, phi3) and the
 * per-layer attention features they brought, on models written by kiln-gen:
 *   - the forward pass directly: rows batched together give the bits of each row alone, a prompt
 *     in chunks gives the bits of one pass (logits and KV), and thread counts agree;
 *   - sliding windows: with one sliding-window layer, a token just outside the window changes
 *     nothing (bit for bit) while one just inside does, and the same file without the window
 *     (full attention) does change: the test fails with full attention;
 *   - the engine: greedy tokens identical at any batch size and with prefix cache hits (RAM and the
 *     SSD tier) on prompts far longer than the window;
 *   - SmolLM3's layers without RoPE;
 *   - LongRoPE (the long factors serve rows whose context exceeds the original one) and YaRN
 *     (kn_rope against the formula written out in double precision);
 *   - the new operations: GELU gating and soft-capping.
 * Weight types against the F32 reference path are in test_model_types.
 */
#define KT_ENGINE_HELPERS
#include "harness.h"

#include "cache/kv.h"
#include "model/forward.h"
#include "tensor/ops.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the forward pass directly ----------------------------------------------------------------- */

#define MAX_ROWS 3
#define N_CTX    96

typedef struct fwd {
    const kiln_model *m;
    kn_scratch s;
    kn_kv kv[MAX_ROWS];
} fwd;

static bool fwd_init(fwd *f, const kiln_model *m, int n_threads) {
    memset(f, 0, sizeof *f);
    f->m = m;
    const int kvd = m->hp.n_head_kv * m->hp.head_dim;
    if (kn_scratch_init(&f->s, m, N_CTX * MAX_ROWS, N_CTX, n_threads)) return false;
    for (int r = 0; r < MAX_ROWS; r++)
        if (kn_kv_init(&f->kv[r], KN_F16, m->hp.n_layer, N_CTX, kvd)) return false;
    return true;
}

static void fwd_free(fwd *f) {
    for (int r = 0; r < MAX_ROWS; r++) kn_kv_free(&f->kv[r]);
    kn_scratch_free(&f->s);
}

/* Row r's test tokens: n of them, depending on r. */
static void row_tokens(const kiln_model *m, int r, int n, int32_t *t) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)((i * 131 + r * 71 + 17) % m->hp.n_vocab);
}

/* Runs rows [0, n_rows) of lengths len[] from position 0, each in chunks of `chunk` tokens, all
 * rows in every call; logits of every token of every row into lg[r][i][V]. */
static void run_rows(fwd *f, int n_rows, const int *len, int chunk, float *lg) {
    const int V = f->m->hp.n_vocab;
    int32_t toks[MAX_ROWS][N_CTX];
    for (int r = 0; r < n_rows; r++) {
        f->kv[r].n_past = 0;
        row_tokens(f->m, r, len[r], toks[r]);
    }
    for (int done = 0;; done += chunk) {
        kn_batch_row rows[MAX_ROWS];
        int nr = 0, idx[MAX_ROWS];
        int32_t n_logits = 0;
        for (int r = 0; r < n_rows; r++) {
            const int n = KN_MIN(chunk, len[r] - done);
            if (n <= 0) continue;
            rows[nr] = (kn_batch_row){.kv = &f->kv[r], .tokens = toks[r] + done, .n_tokens = n, .logits_from = 0};
            idx[nr++] = r;
            n_logits += n;
        }
        if (!nr) break;
        float *tmp = malloc(sizeof(float) * (size_t)n_logits * (size_t)V);
        kn_forward(f->m, &f->s, rows, nr, tmp, n_logits);
        float *p = tmp;
        for (int k = 0; k < nr; k++) {
            memcpy(lg + ((size_t)idx[k] * N_CTX + (size_t)done) * (size_t)V, p,
                   sizeof(float) * (size_t)rows[k].n_tokens * (size_t)V);
            p += (size_t)rows[k].n_tokens * (size_t)V;
        }
        free(tmp);
    }
}

static const char *family_presets[] = {"tiny-gemma2", "tiny-gemma3", "tiny-phi3"};

/* Batched rows == each row alone, chunked prefill == one pass, 1 thread == 2 threads, bit for bit,
 * for every family and two weight types. */
static void test_forward_invariance(void) {
    if (!kt_exists(kt_gen_path())) SKIP("no %s", kt_gen_path());
    static const char *types[] = {"Q8_0", "Q4_K"};
    for (size_t a = 0; a < KN_ARRAY_LEN(family_presets); a++) {
        for (size_t t = 0; t < KN_ARRAY_LEN(types); t++) {
            char name[64], args[256];
            snprintf(name, sizeof name, "%s-%s", family_presets[a], types[t]);
            snprintf(args, sizeof args, "--preset %s --type %s --seed 11", family_presets[a], types[t]);
            kiln_model *m = kt_load(kt_gen(name, args));
            CHECKF(m, "%s: %s", name, kiln_last_error());
            const size_t V = (size_t)m->hp.n_vocab, per = (size_t)MAX_ROWS * N_CTX * V;
            float *together = calloc(per, sizeof(float)), *alone = calloc(per, sizeof(float)),
                  *chunked = calloc(per, sizeof(float)), *threads = calloc(per, sizeof(float));
            const int len[MAX_ROWS] = {40, 23, 57};
            fwd f1, f2;
            CHECK(fwd_init(&f1, m, 1) && fwd_init(&f2, m, 2));
            run_rows(&f1, MAX_ROWS, len, N_CTX, together); /* every row in one call */
            for (int r = 0; r < MAX_ROWS; r++) {           /* each row alone, in place r */
                int one[MAX_ROWS] = {0};
                one[r] = len[r];
                run_rows(&f1, MAX_ROWS, one, N_CTX, alone);
            }
            run_rows(&f1, MAX_ROWS, len, 7, chunked); /* chunks of 7 tokens, rows together */
            run_rows(&f2, MAX_ROWS, len, 5, threads); /* 2 threads, chunks of 5 */
            for (int r = 0; r < MAX_ROWS; r++) {
                const size_t off = (size_t)r * N_CTX * V, n = (size_t)len[r] * V;
                CHECKF(memcmp(together + off, alone + off, n * sizeof(float)) == 0, "%s row %d: batched != alone", name,
                       r);
                CHECKF(memcmp(together + off, chunked + off, n * sizeof(float)) == 0, "%s row %d: chunked != one pass",
                       name, r);
                CHECKF(memcmp(together + off, threads + off, n * sizeof(float)) == 0, "%s row %d: 2 threads != 1", name,
                       r);
                CHECKF(kt_same_rows(&f1.kv[r], &f2.kv[r], len[r]), "%s row %d: KV differs", name, r);
                double ss = 0;
                for (size_t i = 0; i < n; i++) ss += (double)together[off + i] * together[off + i];
                CHECKF(isfinite(ss) && ss > 0, "%s row %d: logits not finite or zero", name, r);
            }
            fwd_free(&f1);
            fwd_free(&f2);
            free(together);
            free(alone);
            free(chunked);
            free(threads);
            kiln_model_free(m);
        }
    }
}

/* ---- sliding windows --------------------------------------------------------------------------- */

/* Last-position logits of t[n] through a session (prompt in chunks of 5), into out[V]. */
static bool session_logits(kiln_model *m, const kiln_token *t, int n, int n_ctx, float *out) {
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = 5;
    sp.n_threads = 1;
    kiln_session *s = NULL;
    if (kiln_session_new(m, &sp, &s)) return false;
    bool ok = kiln_session_eval(s, t, (size_t)n, false) == KILN_OK;
    if (ok) memcpy(out, kiln_session_logits(s, -1), sizeof(float) * (size_t)kiln_model_n_vocab(m));
    kiln_session_free(s);
    return ok;
}

/* One layer, which slides over 8 positions (gemma3 layer 0; gemma2 layer 0, soft-capped): the last
 * position P = 23 sees positions 16 .. 23. A change at 15 leaves its logits bit-identical, a change
 * at 16 does not; without the window (full attention) the change at 15 shows. */
static void check_window(const char *arch) {
    char name[64], args[256];
    snprintf(name, sizeof name, "%s-1l-swa8", arch);
    snprintf(args, sizeof args,
             "--arch %s --vocab 512 --dim 128 --layers 1 --heads 4 --kv-heads 2 --head-dim 32 --ffn 256 "
             "--sliding-window 8 --type F32 --scale 4 --seed 5",
             arch);
    kiln_model *swa = kt_load(kt_gen(name, args));
    snprintf(name, sizeof name, "%s-1l-full", arch);
    snprintf(args, sizeof args,
             "--arch %s --vocab 512 --dim 128 --layers 1 --heads 4 --kv-heads 2 --head-dim 32 --ffn 256 "
             "--type F32 --scale 4 --seed 5",
             arch);
    kiln_model *full = kt_load(kt_gen(name, args));
    CHECKF(swa && full, "%s: %s", arch, kiln_last_error());
    CHECK(swa->layers[0].attn.window == 8 && (full->layers[0].attn.window == 0 || full->layers[0].attn.window > 24));
    const int V = kiln_model_n_vocab(swa), P = 24;
    kiln_token base[24], out15[24], in16[24];
    for (int i = 0; i < P; i++) base[i] = out15[i] = in16[i] = (kiln_token)((i * 37 + 5) % V);
    out15[15] = (kiln_token)((base[15] + 100) % V);
    in16[16] = (kiln_token)((base[16] + 100) % V);
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    for (int w = 0; w < 2; w++) {
        kiln_model *m = w ? full : swa;
        CHECK(session_logits(m, base, P, 64, a) && session_logits(m, out15, P, 64, b));
        const bool same15 = memcmp(a, b, sizeof(float) * (size_t)V) == 0;
        CHECKF(same15 == (w == 0), "%s %s: a change just outside the window %s the last logits", arch,
               w ? "full attention" : "window 8", same15 ? "left unchanged" : "changed");
        CHECK(session_logits(m, in16, P, 64, b));
        CHECKF(memcmp(a, b, sizeof(float) * (size_t)V) != 0, "%s: a change inside the window changed nothing", arch);
    }
    free(a);
    free(b);
    kiln_model_free(swa);
    kiln_model_free(full);
}

static void test_sliding_window_gemma3(void) {
    if (!kt_exists(kt_gen_path())) SKIP("no %s", kt_gen_path());
    check_window("gemma3");
}

static void test_sliding_window_gemma2_softcap(void) {
    if (!kt_exists(kt_gen_path())) SKIP("no %s", kt_gen_path());
    check_window("gemma2");
}

/* The layer pattern and per-layer RoPE of the real files: gemma3 5 local : 1 global with the local
 * base 10000 unscaled; gemma2 every other layer; query scale; soft-caps; embedding scale. */
static void test_layer_configuration(void) {
    if (!kt_exists(kt_gen_path())) SKIP("no %s", kt_gen_path());
    kiln_model *g3 = kt_load(kt_gen("tiny-gemma3-Q8_0", "--preset tiny-gemma3 --type Q8_0 --seed 11"));
    kiln_model *g2 = kt_load(kt_gen("tiny-gemma2-Q8_0", "--preset tiny-gemma2 --type Q8_0 --seed 11"));
    kiln_model *p3 = kt_load(kt_gen("tiny-phi3-Q8_0", "--preset tiny-phi3 --type Q8_0 --seed 11"));
    CHECKF(g3 && g2 && p3, "%s", kiln_last_error());
    for (int l = 0; l < 6; l++) {
        const kn_layer_attn *a = &g3->layers[l].attn;
        const bool global = l == 5;
        CHECKF(a->window == (global ? 0 : 8), "gemma3 layer %d window %d", l, a->window);
        CHECKF(a->rope.base == (global ? 1e6f : 10000.0f) && a->rope.pos_scale == (global ? 0.125f : 1.0f),
               "gemma3 layer %d rope base %g scale %g", l, a->rope.base, a->rope.pos_scale);
        CHECK(a->scale == 1.0f / 8.0f && a->softcap == 0 && g3->layers[l].q_norm && g3->layers[l].post_ffn_norm);
    }
    CHECK(g3->hp.embd_scale == sqrtf(256.0f) && g3->hp.logit_softcap == 0);
    CHECK(g2->layers[0].attn.window == 8 && g2->layers[1].attn.window == 0);
    CHECK(g2->layers[0].attn.softcap == 50.0f && g2->hp.logit_softcap == 30.0f && !g2->layers[0].q_norm);
    /* phi3: the fused tensors split into views over one copy, in q, k, v and gate, up order */
    const kn_layer *ly = &p3->layers[0];
    CHECK(ly->wq.rows == 256 && ly->wk.rows == 64 && ly->wv.rows == 64);
    CHECK(ly->wk.data == ly->wq.data + 256 * ly->wq.row_bytes && ly->wv.data == ly->wk.data + 64 * ly->wk.row_bytes);
    CHECK(ly->w_gate.rows == 512 && ly->w_up.data == ly->w_gate.data + 512 * ly->w_gate.row_bytes);
    CHECK(p3->rope_freqs && p3->rope_freqs_long && ly->attn.rope.n_ctx_orig == 64);
    CHECKF(fabsf(ly->attn.rope.mscale - sqrtf(1.0f + logf(8.0f) / logf(64.0f))) < 1e-6f, "mscale %g",
           ly->attn.rope.mscale);
    kiln_model_free(g3);
    kiln_model_free(g2);
    kiln_model_free(p3);
}

/* ---- the engine: batch sizes, prefix cache, SSD tier --------------------------------------------- */

static kiln_engine *engine(kiln_model *m, int rows, int64_t cache, const char *ssd) {
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 160;
    ep.max_rows = rows;
    ep.prefill_chunk = 9;
    ep.n_threads = 2;
    ep.prompt_cache = cache;
    ep.ssd_dir = ssd;
    ep.ssd_max_bytes = 64 << 20;
    ep.ssd_demote_idle_s = 0;
    kiln_engine *e = NULL;
    return kiln_engine_new(m, &ep, &e) == KILN_OK ? e : NULL;
}

#define N_P  4
#define PL   50
#define NGEN 12

static void prompt(int k, int V, kiln_token *p) {
    for (int i = 0; i < PL; i++) p[i] = (kiln_token)(1 + (i * 37 + k * 101) % (V - 1));
}

/* Greedy tokens of N_P prompts (50 tokens, window 8): alone; 1, 2 and 4 rows at once; then with the
 * RAM prefix cache (a second turn that hits); then from the SSD tier after a restart. */
static void check_engine(const char *preset) {
    char name[64], args[256];
    snprintf(name, sizeof name, "%s-Q4_0", preset);
    snprintf(args, sizeof args, "--preset %s --type Q4_0 --seed 13", preset);
    kiln_model *m = kt_load(kt_gen(name, args));
    CHECKF(m, "%s: %s", preset, kiln_last_error());
    const int V = kiln_model_n_vocab(m);
    kiln_token p[N_P][PL + NGEN + 10];
    kt_out ref[N_P], ref2[N_P], o;
    kiln_generate_result r;
    kiln_engine *e = engine(m, 1, 0, NULL);
    CHECK(e);
    for (int k = 0; k < N_P; k++) {
        prompt(k, V, p[k]);
        CHECK(kt_generate(e, p[k], PL, NGEN, &ref[k], &r) == KILN_OK && ref[k].n == NGEN);
        memcpy(p[k] + PL, ref[k].toks, NGEN * sizeof(kiln_token)); /* the next turn: + reply + 10 */
        for (int i = 0; i < 10; i++) p[k][PL + NGEN + i] = (kiln_token)(7 + i * 13 + k);
        CHECK(kt_generate(e, p[k], PL + NGEN + 10, NGEN, &ref2[k], &r) == KILN_OK);
    }
    kiln_engine_free(e);
    static const int caps[] = {2, 4};
    for (size_t c = 0; c < KN_ARRAY_LEN(caps); c++) {
        e = engine(m, caps[c], 0, NULL);
        CHECK(e);
        kiln_generate_params gp = kiln_generate_default_params();
        gp.sampling.temperature = 0;
        gp.max_tokens = NGEN;
        gp.ignore_eos = true;
        gp.on_token = kt_on_token;
        kt_out out[N_P];
        kiln_request *q[N_P];
        for (int k = 0; k < N_P; k++) {
            out[k].n = 0;
            gp.user = &out[k];
            CHECK(kiln_engine_submit(e, p[k], PL, &gp, &q[k]) == KILN_OK);
        }
        for (int k = 0; k < N_P; k++) {
            CHECK(kiln_request_wait(q[k], &r) == KILN_OK);
            kiln_request_free(q[k]);
            CHECKF(kt_same_out(&out[k], &ref[k]), "%s: %d rows: prompt %d differs from alone", preset, caps[c], k);
        }
        kiln_engine_free(e);
    }
    /* RAM prefix cache: turn 1 misses, turn 2 hits turn 1's prompt and reply */
    e = engine(m, 2, 64 << 20, NULL);
    CHECK(e);
    for (int k = 0; k < N_P; k++) {
        CHECK(kt_generate(e, p[k], PL, NGEN, &o, &r) == KILN_OK && kt_same_out(&o, &ref[k]));
        CHECK(kt_generate(e, p[k], PL + NGEN + 10, NGEN, &o, &r) == KILN_OK);
        CHECKF(r.n_cached == PL + NGEN - 1, "%s prompt %d: cached %d", preset, k, r.n_cached);
        CHECKF(kt_same_out(&o, &ref2[k]), "%s prompt %d: a prefix cache hit changed the reply", preset, k);
    }
    kiln_engine_free(e);
    /* SSD tier: written at once, read back after a restart */
    char dir[600];
    snprintf(dir, sizeof dir, "%s/ssd-%s", kt_tmpdir(), preset);
    mkdir(dir, 0700);
    e = engine(m, 2, 64 << 20, dir);
    CHECK(e);
    for (int k = 0; k < N_P; k++) CHECK(kt_generate(e, p[k], PL, NGEN, &o, &r) == KILN_OK && kt_same_out(&o, &ref[k]));
    CHECK(kiln_engine_flush_cache(e, 5000) == KILN_OK);
    kiln_engine_free(e);
    e = engine(m, 2, 64 << 20, dir);
    CHECK(e);
    for (int k = 0; k < N_P; k++) {
        CHECK(kt_generate(e, p[k], PL + NGEN + 10, NGEN, &o, &r) == KILN_OK);
        CHECKF(r.n_cached == PL + NGEN - 1, "%s prompt %d: %d from the SSD tier", preset, k, r.n_cached);
        CHECKF(kt_same_out(&o, &ref2[k]), "%s prompt %d: an SSD hit changed the reply", preset, k);
    }
    kiln_engine_stats es;
    kiln_engine_get_stats(e, &es);
    CHECK(es.ssd_hits == N_P);
    kiln_engine_free(e);
    kiln_model_free(m);
}

static void test_engine_gemma3(void) {
    if (!kt_exists(kt_gen_path())) SKIP("no %s", kt_gen_path());
    check_engine("tiny-gemma3");
}
static void test_engine_gemma2(void) {
    if (!kt_exists(kt_gen_path())) SKIP("no %s", kt_gen_path());
    check_engine("tiny-gemma2");
}
static void test_engine_phi3(void) {
    if (!kt_exists(kt_gen_path())) SKIP("no %s", kt_gen_path());
    check_engine("tiny-phi3");
}

/* ---- RoPE scaling ------------------------------------------------------------------------------ */

/* LongRoPE: a context within the original 64 positions takes the short factors, a longer one the
 * long factors; position 0 is not rotated, so only later positions differ. */
static void test_longrope_switch(void) {
    if (!kt_exists(kt_gen_path())) SKIP("no %s", kt_gen_path());
    kiln_model *m = kt_load(kt_gen("tiny-phi3-F32", "--preset tiny-phi3 --type F32 --seed 11"));
    CHECKF(m, "%s", kiln_last_error());
    const int V = kiln_model_n_vocab(m);
    kiln_token t[20];
    for (int i = 0; i < 20; i++) t[i] = (kiln_token)((i * 53 + 3) % V);
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V),
          *c = malloc(sizeof(float) * (size_t)V);
    CHECK(session_logits(m, t, 20, 64, a) && session_logits(m, t, 20, 48, b) && session_logits(m, t, 20, 128, c));
    CHECK(memcmp(a, b, sizeof(float) * (size_t)V) == 0); /* both short */
    CHECK(memcmp(a, c, sizeof(float) * (size_t)V) != 0); /* long factors */
    CHECK(session_logits(m, t, 1, 64, a) && session_logits(m, t, 1, 128, c));
    CHECK(memcmp(a, c, sizeof(float) * (size_t)V) == 0); /* position 0: no rotation either way */
    free(a);
    free(b);
    free(c);
    kiln_model_free(m);
}

/* kn_rope with YaRN (and the magnitude scale) against the formula in double precision: the angle
 * of pair j is pos * f_j / s below the ramp (interpolated), pos * f_j above it (extrapolated),
 * mixed linearly between; cos and sin scaled by mscale. */
static void test_rope_yarn_formula(void) {
    const int hd = 64, n_rot = 64;
    const float base = 10000.0f, factor = 4.0f;
    kn_rope_cfg r = {.style = KN_ROPE_NEOX, .n_rot = n_rot, .base = base, .pos_scale = 1.0f / factor};
    r.mscale = 1.0f + 0.1f * logf(factor);
    r.yarn_ext = 1.0f;
    r.yarn_lo = 8;
    r.yarn_hi = 20;
    float x[64], y[64];
    for (int i = 0; i < hd; i++) x[i] = sinf((float)i * 0.7f) + 0.1f;
    const int32_t pos = 1234;
    memcpy(y, x, sizeof x);
    kn_rope(y, 1, hd, pos, &r, false);
    double worst = 0;
    for (int j = 0; j < n_rot / 2; j++) {
        const double f = pow((double)base, -2.0 * j / n_rot);
        const double ramp = 1.0 - fmin(1.0, fmax(0.0, (j - 8.0) / 12.0));
        const double th = pos * f / factor * (1 - ramp) + pos * f * ramp;
        const double ms = 1.0 + 0.1 * log((double)factor);
        const double a = x[j], b = x[j + n_rot / 2];
        const double ya = ms * (a * cos(th) - b * sin(th)), yb = ms * (a * sin(th) + b * cos(th));
        worst = fmax(worst, fmax(fabs(ya - y[j]), fabs(yb - y[j + n_rot / 2])));
        if (j < 8) CHECK(ramp == 1.0); /* high frequencies keep their angle */
    }
    /* float angles of pos * f lose about pos * 2^-24 radians */
    CHECKF(worst < 2e-3, "largest difference %g", worst);
    /* without YaRN and with mscale 1 nothing beyond the linear scale changes */
    kn_rope_cfg plain = {.style = KN_ROPE_NORM, .n_rot = 32, .base = base, .pos_scale = 1.0f, .mscale = 1.0f};
    memcpy(y, x, sizeof x);
    kn_rope(y, 2, 32, 0, &plain, false);
    CHECK(memcmp(x, y, sizeof x) == 0); /* position 0: identity */
}

/* A llama file with YaRN scaling loads without the "not implemented" warning and rotates otherwise
 * than the same file without it. */
static void test_yarn_model(void) {
    if (!kt_exists(kt_gen_path())) SKIP("no %s", kt_gen_path());
    kiln_model *y = kt_load(kt_gen("tiny-llama-yarn",
                                   "--preset tiny-llama-plain --rope-scaling yarn --rope-factor 4 --rope-orig-ctx 128 "
                                   "--type F32 --seed 3"));
    kiln_model *p = kt_load(kt_gen("tiny-llama-plain-f32", "--preset tiny-llama-plain --type F32 --seed 3"));
    CHECKF(y && p, "%s", kiln_last_error());
    const kn_rope_cfg *r = &y->layers[0].attn.rope;
    CHECK(r->yarn_ext == 1.0f && r->pos_scale == 0.25f && r->yarn_hi > r->yarn_lo);
    CHECK(fabsf(r->mscale - (1.0f + 0.1f * logf(4.0f))) < 1e-6f);
    const int V = kiln_model_n_vocab(y);
    kiln_token t[12];
    for (int i = 0; i < 12; i++) t[i] = (kiln_token)((i * 29 + 1) % V);
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    CHECK(session_logits(y, t, 12, 64, a) && session_logits(p, t, 12, 64, b));
    CHECK(memcmp(a, b, sizeof(float) * (size_t)V) != 0);
    free(a);
    free(b);
    kiln_model_free(y);
    kiln_model_free(p);
}

/* SmolLM3: the llama layout whose every fourth layer has no RoPE. The same weights (the tensor names
 * match, so the seed gives the same values) as llama give the same bits with 3 layers and differ
 * with 4. */
static void test_smollm3_nope(void) {
    if (!kt_exists(kt_gen_path())) SKIP("no %s", kt_gen_path());
    const char *shape = "--vocab 512 --dim 128 --layers %d --heads 4 --kv-heads 2 --ffn 256 --norm-eps 1e-6 "
                        "--tied --type F32 --seed 9";
    char args[512], fmt[512];
    float *out[2][2];
    for (int layers = 3; layers <= 4; layers++) {
        for (int a = 0; a < 2; a++) {
            const char *arch = a ? "smollm3" : "llama";
            char name[64];
            snprintf(name, sizeof name, "%s-%dl", arch, layers);
            snprintf(fmt, sizeof fmt, "--arch %s %s", arch, shape);
            snprintf(args, sizeof args, fmt, layers);
            kiln_model *m = kt_load(kt_gen(name, args));
            CHECKF(m, "%s: %s", name, kiln_last_error());
            CHECK(m->layers[layers - 1].attn.rope.n_rot == (a && layers == 4 ? 0 : 32));
            const int V = kiln_model_n_vocab(m);
            kiln_token t[10];
            for (int i = 0; i < 10; i++) t[i] = (kiln_token)((i * 41 + 2) % V);
            out[layers - 3][a] = malloc(sizeof(float) * (size_t)V);
            CHECK(session_logits(m, t, 10, 64, out[layers - 3][a]));
            kiln_model_free(m);
        }
    }
    CHECK(memcmp(out[0][0], out[0][1], 512 * sizeof(float)) == 0);
    CHECK(memcmp(out[1][0], out[1][1], 512 * sizeof(float)) != 0);
    for (int i = 0; i < 4; i++) free(out[i / 2][i % 2]);
}

/* ---- operations -------------------------------------------------------------------------------- */

static void test_ops(void) {
    /* GELU (tanh approximation) gating against the formula; the parallel run equals the serial */
    enum { N = 70000 };
    float *g = malloc(N * sizeof(float)), *u = malloc(N * sizeof(float)), *g2 = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) {
        g[i] = g2[i] = (float)(i % 997) / 100.0f - 5.0f;
        u[i] = 1.0f + (float)(i % 7) * 0.25f;
    }
    kn_pool *pool = NULL;
    CHECK(kn_pool_new(2, &pool) == KILN_OK);
    const kn_kernels *ks = kn_kernels_get(KN_KERNELS_AUTO);
    kn_geglu(g, u, N, NULL, ks);
    kn_geglu(g2, u, N, pool, ks);
    CHECK(memcmp(g, g2, N * sizeof(float)) == 0);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        const double x = (double)(i % 997) / 100.0 - 5.0;
        const double want = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
        worst = fmax(worst, fabs(want - g[i]));
    }
    CHECKF(worst < 1e-5, "gelu: largest difference %g", worst);
    kn_pool_free(pool);
    free(g);
    free(u);
    free(g2);
    /* soft-capping: bounded by the cap, odd, near identity for small values */
    float v[5] = {-1000.0f, -3.0f, 0.0f, 0.5f, 1000.0f};
    kn_softcap(v, 5, 30.0f);
    CHECK(v[0] >= -30.0f && v[0] < -29.9f && v[4] <= 30.0f && v[4] > 29.9f && v[2] == 0.0f);
    CHECK(fabsf(v[3] - 30.0f * tanhf(0.5f / 30.0f)) < 1e-7f && fabsf(v[1] + 30.0f * tanhf(0.1f)) < 1e-6f);
}

int main(void) {
    RUN(test_ops);
    RUN(test_rope_yarn_formula);
    RUN(test_layer_configuration);
    RUN(test_forward_invariance);
    RUN(test_sliding_window_gemma3);
    RUN(test_sliding_window_gemma2_softcap);
    RUN(test_longrope_switch);
    RUN(test_yarn_model);
    RUN(test_smollm3_nope);
    RUN(test_engine_gemma3);
    RUN(test_engine_gemma2);
    RUN(test_engine_phi3);
    return kt_summary();
}
