/*
 * hub_fit.c - before a download: will the model fit this machine? The weights are the sizes of the
 * files to fetch; the KV cache per token comes from the model's dimensions, read from config.json
 * (a safetensors repository) or from the metadata at the start of a GGUF file (fetched with a
 * Range request of its first bytes), and is counted at the context kiln would give the model by
 * default (kiln_default_n_ctx), in F16, as kiln serve's automatic choice plans it.
 *
 * Before a load (kiln run, chat, serve, and kiln alone): the weights (every part of a split model,
 * counted once: mapped with --mmap or copied, they are in memory once), the KV of the context and
 * rows chosen (the library's kiln_kv_bytes_per_token_kv, exactly what a session or engine row
 * allocates) and the compute buffers of one step, against the memory available at that moment
 * (MemAvailable and the cgroup's limit). A model that does not fit is refused with the figures and
 * what would fit; one that fits with less than CLI_FIT_SLACK_PCT to spare gets a warning. --fit off
 * skips the check.
 */
#include "hub_fit.h"
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
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

double hub_fit_mlx_ratio(const char *text, size_t len) {
    json_t *root = json_loadb(text, len, 0, NULL), *q = json_object_get(root, "quantization");
    const json_t *b = json_object_get(q, "bits"), *g = json_object_get(q, "group_size");
    double r = 1.0;
    if (json_is_integer(b) && json_is_integer(g)) {
        const json_int_t bits = json_integer_value(b), group = json_integer_value(g);
        if (bits >= 2 && bits <= 8 && group >= 16 && group <= 1024)
            r = (bits == 4 ? 5.0 : 9.0) / ((double)bits + 32.0 / (double)group);
    }
    json_decref(root);
    return r;
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

/* ---- before loading: the memory available now, and the model's need ------------------------- */

/* a + b and a * b, saturating. */
static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static uint64_t sat_mul(uint64_t a, uint64_t b) { return b && a > UINT64_MAX / b ? UINT64_MAX : a * b; }

/* Parses "123", "64M", "2G" (K, M, G: powers of 1024) into *out; false when it is not such a value. */
static bool parse_size(const char *t, uint64_t *out) {
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(t, &end, 10);
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1ull << 10;
    else if (*end == 'M' || *end == 'm') mul = 1ull << 20;
    else if (*end == 'G' || *end == 'g') mul = 1ull << 30;
    if (errno || end == t || (mul == 1 ? *end != 0 : end[1] != 0) || v == 0 || v > (UINT64_MAX >> 30)) return false;
    *out = (uint64_t)v * mul;
    return true;
}

/* The first line of file path as an unsigned number into *v; false when absent or not a number
 * (cgroup v2's "max" included). */
static bool read_u64_file(const char *path, uint64_t *v) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    unsigned long long x;
    const bool ok = fscanf(f, "%llu", &x) == 1;
    fclose(f);
    if (ok) *v = (uint64_t)x;
    return ok;
}

/* The value of key in a "key value" file (memory.stat, /proc/meminfo), times mul; 0 when absent. */
static uint64_t read_keyed(const char *path, const char *key, uint64_t mul) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    uint64_t v = 0;
    const size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) == 0 && (line[kl] == ' ' || line[kl] == ':')) {
            v = (uint64_t)strtoull(line + kl + 1, NULL, 10) * mul;
            break;
        }
    }
    fclose(f);
    return v;
}

/* What the memory cgroup at dir leaves: its limit less its usage, whose inactive file pages count as
 * free (the kernel reclaims them first). UINT64_MAX when dir sets no limit. */
static uint64_t cgroup_left(const char *dir, bool v2) {
    char p[8500];
    uint64_t limit, usage;
    snprintf(p, sizeof p, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    if (!read_u64_file(p, &limit) || limit >= ((uint64_t)1 << 60)) return UINT64_MAX; /* "max", or v1's huge value */
    snprintf(p, sizeof p, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    if (!read_u64_file(p, &usage)) return UINT64_MAX;
    snprintf(p, sizeof p, "%s/memory.stat", dir);
    const uint64_t inactive = read_keyed(p, v2 ? "inactive_file" : "total_inactive_file", 1);
    usage = usage > inactive ? usage - inactive : 0;
    return limit > usage ? limit - usage : 0;
}

/* The least any memory cgroup of this process leaves (its own and its ancestors', v2 and v1), or
 * UINT64_MAX when none sets a limit. */
static uint64_t cgroups_left(void) {
    uint64_t best = UINT64_MAX;
    /* tests only: KILN_TEST_CGROUP_FS is a directory standing for "/" (its proc/self/cgroup and
     * sys/fs/cgroup are read instead) */
    const char *fs = getenv("KILN_TEST_CGROUP_FS");
    if (!fs) fs = "";
    char path[4200];
    snprintf(path, sizeof path, "%s/proc/self/cgroup", fs);
    FILE *f = fopen(path, "r");
    if (!f) return best;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char root[4200];
        const char *rel = NULL;
        bool v2 = false;
        if (strncmp(line, "0::", 3) == 0) {
            snprintf(root, sizeof root, "%s/sys/fs/cgroup", fs);
            rel = line + 3;
            v2 = true;
        } else {
            char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (!c2) continue;
            *c2 = '\0';
            bool mem = false;
            for (char *save = NULL, *t = strtok_r(c1 + 1, ",", &save); t; t = strtok_r(NULL, ",", &save))
                mem |= strcmp(t, "memory") == 0;
            if (!mem) continue;
            snprintf(root, sizeof root, "%s/sys/fs/cgroup/memory", fs);
            rel = c2 + 1;
        }
        /* the process's cgroup and each ancestor; inside a cgroup namespace the mount is the root */
        char dir[8400];
        snprintf(dir, sizeof dir, "%s%s", root, rel);
        for (;;) {
            size_t n = strlen(dir);
            while (n > strlen(root) && dir[n - 1] == '/') dir[--n] = '\0';
            const uint64_t left = cgroup_left(dir, v2);
            if (left < best) best = left;
            if (n <= strlen(root)) break;
            char *slash = strrchr(dir, '/');
            if (!slash || (size_t)(slash - dir) < strlen(root)) break;
            *slash = '\0';
        }
    }
    fclose(f);
    return best;
}

uint64_t cli_memory_available(char *src, size_t cap) {
    const char *t = getenv("KILN_TEST_MEMORY_AVAILABLE"); /* tests only: pretend this much is free */
    uint64_t v;
    if (t && *t) {
        if (parse_size(t, &v)) {
            snprintf(src, cap, "KILN_TEST_MEMORY_AVAILABLE, for tests only");
            return v;
        }
        fprintf(stderr, "kiln: ignoring KILN_TEST_MEMORY_AVAILABLE='%s' (expected bytes, or a number with K, M or G)\n",
                t);
    }
    uint64_t avail = read_keyed("/proc/meminfo", "MemAvailable", 1024);
    snprintf(src, cap, "MemAvailable");
    const uint64_t cg = cgroups_left();
    if (cg != UINT64_MAX && (!avail || cg < avail)) {
        avail = cg;
        snprintf(src, cap, "the cgroup memory limit less its usage");
    }
    return avail;
}

/* A dimension of the tensor called name in f: shape[dim] of its shape, 0 when absent. */
static int64_t tensor_dim(const kiln_file *f, const char *name, int dim) {
    const int64_t i = kiln_file_find(f, name);
    kiln_file_tensor t;
    if (i < 0 || !kiln_file_tensor_info(f, (size_t)i, &t) || dim >= t.n_dims) return 0;
    return t.shape[dim];
}

void cli_fit_estimate(const char *path, const kiln_model_info *info, int32_t ctx, int32_t rows, kiln_kv_type k,
                      kiln_kv_type v, int32_t step_tokens, int32_t logit_rows, cli_fit_need *need) {
    memset(need, 0, sizeof *need);
    need->weights = info->tensor_bytes;
    need->ctx = ctx > 0 ? ctx : kiln_default_n_ctx(info->n_ctx_train);
    need->rows = rows > 0 ? rows : 1;
    need->kv_per_token = kiln_kv_bytes_per_token_kv(info, k, v);
    const uint64_t toks = (uint64_t)need->ctx * (uint64_t)need->rows;
    need->kv = need->kv_per_token && need->kv_per_token > UINT64_MAX / toks ? UINT64_MAX : need->kv_per_token * toks;
    /* The activation buffers a forward pass allocates for its tokens (model/forward.c): the residual
     * stream three times, queries and attention output, keys and values, two feed-forward rows and
     * the quantized copy of the widest input; then the kept logits. The widths come from the tensor
     * table (a GGUF's or a model directory's names), else the model's width stands in. */
    int64_t ff = 0, vocab = 0;
    kiln_file *f = NULL;
    if (path && kiln_file_open(path, &f) == KILN_OK) {
        ff = tensor_dim(f, "blk.0.ffn_up.weight", 0);
        if (!ff) ff = tensor_dim(f, "blk.0.ffn_up_exps.weight", 1);
        if (!ff) ff = tensor_dim(f, "model.layers.0.mlp.up_proj.weight", 0);
        if (!ff) ff = tensor_dim(f, "model.layers.0.mlp.gate_up_proj.weight", 0);
        vocab = tensor_dim(f, "token_embd.weight", 0);
        if (!vocab) vocab = tensor_dim(f, "model.embed_tokens.weight", 0);
        kiln_file_close(f);
    }
    const uint64_t embd = info->n_embd > 0 ? (uint64_t)info->n_embd : 0;
    if (ff <= 0) ff = (int64_t)(4 * embd);
    if (vocab <= 0) vocab = 256 * 1024; /* the largest vocabularies in use */
    const uint64_t qd =
        (uint64_t)(info->n_head > 0 ? info->n_head : 0) * (uint64_t)(info->head_dim > 0 ? info->head_dim : 0);
    const uint64_t kvd =
        (uint64_t)(info->n_head_kv > 0 ? info->n_head_kv : 0) * (uint64_t)(info->head_dim > 0 ? info->head_dim : 0);
    /* a hostile header's sizes saturate instead of wrapping */
    const uint64_t widths = sat_add(3 * embd + 2 * qd + 2 * kvd, sat_mul((uint64_t)ff, 2));
    const uint64_t per_tok = sat_add(sat_mul(widths, 4), (uint64_t)ff);
    const uint64_t n = (uint64_t)(step_tokens > 0 ? step_tokens : 1);
    const uint64_t lr = (uint64_t)(logit_rows > 0 ? logit_rows : 1);
    need->compute = sat_add(sat_add(sat_mul(n, per_tok), sat_mul(lr * 4, (uint64_t)vocab)), CLI_FIT_ALLOWANCE);
}

int cli_parse_fit(int argc, char **argv, int *i, bool *on) {
    const char *a = argv[*i], *v = NULL;
    if (strncmp(a, "--fit=", 6) == 0) v = a + 6;
    else if (strcmp(a, "--fit") == 0) v = *i + 1 < argc ? argv[++*i] : "";
    else return 0;
    if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
        fprintf(stderr, "kiln: --fit must be on or off (off: load the model without checking its memory)\n");
        return -1;
    }
    *on = strcmp(v, "on") == 0;
    return 1;
}

bool cli_fit_check(const char *verb, const char *label, const cli_fit_need *need, const char *rows_flag, bool on) {
    if (!on) return true;
    char src[96];
    const uint64_t avail = cli_memory_available(src, sizeof src);
    if (!avail) return true; /* nothing to judge by */
    const uint64_t total = sat_add(sat_add(need->weights, need->kv), need->compute);
    char w[32], k[32], c[32], t[32], a[32];
    cli_fmt_bytes(need->weights, w, sizeof w);
    cli_fmt_bytes(need->kv, k, sizeof k);
    cli_fmt_bytes(need->compute, c, sizeof c);
    cli_fmt_bytes(total, t, sizeof t);
    cli_fmt_bytes(avail, a, sizeof a);
    char kv_what[96];
    if (need->rows > 1) snprintf(kv_what, sizeof kv_what, "%d rows of %d tokens", need->rows, need->ctx);
    else snprintf(kv_what, sizeof kv_what, "%d tokens", need->ctx);
    if (total > avail) {
        fprintf(stderr,
                "kiln %s: %s does not fit in the memory available: it needs about %s (%s of weights + %s of KV "
                "cache for %s + %s of compute buffers), and %s is available (%s).\n",
                verb, label, t, w, k, kv_what, c, a, src);
        fprintf(stderr, "kiln %s: to make it fit:", verb);
        const uint64_t fixed = sat_add(need->weights, need->compute);
        const uint64_t left = avail > fixed ? avail - fixed : 0;
        const uint64_t per_ctx = sat_mul(need->kv_per_token, (uint64_t)need->rows); /* KV bytes a token of -c */
        const uint64_t per_row = sat_mul(need->kv_per_token, (uint64_t)need->ctx);  /* KV bytes a row */
        bool any = false;
        if (per_ctx && left / per_ctx >= 256) {
            uint64_t ctx = left / per_ctx;
            ctx = ctx >= 1024 ? ctx / 1024 * 1024 : ctx / 256 * 256;
            fprintf(stderr, " a smaller context (-c %llu or less)", (unsigned long long)ctx);
            any = true;
        }
        if (rows_flag && need->rows > 1 && per_row && left / per_row >= 1) {
            fprintf(stderr, "%s fewer rows (%s %llu)", any ? "," : "", rows_flag, (unsigned long long)(left / per_row));
            any = true;
        }
        if (need->kv_per_token && left) {
            fprintf(stderr, "%s a smaller KV cache type (--kv-type q8_0 or q4_0)", any ? "," : "");
            any = true;
        }
        char fx[32];
        cli_fmt_bytes(fixed, fx, sizeof fx);
        if (!left) fprintf(stderr, " a smaller quant or a smaller model (its weights and buffers alone need %s)", fx);
        else fprintf(stderr, ", or a smaller quant of the model");
        fprintf(stderr, "; or free some memory. --fit off loads it anyway (it may then swap or be killed).\n");
        return false;
    }
    if (total > avail / 100 * (100 - CLI_FIT_SLACK_PCT))
        fprintf(stderr,
                "kiln %s: warning: %s fits only tightly: it needs about %s (%s of weights + %s of KV cache for %s + "
                "%s of compute buffers) of the %s available (%s); other programs may push it into swap.\n",
                verb, label, t, w, k, kv_what, c, a, src);
    else if (need->cache && sat_add(total, need->cache) > avail) {
        char cb[32], lb[32];
        cli_fmt_bytes(need->cache, cb, sizeof cb);
        cli_fmt_bytes(avail - total, lb, sizeof lb);
        fprintf(stderr,
                "kiln %s: warning: the prompt cache may grow to %s, more than the %s of memory left after the model "
                "(%s needs %s of the %s available)%s.\n",
                verb, cb, lb, label, t, a, strcmp(verb, "serve") == 0 ? "; --prompt-cache GB limits it" : "");
    }
    return true;
}

void cli_fit_add_draft(const char *draft, kiln_kv_type k, kiln_kv_type v, cli_fit_need *need) {
    if (!draft) return;
    char *path = cli_model_resolve(draft, false);
    kiln_model_info info;
    if (path && kiln_model_info_read(path, &info) == KILN_OK) {
        need->weights = sat_add(need->weights, info.tensor_bytes);
        const uint64_t tok = kiln_kv_bytes_per_token_kv(&info, k, v), n = (uint64_t)need->ctx * (uint64_t)need->rows;
        need->kv = sat_add(need->kv, tok && tok > UINT64_MAX / n ? UINT64_MAX : tok * n);
        need->kv_per_token = sat_add(need->kv_per_token, tok);
    }
    free(path);
}

char *cli_fit_resolve_check(const char *verb, const cli_common *c, int32_t cache_rows, const char *draft, bool on) {
    char *path = cli_model_resolve(c->model, c->verbose);
    if (!path) {
        fprintf(stderr, "kiln %s: out of memory\n", verb);
        return NULL;
    }
    kiln_model_info info;
    if (!on || kiln_model_info_read(path, &info) != KILN_OK) return path; /* the load says what is wrong */
    cli_fit_need need;
    const int32_t ctx = c->ctx ? c->ctx : kiln_default_n_ctx(info.n_ctx_train);
    cli_fit_estimate(path, &info, ctx, 1, c->kv_type, c->kv_type_v, c->batch < ctx ? c->batch : ctx, 1, &need);
    cli_fit_add_draft(draft, c->kv_type, c->kv_type_v, &need);
    if (cache_rows > 0)
        need.cache = need.kv > UINT64_MAX / (uint64_t)cache_rows ? UINT64_MAX : need.kv * (uint64_t)cache_rows;
    const char *base = strrchr(path, '/');
    if (!cli_fit_check(verb, base ? base + 1 : path, &need, NULL, on)) {
        free(path);
        return NULL;
    }
    return path;
}
