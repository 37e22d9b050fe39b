/*
 * hf.c - a Hugging Face / MLX model directory as the GGUF metadata and tensor table of the same model
 * (see hf.h). config.json keys become `{arch}.*` keys, safetensors tensors become kiln's tensor names,
 * and what a GGUF converter would change in the weights (Q/K row order of the interleaved RoPE layout,
 * Gemma's +1 on norms, per-expert tensors stacked, MLX groups) is changed here, once, at open.
 */
#include "model/hf.h"
#include "base/json.h"

#include "model/arch.h"
#include "tensor/quant.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Caps on the side files (bytes). */
#define MAX_JSON_FILE     ((size_t)64 << 20)
#define MAX_CONFIG_FILE   ((size_t)4 << 20)
#define MAX_CHAT_TEMPLATE ((size_t)4 << 20)
#define MAX_EXPERTS_STACK 4096
#define GEN_EOS_MAX       64 /* ids in generation_config.json's eos_token_id */

typedef struct kn_hf {
    char dir[2048];
    kn_safetensors st;
    json_t *config;      /* the text model's config (text_config when nested) */
    json_t *config_root; /* config.json as read */
    void **allocs;       /* everything the views in the gguf point into */
    size_t n_allocs, cap_allocs;
    char *tok_json, *tok_cfg; /* tokenizer.json, tokenizer_config.json (NUL-terminated; tok_cfg may be NULL) */
    size_t tok_len, tok_cfg_len;
    int q_bits, q_group; /* config.json quantization (0: none) */
    bool headers_only;   /* kn_hf_open_headers: types and shapes only, no tensor converted */
    json_t *q;           /* the quantization object, or NULL */
} kn_hf;

typedef struct builder {
    kn_hf *h;
    kn_gguf *g;
    size_t cap_kv, cap_t;
    const kn_arch_def *def;
    const char *arch;
    int64_t n_head, n_head_kv;
} builder;

/* ---- ownership ---------------------------------------------------------------------------------- */

static void hf_free(void *p) {
    kn_hf *h = p;
    if (!h) return;
    for (size_t i = 0; i < h->n_allocs; i++) free(h->allocs[i]);
    free(h->allocs);
    kn_st_close(&h->st);
    json_decref(h->config_root);
    free(h);
}

/* Records p as owned by h (freed with it); returns p, or NULL (p freed) when out of memory. */
static void *keep(kn_hf *h, void *p) {
    if (!p) return NULL;
    if (h->n_allocs == h->cap_allocs) {
        size_t cap = h->cap_allocs ? 2 * h->cap_allocs : 64;
        void **a = realloc(h->allocs, cap * sizeof *a);
        if (!a) {
            free(p);
            return NULL;
        }
        h->allocs = a;
        h->cap_allocs = cap;
    }
    h->allocs[h->n_allocs++] = p;
    return p;
}

static void *owned(kn_hf *h, size_t n) { return keep(h, malloc(n ? n : 1)); }

static kn_str owned_str(kn_hf *h, const char *s, size_t n) {
    char *p = owned(h, n + 1);
    if (!p) return (kn_str){NULL, 0};
    memcpy(p, s, n);
    p[n] = 0;
    return (kn_str){p, n};
}

/* ---- key/values ----------------------------------------------------------------------------------- */

static kn_gguf_kv *kv_new(builder *b, const char *key) {
    kn_gguf *g = b->g;
    if (g->n_kv == b->cap_kv) {
        size_t cap = b->cap_kv ? 2 * b->cap_kv : 64;
        kn_gguf_kv *kv = realloc(g->kv, cap * sizeof *kv);
        if (!kv) return NULL;
        g->kv = kv;
        b->cap_kv = cap;
    }
    kn_gguf_kv *kv = &g->kv[g->n_kv];
    memset(kv, 0, sizeof *kv);
    kv->key = owned_str(b->h, key, strlen(key));
    if (!kv->key.ptr) return NULL;
    g->n_kv++;
    return kv;
}

/* `{arch}.suffix` in buf. */
static const char *akey(const builder *b, char buf[128], const char *suffix) {
    snprintf(buf, 128, "%s.%s", b->arch, suffix);
    return buf;
}

static kiln_status set_u32(builder *b, const char *key, uint64_t v) {
    kn_gguf_kv *kv = kv_new(b, key);
    if (!kv) return kn_error(KILN_ERR_NOMEM, "out of memory");
    kv->type = KN_GGUF_UINT32;
    kv->v.u = v;
    return KILN_OK;
}

static kiln_status set_f32(builder *b, const char *key, double v) {
    kn_gguf_kv *kv = kv_new(b, key);
    if (!kv) return kn_error(KILN_ERR_NOMEM, "out of memory");
    kv->type = KN_GGUF_FLOAT32;
    kv->v.f = (float)v;
    return KILN_OK;
}

static kiln_status set_str(builder *b, const char *key, const char *s, size_t n) {
    kn_gguf_kv *kv = kv_new(b, key);
    if (!kv) return kn_error(KILN_ERR_NOMEM, "out of memory");
    kv->type = KN_GGUF_STRING;
    kv->str = owned_str(b->h, s, n);
    return kv->str.ptr ? KILN_OK : kn_error(KILN_ERR_NOMEM, "out of memory");
}

/* ---- config.json ---------------------------------------------------------------------------------- */

/* An integer member of the config: required and absent (or not an integer) is an error naming it. */
static kiln_status cfg_int(const kn_hf *h, const char *key, bool required, int64_t lo, int64_t hi, int64_t *out) {
    json_t *v = json_object_get(h->config, key);
    if (!v || json_is_null(v)) {
        if (required) return kn_error(KILN_ERR_FORMAT, "%s/config.json: missing '%s'", h->dir, key);
        return KILN_OK;
    }
    if (!json_is_integer(v)) return kn_error(KILN_ERR_FORMAT, "%s/config.json: '%s' is not an integer", h->dir, key);
    int64_t x = (int64_t)json_integer_value(v);
    if (x < lo || x > hi)
        return kn_error(KILN_ERR_FORMAT, "%s/config.json: '%s' = %lld is out of range [%lld, %lld]", h->dir, key,
                        (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return KILN_OK;
}

static kiln_status obj_num(const kn_hf *h, json_t *o, const char *where, const char *key, double *out, bool *have) {
    json_t *v = json_object_get(o, key);
    *have = false;
    if (!v || json_is_null(v)) return KILN_OK;
    if (!json_is_number(v)) return kn_error(KILN_ERR_FORMAT, "%s/%s: '%s' is not a number", h->dir, where, key);
    *out = json_number_value(v);
    *have = true;
    return KILN_OK;
}

static const struct {
    const char *model_type, *arch;
} arch_map[] = {
    {"llama", "llama"},   {"mistral", "llama"},   {"mixtral", "llama"},      {"qwen2", "qwen2"},
    {"qwen3", "qwen3"},   {"smollm3", "smollm3"}, {"gemma3", "gemma3"},      {"gemma3_text", "gemma3"},
    {"gemma2", "gemma2"}, {"phi3", "phi3"},       {"qwen3_moe", "qwen3moe"}, {"gpt_oss", "gpt-oss"},
};

static bool is_gemma(const builder *b);

/* The llama3 RoPE frequency factors (written as rope_freqs.weight, as GGUF converters do). */
static kiln_status llama3_freqs(builder *b, json_t *rs, double base, int64_t n_rot);
static kiln_status add_f32_tensor(builder *b, const char *name, const float *v, int64_t n);

static kiln_status read_rope_scaling(builder *b, double base, int64_t n_rot) {
    kn_hf *h = b->h;
    json_t *rs = json_object_get(h->config, "rope_scaling");
    if (!rs || json_is_null(rs)) return KILN_OK;
    if (!json_is_object(rs))
        return kn_error(KILN_ERR_FORMAT, "%s/config.json: 'rope_scaling' is not an object", h->dir);
    const char *type = json_string_value(json_object_get(rs, "rope_type"));
    if (!type) type = json_string_value(json_object_get(rs, "type"));
    if (!type) return kn_error(KILN_ERR_FORMAT, "%s/config.json: rope_scaling has no 'rope_type'", h->dir);
    char k[128];
    kiln_status st;
    double factor = 1, v;
    bool have;
    if ((st = obj_num(h, rs, "config.json rope_scaling", "factor", &factor, &have))) return st;
    if (!strcmp(type, "default")) return KILN_OK;
    if (!strcmp(type, "llama3")) return llama3_freqs(b, rs, base, n_rot);
    if (!strcmp(type, "longrope") || !strcmp(type, "su")) {
        static const char *const names[2] = {"short_factor", "long_factor"};
        static const char *const tnames[2] = {"rope_factors_short.weight", "rope_factors_long.weight"};
        for (int i = 0; i < 2; i++) {
            json_t *a = json_object_get(rs, names[i]);
            if (!json_is_array(a) || (int64_t)json_array_size(a) != n_rot / 2)
                return kn_error(KILN_ERR_FORMAT, "%s/config.json: rope_scaling.%s must be an array of %lld numbers",
                                h->dir, names[i], (long long)(n_rot / 2));
            float f[4096];
            for (size_t j = 0; j < json_array_size(a); j++) {
                f[j] = (float)json_number_value(json_array_get(a, j));
                if (!(f[j] > 0 && f[j] < 1e30f))
                    return kn_error(KILN_ERR_FORMAT, "%s/config.json: rope_scaling.%s[%zu] is not a positive number",
                                    h->dir, names[i], j);
            }
            if ((st = add_f32_tensor(b, tnames[i], f, n_rot / 2))) return st;
        }
        int64_t orig = 0, maxpos = 0;
        if ((st = cfg_int(h, "original_max_position_embeddings", true, 1, 1 << 24, &orig))) return st;
        if ((st = cfg_int(h, "max_position_embeddings", true, 1, 1 << 24, &maxpos))) return st;
        double scale = (double)maxpos / (double)orig;
        double attn = scale <= 1 ? 1 : sqrt(1 + log(scale) / log((double)orig));
        if ((st = set_u32(b, akey(b, k, "rope.scaling.original_context_length"), (uint64_t)orig))) return st;
        return set_f32(b, akey(b, k, "rope.scaling.attn_factor"), attn);
    }
    if ((st = set_str(b, akey(b, k, "rope.scaling.type"), type, strlen(type)))) return st;
    if ((st = set_f32(b, akey(b, k, "rope.scaling.factor"), factor))) return st;
    if ((st = obj_num(h, rs, "config.json rope_scaling", "original_max_position_embeddings", &v, &have))) return st;
    if (have && (st = set_u32(b, akey(b, k, "rope.scaling.original_context_length"), (uint64_t)v))) return st;
    if ((st = obj_num(h, rs, "config.json rope_scaling", "beta_fast", &v, &have))) return st;
    if (have && (st = set_f32(b, akey(b, k, "rope.scaling.yarn_beta_fast"), v))) return st;
    if ((st = obj_num(h, rs, "config.json rope_scaling", "beta_slow", &v, &have))) return st;
    if (have && (st = set_f32(b, akey(b, k, "rope.scaling.yarn_beta_slow"), v))) return st;
    return KILN_OK;
}

static kiln_status llama3_freqs(builder *b, json_t *rs, double base, int64_t n_rot) {
    double factor = 8, lo = 1, hi = 4, orig = 8192;
    bool have;
    kiln_status st;
    const char *w = "config.json rope_scaling";
    if ((st = obj_num(b->h, rs, w, "factor", &factor, &have))) return st;
    if ((st = obj_num(b->h, rs, w, "low_freq_factor", &lo, &have))) return st;
    if ((st = obj_num(b->h, rs, w, "high_freq_factor", &hi, &have))) return st;
    if ((st = obj_num(b->h, rs, w, "original_max_position_embeddings", &orig, &have))) return st;
    if (!(factor > 0) || !(lo > 0) || !(hi > lo) || !(orig > 0))
        return kn_error(KILN_ERR_FORMAT, "%s/config.json: rope_scaling (llama3) has bad factors", b->h->dir);
    float f[4096];
    const double lo_wl = orig / lo, hi_wl = orig / hi;
    for (int64_t i = 0; i < n_rot / 2; i++) {
        const double freq = 1.0 / pow(base, (double)(2 * i) / (double)n_rot), wl = 2 * M_PI / freq;
        if (wl < hi_wl) f[i] = 1.0f;
        else if (wl > lo_wl) f[i] = (float)factor;
        else {
            const double s = (orig / wl - lo) / (hi - lo);
            f[i] = (float)(1.0 / ((1 - s) / factor + s));
        }
    }
    char k[128];
    if ((st = set_str(b, akey(b, k, "rope.scaling.type"), "llama3", 6))) return st;
    return add_f32_tensor(b, "rope_freqs.weight", f, n_rot / 2);
}

/* The `{arch}.*` hyperparameters. */
static kiln_status read_config(builder *b) {
    kn_hf *h = b->h;
    kiln_status st;
    char k[128];
    int64_t d = 0, nl = 0, ff = 0, nh = 0, nkv = 0, ctx = 0, hd = 0, sw = 0, ne = 0, nu = 0, ffe = 0;
    if ((st = cfg_int(h, "hidden_size", true, 1, 1 << 16, &d))) return st;
    if ((st = cfg_int(h, "num_hidden_layers", true, 1, 4096, &nl))) return st;
    if ((st = cfg_int(h, "num_attention_heads", true, 1, 4096, &nh))) return st;
    nkv = nh;
    if ((st = cfg_int(h, "num_key_value_heads", false, 1, 4096, &nkv))) return st;
    if ((st = cfg_int(h, "max_position_embeddings", false, 1, 1 << 24, &ctx))) return st;
    if ((st = cfg_int(h, "head_dim", false, 2, 4096, &hd))) return st;
    if ((st = cfg_int(h, "num_experts", false, 0, MAX_EXPERTS_STACK, &ne))) return st;
    if ((st = cfg_int(h, "num_local_experts", false, 0, MAX_EXPERTS_STACK, &ne))) return st;
    if ((st = cfg_int(h, "num_experts_per_tok", ne > 0, 1, KN_MAX(ne, 1), &nu))) return st;
    if ((st = cfg_int(h, "moe_intermediate_size", false, 1, 1 << 20, &ffe))) return st;
    if ((st = cfg_int(h, "intermediate_size", !ffe, 1, 1 << 20, &ff))) return st;
    if (!ff) ff = ffe;
    json_t *usw = json_object_get(h->config, "use_sliding_window");
    if (!json_is_false(usw) && (st = cfg_int(h, "sliding_window", false, 0, 1 << 24, &sw))) return st;
    b->n_head = nh;
    b->n_head_kv = nkv;
    if (!hd) hd = d / nh;
    if ((st = set_str(b, "general.architecture", b->arch, strlen(b->arch)))) return st;
    if (ctx && (st = set_u32(b, akey(b, k, "context_length"), (uint64_t)ctx))) return st;
    if ((st = set_u32(b, akey(b, k, "embedding_length"), (uint64_t)d))) return st;
    if ((st = set_u32(b, akey(b, k, "block_count"), (uint64_t)nl))) return st;
    if ((st = set_u32(b, akey(b, k, "feed_forward_length"), (uint64_t)ff))) return st;
    if ((st = set_u32(b, akey(b, k, "attention.head_count"), (uint64_t)nh))) return st;
    if ((st = set_u32(b, akey(b, k, "attention.head_count_kv"), (uint64_t)nkv))) return st;
    if ((st = set_u32(b, akey(b, k, "attention.key_length"), (uint64_t)hd))) return st;
    if ((st = set_u32(b, akey(b, k, "attention.value_length"), (uint64_t)hd))) return st;
    if (sw > 0 && (st = set_u32(b, akey(b, k, "attention.sliding_window"), (uint64_t)sw))) return st;
    if (ne > 0) {
        if ((st = set_u32(b, akey(b, k, "expert_count"), (uint64_t)ne))) return st;
        if ((st = set_u32(b, akey(b, k, "expert_used_count"), (uint64_t)nu))) return st;
        if (ffe && (st = set_u32(b, akey(b, k, "expert_feed_forward_length"), (uint64_t)ffe))) return st;
    }
    double v;
    bool have;
    if ((st = obj_num(h, h->config, "config.json", "rms_norm_eps", &v, &have))) return st;
    if (have && (st = set_f32(b, akey(b, k, "attention.layer_norm_rms_epsilon"), v))) return st;
    double base = b->def->rope_base;
    if ((st = obj_num(h, h->config, "config.json", "rope_theta", &base, &have))) return st;
    if (have && (st = set_f32(b, akey(b, k, "rope.freq_base"), base))) return st;
    int64_t n_rot = hd;
    if ((st = obj_num(h, h->config, "config.json", "partial_rotary_factor", &v, &have))) return st;
    if (have && !(v > 0 && v <= 1))
        return kn_error(KILN_ERR_FORMAT, "%s/config.json: 'partial_rotary_factor' = %g is not in (0, 1]", h->dir, v);
    if (have) n_rot = (int64_t)(v * (double)hd) & ~(int64_t)1;
    if (n_rot != hd && (st = set_u32(b, akey(b, k, "rope.dimension_count"), (uint64_t)n_rot))) return st;
    if (n_rot > 8192)
        return kn_error(KILN_ERR_FORMAT, "%s/config.json: head_dim %lld is too large", h->dir, (long long)hd);
    if ((st = obj_num(h, h->config, "config.json", "attn_logit_softcapping", &v, &have))) return st;
    if (have && (st = set_f32(b, akey(b, k, "attn_logit_softcapping"), v))) return st;
    if ((st = obj_num(h, h->config, "config.json", "final_logit_softcapping", &v, &have))) return st;
    if (have && (st = set_f32(b, akey(b, k, "final_logit_softcapping"), v))) return st;
    /* Gemma scales queries by 1/sqrt(query_pre_attn_scalar) (head_dim in most models, not all) */
    if ((st = obj_num(h, h->config, "config.json", "query_pre_attn_scalar", &v, &have))) return st;
    if (have && !(v > 0 && v < 1e30))
        return kn_error(KILN_ERR_FORMAT, "%s/config.json: 'query_pre_attn_scalar' = %g is not positive", h->dir, v);
    if (have && is_gemma(b) && (st = set_f32(b, akey(b, k, "attention.scale"), 1.0 / sqrt(v)))) return st;
    return read_rope_scaling(b, base, n_rot);
}

/* generation_config.json: the author's sampling settings as general.sampling.* (when it samples). */
static kiln_status read_generation(builder *b) {
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", b->h->dir);
    struct stat sb;
    if (stat(path, &sb) != 0) return KILN_OK;
    if ((size_t)sb.st_size > MAX_CONFIG_FILE) return kn_error(KILN_ERR_FORMAT, "%s is over the size limit", path);
    json_error_t jerr;
    json_t *g = kn_json_load_file(path, 0, &jerr);
    if (!g || !json_is_object(g)) {
        json_decref(g);
        return kn_error(g ? KILN_ERR_FORMAT : kn_json_status(&jerr, KILN_ERR_FORMAT), "%s: line %d: %s", path,
                        jerr.line, g ? "not an object" : jerr.text);
    }
    static const struct {
        const char *hf, *kiln;
    } keys[] = {{"temperature", "general.sampling.temp"},
                {"top_k", "general.sampling.top_k"},
                {"top_p", "general.sampling.top_p"},
                {"min_p", "general.sampling.min_p"},
                {"repetition_penalty", "general.sampling.penalty_repeat"}};
    kiln_status st = KILN_OK;
    /* eos_token_id (an id or a list): end-of-generation ids besides the tokenizer's, as a tokenizer.* key
     * (so the tokenizer hash covers them) that kn_hf_tokenizer applies */
    json_t *eos = json_object_get(g, "eos_token_id");
    char ids[GEN_EOS_MAX * 12 + 1] = "";
    size_t n_ids = 0;
    for (size_t i = 0; i < (json_is_array(eos) ? json_array_size(eos) : 1) && !st; i++) {
        json_t *e = json_is_array(eos) ? json_array_get(eos, i) : eos;
        if (!e || json_is_null(e)) continue;
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX ||
            n_ids == GEN_EOS_MAX)
            st = kn_error(KILN_ERR_FORMAT, "%s: 'eos_token_id' must be a token id or a list of at most %d", path,
                          GEN_EOS_MAX);
        else
            snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%lld", n_ids++ ? "," : "",
                     (long long)json_integer_value(e));
    }
    if (!st && n_ids) st = set_str(b, "tokenizer.huggingface.generation_eos", ids, strlen(ids));
    if (!st && !json_is_false(json_object_get(g, "do_sample"))) {
        for (size_t i = 0; i < KN_ARRAY_LEN(keys) && !st; i++) {
            json_t *v = json_object_get(g, keys[i].hf);
            if (json_is_number(v)) st = set_f32(b, keys[i].kiln, json_number_value(v));
        }
    }
    json_decref(g);
    return st;
}

/* Reads a side file into an owned NUL-terminated buffer (*out NULL when absent and optional). */
static kiln_status read_file(kn_hf *h, const char *name, size_t cap, bool required, char **out, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", h->dir, name);
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return required ? kn_error(KILN_ERR_IO, "%s: missing (a model directory needs it)", path) : KILN_OK;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || (size_t)n > cap) {
        fclose(f);
        return kn_error(KILN_ERR_FORMAT, "%s: %ld bytes is over the %zu-byte limit", path, n, cap);
    }
    char *buf = owned(h, (size_t)n + 1);
    if (!buf) {
        fclose(f);
        return kn_error(KILN_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) return kn_error(KILN_ERR_IO, "%s: short read", path);
    buf[n] = 0;
    *out = buf;
    *len = (size_t)n;
    return KILN_OK;
}

/* tokenizer.json and tokenizer_config.json as tokenizer.huggingface.* strings (hashed with the tokenizer),
 * the chat template (tokenizer_config.json's, or chat_template.jinja) as tokenizer.chat_template. */
static kiln_status read_tokenizer_files(builder *b) {
    kn_hf *h = b->h;
    kiln_status st;
    if ((st = read_file(h, "tokenizer.json", MAX_JSON_FILE, true, &h->tok_json, &h->tok_len))) return st;
    if ((st = read_file(h, "tokenizer_config.json", MAX_CONFIG_FILE * 4, false, &h->tok_cfg, &h->tok_cfg_len)))
        return st;
    if ((st = set_str(b, "tokenizer.huggingface.json", h->tok_json, h->tok_len))) return st;
    const char *tmpl = NULL;
    size_t tlen = 0;
    json_t *cfg = NULL;
    if (h->tok_cfg) {
        json_error_t jerr;
        cfg = kn_json_loadb(h->tok_cfg, h->tok_cfg_len, 0, &jerr);
        if (!json_is_object(cfg)) {
            const kiln_status bad = cfg ? KILN_ERR_FORMAT : kn_json_status(&jerr, KILN_ERR_FORMAT);
            json_decref(cfg);
            return kn_error(bad, "%s/tokenizer_config.json: line %d: %s", h->dir, jerr.line,
                            cfg ? "not an object" : jerr.text);
        }
        json_t *t = json_object_get(cfg, "chat_template");
        if (json_is_string(t)) {
            tmpl = json_string_value(t);
            tlen = json_string_length(t);
        } else if (json_is_array(t)) { /* [{"name": "default", "template": ...}, ...] */
            for (size_t i = 0; i < json_array_size(t) && !tmpl; i++) {
                json_t *e = json_array_get(t, i);
                const char *nm = json_string_value(json_object_get(e, "name"));
                json_t *tt = json_object_get(e, "template");
                if (nm && !strcmp(nm, "default") && json_is_string(tt)) {
                    tmpl = json_string_value(tt);
                    tlen = json_string_length(tt);
                }
            }
        }
        /* the rest of the config, canonical, for the tokenizer hash (a template edit must not change it) */
        const unsigned mark = kn_json_mark(); /* a copy without a part would hash as another config */
        json_t *rest = json_deep_copy(cfg);
        json_object_del(rest, "chat_template");
        char *dump = json_dumps(rest, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(rest);
        st = dump && !kn_json_failed_since(mark) ? set_str(b, "tokenizer.huggingface.config", dump, strlen(dump))
                                                 : KILN_ERR_NOMEM;
        free(dump);
        if (st) {
            json_decref(cfg);
            return st;
        }
    }
    char *jinja = NULL;
    size_t jlen = 0;
    if (!tmpl && (st = read_file(h, "chat_template.jinja", MAX_CHAT_TEMPLATE, false, &jinja, &jlen))) {
        json_decref(cfg);
        return st;
    }
    if (jinja) {
        tmpl = jinja;
        tlen = jlen;
    }
    if (tmpl) st = set_str(b, "tokenizer.chat_template", tmpl, tlen);
    json_decref(cfg);
    return st;
}

/* ---- tensors -------------------------------------------------------------------------------------- */

static kn_gguf_tensor *tensor_new(builder *b, const char *name) {
    kn_gguf *g = b->g;
    if (g->n_tensors == b->cap_t) {
        size_t cap = b->cap_t ? 2 * b->cap_t : 256;
        kn_gguf_tensor *t = realloc(g->tensors, cap * sizeof *t);
        if (!t) return NULL;
        g->tensors = t;
        b->cap_t = cap;
    }
    kn_gguf_tensor *t = &g->tensors[g->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = owned_str(b->h, name, strlen(name));
    if (!t->name.ptr) return NULL;
    for (int i = 0; i < KN_MAX_DIMS; i++) t->ne[i] = 1;
    g->n_tensors++;
    return t;
}

static kiln_status add_f32_tensor(builder *b, const char *name, const float *v, int64_t n) {
    float *p = owned(b->h, (size_t)n * sizeof *p);
    kn_gguf_tensor *t = p ? tensor_new(b, name) : NULL;
    if (!t) return kn_error(KILN_ERR_NOMEM, "out of memory");
    memcpy(p, v, (size_t)n * sizeof *p);
    t->n_dims = 1;
    t->ne[0] = n;
    t->type = KN_F32;
    t->nbytes = (uint64_t)n * sizeof *p;
    t->data = (const uint8_t *)p;
    return KILN_OK;
}

static float scalar_f32(const uint8_t *p, kn_st_dtype t) {
    uint16_t u;
    float f;
    switch (t) {
        case KN_ST_F16: memcpy(&u, p, 2); return kn_fp16_to_fp32(u);
        case KN_ST_BF16: memcpy(&u, p, 2); return kn_bf16_to_fp32(u);
        default: memcpy(&f, p, 4); return f;
    }
}

bool kn_st_to_f32(const kn_st_tensor *t, float *out) {
    if (t->dtype != KN_ST_F32 && t->dtype != KN_ST_F16 && t->dtype != KN_ST_BF16) return false;
    const size_t es = kn_st_dtype_size(t->dtype);
    for (uint64_t i = 0; i < t->n_elem; i++) out[i] = scalar_f32(t->data + i * es, t->dtype);
    return true;
}

/* The k-th bits-wide value of a little-endian bit stream (bits <= 8). */
static inline uint32_t mlx_q(const uint8_t *row, int64_t k, int bits) {
    const uint64_t bit = (uint64_t)k * (uint64_t)bits;
    const size_t byte = (size_t)(bit >> 3);
    const unsigned sh = (unsigned)(bit & 7);
    uint32_t v = row[byte];
    if (sh + (unsigned)bits > 8) v |= (uint32_t)row[byte + 1] << 8;
    return (v >> sh) & ((1u << bits) - 1);
}

void kn_mlx_dequant(const uint8_t *packed, size_t row_bytes, const uint8_t *scales, const uint8_t *biases,
                    kn_st_dtype sdt, int bits, int group, int64_t rows, int64_t cols, float *out) {
    const size_t es = kn_st_dtype_size(sdt);
    const int64_t ng = cols / group;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *row = packed + (size_t)r * row_bytes;
        for (int64_t gi = 0; gi < ng; gi++) {
            const float s = scalar_f32(scales + (size_t)(r * ng + gi) * es, sdt);
            const float bias = scalar_f32(biases + (size_t)(r * ng + gi) * es, sdt);
            for (int64_t j = gi * group; j < (gi + 1) * group; j++)
                out[r * cols + j] = s * (float)mlx_q(row, j, bits) + bias;
        }
    }
}

bool kn_hf_mlx_params(const kn_gguf *g, const char *base, int *bits, int *group) {
    const kn_hf *h = g->owner_free == hf_free ? g->owner : NULL;
    if (!h || !h->q) return false;
    *bits = h->q_bits;
    *group = h->q_group;
    json_t *o = json_object_get(h->q, base);
    if (json_is_false(o)) return false;
    if (json_is_object(o)) {
        json_t *bb = json_object_get(o, "bits"), *gg = json_object_get(o, "group_size");
        if (json_is_integer(bb)) *bits = (int)json_integer_value(bb);
        if (json_is_integer(gg)) *group = (int)json_integer_value(gg);
    }
    return true;
}

static bool valid_bits(int bits) { return bits == 2 || bits == 3 || bits == 4 || bits == 6 || bits == 8; }

/* What one Hugging Face tensor becomes: a type, ne (innermost first) and bytes. */
typedef struct conv {
    kn_dtype type;
    uint32_t n_dims;
    int64_t ne[KN_MAX_DIMS];
    const uint8_t *data;
    uint64_t nbytes;
    bool copied; /* data is an owned buffer that may be changed in place */
} conv;

/* An MLX-quantized weight `base`.weight with its scales and biases, exactly: 4-bit as Q4_1 when its scales
 * and biases are fp16 values; every other width (2, 3, 6, 8 bits), and 4-bit with other scales, as MLX8
 * (MLX8_F32 when a scale or bias is not an fp16 value), one byte per value: MLX8 runs at Q8_0's speed
 * (docs/benchmarks.md), where a dequantized copy would take 2 bytes per value and round them. */
static kiln_status convert_mlx(builder *b, const char *base, const kn_st_tensor *w, conv *c) {
    kn_hf *h = b->h;
    const char *file = h->st.paths[w->file];
    char nm[1200];
    int bits = 0, group = 0;
    if (!kn_hf_mlx_params(b->g, base, &bits, &group))
        return kn_error(KILN_ERR_FORMAT, "%s: '%s.scales' exists but config.json has no quantization for it", file,
                        base);
    if (!valid_bits(bits) || (group != 32 && group != 64 && group != 128))
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "%s/config.json: quantization of '%s' is %d bits, group %d (kiln reads 2, 3, 4, 6 or 8 bits in "
                        "groups of 32, 64 or 128)",
                        h->dir, base, bits, group);
    snprintf(nm, sizeof nm, "%s.scales", base);
    const kn_st_tensor *s = kn_st_find(&h->st, nm);
    snprintf(nm, sizeof nm, "%s.biases", base);
    const kn_st_tensor *bi = kn_st_find(&h->st, nm);
    if (!bi) return kn_error(KILN_ERR_FORMAT, "%s: '%s.weight' is quantized but '%s' is missing", file, base, nm);
    if (w->dtype != KN_ST_U32 || w->n_dims < 2 || w->n_dims > 3)
        return kn_error(KILN_ERR_FORMAT, "%s: quantized tensor '%s.weight' must be U32 of 2 or 3 dims (is %s, %d dims)",
                        file, base, kn_st_dtype_name(w->dtype), w->n_dims);
    const int nd = w->n_dims;
    const int64_t packed = w->shape[nd - 1], cols = packed * 32 / bits;
    int64_t rows = 1;
    for (int i = 0; i < nd - 1; i++) rows *= w->shape[i];
    if ((packed * 32) % bits || cols % group)
        return kn_error(KILN_ERR_FORMAT, "%s: '%s.weight' row of %lld words is not whole groups of %d %d-bit values",
                        file, base, (long long)packed, group, bits);
    const kn_st_tensor *sb[2] = {s, bi};
    for (int i = 0; i < 2; i++) {
        const kn_st_tensor *t = sb[i];
        bool ok = (t->dtype == KN_ST_F16 || t->dtype == KN_ST_BF16 || t->dtype == KN_ST_F32) && t->n_dims == nd &&
                  t->shape[nd - 1] == cols / group && t->dtype == s->dtype;
        for (int j = 0; j < nd - 1 && ok; j++) ok = t->shape[j] == w->shape[j];
        if (!ok)
            return kn_error(KILN_ERR_FORMAT, "%s: '%s.%s' must be %s [%lld rows][%lld groups] like its scales", file,
                            base, i ? "biases" : "scales", kn_st_dtype_name(s->dtype), (long long)rows,
                            (long long)(cols / group));
    }
    c->n_dims = (uint32_t)nd;
    c->ne[0] = cols;
    for (int i = 1; i < nd; i++) c->ne[i] = w->shape[nd - 1 - i];
    const int64_t ng = cols / group;
    const size_t es = kn_st_dtype_size(s->dtype);
    if (h->headers_only) { /* what a load would most likely make of it, unconverted */
        c->type = bits == 4 ? KN_Q4_1 : KN_MLX8;
        c->data = w->data;
        c->nbytes = kn_row_bytes(c->type, cols) * (uint64_t)rows;
        return KILN_OK;
    }
    bool f16 = true; /* scales and biases exact in fp16 (and finite) */
    for (int64_t i = 0; i < rows * ng && f16; i++) {
        const float sv = scalar_f32(s->data + (size_t)i * es, s->dtype),
                    bv = scalar_f32(bi->data + (size_t)i * es, s->dtype);
        f16 = isfinite(sv) && isfinite(bv) && kn_fp16_to_fp32(kn_fp32_to_fp16(sv)) == sv &&
              kn_fp16_to_fp32(kn_fp32_to_fp16(bv)) == bv;
    }
    const size_t row_bytes = (size_t)packed * 4;
    if (bits != 4 || !f16) { /* MLX8 (fp16 scale and bias) or MLX8_F32: one block per 32 of the group */
        const bool f32 = !f16;
        const size_t bs = f32 ? sizeof(kn_block_mlx8_f32) : sizeof(kn_block_mlx8);
        uint8_t *out = owned(h, (size_t)(rows * cols / 32) * bs);
        if (!out) return kn_error(KILN_ERR_NOMEM, "out of memory converting '%s'", base);
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *row = w->data + (size_t)r * row_bytes;
            for (int64_t blk = 0; blk < cols / 32; blk++) {
                uint8_t *o = out + (size_t)(r * (cols / 32) + blk) * bs;
                const int64_t gi = r * ng + blk * 32 / group;
                const float sv = scalar_f32(s->data + (size_t)gi * es, s->dtype),
                            bv = scalar_f32(bi->data + (size_t)gi * es, s->dtype);
                if (f32) {
                    kn_block_mlx8_f32 *b8 = (kn_block_mlx8_f32 *)o;
                    b8->d = sv;
                    b8->m = bv;
                } else {
                    kn_block_mlx8 *b8 = (kn_block_mlx8 *)o;
                    b8->d = kn_fp32_to_fp16(sv);
                    b8->m = kn_fp32_to_fp16(bv);
                }
                uint8_t *q = o + bs - 32;
                if (bits == 8) memcpy(q, row + blk * 32, 32); /* byte k of the little-endian words is value k */
                else
                    for (int j = 0; j < 32; j++) q[j] = (uint8_t)mlx_q(row, blk * 32 + j, bits);
            }
        }
        c->type = f32 ? KN_MLX8_F32 : KN_MLX8;
        c->data = out;
        c->nbytes = (uint64_t)(rows * cols / 32) * bs;
    } else {
        kn_block_q4_1 *out = owned(h, (size_t)(rows * cols / 32) * sizeof *out);
        if (!out) return kn_error(KILN_ERR_NOMEM, "out of memory converting '%s'", base);
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *row = w->data + (size_t)r * row_bytes;
            for (int64_t blk = 0; blk < cols / 32; blk++) {
                kn_block_q4_1 *o = &out[r * (cols / 32) + blk];
                const int64_t gi = r * ng + blk * 32 / group;
                o->d = kn_fp32_to_fp16(scalar_f32(s->data + (size_t)gi * es, s->dtype));
                o->m = kn_fp32_to_fp16(scalar_f32(bi->data + (size_t)gi * es, s->dtype));
                for (int j = 0; j < 16; j++)
                    o->qs[j] = (uint8_t)(mlx_q(row, blk * 32 + j, 4) | mlx_q(row, blk * 32 + j + 16, 4) << 4);
            }
        }
        c->type = KN_Q4_1;
        c->data = (const uint8_t *)out;
        c->nbytes = (uint64_t)(rows * cols / 32) * sizeof *out;
    }
    c->copied = true;
    return KILN_OK;
}

/* The tensor `base`.`suffix` as kiln can use it (see conv). */
static kiln_status convert(builder *b, const char *base, const char *suffix, const kn_st_tensor *t, conv *c) {
    kn_hf *h = b->h;
    memset(c, 0, sizeof *c);
    for (int i = 0; i < KN_MAX_DIMS; i++) c->ne[i] = 1;
    char nm[1200];
    snprintf(nm, sizeof nm, "%s.scales", base);
    if (!strcmp(suffix, "weight") && kn_st_find(&h->st, nm)) return convert_mlx(b, base, t, c);
    const char *file = h->st.paths[t->file];
    switch (t->dtype) {
        case KN_ST_F32: c->type = KN_F32; break;
        case KN_ST_F16: c->type = KN_F16; break;
        case KN_ST_BF16: c->type = KN_BF16; break;
        default:
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "%s: tensor '%s.%s' has dtype %s (kiln loads F32, F16, BF16 and MLX-quantized U32)", file,
                            base, suffix, kn_st_dtype_name(t->dtype));
    }
    if (t->n_dims < 1 || t->n_dims > KN_MAX_DIMS)
        return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s.%s' has %d dimensions (1 to %d)", file, base, suffix,
                        t->n_dims, KN_MAX_DIMS);
    c->n_dims = (uint32_t)t->n_dims;
    for (int i = 0; i < t->n_dims; i++) c->ne[i] = t->shape[t->n_dims - 1 - i];
    c->data = t->data;
    c->nbytes = t->nbytes;
    return KILN_OK;
}

/* Hugging Face's rotate-half Q/K rows to the interleaved order of GGUF (per head: row s * hd/2 + i
 * goes to 2i + s). */
static kiln_status permute_rows(builder *b, conv *c, int64_t n_head, const char *name) {
    const int64_t rows = c->ne[1];
    if (n_head <= 0 || rows % n_head || (rows / n_head) % 2)
        return kn_error(KILN_ERR_FORMAT, "tensor '%s': %lld rows do not split into %lld heads of even size", name,
                        (long long)rows, (long long)n_head);
    const int64_t hd = rows / n_head;
    const size_t rb = kn_row_bytes(c->type, c->ne[0]);
    if (b->h->headers_only) return KILN_OK;
    uint8_t *out = owned(b->h, c->nbytes);
    if (!out) return kn_error(KILN_ERR_NOMEM, "out of memory");
    for (int64_t hh = 0; hh < n_head; hh++)
        for (int64_t i = 0; i < hd / 2; i++)
            for (int s = 0; s < 2; s++)
                memcpy(out + (size_t)(hh * hd + 2 * i + s) * rb, c->data + (size_t)(hh * hd + s * hd / 2 + i) * rb, rb);
    c->data = out;
    c->copied = true;
    return KILN_OK;
}

/* Gemma's RMSNorm multiplies by (1 + w); GGUF stores 1 + w. */
static kiln_status plus_one(builder *b, conv *c) {
    if (b->h->headers_only) return KILN_OK;
    float *v = owned(b->h, (size_t)c->ne[0] * c->ne[1] * sizeof *v);
    if (!v) return kn_error(KILN_ERR_NOMEM, "out of memory");
    const kn_type_traits *tr = kn_type_traits_get(c->type);
    tr->to_float(c->data, v, c->ne[0] * c->ne[1]);
    for (int64_t i = 0; i < c->ne[0] * c->ne[1]; i++) v[i] += 1.0f;
    c->type = KN_F32;
    c->data = (const uint8_t *)v;
    c->nbytes = (uint64_t)(c->ne[0] * c->ne[1]) * sizeof *v;
    c->copied = true;
    return KILN_OK;
}

static kiln_status put(builder *b, const char *name, const conv *c) {
    if (kn_gguf_find_tensor(b->g, name))
        return kn_error(KILN_ERR_FORMAT, "%s: two tensors map to '%s'", b->h->dir, name);
    kn_gguf_tensor *t = tensor_new(b, name);
    if (!t) return kn_error(KILN_ERR_NOMEM, "out of memory");
    t->n_dims = c->n_dims;
    memcpy(t->ne, c->ne, sizeof t->ne);
    t->type = c->type;
    t->data = c->data;
    t->nbytes = c->nbytes;
    return KILN_OK;
}

/* The per-layer module names: Hugging Face suffix -> GGUF suffix. */
static const struct {
    const char *hf, *gguf;
} layer_map[] = {
    {"self_attn.q_proj", "attn_q"},
    {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_output"},
    {"self_attn.qkv_proj", "attn_qkv"},
    {"self_attn.q_norm", "attn_q_norm"},
    {"self_attn.k_norm", "attn_k_norm"},
    {"input_layernorm", "attn_norm"},
    {"post_attention_layernorm", "ffn_norm"}, /* gemma: post_attention_norm (below) */
    {"pre_feedforward_layernorm", "ffn_norm"},
    {"post_feedforward_layernorm", "post_ffw_norm"},
    {"mlp.gate_proj", "ffn_gate"},
    {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
    {"mlp.gate_up_proj", "ffn_up"},
    {"mlp.gate", "ffn_gate_inp"},
    {"mlp.router", "ffn_gate_inp"}, /* gpt-oss */
    {"mlp.switch_mlp.gate_proj", "ffn_gate_exps"},
    {"mlp.switch_mlp.up_proj", "ffn_up_exps"},
    {"mlp.switch_mlp.down_proj", "ffn_down_exps"},
};

static bool is_gemma(const builder *b) { return !strncmp(b->arch, "gemma", 5); }

/* Maps one tensor `raw`.`suffix` to kiln's name (base: raw without a leading "language_model.", as
 * multimodal checkpoints name their text model); nothing when kiln has no use for it. */
static kiln_status map_one(builder *b, const char *base, const char *raw, const char *suffix, const kn_st_tensor *t) {
    char name[256];
    int layer = -1, used = 0;
    const char *rest = NULL;
    if (!strcmp(base, "model.embed_tokens")) snprintf(name, sizeof name, "token_embd.%s", suffix);
    else if (!strcmp(base, "model.norm")) snprintf(name, sizeof name, "output_norm.%s", suffix);
    else if (!strcmp(base, "lm_head")) {
        json_t *tie = json_object_get(b->h->config, "tie_word_embeddings");
        if (json_is_true(tie)) return KILN_OK; /* the same matrix as the embeddings */
        snprintf(name, sizeof name, "output.%s", suffix);
    } else if (sscanf(base, "model.layers.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0) {
        rest = base + used;
        const char *g = NULL;
        for (size_t i = 0; i < KN_ARRAY_LEN(layer_map) && !g; i++)
            if (!strcmp(rest, layer_map[i].hf)) g = layer_map[i].gguf;
        if (g && (is_gemma(b) || !strcmp(b->arch, "gpt-oss")) && !strcmp(rest, "post_attention_layernorm"))
            g = "post_attention_norm"; /* gpt-oss: the norm before the FFN keeps this name in GGUF */
        int e = -1, eu = 0;
        char proj[32];
        if (!g && sscanf(rest, "mlp.experts.%d.%n", &e, &eu) == 1 && eu > 0 &&
            sscanf(rest + eu, "%31[a-z]_proj", proj) == 1)
            return KILN_OK; /* stacked afterwards (stack_experts) */
        if (!g) {
            KN_LOGW("%s: ignoring tensor '%s.%s' (kiln has no use for it)", b->h->dir, base, suffix);
            return KILN_OK;
        }
        snprintf(name, sizeof name, "blk.%d.%s.%s", layer, g, suffix);
    } else {
        KN_LOGD("%s: ignoring tensor '%s.%s'", b->h->dir, base, suffix);
        return KILN_OK;
    }
    conv c;
    kiln_status st = convert(b, raw, suffix, t, &c);
    if (st) return st;
    if (rest && b->def->rope_style == KN_ROPE_NORM &&
        (!strcmp(rest, "self_attn.q_proj") || !strcmp(rest, "self_attn.k_proj")))
        if ((st = permute_rows(b, &c, !strcmp(rest, "self_attn.q_proj") ? b->n_head : b->n_head_kv, name))) return st;
    if (is_gemma(b) && strstr(base, "norm") && !strcmp(suffix, "weight") && (st = plus_one(b, &c))) return st;
    return put(b, name, &c);
}

/* Stacks model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight, E = 0..n-1, into blk.L.ffn_*_exps.weight
 * {cols, rows, n} (one copy; every expert must have the same type and shape). */
static kiln_status stack_experts(builder *b, int64_t n_layer, int64_t n_exp) {
    static const char *const proj[3] = {"gate", "up", "down"};
    kn_hf *h = b->h;
    for (int64_t l = 0; l < n_layer; l++) {
        for (int p = 0; p < 3; p++) {
            char base[256], name[256];
            snprintf(base, sizeof base, "model.layers.%lld.mlp.experts.0.%s_proj", (long long)l, proj[p]);
            char wn[300];
            snprintf(wn, sizeof wn, "%s.weight", base);
            if (!kn_st_find(&h->st, wn)) continue;
            conv first = {0};
            uint8_t *all = NULL;
            for (int64_t e = 0; e < n_exp; e++) {
                snprintf(base, sizeof base, "model.layers.%lld.mlp.experts.%lld.%s_proj", (long long)l, (long long)e,
                         proj[p]);
                snprintf(wn, sizeof wn, "%s.weight", base);
                const kn_st_tensor *t = kn_st_find(&h->st, wn);
                if (!t)
                    return kn_error(KILN_ERR_FORMAT, "%s: missing tensor '%s' (config.json has %lld experts)", h->dir,
                                    wn, (long long)n_exp);
                conv c;
                kiln_status st = convert(b, base, "weight", t, &c);
                if (st) return st;
                if (c.n_dims != 2) return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s' is not a matrix", h->dir, wn);
                if (e == 0) {
                    first = c;
                    if (h->headers_only) all = (uint8_t *)c.data;
                    else if (!(all = owned(h, (size_t)c.nbytes * (size_t)n_exp)))
                        return kn_error(KILN_ERR_NOMEM, "out of memory");
                } else if (c.type != first.type || c.ne[0] != first.ne[0] || c.ne[1] != first.ne[1]) {
                    return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s' differs in type or shape from expert 0", h->dir,
                                    wn);
                }
                if (!h->headers_only) memcpy(all + (size_t)e * first.nbytes, c.data, c.nbytes);
            }
            first.n_dims = 3;
            first.ne[2] = n_exp;
            first.data = all;
            first.nbytes *= (uint64_t)n_exp;
            snprintf(name, sizeof name, "blk.%lld.ffn_%s_exps.weight", (long long)l, proj[p]);
            kiln_status st = put(b, name, &first);
            if (st) return st;
        }
    }
    return KILN_OK;
}

/* A gpt-oss expert tensor `raw`.{gate_up,down}_proj_{blocks,scales,bias} as `part`, checked: U8
 * blocks [E][R][nb][16] and scales [E][R][nb], a float bias [E][R]. */
static kiln_status oss_part(builder *b, const char *raw, const char *part, int n_dims, const kn_st_tensor *like,
                            const kn_st_tensor **out) {
    char nm[1200];
    snprintf(nm, sizeof nm, "%s.%s", raw, part);
    const kn_st_tensor *t = kn_st_find(&b->h->st, nm);
    bool ok = t && t->n_dims == n_dims;
    if (ok && n_dims == 2) ok = t->dtype == KN_ST_F32 || t->dtype == KN_ST_F16 || t->dtype == KN_ST_BF16;
    else if (ok) ok = t->dtype == KN_ST_U8 && (n_dims != 4 || t->shape[3] == 16);
    for (int i = 0; ok && like && i < n_dims && i < 3; i++) ok = t->shape[i] == like->shape[i];
    if (!ok)
        return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s' is missing or not %s", b->h->dir, nm,
                        n_dims == 4   ? "U8 [experts][rows][blocks][16]"
                        : n_dims == 3 ? "U8 [experts][rows][blocks] like its blocks"
                                      : "a float [experts][rows] like its blocks");
    *out = t;
    return KILN_OK;
}

/* gpt-oss experts (model.layers.L.mlp.experts.{gate_up,down}_proj_{blocks,scales,bias}: MXFP4 with the
 * two 4-bit values of byte k being elements 2k (low nibble) and 2k + 1, one E8M0 scale per 32; gate_up
 * interleaves the gate (even rows) and up (odd rows) projections) as GGUF's ffn_{gate,up,down}_exps
 * MXFP4 weights (nibbles in the block layout of quant.h) and F32 biases. */
static kiln_status oss_experts(builder *b, const char *raw, int layer, bool gate_up) {
    kn_hf *h = b->h;
    const kn_st_tensor *bl, *sc, *bi;
    kiln_status st;
    if ((st = oss_part(b, raw, gate_up ? "gate_up_proj_blocks" : "down_proj_blocks", 4, NULL, &bl))) return st;
    if ((st = oss_part(b, raw, gate_up ? "gate_up_proj_scales" : "down_proj_scales", 3, bl, &sc))) return st;
    if ((st = oss_part(b, raw, gate_up ? "gate_up_proj_bias" : "down_proj_bias", 2, bl, &bi))) return st;
    const int64_t E = bl->shape[0], R = bl->shape[1], nb = bl->shape[2], nout = gate_up ? 2 : 1, rows = R / nout;
    if (E < 1 || R % nout || nb < 1 || E > MAX_EXPERTS_STACK)
        return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s.%s' has a bad shape", h->dir, raw,
                        gate_up ? "gate_up_proj_blocks" : "down_proj_blocks");
    static const char *const names[3] = {"gate", "up", "down"};
    for (int o = 0; o < nout; o++) {
        const char *which = gate_up ? names[o] : names[2];
        conv w = {.type = KN_MXFP4, .n_dims = 3, .ne = {nb * 32, rows, E, 1}};
        w.nbytes = (uint64_t)(E * rows * nb) * sizeof(kn_block_mxfp4);
        conv c = {.type = KN_F32, .n_dims = 2, .ne = {rows, E, 1, 1}};
        c.nbytes = (uint64_t)(E * rows) * sizeof(float);
        if (h->headers_only) {
            w.data = bl->data;
            c.data = bi->data;
        } else {
            kn_block_mxfp4 *q = owned(h, (size_t)w.nbytes);
            float *v = owned(h, (size_t)c.nbytes);
            if (!q || !v) return kn_error(KILN_ERR_NOMEM, "out of memory converting '%s'", raw);
            const size_t es = kn_st_dtype_size(bi->dtype);
            for (int64_t e = 0; e < E; e++)
                for (int64_t r = 0; r < rows; r++) {
                    const int64_t src = e * R + r * nout + o; /* row of the source */
                    v[e * rows + r] = scalar_f32(bi->data + (size_t)src * es, bi->dtype);
                    for (int64_t k = 0; k < nb; k++) {
                        const uint8_t *in = bl->data + (size_t)((src * nb + k) * 16);
                        kn_block_mxfp4 *out = &q[(e * rows + r) * nb + k];
                        out->e = sc->data[src * nb + k];
                        for (int j = 0; j < 16; j++) {
                            const int lo = (in[j >> 1] >> ((j & 1) * 4)) & 15;       /* element j */
                            const int hi = (in[8 + (j >> 1)] >> ((j & 1) * 4)) & 15; /* element j + 16 */
                            out->qs[j] = (uint8_t)(lo | hi << 4);
                        }
                    }
                }
            w.data = (const uint8_t *)q;
            c.data = (const uint8_t *)v;
        }
        char name[96];
        snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.weight", layer, which);
        if ((st = put(b, name, &w))) return st;
        snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.bias", layer, which);
        if ((st = put(b, name, &c))) return st;
    }
    return KILN_OK;
}

static kiln_status map_tensors(builder *b) {
    kn_hf *h = b->h;
    kiln_status st;
    for (size_t i = 0; i < h->st.n_tensors; i++) {
        const kn_st_tensor *t = &h->st.tensors[i];
        const char *full = t->name;
        if (!strncmp(full, "language_model.", 15)) full += 15;
        const char *dot = strrchr(full, '.');
        if (!dot) {
            KN_LOGD("%s: ignoring tensor '%s'", h->dir, t->name);
            continue;
        }
        char base[1100], raw[1200];
        snprintf(base, sizeof base, "%.*s", (int)(dot - full), full);
        snprintf(raw, sizeof raw, "%.*s", (int)(dot - t->name), t->name);
        const char *suffix = dot + 1;
        if (!strcmp(suffix, "scales") || !strcmp(suffix, "biases")) {
            char wn[1200];
            snprintf(wn, sizeof wn, "%.*s.weight", (int)(strrchr(t->name, '.') - t->name), t->name);
            if (kn_st_find(&h->st, wn)) continue; /* part of an MLX-quantized weight */
        }
        int layer = -1, used = 0;
        if (sscanf(base, "model.layers.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0) {
            if (!strcmp(base + used, "self_attn") && !strcmp(suffix, "sinks")) { /* gpt-oss */
                char name[96];
                conv c;
                snprintf(name, sizeof name, "blk.%d.attn_sinks.weight", layer);
                if ((st = convert(b, raw, suffix, t, &c)) || (st = put(b, name, &c))) return st;
                continue;
            }
            if (!strcmp(base + used, "mlp.experts") && strstr(suffix, "_proj_")) { /* gpt-oss MXFP4 experts */
                if (!strcmp(suffix, "gate_up_proj_blocks") || !strcmp(suffix, "down_proj_blocks"))
                    if ((st = oss_experts(b, raw, layer, !strcmp(suffix, "gate_up_proj_blocks")))) return st;
                continue; /* the scales and biases go with the blocks */
            }
        }
        if (strcmp(suffix, "weight") && strcmp(suffix, "bias")) {
            KN_LOGD("%s: ignoring tensor '%s'", h->dir, t->name);
            continue;
        }
        if ((st = map_one(b, base, raw, suffix, t))) return st;
    }
    int64_t nl = 0, ne = 0;
    cfg_int(h, "num_hidden_layers", false, 0, 4096, &nl);
    cfg_int(h, "num_experts", false, 0, MAX_EXPERTS_STACK, &ne);
    cfg_int(h, "num_local_experts", false, 0, MAX_EXPERTS_STACK, &ne);
    if (ne > 0 && (st = stack_experts(b, nl, ne))) return st;
    if (!kn_gguf_find_tensor(b->g, "output.weight") &&
        !json_is_true(json_object_get(h->config, "tie_word_embeddings")) &&
        json_is_false(json_object_get(h->config, "tie_word_embeddings")))
        return kn_error(KILN_ERR_FORMAT,
                        "%s: tensor 'lm_head.weight' is missing and config.json does not tie it to the "
                        "embeddings",
                        h->dir);
    return KILN_OK;
}

/* ---- open ------------------------------------------------------------------------------------------- */

bool kn_hf_is_dir(const char *path) {
    struct stat sb;
    char p[4096];
    if (!path || stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return false;
    snprintf(p, sizeof p, "%s/config.json", path);
    return stat(p, &sb) == 0;
}

const kn_safetensors *kn_hf_safetensors(const kn_gguf *g) {
    return g->owner_free == hf_free ? &((const kn_hf *)g->owner)->st : NULL;
}

json_t *kn_hf_config(const kn_gguf *g) {
    return g->owner_free == hf_free ? ((const kn_hf *)g->owner)->config_root : NULL;
}

void kn_hf_fit_vocab(kn_gguf *g, int64_t n_vocab) {
    if (g->owner_free != hf_free || n_vocab <= 0) return;
    static const char *const names[2] = {"token_embd.weight", "output.weight"};
    for (int i = 0; i < 2; i++) {
        kn_gguf_tensor *t = (kn_gguf_tensor *)kn_gguf_find_tensor(g, names[i]);
        if (!t || t->n_dims != 2 || t->ne[1] <= n_vocab) continue;
        KN_LOGD("%s: using %lld of %lld rows (the tokenizer has %lld tokens)", names[i], (long long)n_vocab,
                (long long)t->ne[1], (long long)n_vocab);
        t->nbytes = t->nbytes / (uint64_t)t->ne[1] * (uint64_t)n_vocab;
        t->ne[1] = n_vocab;
    }
}

static kiln_status read_quantization(kn_hf *h) {
    json_t *q = json_object_get(h->config_root, "quantization");
    if (!q) q = json_object_get(h->config_root, "quantization_config");
    if (!q || json_is_null(q)) return KILN_OK;
    json_t *bb = json_object_get(q, "bits"), *gg = json_object_get(q, "group_size");
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    if (method && !strcmp(method, "mxfp4") && !json_is_integer(bb))
        return KILN_OK; /* gpt-oss: the experts' *_blocks / *_scales tensors carry it (oss_experts) */
    if (!json_is_object(q) || !json_is_integer(bb) || !json_is_integer(gg)) {
        if (json_is_object(q) && json_object_get(q, "quant_method"))
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "%s/config.json: quantization method '%s' is not supported (kiln reads "
                            "MLX affine quantization)",
                            h->dir, json_string_value(json_object_get(q, "quant_method")));
        return kn_error(KILN_ERR_FORMAT, "%s/config.json: 'quantization' needs integer 'bits' and 'group_size'",
                        h->dir);
    }
    h->q = q;
    h->q_bits = (int)json_integer_value(bb);
    h->q_group = (int)json_integer_value(gg);
    return KILN_OK;
}

static kiln_status hf_open(const char *dir, kn_gguf *g, bool headers_only) {
    memset(g, 0, sizeof *g);
    kn_hf *h = kn_calloc(1, sizeof *h);
    if (!h) return KILN_ERR_NOMEM;
    h->headers_only = headers_only;
    g->owner = h;
    g->owner_free = hf_free;
    snprintf(h->dir, sizeof h->dir, "%s", dir);
    size_t n = strlen(h->dir);
    while (n > 1 && h->dir[n - 1] == '/') h->dir[--n] = 0;
    builder b = {.h = h, .g = g};
    kiln_status st;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", h->dir);
    json_error_t jerr;
    struct stat sb;
    if (stat(path, &sb) == 0 && (size_t)sb.st_size > MAX_CONFIG_FILE) {
        st = kn_error(KILN_ERR_FORMAT, "%s is over the size limit", path);
        goto fail;
    }
    h->config_root = kn_json_load_file(path, 0, &jerr);
    if (!json_is_object(h->config_root)) {
        st = kn_error(h->config_root ? KILN_ERR_FORMAT : kn_json_status(&jerr, KILN_ERR_FORMAT), "%s: line %d: %s",
                      path, jerr.line, h->config_root ? "not an object" : jerr.text);
        goto fail;
    }
    h->config = h->config_root;
    json_t *tc = json_object_get(h->config_root, "text_config");
    if (json_is_object(tc)) h->config = tc;
    const char *mt = json_string_value(json_object_get(h->config, "model_type"));
    if (!mt) mt = json_string_value(json_object_get(h->config_root, "model_type"));
    if (!mt) {
        st = kn_error(KILN_ERR_FORMAT, "%s: missing 'model_type'", path);
        goto fail;
    }
    for (size_t i = 0; i < KN_ARRAY_LEN(arch_map) && !b.arch; i++)
        if (!strcmp(mt, arch_map[i].model_type)) b.arch = arch_map[i].arch;
    if (!b.arch || !(b.def = kn_arch_find(b.arch, strlen(b.arch)))) {
        char names[512] = "";
        for (size_t i = 0; i < KN_ARRAY_LEN(arch_map); i++)
            if (kn_arch_find(arch_map[i].arch, strlen(arch_map[i].arch)))
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                         arch_map[i].model_type);
        st = kn_error(KILN_ERR_UNSUPPORTED, "%s: model_type '%.64s' is not supported (kiln reads %s)", path, mt, names);
        goto fail;
    }
    if ((st = read_quantization(h))) goto fail;
    if ((st = read_config(&b))) goto fail;
    if ((st = read_generation(&b))) goto fail;
    if ((st = read_tokenizer_files(&b))) goto fail;
    if ((st = kn_st_open_dir(h->dir, &h->st))) goto fail;
    if ((st = map_tensors(&b))) goto fail;
    return KILN_OK;
fail:
    kn_gguf_close(g);
    return st;
}

kiln_status kn_hf_open(const char *dir, kn_gguf *g) { return hf_open(dir, g, false); }
kiln_status kn_hf_open_headers(const char *dir, kn_gguf *g) { return hf_open(dir, g, true); }

kiln_status kn_hf_tokenizer(const kn_gguf *g, kn_tokenizer **out) {
    const kn_hf *h = g->owner_free == hf_free ? g->owner : NULL;
    if (!h || !h->tok_json) return kn_error(KILN_ERR_INVALID_ARG, "not a Hugging Face model directory");
    kiln_status st = kn_tokenizer_load_hf(h->tok_json, h->tok_len, h->tok_cfg, h->tok_cfg_len, out);
    if (st) {
        kn_error_prefix("%s/tokenizer.json", h->dir);
        return st;
    }
    /* generation_config.json's eos_token_id (read_generation wrote them as "1,106") */
    const kn_gguf_kv *kv = kn_gguf_find(g, "tokenizer.huggingface.generation_eos");
    for (const char *p = kv ? kv->str.ptr : NULL; p && *p && !st;) {
        char *end;
        long id = strtol(p, &end, 10);
        if (id >= kn_tok_n_vocab(*out))
            KN_LOGW("%s/generation_config.json: eos_token_id %ld is not a token (the vocabulary has %d)", h->dir, id,
                    kn_tok_n_vocab(*out));
        else st = kn_tok_add_eog(*out, (int32_t)id);
        p = *end == ',' ? end + 1 : NULL;
    }
    if (st) {
        kn_tokenizer_free(*out);
        *out = NULL;
    }
    return st;
}
