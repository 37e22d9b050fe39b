/*
 * kiln-hf.c - writes a Hugging Face model directory (config.json, model.safetensors, tokenizer.json,
 * tokenizer_config.json) from a GGUF file or another such directory, in F32, F16 or BF16, or
 * MLX-quantized (the affine layout of mlx-community models: uint32-packed `weight`, per-group `scales`
 * and `biases`, config.json `quantization: {group_size, bits}`).
 *
 *   kiln-hf IN OUTDIR [--dtype f32|f16|bf16] [--mlx-bits B --mlx-group G [--mlx-minmax]] [--mlx-layer NAME=B]...
 *
 * It is the inverse of what kiln's loader does with a directory (src/model/hf.c): GGUF tensor names
 * become Hugging Face module names, the Q/K rows of interleaved-RoPE families (llama) go back to the
 * rotate-half order, Gemma's norms lose the +1, stacked experts are written one per expert (gpt-oss's
 * as its MXFP4 `*_blocks` / `*_scales` with interleaved gate_up rows, model_type gpt_oss), and the
 * GGUF tokenizer (SentencePiece "llama" or byte-level "gpt2") is written as a tokenizer.json a
 * Hugging Face tokenizer reads the same way. Tests use it to check that a directory gives exactly what
 * the GGUF gives, and that MLX-quantized copies stay close.
 *
 * MLX quantization (per group of G values along a row): scale = (max - min) / (2^B - 1) and bias = min,
 * searched over a grid of ranges with weighted least-squares refits (fit_group), both rounded to f16; q = round((w -
 * bias) / scale) clamped to [0, 2^B - 1], packed as a little-endian bit stream into uint32 words. Norms and other
 * vectors stay in --dtype. --mlx-minmax keeps each group's plain min/max range (no search: about 100 times
 * faster, for large models).
 */
#include "base/base.h"
#include "model/arch.h"
#include "model/gguf.h"
#include "model/hf.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct opts {
    const char *in, *out;
    int dtype; /* 0 f32, 1 f16, 2 bf16 */
    int bits, group;
    const char *layer_names[64];
    int layer_bits[64], n_layer;
    bool minmax; /* --mlx-minmax: each group's plain min/max range, no search (fast, for large models) */
} opts;

static int die(const char *fmt, const char *a) {
    fprintf(stderr, "kiln-hf: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    return 1;
}

/* ---- names ----------------------------------------------------------------------------------------- */

static const struct {
    const char *gguf, *hf;
} layer_map[] = {
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_qkv", "self_attn.qkv_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"attn_norm", "input_layernorm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"ffn_gate_inp", "mlp.gate"},
};

static const struct {
    const char *arch, *model_type;
} arch_map[] = {{"llama", "llama"},     {"qwen2", "qwen2"},        {"qwen3", "qwen3"},
                {"smollm3", "smollm3"}, {"gemma3", "gemma3_text"}, {"gemma2", "gemma2"},
                {"phi3", "phi3"},       {"qwen3moe", "qwen3_moe"}, {"gpt-oss", "gpt_oss"}};

/* The Hugging Face name of a GGUF tensor into out; false when it has none (written elsewhere or skipped). */
static bool hf_name(const char *arch, const kn_gguf *g, const char *name, char *out, size_t cap) {
    int l = -1, used = 0;
    char mod[64], suffix[16];
    if (!strcmp(name, "token_embd.weight")) return snprintf(out, cap, "model.embed_tokens.weight"), true;
    if (!strcmp(name, "output_norm.weight")) return snprintf(out, cap, "model.norm.weight"), true;
    if (!strcmp(name, "output.weight")) return snprintf(out, cap, "lm_head.weight"), true;
    if (sscanf(name, "blk.%d.%n", &l, &used) != 1 || !used) return false;
    if (sscanf(name + used, "%63[a-z_0-9].%15s", mod, suffix) != 2) return false;
    const bool gemma = !strncmp(arch, "gemma", 5), oss = !strcmp(arch, "gpt-oss");
    if (oss && !strcmp(mod, "attn_sinks")) return snprintf(out, cap, "model.layers.%d.self_attn.sinks", l), true;
    const char *hf = NULL;
    for (size_t i = 0; i < KN_ARRAY_LEN(layer_map) && !hf; i++)
        if (!strcmp(mod, layer_map[i].gguf)) hf = layer_map[i].hf;
    if (gemma && !strcmp(mod, "ffn_norm")) hf = "pre_feedforward_layernorm";
    if (oss && !strcmp(mod, "ffn_gate_inp")) hf = "mlp.router";
    if (!strcmp(arch, "phi3") && !strcmp(mod, "ffn_up")) {
        char gate[96];
        snprintf(gate, sizeof gate, "blk.%d.ffn_gate.weight", l);
        if (!kn_gguf_find_tensor(g, gate)) hf = "mlp.gate_up_proj";
    }
    if (!hf) return false;
    snprintf(out, cap, "model.layers.%d.%s.%s", l, hf, suffix);
    return true;
}

/* ---- safetensors writer ---------------------------------------------------------------------------- */

typedef struct wtensor {
    char name[256];
    const char *dtype;
    int n_dims;
    int64_t shape[4];
    uint8_t *data;
    size_t nbytes;
} wtensor;

typedef struct writer {
    wtensor *t;
    size_t n, cap;
} writer;

static void add(writer *w, const char *name, const char *dtype, int n_dims, const int64_t *shape, uint8_t *data,
                size_t nbytes) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 256;
        w->t = realloc(w->t, w->cap * sizeof *w->t);
        if (!w->t) exit(die("%s", "out of memory"));
    }
    wtensor *t = &w->t[w->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->n_dims = n_dims;
    memcpy(t->shape, shape, (size_t)n_dims * sizeof *shape);
    t->data = data;
    t->nbytes = nbytes;
}

static int write_safetensors(const writer *w, const char *path) {
    json_t *h = json_object();
    size_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < w->t[i].n_dims; d++) json_array_append_new(shape, json_integer(w->t[i].shape[d]));
        json_object_set_new(h, w->t[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", w->t[i].dtype, "shape", shape, "data_offsets",
                                      (json_int_t)off, (json_int_t)(off + w->t[i].nbytes)));
        off += w->t[i].nbytes;
    }
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *js = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(h);
    size_t hl = strlen(js), padded = (hl + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    if (!f) return die("cannot write %s", path);
    uint64_t n = padded;
    fwrite(&n, 8, 1, f);
    fwrite(js, 1, hl, f);
    for (size_t i = hl; i < padded; i++) fputc(' ', f);
    for (size_t i = 0; i < w->n; i++) fwrite(w->t[i].data, 1, w->t[i].nbytes, f);
    free(js);
    return fclose(f) ? die("cannot write %s", path) : 0;
}

/* ---- tensor data ----------------------------------------------------------------------------------- */

static float *to_f32(const kn_gguf_tensor *t, int64_t n) {
    float *v = malloc((size_t)n * sizeof *v);
    const kn_type_traits *tr = kn_type_traits_get(t->type);
    if (!v || !tr || !tr->to_float) exit(die("cannot convert tensor %s", "(type)"));
    tr->to_float(t->data, v, n);
    return v;
}

static uint8_t *encode(const float *v, int64_t n, int dtype, size_t *nbytes, const char **name) {
    if (dtype == 0) {
        uint8_t *p = malloc((size_t)n * 4);
        memcpy(p, v, (size_t)n * 4);
        *nbytes = (size_t)n * 4;
        *name = "F32";
        return p;
    }
    uint16_t *p = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) p[i] = dtype == 1 ? kn_fp32_to_fp16(v[i]) : kn_fp32_to_bf16(v[i]);
    *nbytes = (size_t)n * 2;
    *name = dtype == 1 ? "F16" : "BF16";
    return (uint8_t *)p;
}

/* Quantizes one group of n values with the f16 scale and bias given; returns the squared error weighted
 * by x^2. */
static double quant_group(const float *x, int n, float s, float b, float nb, uint32_t *q) {
    double err = 0;
    for (int j = 0; j < n; j++) {
        float qf = s > 0 ? roundf((x[j] - b) / s) : 0;
        q[j] = qf < 0 ? 0 : qf > nb ? (uint32_t)nb : (uint32_t)qf;
        const double e = (double)(s * (float)q[j] + b) - (double)x[j];
        err += e * e * ((double)x[j] * x[j] + 1e-12);
    }
    return err;
}

/* The scale and bias of one group: starting from min/max ranges over 2^B - 2 .. 2^B steps (a grid of
 * 21), each followed by weighted least-squares refits of x ~ scale * q + bias over its codes (both
 * rounded to f16 each time); the pair with the smallest error weighted by x^2 wins (large weights matter
 * most: on stories260K this halves the 4-bit perplexity loss of plain min/max). */
static void fit_group(const float *x, int n, float nb, bool minmax, uint16_t *hs, uint16_t *hb) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < n; j++) mn = fminf(mn, x[j]), mx = fmaxf(mx, x[j]);
    uint16_t bs = kn_fp32_to_fp16((mx - mn) / nb), bb = kn_fp32_to_fp16(mn);
    if (kn_fp16_to_fp32(bs) == 0) bs = kn_fp32_to_fp16(1e-7f);
    uint32_t q[128];
    double best = minmax ? 0 : quant_group(x, n, kn_fp16_to_fp32(bs), kn_fp16_to_fp32(bb), nb, q);
    if (mx == mn || minmax) {
        *hs = bs;
        *hb = bb;
        return;
    }
    for (int k = 0; k <= 20; k++) {
        uint16_t cs = kn_fp32_to_fp16((mx - mn) / (nb - 1.0f + 0.1f * (float)k)), cb = kn_fp32_to_fp16(mn);
        double e = quant_group(x, n, kn_fp16_to_fp32(cs), kn_fp16_to_fp32(cb), nb, q);
        if (e < best) best = e, bs = cs, bb = cb;
        for (int it = 0; it < 4; it++) {
            double sq = 0, sqq = 0, sx = 0, sqx = 0;
            double sw = 0;
            for (int j = 0; j < n; j++) {
                const double wj = (double)x[j] * x[j] + 1e-12;
                sw += wj, sq += wj * q[j], sqq += wj * q[j] * q[j], sx += wj * x[j], sqx += wj * q[j] * x[j];
            }
            const double det = sw * sqq - sq * sq;
            if (det <= 0) break;
            const double s = (sw * sqx - sq * sx) / det, b = (sx - s * sq) / sw;
            if (!(s > 0)) break;
            cs = kn_fp32_to_fp16((float)s);
            cb = kn_fp32_to_fp16((float)b);
            e = quant_group(x, n, kn_fp16_to_fp32(cs), kn_fp16_to_fp32(cb), nb, q);
            if (e < best) best = e, bs = cs, bb = cb;
        }
    }
    *hs = bs;
    *hb = bb;
}

/* MLX affine quantization of rows [rows][cols] (see the file comment) into weight/scales/biases. */
static void mlx_quantize(writer *w, const char *base, const float *v, int64_t rows, int64_t cols, int bits, int group,
                         bool minmax) {
    const int64_t words = cols * bits / 32, ng = cols / group;
    uint32_t *q = calloc((size_t)(rows * words), 4);
    uint16_t *sc = malloc((size_t)(rows * ng) * 2), *bi = malloc((size_t)(rows * ng) * 2);
    const float nb = (float)((1 << bits) - 1);
    uint32_t codes[128];
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = (uint8_t *)(q + r * words);
        for (int64_t g = 0; g < ng; g++) {
            const float *x = v + r * cols + g * group;
            fit_group(x, group, nb, minmax, &sc[r * ng + g], &bi[r * ng + g]);
            quant_group(x, group, kn_fp16_to_fp32(sc[r * ng + g]), kn_fp16_to_fp32(bi[r * ng + g]), nb, codes);
            for (int j = 0; j < group; j++) {
                const uint32_t qi = codes[j];
                const uint64_t bit = (uint64_t)(g * group + j) * (uint64_t)bits;
                row[bit >> 3] |= (uint8_t)(qi << (bit & 7));
                if ((bit & 7) + (uint64_t)bits > 8) row[(bit >> 3) + 1] |= (uint8_t)(qi >> (8 - (bit & 7)));
            }
        }
    }
    char nm[300];
    int64_t sh[2] = {rows, words}, ss[2] = {rows, ng};
    snprintf(nm, sizeof nm, "%s.weight", base);
    add(w, nm, "U32", 2, sh, (uint8_t *)q, (size_t)(rows * words) * 4);
    snprintf(nm, sizeof nm, "%s.scales", base);
    add(w, nm, "F16", 2, ss, (uint8_t *)sc, (size_t)(rows * ng) * 2);
    snprintf(nm, sizeof nm, "%s.biases", base);
    add(w, nm, "F16", 2, ss, (uint8_t *)bi, (size_t)(rows * ng) * 2);
}

/* GGUF's interleaved Q/K row order back to Hugging Face's rotate-half order (per head). */
static void unpermute(float *v, int64_t rows, int64_t cols, int64_t n_head) {
    const int64_t hd = rows / n_head;
    float *tmp = malloc((size_t)(rows * cols) * sizeof *tmp);
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t i = 0; i < hd / 2; i++)
            for (int s = 0; s < 2; s++)
                memcpy(tmp + (h * hd + s * hd / 2 + i) * cols, v + (h * hd + 2 * i + s) * cols, (size_t)cols * 4);
    memcpy(v, tmp, (size_t)(rows * cols) * 4);
    free(tmp);
}

static int layer_bits(const opts *o, const char *base) {
    for (int i = 0; i < o->n_layer; i++)
        if (!strcmp(o->layer_names[i], base)) return o->layer_bits[i];
    return o->bits;
}

/* One 2-D (or 1-D) tensor under its Hugging Face name; matrices MLX-quantized when asked. */
static void emit(writer *w, const opts *o, const char *hfname, float *v, int n_dims, const int64_t *shape) {
    const int64_t n = n_dims == 1 ? shape[0] : shape[0] * shape[1];
    char base[256];
    snprintf(base, sizeof base, "%.*s", (int)(strrchr(hfname, '.') - hfname), hfname);
    const bool weight = !strcmp(strrchr(hfname, '.'), ".weight");
    const int bits = layer_bits(o, base);
    if (o->bits && weight && n_dims == 2 && shape[1] % o->group == 0 && !strstr(base, "norm") && bits) {
        mlx_quantize(w, base, v, shape[0], shape[1], bits, o->group, o->minmax);
        return;
    }
    size_t nb;
    const char *dt;
    uint8_t *p = encode(v, n, o->dtype, &nb, &dt);
    add(w, hfname, dt, n_dims, shape, p, nb);
}

/* ---- config and tokenizer ------------------------------------------------------------------------- */

static int64_t meta_int(const kn_gguf *g, const char *arch, const char *suffix, int64_t dflt) {
    char k[128];
    int64_t v;
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    return kn_gguf_get_i64(g, k, &v) ? v : dflt;
}

static double meta_f(const kn_gguf *g, const char *arch, const char *suffix, double dflt) {
    char k[128];
    double v;
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    return kn_gguf_get_f64(g, k, &v) ? v : dflt;
}

static json_t *str_json(kn_str s) { return json_stringn(s.ptr, s.len); }

/* tokenizer.json and tokenizer_config.json from a GGUF tokenizer (or copied from a directory). */
static int write_tokenizer(const kn_gguf *g, const char *out, json_t *tcfg) {
    char path[4096];
    kn_str s;
    if (kn_gguf_get_str(g, "tokenizer.huggingface.json", &s)) { /* a directory: copy it */
        snprintf(path, sizeof path, "%s/tokenizer.json", out);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(s.ptr, 1, s.len, f) != s.len || fclose(f)) return die("cannot write %s", path);
        return 0;
    }
    kn_str model;
    uint64_t n;
    const uint8_t *cur;
    if (!kn_gguf_get_str(g, "tokenizer.ggml.model", &model) ||
        !kn_gguf_get_arr(g, "tokenizer.ggml.tokens", KN_GGUF_STRING, &n, &cur))
        return die("%s: no tokenizer.ggml.model / tokens", "input");
    const bool spm = kn_str_eq(model, "llama");
    if (!spm && !kn_str_eq(model, "gpt2")) return die("tokenizer model '%s' is not supported", "?");
    kn_str *tok = calloc(n, sizeof *tok);
    for (uint64_t i = 0; i < n; i++) tok[i] = kn_gguf_next_str(&cur);
    uint64_t nt = 0, nsc = 0;
    const uint8_t *types = NULL, *scores = NULL;
    kn_gguf_get_arr(g, "tokenizer.ggml.token_type", KN_GGUF_INT32, &nt, &types);
    kn_gguf_get_arr(g, "tokenizer.ggml.scores", KN_GGUF_FLOAT32, &nsc, &scores);
    json_t *vocab = json_object(), *added = json_array(), *merges = json_array();
    for (uint64_t i = 0; i < n; i++) {
        char *k = strndup(tok[i].ptr, tok[i].len);
        json_object_set_new(vocab, k, json_integer((json_int_t)i));
        int32_t ty = 1;
        if (types && i < nt) memcpy(&ty, types + 4 * i, 4);
        if (ty == 2 || ty == 3 || ty == 4) /* unknown, control, user-defined */
            json_array_append_new(added, json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)i,
                                                   "content", k, "single_word", 0, "lstrip", 0, "rstrip", 0,
                                                   "normalized", ty == 4, "special", ty != 4));
        free(k);
    }
    if (spm) {
        /* merges from the scores: every split of a piece into two pieces, ranked by the piece's score
         * (the pair SentencePiece would merge first comes first) */
        typedef struct {
            float score;
            uint64_t id;
            size_t cut;
        } mg;
        size_t nm = 0, cap = 1024;
        mg *m = malloc(cap * sizeof *m);
        for (uint64_t i = 0; i < n; i++) {
            int32_t ty = 1;
            if (types && i < nt) memcpy(&ty, types + 4 * i, 4);
            if (ty != 1) continue;
            for (size_t c = 1; c < tok[i].len; c++) {
                char *l = strndup(tok[i].ptr, c), *r = strndup(tok[i].ptr + c, tok[i].len - c);
                if (json_object_get(vocab, l) && json_object_get(vocab, r)) {
                    if (nm == cap) m = realloc(m, (cap *= 2) * sizeof *m);
                    float sc = 0;
                    if (scores && i < nsc) memcpy(&sc, scores + 4 * i, 4);
                    m[nm++] = (mg){sc, i, c};
                }
                free(l);
                free(r);
            }
        }
        /* stable order: score descending, then id, then cut */
        for (size_t i = 1; i < nm; i++) {
            mg x = m[i];
            size_t j = i;
            while (j > 0 && (m[j - 1].score < x.score || (m[j - 1].score == x.score && m[j - 1].id > x.id))) {
                m[j] = m[j - 1];
                j--;
            }
            m[j] = x;
        }
        for (size_t i = 0; i < nm; i++) {
            const kn_str t = tok[m[i].id];
            json_array_append_new(merges, json_pack("[s%, s%]", t.ptr, m[i].cut, t.ptr + m[i].cut, t.len - m[i].cut));
        }
        free(m);
    } else {
        uint64_t nmg;
        const uint8_t *mc;
        if (kn_gguf_get_arr(g, "tokenizer.ggml.merges", KN_GGUF_STRING, &nmg, &mc))
            for (uint64_t i = 0; i < nmg; i++) {
                kn_str ms = kn_gguf_next_str(&mc);
                const char *sp = memchr(ms.ptr, ' ', ms.len);
                if (!sp) continue;
                json_array_append_new(merges, json_pack("[s%, s%]", ms.ptr, (size_t)(sp - ms.ptr), sp + 1,
                                                        (size_t)(ms.len - (size_t)(sp - ms.ptr) - 1)));
            }
    }
    int64_t bos = -1, eos = -1, unk = -1;
    kn_gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &bos);
    kn_gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &eos);
    kn_gguf_get_i64(g, "tokenizer.ggml.unknown_token_id", &unk);
    bool add_bos = spm, add_eos = false;
    kn_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos);
    kn_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos);
    json_t *root = json_object();
    json_object_set_new(root, "version", json_string("1.0"));
    json_object_set_new(root, "truncation", json_null());
    json_object_set_new(root, "padding", json_null());
    json_object_set_new(root, "added_tokens", added);
    json_t *single = json_array(), *special = json_object();
    if (add_bos && bos >= 0) {
        json_array_append_new(single,
                              json_pack("{s:{s:o, s:i}}", "SpecialToken", "id", str_json(tok[bos]), "type_id", 0));
        json_object_set_new(special, kn_gguf_get_str(g, "tokenizer.ggml.model", &model) ? "bos" : "bos",
                            json_pack("{s:o, s:[I], s:[o]}", "id", str_json(tok[bos]), "ids", (json_int_t)bos, "tokens",
                                      str_json(tok[bos])));
    }
    json_array_append_new(single, json_pack("{s:{s:s, s:i}}", "Sequence", "id", "A", "type_id", 0));
    if (add_eos && eos >= 0) {
        json_array_append_new(single,
                              json_pack("{s:{s:o, s:i}}", "SpecialToken", "id", str_json(tok[eos]), "type_id", 0));
        json_object_set_new(special, "eos",
                            json_pack("{s:o, s:[I], s:[o]}", "id", str_json(tok[eos]), "ids", (json_int_t)eos, "tokens",
                                      str_json(tok[eos])));
    }
    json_object_set_new(root, "post_processor",
                        json_pack("{s:s, s:o, s:o, s:o}", "type", "TemplateProcessing", "single", single, "pair",
                                  json_deep_copy(single), "special_tokens", special));
    if (spm) {
        json_object_set_new(root, "normalizer",
                            json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}", "type", "Sequence", "normalizers",
                                      "type", "Prepend", "prepend", "\xe2\x96\x81", "type", "Replace", "pattern",
                                      "String", " ", "content", "\xe2\x96\x81"));
        json_object_set_new(root, "pre_tokenizer", json_null());
        json_object_set_new(root, "decoder",
                            json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]}", "type",
                                      "Sequence", "decoders", "type", "Replace", "pattern", "String", "\xe2\x96\x81",
                                      "content", " ", "type", "ByteFallback", "type", "Fuse", "type", "Strip",
                                      "content", " ", "start", 1, "stop", 0));
    } else {
        kn_str pre = {"", 0};
        kn_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
        const char *re = kn_str_eq(pre, "qwen2") || kn_str_eq(pre, "llama-bpe")
                             ? "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
                             : "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
        json_object_set_new(root, "normalizer", json_null());
        json_object_set_new(root, "pre_tokenizer",
                            json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence",
                                      "pretokenizers", "type", "Split", "pattern", "Regex", re, "behavior", "Isolated",
                                      "invert", 0, "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0,
                                      "use_regex", 0));
        json_object_set_new(root, "decoder",
                            json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                                      "trim_offsets", 1, "use_regex", 1));
    }
    json_t *bpe = json_pack("{s:s, s:n, s:n, s:n, s:o, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout",
                            "continuing_subword_prefix", "end_of_word_suffix", "unk_token",
                            spm && unk >= 0 ? str_json(tok[unk]) : json_null(), "fuse_unk", spm, "byte_fallback", spm,
                            "ignore_merges", 0, "vocab", vocab, "merges", merges);
    json_object_set_new(root, "model", bpe);
    snprintf(path, sizeof path, "%s/tokenizer.json", out);
    int rc = json_dump_file(root, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER) ? die("cannot write %s", path) : 0;
    json_object_set_new(tcfg, "add_bos_token", json_boolean(add_bos));
    json_object_set_new(tcfg, "add_eos_token", json_boolean(add_eos));
    if (bos >= 0) json_object_set_new(tcfg, "bos_token", str_json(tok[bos]));
    if (eos >= 0) json_object_set_new(tcfg, "eos_token", str_json(tok[eos]));
    if (unk >= 0) json_object_set_new(tcfg, "unk_token", str_json(tok[unk]));
    json_object_set_new(tcfg, "tokenizer_class", json_string(spm ? "LlamaTokenizerFast" : "PreTrainedTokenizerFast"));
    json_decref(root);
    free(tok);
    return rc;
}

/* ---- main ------------------------------------------------------------------------------------------ */

/* ---- gpt-oss experts ------------------------------------------------------------------------------- */

/* The MXFP4 blocks of row r of expert e of t (ne: cols, rows, experts) into out[cols / 32]: t's own when
 * it is MXFP4, else quantized with the reference quantizer. */
static void mxfp4_row(const kn_gguf_tensor *t, int64_t e, int64_t r, kn_block_mxfp4 *out) {
    const int64_t cols = t->ne[0], nb = cols / 32, row = e * t->ne[1] + r;
    if (t->type == KN_MXFP4) {
        memcpy(out, t->data + (size_t)(row * nb) * sizeof *out, (size_t)nb * sizeof *out);
        return;
    }
    const kn_type_traits *tr = kn_type_traits_get(t->type);
    float *v = malloc((size_t)cols * sizeof *v);
    if (!v || !tr || !tr->to_float) exit(die("%s", "cannot convert an expert tensor"));
    tr->to_float(t->data + (size_t)row * kn_row_bytes(t->type, cols), v, cols);
    kn_mxfp4_from_float(v, out, cols);
    free(v);
}

/* gpt-oss's layout of expert tensors a (and b, interleaved row by row: gate_up) as `base`_blocks
 * U8 [E][R][cols / 32][16] (byte k of a block: element 2k in the low nibble, 2k + 1 in the high one)
 * and `base`_scales U8 [E][R][cols / 32] (the E8M0 exponents). */
static void oss_blocks(writer *w, const char *base, const kn_gguf_tensor *a, const kn_gguf_tensor *b) {
    const int64_t cols = a->ne[0], rows = a->ne[1], E = a->ne[2], nb = cols / 32, nout = b ? 2 : 1, R = rows * nout;
    uint8_t *bl = malloc((size_t)(E * R * nb * 16)), *sc = malloc((size_t)(E * R * nb));
    kn_block_mxfp4 *row = malloc((size_t)nb * sizeof *row);
    if (!bl || !sc || !row) exit(die("%s", "out of memory"));
    for (int64_t e = 0; e < E; e++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = 0; o < nout; o++) {
                mxfp4_row(o ? b : a, e, r, row);
                const int64_t dst = e * R + r * nout + o;
                for (int64_t k = 0; k < nb; k++) {
                    sc[dst * nb + k] = row[k].e;
                    uint8_t *out = bl + (size_t)((dst * nb + k) * 16);
                    for (int m = 0; m < 16; m++) {
                        int v[2];
                        for (int h = 0; h < 2; h++) {
                            const int j = 2 * m + h; /* element j of the block */
                            v[h] = j < 16 ? row[k].qs[j] & 15 : row[k].qs[j - 16] >> 4;
                        }
                        out[m] = (uint8_t)(v[0] | v[1] << 4);
                    }
                }
            }
    free(row);
    char nm[300];
    int64_t sh[4] = {E, R, nb, 16};
    snprintf(nm, sizeof nm, "%s_blocks", base);
    add(w, nm, "U8", 4, sh, bl, (size_t)(E * R * nb * 16));
    snprintf(nm, sizeof nm, "%s_scales", base);
    add(w, nm, "U8", 3, sh, sc, (size_t)(E * R * nb));
}

/* Expert biases a (and b, interleaved) {rows, E} as `base`_bias [E][R] in dtype. */
static void oss_bias(writer *w, const opts *o, const char *base, const kn_gguf_tensor *a, const kn_gguf_tensor *b) {
    const int64_t rows = a->ne[0], E = a->ne[1], nout = b ? 2 : 1;
    float *va = to_f32(a, rows * E), *vb = b ? to_f32(b, rows * E) : NULL;
    float *v = malloc((size_t)(rows * E * nout) * sizeof *v);
    if (!v) exit(die("%s", "out of memory"));
    for (int64_t e = 0; e < E; e++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t k = 0; k < nout; k++) v[(e * rows + r) * nout + k] = (k ? vb : va)[e * rows + r];
    size_t nbytes;
    const char *dt;
    uint8_t *p = encode(v, rows * E * nout, o->dtype, &nbytes, &dt);
    char nm[300];
    int64_t sh[2] = {E, rows * nout};
    snprintf(nm, sizeof nm, "%s_bias", base);
    add(w, nm, dt, 2, sh, p, nbytes);
    free(va);
    free(vb);
    free(v);
}

/* A gpt-oss expert tensor `name` of g: written with its partner (gate with up), skipped when it is the
 * partner. False when name is not one. */
static bool oss_expert(writer *w, const opts *o, const kn_gguf *g, const char *name) {
    int l, used = 0;
    char proj[16], suffix[16];
    if (sscanf(name, "blk.%d.ffn_%15[a-z]_exps.%15[a-z]%n", &l, proj, suffix, &used) != 3 || !used) return false;
    if (!strcmp(proj, "up")) return true; /* with the gate */
    const bool gate = !strcmp(proj, "gate");
    char other[96], base[160];
    snprintf(other, sizeof other, "blk.%d.ffn_up_exps.%s", l, suffix);
    const kn_gguf_tensor *t = kn_gguf_find_tensor(g, name), *u = gate ? kn_gguf_find_tensor(g, other) : NULL;
    if (gate && !u) exit(die("%s: no ffn_up_exps beside it", name));
    snprintf(base, sizeof base, "model.layers.%d.mlp.experts.%s_proj", l, gate ? "gate_up" : "down");
    if (!strcmp(suffix, "weight")) oss_blocks(w, base, t, u);
    else oss_bias(w, o, base, t, u);
    return true;
}

static int usage(void) {
    fprintf(stderr, "usage: kiln-hf IN.gguf|IN_DIR OUTDIR [--dtype f32|f16|bf16] [--mlx-bits B --mlx-group G]\n"
                    "                [--mlx-minmax] [--mlx-layer MODULE=B]...\n");
    return 2;
}

int main(int argc, char **argv) {
    opts o = {.group = 64};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--dtype") && i + 1 < argc) {
            const char *d = argv[++i];
            o.dtype = !strcmp(d, "f32") ? 0 : !strcmp(d, "f16") ? 1 : !strcmp(d, "bf16") ? 2 : -1;
            if (o.dtype < 0) return die("--dtype: '%s' is not f32, f16 or bf16", d);
        } else if (!strcmp(a, "--mlx-bits") && i + 1 < argc) {
            o.bits = atoi(argv[++i]);
            if (o.bits != 2 && o.bits != 3 && o.bits != 4 && o.bits != 6 && o.bits != 8)
                return die("--mlx-bits: '%s' is not 2, 3, 4, 6 or 8", argv[i]);
        } else if (!strcmp(a, "--mlx-group") && i + 1 < argc) {
            o.group = atoi(argv[++i]);
            if (o.group != 32 && o.group != 64 && o.group != 128)
                return die("--mlx-group: '%s' is not 32, 64 or 128", argv[i]);
        } else if (!strcmp(a, "--mlx-minmax")) {
            o.minmax = true;
        } else if (!strcmp(a, "--mlx-layer") && i + 1 < argc && o.n_layer < 64) {
            char *eq = strchr(argv[++i], '=');
            if (!eq) return die("--mlx-layer: '%s' is not MODULE=BITS", argv[i]);
            *eq = 0;
            o.layer_names[o.n_layer] = argv[i];
            o.layer_bits[o.n_layer++] = atoi(eq + 1);
        } else if (a[0] == '-') {
            return usage();
        } else if (!o.in) {
            o.in = a;
        } else if (!o.out) {
            o.out = a;
        } else {
            return usage();
        }
    }
    if (!o.in || !o.out) return usage();
    if (o.n_layer && !o.bits) return die("%s", "--mlx-layer needs --mlx-bits");
    kn_gguf g;
    kiln_status st = kn_hf_is_dir(o.in) ? kn_hf_open(o.in, &g) : kn_gguf_open(o.in, &g);
    if (st) return die("%s", kiln_last_error());
    kn_str archs;
    if (!kn_gguf_get_str(&g, "general.architecture", &archs)) return die("%s: no general.architecture", o.in);
    char arch[32];
    snprintf(arch, sizeof arch, "%.*s", (int)KN_MIN(archs.len, 31), archs.ptr);
    const char *model_type = NULL;
    for (size_t i = 0; i < KN_ARRAY_LEN(arch_map); i++)
        if (!strcmp(arch, arch_map[i].arch)) model_type = arch_map[i].model_type;
    const kn_arch_def *def = kn_arch_find(arch, strlen(arch));
    if (!model_type || !def) return die("architecture '%s' cannot be written as a Hugging Face directory", arch);
    if (mkdir(o.out, 0755) != 0 && errno != EEXIST) return die("cannot create %s", o.out);
    const int64_t n_embd = meta_int(&g, arch, "embedding_length", 0),
                  n_head = meta_int(&g, arch, "attention.head_count", 1),
                  n_kv = meta_int(&g, arch, "attention.head_count_kv", n_head),
                  head_dim = meta_int(&g, arch, "attention.key_length", n_embd / n_head);
    const bool gemma = !strncmp(arch, "gemma", 5), norm_rope = def->rope_style == KN_ROPE_NORM,
               oss = !strcmp(arch, "gpt-oss");
    writer w = {0};
    json_t *cfg = json_object(), *tcfg = json_object();
    int64_t n_vocab = 0;
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const kn_gguf_tensor *t = &g.tensors[i];
        char name[128], hf[300];
        snprintf(name, sizeof name, "%.*s", (int)KN_MIN(t->name.len, 127), t->name.ptr);
        if (!strcmp(name, "token_embd.weight")) n_vocab = t->ne[1];
        const int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        if (!strcmp(name, "rope_factors_long.weight") || !strcmp(name, "rope_factors_short.weight")) {
            float *v = to_f32(t, n);
            json_t *rs = json_object_get(cfg, "rope_scaling");
            if (!rs) json_object_set_new(cfg, "rope_scaling", rs = json_pack("{s:s}", "type", "longrope"));
            json_t *a = json_array();
            for (int64_t j = 0; j < n; j++) json_array_append_new(a, json_real(v[j]));
            json_object_set_new(rs, strstr(name, "long") ? "long_factor" : "short_factor", a);
            free(v);
            continue;
        }
        if (oss && oss_expert(&w, &o, &g, name)) continue;
        int l, used = 0;
        char proj[16];
        if (sscanf(name, "blk.%d.ffn_%15[a-z]_exps.weight%n", &l, proj, &used) == 2 && used) {
            float *v = to_f32(t, n);
            for (int64_t e = 0; e < t->ne[2]; e++) {
                snprintf(hf, sizeof hf, "model.layers.%d.mlp.experts.%lld.%s_proj.weight", l, (long long)e, proj);
                int64_t sh[2] = {t->ne[1], t->ne[0]};
                emit(&w, &o, hf, v + e * t->ne[0] * t->ne[1], 2, sh);
            }
            free(v);
            continue;
        }
        if (!hf_name(arch, &g, name, hf, sizeof hf)) {
            fprintf(stderr, "kiln-hf: skipping tensor %s\n", name);
            continue;
        }
        float *v = to_f32(t, n);
        if (norm_rope && (strstr(name, ".attn_q.weight") || strstr(name, ".attn_k.weight")))
            unpermute(v, t->ne[1], t->ne[0], strstr(name, ".attn_q.") ? n_head : n_kv);
        if (gemma && strstr(name, "norm.weight"))
            for (int64_t j = 0; j < n; j++) v[j] -= 1.0f;
        int64_t sh[2] = {t->ne[1], t->ne[0]};
        if (t->ne[1] == 1 && t->n_dims == 1) sh[0] = t->ne[0];
        emit(&w, &o, hf, v, t->n_dims == 1 ? 1 : 2, sh);
        free(v);
    }
    /* config.json */
    json_object_set_new(cfg, "architectures", json_pack("[s]", "KilnConverted"));
    json_object_set_new(cfg, "model_type", json_string(model_type));
    json_object_set_new(cfg, "hidden_size", json_integer(n_embd));
    json_object_set_new(cfg, "intermediate_size", json_integer(meta_int(&g, arch, "feed_forward_length", 0)));
    json_object_set_new(cfg, "num_hidden_layers", json_integer(meta_int(&g, arch, "block_count", 0)));
    json_object_set_new(cfg, "num_attention_heads", json_integer(n_head));
    json_object_set_new(cfg, "num_key_value_heads", json_integer(n_kv));
    json_object_set_new(cfg, "head_dim", json_integer(head_dim));
    json_object_set_new(cfg, "max_position_embeddings", json_integer(meta_int(&g, arch, "context_length", 2048)));
    json_object_set_new(cfg, "rms_norm_eps",
                        json_real(meta_f(&g, arch, "attention.layer_norm_rms_epsilon", def->norm_eps)));
    json_object_set_new(cfg, "rope_theta", json_real(meta_f(&g, arch, "rope.freq_base", def->rope_base)));
    json_object_set_new(cfg, "vocab_size", json_integer(n_vocab));
    json_object_set_new(cfg, "tie_word_embeddings", json_boolean(!kn_gguf_find_tensor(&g, "output.weight")));
    const int64_t n_rot = meta_int(&g, arch, "rope.dimension_count", head_dim);
    if (n_rot != head_dim)
        json_object_set_new(cfg, "partial_rotary_factor", json_real((double)n_rot / (double)head_dim));
    const int64_t swa = meta_int(&g, arch, "attention.sliding_window", 0);
    if (swa) json_object_set_new(cfg, "sliding_window", json_integer(swa));
    const int64_t ne = meta_int(&g, arch, "expert_count", 0);
    if (ne) {
        json_object_set_new(cfg, oss ? "num_local_experts" : "num_experts", json_integer(ne));
        json_object_set_new(cfg, "num_experts_per_tok", json_integer(meta_int(&g, arch, "expert_used_count", 1)));
        int64_t ffe = meta_int(&g, arch, "expert_feed_forward_length", 0);
        if (ffe) json_object_set_new(cfg, "moe_intermediate_size", json_integer(ffe));
    }
    kn_str rst;
    char k[128];
    snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
    if (kn_gguf_get_str(&g, k, &rst) && (kn_str_eq(rst, "linear") || kn_str_eq(rst, "yarn"))) {
        json_t *rs =
            json_pack("{s:o, s:f}", "rope_type", str_json(rst), "factor", meta_f(&g, arch, "rope.scaling.factor", 1));
        int64_t oc = meta_int(&g, arch, "rope.scaling.original_context_length", 0);
        if (oc) json_object_set_new(rs, "original_max_position_embeddings", json_integer(oc));
        json_object_set_new(cfg, "rope_scaling", rs);
    } else if (json_object_get(cfg, "rope_scaling")) {
        json_object_set_new(cfg, "original_max_position_embeddings",
                            json_integer(meta_int(&g, arch, "rope.scaling.original_context_length", 4096)));
    }
    if (oss) json_object_set_new(cfg, "quantization_config", json_pack("{s:s}", "quant_method", "mxfp4"));
    if (o.bits) {
        json_t *q = json_pack("{s:i, s:i}", "group_size", o.group, "bits", o.bits);
        for (int i = 0; i < o.n_layer; i++)
            json_object_set_new(q, o.layer_names[i],
                                json_pack("{s:i, s:i}", "group_size", o.group, "bits", o.layer_bits[i]));
        json_object_set_new(cfg, "quantization", q);
        json_object_set_new(cfg, "quantization_config", json_deep_copy(q));
    }
    json_object_set_new(cfg, "torch_dtype",
                        json_string(o.dtype == 0   ? "float32"
                                    : o.dtype == 1 ? "float16"
                                                   : "bfloat16"));
    char path[4096];
    int rc = write_tokenizer(&g, o.out, tcfg);
    kn_str tmpl;
    if (kn_gguf_get_str(&g, "tokenizer.chat_template", &tmpl))
        json_object_set_new(tcfg, "chat_template", str_json(tmpl));
    kn_str tc;
    if (kn_gguf_get_str(&g, "tokenizer.huggingface.config", &tc)) { /* a directory: its config, template back in */
        json_t *src = json_loadb(tc.ptr, tc.len, 0, NULL);
        if (src) {
            json_t *t = json_object_get(tcfg, "chat_template");
            if (t) json_object_set(src, "chat_template", t);
            json_decref(tcfg);
            tcfg = src;
        }
    }
    snprintf(path, sizeof path, "%s/config.json", o.out);
    if (!rc && json_dump_file(cfg, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) rc = die("cannot write %s", path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", o.out);
    if (!rc && json_dump_file(tcfg, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) rc = die("cannot write %s", path);
    snprintf(path, sizeof path, "%s/model.safetensors", o.out);
    if (!rc) rc = write_safetensors(&w, path);
    for (size_t i = 0; i < w.n; i++) free(w.t[i].data);
    free(w.t);
    json_decref(cfg);
    json_decref(tcfg);
    kn_gguf_close(&g);
    return rc;
}
