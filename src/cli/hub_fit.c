/*
 * hub_fit.c - before a download: will the model fit this machine? The weights are the sizes of the
 * files to fetch; the KV cache per token comes from the model's dimensions, read from config.json
 * (a safetensors repository) or from the metadata at the start of a GGUF file (fetched with a
 * Range request of its first bytes), and is counted at the context kiln would give the model by
 * default (kiln_default_n_ctx), in F16, as kiln serve's automatic choice plans it.
 */
#include "hub_fit.h"
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* An integer member of a config.json object (or of its text_config), 0 when absent. */
static int32_t cfg_int(json_t *root, const char *key) {
    json_t *v = json_object_get(root, key);
    if (!json_is_integer(v)) v = json_object_get(json_object_get(root, "text_config"), key);
    if (!json_is_integer(v)) return 0;
    const json_int_t x = json_integer_value(v);
    return x > 0 && x < (1 << 30) ? (int32_t)x : 0;
}

bool hub_fit_from_config(const char *text, size_t len, kiln_model_info *out) {
    memset(out, 0, sizeof *out);
    json_t *root = json_loadb(text, len, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return false;
    }
    const char *type = json_string_value(json_object_get(root, "model_type"));
    if (type) snprintf(out->arch, sizeof out->arch, "%s", type);
    out->n_layer = cfg_int(root, "num_hidden_layers");
    out->n_head = cfg_int(root, "num_attention_heads");
    out->n_head_kv = cfg_int(root, "num_key_value_heads");
    if (!out->n_head_kv) out->n_head_kv = out->n_head;
    out->n_embd = cfg_int(root, "hidden_size");
    out->head_dim = cfg_int(root, "head_dim");
    if (!out->head_dim && out->n_head) out->head_dim = out->n_embd / out->n_head;
    out->n_ctx_train = cfg_int(root, "max_position_embeddings");
    json_decref(root);
    return out->n_layer && out->n_head_kv && out->head_dim;
}

/* ---- GGUF metadata -------------------------------------------------------------------------- */

typedef struct rd {
    const unsigned char *p;
    size_t n, off;
    bool ok;
} rd;

static uint64_t rd_u(rd *r, size_t k) {
    if (!r->ok || r->n - r->off < k) {
        r->ok = false;
        return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < k; i++) v |= (uint64_t)r->p[r->off + i] << (8 * i);
    r->off += k;
    return v;
}

static void rd_skip(rd *r, uint64_t k) {
    if (!r->ok || r->n - r->off < k) r->ok = false;
    else r->off += (size_t)k;
}

/* Size in bytes of a scalar GGUF value type; 0 for strings and arrays, SIZE_MAX when unknown. */
static size_t scalar_size(uint32_t t) {
    static const size_t sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? sz[t] : (size_t)-1;
}

bool hub_fit_from_gguf(const void *data, size_t len, kiln_model_info *out) {
    memset(out, 0, sizeof *out);
    rd r = {data, len, 0, true};
    if (rd_u(&r, 4) != 0x46554747u) return false; /* "GGUF" */
    const uint64_t version = rd_u(&r, 4);
    if (version < 2 || version > 3) return false;
    rd_u(&r, 8); /* tensors */
    const uint64_t n_kv = rd_u(&r, 8);
    int32_t key_length = 0;
    for (uint64_t i = 0; i < n_kv && r.ok; i++) {
        const uint64_t kl = rd_u(&r, 8);
        if (!r.ok || kl > 1024 || r.n - r.off < kl) break;
        char key[1025];
        memcpy(key, r.p + r.off, (size_t)kl);
        key[kl] = '\0';
        r.off += (size_t)kl;
        const uint32_t type = (uint32_t)rd_u(&r, 4);
        if (type == 8) { /* string */
            const uint64_t sl = rd_u(&r, 8);
            if (strcmp(key, "general.architecture") == 0 && r.ok && sl < sizeof out->arch && r.n - r.off >= sl) {
                memcpy(out->arch, r.p + r.off, (size_t)sl);
                out->arch[sl] = '\0';
            }
            rd_skip(&r, sl);
            continue;
        }
        if (type == 9) { /* array */
            const uint32_t et = (uint32_t)rd_u(&r, 4);
            const uint64_t cnt = rd_u(&r, 8);
            if (et == 8) {
                for (uint64_t k = 0; k < cnt && r.ok; k++) rd_skip(&r, rd_u(&r, 8));
            } else {
                const size_t es = scalar_size(et);
                if (es == 0 || es == (size_t)-1 || cnt > (uint64_t)1 << 40) r.ok = false; /* stop here */
                else rd_skip(&r, cnt * es);
            }
            continue;
        }
        const size_t sz = scalar_size(type);
        if (sz == 0 || sz == (size_t)-1) break; /* unknown type: what was found so far */
        const uint64_t v = rd_u(&r, sz);
        const size_t al = strlen(out->arch);
        if (!r.ok || !al || strncmp(key, out->arch, al) != 0 || key[al] != '.') continue;
        const char *k = key + al + 1;
        const int32_t iv = v < (1u << 30) ? (int32_t)v : 0;
        if (strcmp(k, "block_count") == 0) out->n_layer = iv;
        else if (strcmp(k, "context_length") == 0) out->n_ctx_train = iv;
        else if (strcmp(k, "embedding_length") == 0) out->n_embd = iv;
        else if (strcmp(k, "attention.head_count") == 0) out->n_head = iv;
        else if (strcmp(k, "attention.head_count_kv") == 0) out->n_head_kv = iv;
        else if (strcmp(k, "attention.key_length") == 0) key_length = iv;
    }
    if (!out->n_head_kv) out->n_head_kv = out->n_head;
    out->head_dim = key_length ? key_length : out->n_head ? out->n_embd / out->n_head : 0;
    return out->n_layer && out->n_head_kv && out->head_dim;
}

void hub_fit_report(FILE *f, uint64_t weights, const kiln_model_info *dims) {
    const uint64_t mem = cli_machine_memory();
    const uint64_t budget = mem / 100 * CLI_MEMORY_PCT;
    char w[32], k[32], m[32], need_s[32];
    cli_fmt_bytes(weights, w, sizeof w);
    cli_fmt_bytes(mem, m, sizeof m);
    if (!dims) {
        fprintf(f, "Weights: %s (the model's dimensions are unknown, so its KV cache is not counted). ", w);
        if (!mem) fprintf(f, "This machine's memory is unknown.\n");
        else if (weights <= budget) fprintf(f, "They fit in %d%% of this machine's %s of memory.\n", CLI_MEMORY_PCT, m);
        else fprintf(f, "They will not fit this machine: more than %d%% of its %s of memory.\n", CLI_MEMORY_PCT, m);
        return;
    }
    const int32_t ctx = kiln_default_n_ctx(dims->n_ctx_train);
    uint64_t kv = kiln_kv_bytes_per_token(dims, KILN_KV_F16);
    kv = kv > UINT64_MAX / (uint64_t)ctx ? UINT64_MAX : kv * (uint64_t)ctx;
    const uint64_t need = weights > UINT64_MAX - kv ? UINT64_MAX : weights + kv;
    cli_fmt_bytes(kv, k, sizeof k);
    cli_fmt_bytes(need, need_s, sizeof need_s);
    if (!mem)
        fprintf(f, "Needs %s (%s of weights + %s of KV cache for %d tokens); this machine's memory is unknown.\n",
                need_s, w, k, ctx);
    else if (need <= budget)
        fprintf(f, "Fits this machine: %s of weights + %s of KV cache for %d tokens = %s, within %d%% of its %s.\n", w,
                k, ctx, need_s, CLI_MEMORY_PCT, m);
    else
        fprintf(f,
                "Will not fit this machine well: %s of weights + %s of KV cache for %d tokens = %s, more than %d%% "
                "of its %s of memory (loading it may fail or swap).\n",
                w, k, ctx, need_s, CLI_MEMORY_PCT, m);
}
