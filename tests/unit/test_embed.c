/*
 * test_embed.c - embedding models and kiln_engine_embed, on models written by kiln-gen:
 *   - a tiny F32 bert against a direct scalar computation of the encoder in this file (double
 *     precision: embeddings + token type + position, LayerNorm, bidirectional multi-head attention
 *     with biases, post-norm residuals, exact GELU FFN, mean pooling, L2 normalization);
 *   - identical texts give identical vectors (cosine 1), different texts cosine below 1;
 *   - a batch gives each input the bits it gets alone (bert, nomic-bert, a qwen3 embedder): the
 *     forward pass computes every token's values from its own row only, in an order that does not
 *     depend on the batch, and pooling and normalization sum in a fixed order;
 *   - dimensions (truncation, then unit length), normalization off, and the pooling kinds;
 *   - errors: a generation model, an over-long input (and truncation when asked), empty inputs,
 *     ids outside the vocabulary, dimensions beyond the width, an encoder asked to generate;
 *   - embedding calls and a generation running on one engine at the same time both complete, and
 *     the generation's tokens are those it makes alone.
 */
#define KT_ENGINE_HELPERS
#include "harness.h"

#include "model/model.h"

#include <math.h>
#include <pthread.h>

static kiln_engine *engine(kiln_model *m, int n_ctx) {
    kiln_engine_params p = kiln_engine_default_params();
    p.n_ctx = n_ctx;
    p.max_rows = 2;
    p.prompt_cache = 0;
    p.n_threads = 2;
    kiln_engine *e = NULL;
    return kiln_engine_new(m, &p, &e) == KILN_OK ? e : NULL;
}

/* Tokenizes text with the model's special tokens into t[cap]; returns the count (0 on failure). */
static size_t tok(const kiln_model *m, const char *text, kiln_token *t, size_t cap) {
    size_t n = 0;
    return kiln_tokenize(m, text, strlen(text), true, false, t, cap, &n) == KILN_OK ? n : 0;
}

/* Embeds texts[n] in one call into out (dim floats each); the status. */
static kiln_status embed_texts(kiln_engine *e, const kiln_model *m, const char *const *texts, size_t n,
                               const kiln_embed_params *p, float *out, size_t cap, kiln_embed_result *res) {
    kiln_token buf[8][256];
    const kiln_token *in[8];
    size_t len[8];
    for (size_t i = 0; i < n && i < 8; i++) {
        len[i] = tok(m, texts[i], buf[i], 256);
        in[i] = buf[i];
    }
    return kiln_engine_embed(e, in, len, n, p, out, cap, res);
}

static double cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / sqrt(aa * bb);
}

/* ---- the scalar reference of a bert encoder ---------------------------------------------------- */

/* y[rows] = W x + b, from the model's weight rows (dequantized; F32 here). */
static void ref_linear(const kn_weight *w, const float *b, const double *x, double *y) {
    float *row = malloc((size_t)w->cols * sizeof(float));
    for (int64_t r = 0; r < w->rows; r++) {
        kn_weight_row_f32(w, r, row);
        double s = b ? b[r] : 0;
        for (int64_t c = 0; c < w->cols; c++) s += (double)row[c] * x[c];
        y[r] = s;
    }
    free(row);
}

static void ref_layernorm(double *x, int d, const float *w, const float *b, double eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < d; i++) mean += x[i];
    mean /= d;
    for (int i = 0; i < d; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= d;
    for (int i = 0; i < d; i++) x[i] = (x[i] - mean) / sqrt(var + eps) * (w ? w[i] : 1) + (b ? b[i] : 0);
}

/* The mean-pooled, normalized embedding of tokens[n] by a bert model, in double: out[d]. */
static void ref_bert(const kiln_model *m, const kiln_token *tokens, int n, double *out) {
    const kn_hparams *hp = &m->hp;
    const int d = hp->n_embd, H = hp->n_head, hd = hp->head_dim, ff = hp->n_ff;
    double *x = calloc((size_t)n * d, sizeof(double)), *q = calloc((size_t)n * d, sizeof(double));
    double *k = calloc((size_t)n * d, sizeof(double)), *v = calloc((size_t)n * d, sizeof(double));
    double *att = calloc((size_t)n * d, sizeof(double)), *tmp = calloc((size_t)d, sizeof(double));
    double *h = calloc((size_t)ff, sizeof(double)), *sc = calloc((size_t)n, sizeof(double));
    float *row = malloc((size_t)d * sizeof(float));
    for (int t = 0; t < n; t++) {
        kn_weight_row_f32(&m->tok_embd, tokens[t], row);
        for (int i = 0; i < d; i++) x[t * d + i] = row[i];
        kn_weight_row_f32(&m->tok_types, 0, row);
        for (int i = 0; i < d; i++) x[t * d + i] += row[i];
        kn_weight_row_f32(&m->pos_embd, t, row);
        for (int i = 0; i < d; i++) x[t * d + i] += row[i];
        ref_layernorm(x + t * d, d, m->embd_norm, m->embd_norm_b, hp->norm_eps);
    }
    for (int l = 0; l < hp->n_layer; l++) {
        const kn_layer *ly = &m->layers[l];
        for (int t = 0; t < n; t++) {
            ref_linear(&ly->wq, ly->bq, x + t * d, q + t * d);
            ref_linear(&ly->wk, ly->bk, x + t * d, k + t * d);
            ref_linear(&ly->wv, ly->bv, x + t * d, v + t * d);
        }
        for (int t = 0; t < n; t++)
            for (int hh = 0; hh < H; hh++) {
                double mx = -1e300, sum = 0;
                for (int u = 0; u < n; u++) { /* every token, later ones too */
                    double s = 0;
                    for (int i = 0; i < hd; i++) s += q[t * d + hh * hd + i] * k[u * d + hh * hd + i];
                    sc[u] = s / sqrt((double)hd);
                    mx = fmax(mx, sc[u]);
                }
                for (int u = 0; u < n; u++) sum += (sc[u] = exp(sc[u] - mx));
                for (int i = 0; i < hd; i++) {
                    double o = 0;
                    for (int u = 0; u < n; u++) o += sc[u] / sum * v[u * d + hh * hd + i];
                    att[t * d + hh * hd + i] = o;
                }
            }
        for (int t = 0; t < n; t++) {
            ref_linear(&ly->wo, ly->bo, att + t * d, tmp);
            for (int i = 0; i < d; i++) x[t * d + i] += tmp[i];
            ref_layernorm(x + t * d, d, ly->post_attn_norm, ly->post_attn_norm_b, hp->norm_eps);
            ref_linear(&ly->w_up, ly->b_up, x + t * d, h);
            for (int i = 0; i < ff; i++) h[i] = 0.5 * h[i] * (1 + erf(h[i] / sqrt(2.0)));
            ref_linear(&ly->w_down, ly->b_down, h, tmp);
            for (int i = 0; i < d; i++) x[t * d + i] += tmp[i];
            ref_layernorm(x + t * d, d, ly->post_ffn_norm, ly->post_ffn_norm_b, hp->norm_eps);
        }
    }
    double norm = 0;
    for (int i = 0; i < d; i++) {
        out[i] = 0;
        for (int t = 0; t < n; t++) out[i] += x[t * d + i] / n;
        norm += out[i] * out[i];
    }
    for (int i = 0; i < d; i++) out[i] /= sqrt(norm);
    free(x), free(q), free(k), free(v), free(att), free(tmp), free(h), free(sc), free(row);
}

static void test_bert_reference(void) {
    kiln_model *m = kt_load(kt_gen("emb-bert-f32", "--preset tiny-bert --type f32"));
    if (!m) SKIP("kiln-gen or the model is unavailable");
    kiln_engine *e = engine(m, 128);
    CHECK(e);
    CHECK(kiln_model_is_embedding(m) && !kiln_model_can_generate(m));
    CHECK(strcmp(kiln_model_pooling(m), "mean") == 0);
    const char *texts[] = {"the little girl saw a big red ball.", "once upon a time"};
    kiln_token t[2][256];
    int n[2];
    for (int i = 0; i < 2; i++) {
        n[i] = (int)tok(m, texts[i], t[i], 256);
        CHECK(n[i] > 3 && t[i][0] == kiln_token_bos(m)); /* [CLS] ... [SEP] */
    }
    const int d = kiln_model_n_embd(m);
    float out[2 * 64];
    kiln_embed_result res;
    CHECK(embed_texts(e, m, texts, 2, NULL, out, 2 * 64, &res) == KILN_OK);
    CHECK(res.dim == d && res.n_tokens == n[0] + n[1]);
    double ref[64], worst = 0;
    for (int i = 0; i < 2; i++) {
        ref_bert(m, t[i], n[i], ref);
        for (int j = 0; j < d; j++) worst = fmax(worst, fabs(ref[j] - out[i * d + j]));
    }
    /* F32 weights: kiln's float kernels differ from the double reference only by rounding */
    CHECKF(worst < 2e-5, "largest difference from the scalar reference %g", worst);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* ---- the engine's embeddings ------------------------------------------------------------------- */

/* Same text = same bits, other text < 1, a batch = each alone, for the model at path. */
static void check_model(const char *path, int n_ctx) {
    kiln_model *m = kt_load(path);
    if (!m) SKIP("kiln-gen or the model is unavailable");
    kiln_engine *e = engine(m, n_ctx);
    CHECK(e);
    const int d = kiln_model_n_embd(m);
    const char *texts[] = {"the cat sat on the mat", "a brave little bird flew over the mountains",
                           "the cat sat on the mat", "one, two, three!"};
    float *batch = malloc(4 * (size_t)d * sizeof(float)), *one = malloc((size_t)d * sizeof(float));
    CHECK(embed_texts(e, m, texts, 4, NULL, batch, 4 * (size_t)d, NULL) == KILN_OK);
    CHECK(memcmp(batch, batch + 2 * d, (size_t)d * sizeof(float)) == 0); /* identical text: cosine 1 */
    CHECK_NEAR(cosine(batch, batch + 2 * d, d), 1.0, 1e-12);
    CHECKF(cosine(batch, batch + d, d) < 0.999, "cosine %g", cosine(batch, batch + d, d));
    CHECKF(cosine(batch, batch + 3 * d, d) < 0.999, "cosine %g", cosine(batch, batch + 3 * d, d));
    double norm = 0;
    for (int j = 0; j < d; j++) norm += (double)batch[j] * batch[j];
    CHECK_NEAR(norm, 1.0, 1e-5);
    for (int i = 0; i < 4; i++) {
        CHECK(embed_texts(e, m, texts + i, 1, NULL, one, (size_t)d, NULL) == KILN_OK);
        CHECKF(memcmp(one, batch + (size_t)i * d, (size_t)d * sizeof(float)) == 0, "input %d alone differs", i);
    }
    free(batch);
    free(one);
    kiln_engine_free(e);
    kiln_model_free(m);
}

static void test_bert_batch(void) { check_model(kt_gen("emb-bert", "--preset tiny-bert"), 128); }
static void test_nomic_bert_batch(void) { check_model(kt_gen("emb-nomic", "--preset tiny-nomic-bert"), 256); }
static void test_qwen3_embedding_batch(void) { check_model(kt_gen("emb-q3e", "--preset tiny-qwen3-embedding"), 256); }

static void test_params(void) {
    kiln_model *m = kt_load(kt_gen("emb-bert", "--preset tiny-bert"));
    if (!m) SKIP("kiln-gen or the model is unavailable");
    kiln_engine *e = engine(m, 128);
    CHECK(e);
    const char *text[] = {"the little girl and her dog"};
    float full[64], raw[64], cut[16];
    kiln_embed_params p = kiln_embed_default_params();
    CHECK(embed_texts(e, m, text, 1, &p, full, 64, NULL) == KILN_OK);
    p.normalize = false;
    CHECK(embed_texts(e, m, text, 1, &p, raw, 64, NULL) == KILN_OK);
    double rn = 0;
    for (int j = 0; j < 64; j++) rn += (double)raw[j] * raw[j];
    CHECK(fabs(rn - 1.0) > 1e-3); /* the pooled vector is not unit length by itself */
    for (int j = 0; j < 64; j++) CHECK_NEAR(full[j], raw[j] / sqrt(rn), 1e-6);
    /* dimensions: the first 16 values, renormalized */
    p = kiln_embed_default_params();
    p.dimensions = 16;
    kiln_embed_result res;
    CHECK(embed_texts(e, m, text, 1, &p, cut, 16, &res) == KILN_OK && res.dim == 16);
    double cn = 0, r16 = 0;
    for (int j = 0; j < 16; j++) cn += (double)cut[j] * cut[j], r16 += (double)raw[j] * raw[j];
    CHECK_NEAR(cn, 1.0, 1e-5);
    for (int j = 0; j < 16; j++) CHECK_NEAR(cut[j], raw[j] / sqrt(r16), 1e-6);
    /* errors */
    p.dimensions = 65;
    CHECK(embed_texts(e, m, text, 1, &p, full, 64, NULL) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "dimensions"));
    p.dimensions = 0;
    CHECK(embed_texts(e, m, text, 1, &p, full, 10, NULL) == KILN_ERR_BUFFER_SMALL);
    kiln_token bad[2] = {2, 100000};
    const kiln_token *in[1] = {bad};
    size_t len[1] = {2};
    CHECK(kiln_engine_embed(e, in, len, 1, NULL, full, 64, NULL) == KILN_ERR_INVALID_ARG);
    len[0] = 0;
    CHECK(kiln_engine_embed(e, in, len, 1, NULL, full, 64, NULL) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_engine_embed(e, in, len, 0, NULL, full, 64, NULL) == KILN_ERR_INVALID_ARG);
    /* over-long: 200 tokens against a limit of 128 (the model's position table) */
    CHECK(kiln_engine_embed_max_tokens(e) == 128);
    kiln_token lng[200];
    for (int i = 0; i < 200; i++) lng[i] = 10 + i % 50;
    in[0] = lng;
    len[0] = 200;
    CHECK(kiln_engine_embed(e, in, len, 1, NULL, full, 64, NULL) == KILN_ERR_CONTEXT_FULL);
    CHECK(strstr(kiln_last_error(), "128"));
    p.truncate = true;
    CHECK(kiln_engine_embed(e, in, len, 1, &p, full, 64, &res) == KILN_OK);
    CHECK(res.n_truncated == 1 && res.n_tokens == 128);
    len[0] = 128; /* the same as the first 128 tokens */
    CHECK(kiln_engine_embed(e, in, len, 1, NULL, raw, 64, NULL) == KILN_OK);
    CHECK(memcmp(full, raw, sizeof raw) == 0);
    /* an encoder does not generate */
    kiln_generate_params gp = kiln_generate_default_params();
    kiln_request *r = NULL;
    CHECK(kiln_engine_submit(e, lng, 5, &gp, &r) == KILN_ERR_UNSUPPORTED);
    kiln_engine_free(e);
    kiln_model_free(m);
}

static void test_generation_model_refused(void) {
    kiln_model *m = kt_load(kt_gen("emb-q3", "--preset tiny-qwen3"));
    if (!m) SKIP("kiln-gen or the model is unavailable");
    kiln_engine *e = engine(m, 128);
    CHECK(e);
    CHECK(!kiln_model_is_embedding(m) && kiln_model_can_generate(m));
    const char *text[] = {"hello"};
    float out[256];
    CHECK(embed_texts(e, m, text, 1, NULL, out, 256, NULL) == KILN_ERR_UNSUPPORTED);
    CHECK(strstr(kiln_last_error(), "not an embedding model"));
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* A generation and embedding calls on one engine at the same time. */
typedef struct gen_job {
    kiln_engine *e;
    kiln_token p[8];
    kt_out out;
    kiln_status st;
} gen_job;

static void *gen_thread(void *arg) {
    gen_job *g = arg;
    kiln_generate_result res;
    g->st = kt_generate(g->e, g->p, 8, 48, &g->out, &res);
    return NULL;
}

static void test_shared_engine(void) {
    kiln_model *m = kt_load(kt_gen("emb-q3e", "--preset tiny-qwen3-embedding"));
    if (!m) SKIP("kiln-gen or the model is unavailable");
    kiln_engine *e = engine(m, 256);
    CHECK(e);
    gen_job alone = {.e = e, .p = {1, 2, 3, 4, 5, 6, 7, 8}}, shared = alone;
    gen_thread(&alone);
    CHECK(alone.st == KILN_OK && alone.out.n == 48);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, gen_thread, &shared) == 0);
    const char *texts[] = {"the cat sat on the mat", "a brave little bird"};
    float first[2 * 256], again[2 * 256];
    kiln_status st = embed_texts(e, m, texts, 2, NULL, first, 512, NULL);
    for (int i = 0; i < 5 && !st; i++) st = embed_texts(e, m, texts, 2, NULL, again, 512, NULL);
    pthread_join(th, NULL);
    CHECK(st == KILN_OK && memcmp(first, again, sizeof first) == 0);
    CHECK(shared.st == KILN_OK && kt_same_out(&alone.out, &shared.out));
    kiln_engine_free(e);
    kiln_model_free(m);
}

int main(void) {
    RUN(test_bert_reference);
    RUN(test_bert_batch);
    RUN(test_nomic_bert_batch);
    RUN(test_qwen3_embedding_batch);
    RUN(test_params);
    RUN(test_generation_model_refused);
    RUN(test_shared_engine);
    return kt_summary();
}
