/*
 * test_moe.c - the mixture-of-experts FFN (model/moe.h) and the MoE families (qwen3moe, Mixtral as
 * llama with experts, gpt-oss with its biases, attention sinks, sliding-window layers and YaRN):
 *   - routing on a hand-built router: the chosen experts and their weights are known in closed form
 *     for each gating (softmax renormalized, softmax kept, softmax over the top-k), ties go to the
 *     lower expert index;
 *   - the MoE FFN of a hand-built layer against a direct double-precision computation, and each
 *     token's output bit-identical alone and inside a batch of other tokens;
 *   - the grouped FFN (all experts' gate/up in one parallel run, down in one) bit-identical to the
 *     plain one-expert-at-a-time path, on every type of the generated models and in split chunks;
 *   - on generated tiny models: logits of every quantized type close to the F32 reference path,
 *     prefill in chunks bit-identical to one pass, greedy tokens identical alone and batched in the
 *     engine, and prefix cache hits identical to a cold run.
 */
#define KT_ENGINE_HELPERS
#include "harness.h"

#include "engine/session.h"
#include "model/block.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/moe.h"

/* ---- routing ----------------------------------------------------------------------------------- */

static void test_route_known(void) {
    kn_moe moe = {.n_expert = 6, .n_used = 2, .gating = KN_MOE_SOFTMAX, .norm_topk = true};
    const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f}; /* experts 1 and 3 tie at the top */
    int32_t ids[6];
    float w[6];
    kn_moe_route(&moe, logits, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 3);
    CHECK_NEAR(w[0], 0.5, 1e-6);
    CHECK_NEAR(w[1], 0.5, 1e-6);
    /* top 3: experts 1, 3 (tie, lower first), then 4; ascending: 1, 3, 4 */
    moe.n_used = 3;
    kn_moe_route(&moe, logits, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 4);
    const double e1 = exp(-1.0), zk = 2 + e1;
    CHECK_NEAR(w[0], 1 / zk, 1e-6);
    CHECK_NEAR(w[2], e1 / zk, 1e-6);
    /* softmax over all experts, kept as is */
    moe.norm_topk = false;
    kn_moe_route(&moe, logits, ids, w);
    double z = 0;
    for (int e = 0; e < 6; e++) z += exp(logits[e] - 2.0);
    CHECK_NEAR(w[0], 1 / z, 1e-6);
    CHECK_NEAR(w[2], e1 / z, 1e-6);
    /* softmax over the chosen logits alone: the same as renormalized here */
    moe.gating = KN_MOE_SOFTMAX_TOPK;
    kn_moe_route(&moe, logits, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 4);
    CHECK_NEAR(w[1], 1 / zk, 1e-6);
    CHECK_NEAR(w[2], e1 / zk, 1e-6);
    /* a tie at the cut: experts 0 and 2 both at 1.0 for the second place; 0 wins */
    const float tie[4] = {1.0f, 3.0f, 1.0f, -2.0f};
    moe.n_expert = 4;
    moe.n_used = 2;
    kn_moe_route(&moe, tie, ids, w);
    CHECK(ids[0] == 0 && ids[1] == 1);
    CHECK(w[1] > w[0]);
}

/* ---- the FFN of a hand-built layer ----------------------------------------------------------- */

#define D  8 /* n_embd */
#define E  5 /* experts */
#define K  2 /* per token */
#define FF 4 /* expert width */
#define NT 7 /* tokens */

static float val(int a, int b, int c) { return (float)sin(0.37 * a + 1.3 * b + 0.71 * c + 0.2); }

static kn_weight f32_weight(float *data, int64_t rows, int64_t cols) {
    return (kn_weight){.type = KN_F32, .rows = rows, .cols = cols, .row_bytes = (size_t)cols * 4, .data = (void *)data};
}

static void test_moe_ffn_hand_built(void) {
    static float router[E * D], gate[E * FF * D], up[E * FF * D], down[E * D * FF], x[NT * D];
    for (int i = 0; i < E * D; i++) router[i] = val(1, i, 0);
    for (int i = 0; i < E * FF * D; i++) gate[i] = val(2, i, 1), up[i] = val(3, i, 2);
    for (int i = 0; i < E * D * FF; i++) down[i] = val(4, i, 3);
    for (int i = 0; i < NT * D; i++) x[i] = 2 * val(5, i, 4);
    kn_layer layer = {.ffn = KN_FFN_MOE, .act = KN_ACT_SILU};
    layer.moe = (kn_moe){.n_expert = E, .n_used = K, .n_ff = FF, .gating = KN_MOE_SOFTMAX, .norm_topk = true};
    layer.moe.router = f32_weight(router, E, D);
    layer.moe.gate = f32_weight(gate, E * FF, D);
    layer.moe.up = f32_weight(up, E * FF, D);
    layer.moe.down = f32_weight(down, E * D, FF);
    kiln_model m = {0};
    m.hp = (kn_hparams){.n_embd = D,
                        .n_layer = 1,
                        .n_head = 2,
                        .n_head_kv = 2,
                        .head_dim = 4,
                        .n_ff = FF,
                        .n_expert = E,
                        .n_expert_used = K,
                        .n_ff_exp = FF,
                        .n_vocab = 4};
    m.layers = &layer;
    m.output = f32_weight(router, 4, D);
    m.kernels = kn_kernels_get(KN_KERNELS_AUTO);
    kn_scratch s;
    CHECK(kn_scratch_init(&s, &m, NT, 16, 2) == KILN_OK);
    /* the whole batch */
    memcpy(s.xb, x, sizeof x);
    kn_moe_ffn(&m, &s, 0, NT);
    float all[NT * D];
    memcpy(all, s.xb2, sizeof all);
    kn_moe_ffn_plain(&m, &s, 0, NT);
    CHECKF(memcmp(s.xb2, all, sizeof all) == 0, "the plain path differs from the grouped one");
    int used[E] = {0};
    for (int t = 0; t < NT; t++) {
        /* the direct computation in double */
        const float *xt = x + t * D;
        double lg[E], mx = -1e30;
        for (int e = 0; e < E; e++) {
            lg[e] = 0;
            for (int j = 0; j < D; j++) lg[e] += (double)router[e * D + j] * xt[j];
            if (lg[e] > mx) mx = lg[e];
        }
        int best[K];
        for (int k = 0; k < K; k++) {
            best[k] = -1;
            for (int e = 0; e < E; e++) {
                bool taken = k > 0 && best[0] == e;
                if (!taken && (best[k] < 0 || lg[e] > lg[best[k]])) best[k] = e;
            }
            used[best[k]]++;
        }
        double wsum = 0, w[K];
        for (int k = 0; k < K; k++) wsum += w[k] = exp(lg[best[k]] - mx);
        for (int j = 0; j < D; j++) {
            double y = 0;
            for (int k = 0; k < K; k++) {
                const int e = best[k];
                double acc = 0;
                for (int f = 0; f < FF; f++) {
                    double g = 0, u = 0;
                    for (int i = 0; i < D; i++) {
                        g += (double)gate[(e * FF + f) * D + i] * xt[i];
                        u += (double)up[(e * FF + f) * D + i] * xt[i];
                    }
                    acc += (double)down[(e * D + j) * FF + f] * (g / (1 + exp(-g)) * u);
                }
                y += w[k] / wsum * acc;
            }
            CHECK_NEAR(all[t * D + j], y, 1e-4);
        }
    }
    int n_active = 0;
    for (int e = 0; e < E; e++) n_active += used[e] > 0;
    CHECKF(n_active >= 3, "only %d experts were used: the test would not exercise the grouping", n_active);
    /* each token alone, and the batch reversed: bit-identical rows */
    for (int t = 0; t < NT; t++) {
        memcpy(s.xb, x + t * D, sizeof(float) * D);
        kn_moe_ffn(&m, &s, 0, 1);
        CHECKF(memcmp(s.xb2, all + t * D, sizeof(float) * D) == 0, "token %d alone differs", t);
    }
    for (int t = 0; t < NT; t++) memcpy(s.xb + t * D, x + (NT - 1 - t) * D, sizeof(float) * D);
    kn_moe_ffn(&m, &s, 0, NT);
    for (int t = 0; t < NT; t++)
        CHECKF(memcmp(s.xb2 + t * D, all + (NT - 1 - t) * D, sizeof(float) * D) == 0, "token %d reversed differs", t);
    kn_scratch_free(&s);
}

/* ---- gpt-oss attention: sinks and a sliding window ------------------------------------------- */

/* Attention of a hand-built layer (2 query heads sharing 1 KV head of width 4, no RoPE, window 3,
 * per-head sinks) over 8 positions against the direct computation: each head's softmax over the
 * window's positions with exp(sink) added to its denominator. Full attention or no sinks would
 * differ from it at every position past the window. */
static void test_sinks_and_window(void) {
    enum { H = 2, HD = 4, T = 8, W = 3 };
    static const float sinks[H] = {0.7f, -1.5f};
    kn_layer layer = {.ffn = KN_FFN_DENSE};
    layer.attn = (kn_layer_attn){.window = W, .scale = 0.5f, .sinks = sinks};
    kiln_model m = {0};
    m.hp =
        (kn_hparams){.n_embd = 8, .n_layer = 1, .n_head = H, .n_head_kv = 1, .head_dim = HD, .n_ff = 4, .n_vocab = 4};
    m.layers = &layer;
    static float out_w[4 * 8];
    m.output = f32_weight(out_w, 4, 8);
    m.kernels = kn_kernels_get(KN_KERNELS_AUTO);
    kn_scratch s;
    CHECK(kn_scratch_init(&s, &m, T, 16, 1) == KILN_OK);
    kn_kv kv;
    CHECK(kn_kv_init(&kv, KN_F32, 1, 16, HD) == KILN_OK);
    kn_batch_row row = {.kv = &kv, .n_tokens = T};
    float q[T][H * HD], k[T][HD], v[T][HD];
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < H * HD; i++) q[t][i] = 2 * val(6, t, i);
        for (int i = 0; i < HD; i++) k[t][i] = 2 * val(7, t, i), v[t][i] = val(8, t, i);
        s.tok_row[t] = 0;
        s.tok_pos[t] = t;
    }
    memcpy(s.q, q, sizeof q);
    memcpy(s.k, k, sizeof k);
    memcpy(s.v, v, sizeof v);
    kn_block_attend(&m, &s, &row, 0, T);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const int p0 = t >= W ? t - W + 1 : 0;
            double sc[T], mx = sinks[h], z = 0;
            for (int p = p0; p <= t; p++) {
                sc[p] = 0;
                for (int i = 0; i < HD; i++) sc[p] += (double)q[t][h * HD + i] * k[p][i];
                sc[p] *= 0.5;
                if (sc[p] > mx) mx = sc[p];
            }
            z = exp(sinks[h] - mx);
            for (int p = p0; p <= t; p++) z += exp(sc[p] - mx);
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int p = p0; p <= t; p++) o += exp(sc[p] - mx) / z * v[p][i];
                CHECKF(fabs(s.att[t * H * HD + h * HD + i] - o) <= 1e-5, "token %d head %d: %g vs %g", t, h,
                       (double)s.att[t * H * HD + h * HD + i], o);
            }
        }
    kn_kv_free(&kv);
    kn_scratch_free(&s);
}

/* ---- generated models ------------------------------------------------------------------------ */

static const char *gen_path(void) {
    static char p[512];
    const char *b = getenv("BUILD");
    snprintf(p, sizeof p, "%s/kiln-gen", b && *b ? b : "build");
    return p;
}

static const char *generate(const char *preset, const char *type) {
    static char out[512];
    char cmd[1536];
    snprintf(out, sizeof out, "%s/%s-%s.gguf", kt_tmpdir(), preset, type);
    if (kt_exists(out)) return out;
    /* float types for the experts too, so that the float files are float throughout (the gpt-oss
     * presets would write MXFP4 experts) */
    const bool is_float = type[0] == 'F' || type[0] == 'B';
    snprintf(cmd, sizeof cmd, "%s --preset %s --type %s%s%s --seed 5 -o %s >/dev/null 2>&1", gen_path(), preset, type,
             is_float ? " --expert-type " : "", is_float ? type : "", out);
    return system(cmd) == 0 ? out : NULL;
}

/* Logits of every position of a fixed sequence of n tokens, fed in chunks of `chunk` (into out[n][V]). */
static int all_logits(kiln_model *m, int n, int chunk, float *out) {
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 64;
    sp.n_batch = chunk;
    sp.logits_all = true;
    sp.n_threads = 2;
    kiln_session *s = NULL;
    if (kiln_session_new(m, &sp, &s)) return -1;
    const int V = kiln_model_n_vocab(m);
    int rc = 0;
    kiln_token toks[64];
    for (int i = 0; i < n; i++) toks[i] = (kiln_token)((i * 131 + 17) % V);
    for (int i = 0; i < n && !rc; i += chunk) {
        const int c = KN_MIN(chunk, n - i);
        rc = kiln_session_eval(s, toks + i, (size_t)c, true) == KILN_OK ? 0 : -1;
        for (int j = 0; j < c && !rc; j++)
            memcpy(out + (size_t)(i + j) * V, kiln_session_logits(s, j), sizeof(float) * (size_t)V);
    }
    kiln_session_free(s);
    return rc;
}

static const char *const types[] = {"F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", NULL};
/* gpt-oss: its presets write the experts in MXFP4 whatever --type says, so the files of the quantized
 * types here have MXFP4 experts; those of the float types take the float type for the experts too
 * (generate), and MXFP4 puts every matrix in it. */
static const char *const gptoss_types[] = {"F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "MXFP4", NULL};

/* Quantized logits vs the F32 reference path, and prefill in chunks of 1, 3 and 5 bit-identical to
 * one pass. The measure is the median over the 12 positions of the relative RMS difference of a
 * position's logits. Float types agree to rounding; quantized types within 6e-2, the bound of dense
 * models (test_model_types). The median, because routing is discontinuous: where quantization
 * noise moves a token's router logits across the top-k cut, that token takes another expert and
 * its logits differ by far more (measured up to 0.17 at single positions with top-2 of 8), which is
 * the model's behaviour, not an error; a wrong expert layout or weight moves every position.
 * gpt-oss within 8e-2: every quantized file of it holds MXFP4 experts (4 bits whatever --type), so
 * its Q6_K file is about as far from F32 as its Q4_K one (measured: Q6_K 4.8e-2, Q4_K 5.1e-2 and 6.5e-2
 * on two draws of the weights). */
static double median_rel(const float *a, const float *b, int n, int V) {
    double rel[64];
    for (int p = 0; p < n; p++) {
        double d2 = 0, r2 = 0;
        for (int k = 0; k < V; k++) {
            const double x = a[(size_t)p * V + k], y = b[(size_t)p * V + k];
            d2 += (x - y) * (x - y);
            r2 += y * y;
        }
        rel[p] = r2 > 0 ? sqrt(d2 / r2) : 1e9;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && rel[j - 1] > rel[j]; j--) {
            const double t = rel[j];
            rel[j] = rel[j - 1];
            rel[j - 1] = t;
        }
    return (rel[(n - 1) / 2] + rel[n / 2]) / 2;
}

/* The grouped MoE FFN (kn_moe_ffn) against the plain one-expert-at-a-time path (kn_moe_ffn_plain) on
 * every MoE layer of a loaded model: bit-identical for one token, for 12 tokens in one chunk, and
 * with a scratch of 5 rows, whose chunks of the grouped rows split experts. */
static int grouped_vs_plain(const kiln_model *m) {
    const int64_t d = m->hp.n_embd;
    static const int32_t n_max[] = {12, 5};
    for (size_t c = 0; c < KN_ARRAY_LEN(n_max); c++) {
        kn_scratch s;
        if (kn_scratch_init(&s, m, n_max[c], 16, 2) != KILN_OK) return 0;
        float *want = malloc(sizeof(float) * (size_t)(12 * d));
        int same = want != NULL;
        for (int l = 0; l < m->hp.n_layer && same; l++) {
            if (m->layers[l].ffn != KN_FFN_MOE) continue;
            for (int64_t N = 1; N <= n_max[c] && same; N += n_max[c] - 1) {
                for (int64_t i = 0; i < N * d; i++) s.xb[i] = 3 * val(6, (int)i, l);
                kn_moe_ffn_plain(m, &s, l, N);
                memcpy(want, s.xb2, sizeof(float) * (size_t)(N * d));
                kn_moe_ffn(m, &s, l, N);
                same = memcmp(want, s.xb2, sizeof(float) * (size_t)(N * d)) == 0;
            }
        }
        free(want);
        kn_scratch_free(&s);
        if (!same) return 0;
    }
    return 1;
}

static void check_family(const char *preset, const char *const *list, double q_tol) {
    if (!kt_exists(gen_path())) SKIP("no %s", gen_path());
    enum { N = 12 };
    for (size_t i = 0; list[i]; i++) {
        const char *path = generate(preset, list[i]);
        CHECKF(path, "kiln-gen failed for %s %s", preset, list[i]);
        kiln_model *q = NULL, *r = NULL;
        CHECKF(kiln_model_load(path, NULL, &q) == KILN_OK, "%s", kiln_last_error());
        CHECKF(kn_model_load_ex(path, NULL, true, &r) == KILN_OK, "%s", kiln_last_error());
        CHECKF(grouped_vs_plain(q), "%s %s: the grouped MoE FFN differs from the plain path", preset, list[i]);
        const int V = kiln_model_n_vocab(q);
        float *a = malloc(sizeof(float) * (size_t)V * N), *b = malloc(sizeof(float) * (size_t)V * N);
        float *c = malloc(sizeof(float) * (size_t)V * N);
        int ok = all_logits(q, N, N, a) == 0 && all_logits(r, N, N, b) == 0;
        const double rel = ok ? median_rel(a, b, N, V) : 1e9;
        int chunks_same = 1;
        static const int chunks[] = {1, 3, 5};
        for (size_t j = 0; ok && j < KN_ARRAY_LEN(chunks); j++) {
            ok = all_logits(q, N, chunks[j], c) == 0;
            chunks_same = chunks_same && ok && memcmp(a, c, sizeof(float) * (size_t)V * N) == 0;
        }
        free(a);
        free(b);
        free(c);
        kiln_model_free(q);
        kiln_model_free(r);
        CHECK(ok);
        const double tol = list[i][0] == 'F' ? 1e-5 : q_tol;
        printf("  %s %-5s median rel. RMS logit difference %.2e (tolerance %.0e)\n", preset, list[i], rel, tol);
        CHECKF(rel <= tol, "%s %s: %.3e > %.0e", preset, list[i], rel, tol);
        CHECKF(chunks_same, "%s %s: prefill in chunks differs from one pass", preset, list[i]);
    }
}

static void test_qwen3moe_types_and_chunks(void) { check_family("tiny-qwen3moe", types, 0.06); }
static void test_mixtral_types_and_chunks(void) { check_family("tiny-mixtral", types, 0.06); }
static void test_gptoss_types_and_chunks(void) { check_family("tiny-gptoss", gptoss_types, 0.08); }

static kiln_engine *new_engine(kiln_model *m, int rows, int64_t cache) {
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 128;
    ep.max_rows = rows;
    ep.prefill_chunk = 5;
    ep.n_threads = 2;
    ep.prompt_cache = cache;
    kiln_engine *e = NULL;
    return kiln_engine_new(m, &ep, &e) == KILN_OK ? e : NULL;
}

/* Greedy tokens of 4 prompts alone (rows 1) and together (rows 4) are identical; a repeated prompt
 * served from the prefix cache gives the same tokens as a cold run. */
static void check_batch_and_cache(const char *preset) {
    const char *path = generate(preset, "Q4_K");
    if (!path) SKIP("kiln-gen unavailable");
    kiln_model *m = NULL;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    enum { P = 4, G = 16 };
    kiln_token prompts[P][20];
    for (int p = 0; p < P; p++)
        for (int i = 0; i < 20; i++) prompts[p][i] = (kiln_token)((p * 977 + i * 131 + 17) % kiln_model_n_vocab(m));
    kt_out alone[P], together[P];
    kiln_generate_result res;
    kiln_engine *e1 = new_engine(m, 1, 0);
    CHECK(e1);
    for (int p = 0; p < P; p++) CHECK(kt_generate(e1, prompts[p], 8 + 4 * p, G, &alone[p], &res) == KILN_OK);
    kiln_engine_free(e1);
    kiln_engine *e4 = new_engine(m, 4, 0);
    CHECK(e4);
    kiln_request *req[P];
    for (int p = 0; p < P; p++) {
        kiln_generate_params gp = kiln_generate_default_params();
        gp.sampling.temperature = 0;
        gp.max_tokens = G;
        gp.ignore_eos = true;
        gp.on_token = kt_on_token;
        gp.user = &together[p];
        together[p].n = 0;
        CHECK(kiln_engine_submit(e4, prompts[p], (size_t)(8 + 4 * p), &gp, &req[p]) == KILN_OK);
    }
    for (int p = 0; p < P; p++) {
        CHECK(kiln_request_wait(req[p], &res) == KILN_OK);
        kiln_request_free(req[p]);
    }
    kiln_engine_free(e4);
    for (int p = 0; p < P; p++)
        CHECKF(kt_same_out(&alone[p], &together[p]), "%s prompt %d: batched differs", preset, p);
    /* prefix cache: the same prompt twice, the second a hit */
    kiln_engine *w = new_engine(m, 2, 64 << 20);
    CHECK(w);
    kt_out a, b;
    CHECK(kt_generate(w, prompts[3], 20, G, &a, &res) == KILN_OK && res.n_cached == 0);
    CHECK(kt_generate(w, prompts[3], 20, G, &b, &res) == KILN_OK);
    CHECKF(res.n_cached >= 19, "cached %d", res.n_cached);
    kiln_engine_free(w);
    CHECK(kt_same_out(&a, &b));
    CHECK(kt_same_out(&a, &alone[3]));
    kiln_model_free(m);
}

/* Greedy tokens (12 new) after a 12-token prompt (so the expert matrices take multi-token tiles), with
 * the given kernels; *packed: whether the first MoE layer's expert matrices were repacked into panels. */
static int greedy_moe(const char *path, kiln_kernels kernels, kiln_token out[12], bool *packed) {
    kiln_model_params mp = kiln_model_default_params();
    mp.kernels = kernels;
    kiln_model *m = NULL;
    if (kiln_model_load(path, &mp, &m)) return -1;
    *packed = false;
    for (int l = 0; l < m->hp.n_layer; l++)
        if (m->layers[l].ffn == KN_FFN_MOE) {
            *packed = m->layers[l].moe.gate.packed && m->layers[l].moe.down.packed;
            break;
        }
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 64;
    sp.n_threads = 2;
    kiln_session *s = NULL;
    int rc = -1;
    if (kiln_session_new(m, &sp, &s) == KILN_OK) {
        kiln_token p[12];
        for (int i = 0; i < 12; i++) p[i] = (kiln_token)((i * 131 + 17) % kiln_model_n_vocab(m));
        rc = kiln_session_eval(s, p, 12, false);
        for (int i = 0; !rc && i < 12; i++) {
            const float *l = kiln_session_logits(s, -1);
            int best = 0;
            for (int k = 1; k < kiln_model_n_vocab(m); k++)
                if (l[k] > l[best]) best = k;
            out[i] = best;
            rc = kiln_session_eval(s, &out[i], 1, false);
        }
    }
    kiln_session_free(s);
    kiln_model_free(m);
    return rc;
}

/* The table-coded expert types (gpt-oss's MXFP4 experts, and IQ4_NL / IQ4_XS / MXFP4 qwen3moe files):
 * greedy tokens identical with the reference kernels and the automatic set, whose panel kernels take the
 * expert matrices where it has them (checked: those matrices are then packed). */
static void test_table_experts_ref_equals_auto(void) {
    if (!kt_exists(gen_path())) SKIP("no %s", gen_path());
    static const char *const cases[][3] = {{"tiny-gptoss", "MXFP4", "MXFP4"},
                                           {"tiny-gptoss", "Q4_0", "MXFP4"},
                                           {"tiny-qwen3moe", "IQ4_NL", "IQ4_NL"},
                                           {"tiny-qwen3moe", "IQ4_XS", "IQ4_XS"},
                                           {"tiny-qwen3moe", "MXFP4", "MXFP4"}};
    static const kn_dtype expert_type[] = {KN_MXFP4, KN_MXFP4, KN_IQ4_NL, KN_IQ4_XS, KN_MXFP4};
    const kn_kernels *ks = kn_kernels_get(KN_KERNELS_AUTO);
    for (size_t i = 0; i < KN_ARRAY_LEN(cases); i++) {
        const char *path = generate(cases[i][0], cases[i][1]);
        CHECKF(path, "kiln-gen failed for %s %s", cases[i][0], cases[i][1]);
        kiln_token r[12], f[12];
        bool pr, pf;
        CHECK(greedy_moe(path, KILN_KERNELS_REF, r, &pr) == 0);
        CHECK(greedy_moe(path, KILN_KERNELS_AUTO, f, &pf) == 0);
        const kn_dtype et = expert_type[i];
        printf("  %s %s: experts %s, %s under %s\n", cases[i][0], cases[i][1], cases[i][2], pf ? "packed" : "plain",
               ks->name);
        CHECKF(!pr, "%s %s: expert matrices packed for the reference kernels", cases[i][0], cases[i][1]);
        CHECKF(pf == (ks->p16[et] != NULL), "%s %s: expert matrices %s though set %s %s a %s panel kernel", cases[i][0],
               cases[i][1], pf ? "packed" : "plain", ks->name, ks->p16[et] ? "has" : "lacks", cases[i][2]);
        CHECKF(memcmp(r, f, sizeof r) == 0, "%s %s: greedy tokens differ between ref and auto kernels", cases[i][0],
               cases[i][1]);
    }
}

static void test_qwen3moe_batch_and_cache(void) { check_batch_and_cache("tiny-qwen3moe"); }
static void test_mixtral_batch_and_cache(void) { check_batch_and_cache("tiny-mixtral"); }
static void test_gptoss_batch_and_cache(void) { check_batch_and_cache("tiny-gptoss"); }

int main(void) {
    RUN(test_route_known);
    RUN(test_moe_ffn_hand_built);
    RUN(test_sinks_and_window);
    RUN(test_qwen3moe_types_and_chunks);
    RUN(test_mixtral_types_and_chunks);
    RUN(test_gptoss_types_and_chunks);
    RUN(test_qwen3moe_batch_and_cache);
    RUN(test_mixtral_batch_and_cache);
    RUN(test_gptoss_batch_and_cache);
    RUN(test_table_experts_ref_equals_auto);
    return kt_summary();
}
