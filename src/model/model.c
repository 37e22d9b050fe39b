/*
 * model.c - kiln_model: loads a GGUF file into hyperparameters, weight views and a tokenizer.
 *
 * Loading order: open and validate the GGUF container; read and check the architecture's metadata;
 * build the tokenizer; find every tensor the architecture needs and check its type and shape; copy
 * the weight matrices into anonymous memory (reads through a file mapping measured several times
 * slower on our machines) unless use_mmap, repacking the matrices the kernel set has panel kernels
 * for into 16-row panels (tensor/pack.h) on the way and telling the caller's progress callback (which
 * may cancel) how far the copy got; compute the fingerprint; close the file. Every failure path releases
 * everything and leaves a message naming the problem.
 */
#include "model/model.h"

#include "model/hf.h"
#include "model/load.h"

#include "base/pool.h"
#include "base/sha256.h"
#include "sample/gmask.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_model_params kiln_model_default_params(void) {
    kiln_model_params p = {
        .vocab_only = false, .use_mmap = false, .kernels = KILN_KERNELS_AUTO, .progress = NULL, .progress_user = NULL};
    return p;
}

/* ---- metadata ---------------------------------------------------------------------------------- */

/* Ranges of the hyperparameters a file may give (beyond: a format error naming the key). */
#define MAX_CTX_TRAIN (1 << 24)
#define MAX_EMBD      (1 << 16)
#define MAX_LAYERS    4096
#define MAX_FF        (1 << 20)
#define MAX_HEADS     4096

kiln_status kn_meta_int(const kiln_model *m, const char *suffix, bool required, int64_t lo, int64_t hi, int32_t *out) {
    const kn_gguf *g = &m->gguf;
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    int64_t v;
    if (!kn_gguf_get_i64(g, key, &v)) {
        if (kn_gguf_find(g, key)) return kn_error(KILN_ERR_FORMAT, "metadata '%s' is not an integer", key);
        if (required) return kn_error(KILN_ERR_FORMAT, "missing metadata '%s'", key);
        return KILN_OK;
    }
    if (v < lo || v > hi)
        return kn_error(KILN_ERR_FORMAT, "metadata '%s' = %lld is out of range [%lld, %lld]", key, (long long)v,
                        (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return KILN_OK;
}

kiln_status kn_meta_float(const kiln_model *m, const char *suffix, float *out) {
    const kn_gguf *g = &m->gguf;
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    double v;
    if (!kn_gguf_get_f64(g, key, &v)) {
        if (kn_gguf_find(g, key)) return kn_error(KILN_ERR_FORMAT, "metadata '%s' is not a number", key);
        return KILN_OK;
    }
    if (!(v > 0 && v < 1e30)) return kn_error(KILN_ERR_FORMAT, "metadata '%s' = %g is out of range", key, v);
    *out = (float)v;
    return KILN_OK;
}

/* The dimension-pair index where the YaRN ramp for n_rot rotations at the original context sits
 * (llama.cpp's ggml_rope_yarn_corr_dim). */
static float yarn_corr_dim(int n_rot, int32_t n_ctx_orig, float rotations, float base) {
    return (float)n_rot * logf((float)n_ctx_orig / (rotations * 2.0f * 3.14159265358979f)) / (2.0f * logf(base));
}

/* YaRN scaling by factor (llama.cpp's conventions): angles interpolated by 1 / factor at low
 * frequencies, kept at high ones, ramped between the pairs of beta_slow and beta_fast rotations over
 * the original context ({arch}.rope.scaling.yarn_beta_fast / _slow, default 32 and 1), and the
 * magnitude scaled by 1 + 0.1 ln(factor). */
static kiln_status read_yarn(kiln_model *m, float factor) {
    kn_hparams *hp = &m->hp;
    float beta_fast = 32.0f, beta_slow = 1.0f;
    kiln_status st;
    if ((st = kn_meta_float(m, "rope.scaling.yarn_beta_fast", &beta_fast))) return st;
    if ((st = kn_meta_float(m, "rope.scaling.yarn_beta_slow", &beta_slow))) return st;
    hp->rope_scale = 1.0f / factor;
    hp->yarn_ext = 1.0f;
    hp->yarn_lo = KN_MAX(0.0f, floorf(yarn_corr_dim(hp->n_rot, hp->rope_n_ctx_orig, beta_fast, hp->rope_base)));
    hp->yarn_hi =
        KN_MIN((float)(hp->n_rot - 1), ceilf(yarn_corr_dim(hp->n_rot, hp->rope_n_ctx_orig, beta_slow, hp->rope_base)));
    hp->rope_mscale *= 1.0f + 0.1f * logf(factor);
    return KILN_OK;
}

/* Fills m->hp from the metadata of the architecture named by general.architecture. */
static kiln_status read_hparams(kiln_model *m) {
    const kn_gguf *g = &m->gguf;
    kn_hparams *hp = &m->hp;
    kn_str arch;
    if (!kn_gguf_get_str(g, "general.architecture", &arch))
        return kn_error(KILN_ERR_FORMAT, "missing metadata 'general.architecture'");
    snprintf(m->arch_name, sizeof m->arch_name, "%.*s", (int)KN_MIN(arch.len, 31), arch.ptr);
    for (char *p = m->arch_name; *p; p++)
        if (*p < 0x20 || *p > 0x7e) *p = '?';
    const kn_arch_def *def = kn_arch_find(arch.ptr, arch.len);
    if (!def && !m->vocab_only) {
        char names[128];
        kn_arch_names(names, sizeof names);
        return kn_error(KILN_ERR_UNSUPPORTED, "architecture '%s' is not supported (kiln runs %s)", m->arch_name, names);
    }
    if (m->vocab_only) return KILN_OK;
    m->arch = def;
    hp->rope_style = def->rope_style;
    hp->embd_scale = 1.0f;

    const char *a = m->arch_name;
    kiln_status st;
    hp->n_ctx_train = KILN_N_CTX_TRAIN_ASSUMED;
    if ((st = kn_meta_int(m, "context_length", false, 1, MAX_CTX_TRAIN, &hp->n_ctx_train))) return st;
    if ((st = kn_meta_int(m, "embedding_length", true, 1, MAX_EMBD, &hp->n_embd))) return st;
    if ((st = kn_meta_int(m, "block_count", true, 1, MAX_LAYERS, &hp->n_layer))) return st;
    if ((st = kn_meta_int(m, "feed_forward_length", true, 1, MAX_FF, &hp->n_ff))) return st;
    if ((st = kn_meta_int(m, "attention.head_count", true, 1, MAX_HEADS, &hp->n_head))) return st;
    hp->n_head_kv = hp->n_head;
    if ((st = kn_meta_int(m, "attention.head_count_kv", false, 1, MAX_HEADS, &hp->n_head_kv))) return st;
    if (hp->n_head % hp->n_head_kv != 0)
        return kn_error(KILN_ERR_FORMAT, "head count %d is not a multiple of the KV head count %d", hp->n_head,
                        hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((st = kn_meta_int(m, "attention.key_length", false, 2, KN_MAX_HEAD_DIM, &hp->head_dim))) return st;
    int32_t vdim = hp->head_dim;
    if ((st = kn_meta_int(m, "attention.value_length", false, 2, KN_MAX_HEAD_DIM, &vdim))) return st;
    if (vdim != hp->head_dim)
        return kn_error(KILN_ERR_UNSUPPORTED, "key length %d differs from value length %d", hp->head_dim, vdim);
    if (hp->head_dim < 2 || hp->head_dim % 2 != 0 || hp->head_dim > KN_MAX_HEAD_DIM)
        return kn_error(KILN_ERR_FORMAT, "head dimension %d must be even, positive and at most %d", hp->head_dim,
                        KN_MAX_HEAD_DIM);
    hp->n_rot = hp->head_dim;
    if ((st = kn_meta_int(m, "rope.dimension_count", false, 2, hp->head_dim, &hp->n_rot))) return st;
    if (hp->n_rot % 2 != 0) return kn_error(KILN_ERR_FORMAT, "rope dimension count %d is odd", hp->n_rot);
    hp->norm_eps = def->norm_eps;
    if ((st = kn_meta_float(m, "attention.layer_norm_rms_epsilon", &hp->norm_eps))) return st;
    hp->rope_base = def->rope_base;
    if ((st = kn_meta_float(m, "rope.freq_base", &hp->rope_base))) return st;
    hp->rope_scale = 1.0f;
    char key[128];
    kn_str stype;
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    hp->rope_mscale = 1.0f;
    if ((st = kn_meta_float(m, "rope.scaling.attn_factor", &hp->rope_mscale))) return st;
    hp->rope_n_ctx_orig = hp->n_ctx_train;
    if ((st = kn_meta_int(m, "rope.scaling.original_context_length", false, 1, MAX_CTX_TRAIN, &hp->rope_n_ctx_orig)))
        return st;
    if (kn_gguf_get_str(g, key, &stype) && !kn_str_eq(stype, "none")) {
        float factor = 1.0f;
        if ((st = kn_meta_float(m, "rope.scaling.factor", &factor))) return st;
        if (kn_str_eq(stype, "linear")) {
            hp->rope_scale = 1.0f / factor;
        } else if (kn_str_eq(stype, "yarn")) {
            if ((st = read_yarn(m, factor))) return st;
        } else if (!kn_str_eq(stype, "llama3")) {
            KN_LOGW("rope scaling '%.*s' is not implemented; positions beyond the original context will degrade",
                    (int)KN_MIN(stype.len, 32), stype.ptr);
        }
    }
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    /* an embedding model says how it pools (encoders default to the mean in their hook) */
    int32_t pooling = KN_POOL_NONE;
    if ((st = kn_meta_int(m, "pooling_type", false, 0, KN_POOL_RANK, &pooling))) return st;
    hp->pooling = (kn_pooling)pooling;
    hp->causal = true;
    return def->hparams ? def->hparams(m) : KILN_OK;
}

/* ---- tensors ----------------------------------------------------------------------------------- */

/* Every matrix in weight_mem starts at a multiple of MAT_ALIGN bytes, every vector in vec_mem at a
 * multiple of VEC_ALIGN_FLOATS floats (both 64 bytes: a cache line, an AVX-512 register). */
#define MAT_ALIGN        64
#define VEC_ALIGN_FLOATS 16

struct kn_loader {
    kiln_model *m;
    bool fill;                                    /* pass 2: copy and convert (pass 1: check and size) */
    bool force_f32;                               /* dequantize every matrix to F32 (the reference path) */
    size_t vec_used, vec_cap;                     /* floats */
    size_t mat_used;                              /* bytes of matrices copied so far */
    size_t mat_total;                             /* bytes of all matrices (known after pass 1) */
    bool (*progress)(float fraction, void *user); /* kiln_model_params.progress, or NULL */
    void *progress_user;
    kn_pool *pool; /* pass 2 with copied weights: threads that copy and repack (NULL: the caller alone) */
};
typedef struct kn_loader loader;

/* Tells the caller's progress callback that done of mat_total bytes are in place;
 * KILN_ERR_CANCELLED when it asks to stop. */
static kiln_status report(const loader *L, size_t done) {
    if (!L->progress) return KILN_OK;
    float f = L->mat_total ? (float)((double)done / (double)L->mat_total) : 1.0f;
    if (f > 1.0f) f = 1.0f;
    if (!L->progress(f, L->progress_user)) return kn_error(KILN_ERR_CANCELLED, "loading was cancelled");
    return KILN_OK;
}

/* Bytes copied between two progress reports: a large matrix (the embeddings) is reported in steps,
 * so a progress bar moves and a cancel is honoured within a fraction of a second. */
#define PROGRESS_STEP ((size_t)32 << 20)

static const kn_gguf_tensor *find_tensor(const kn_gguf *g, const char *name) { return kn_gguf_find_tensor(g, name); }

/* Checks the shape of t against {ne0, ne1, ne2} (ne1 = 1 for vectors, ne2 = 1 but for expert tensors). */
static kiln_status check_shape3(const kn_gguf_tensor *t, const char *name, int64_t ne0, int64_t ne1, int64_t ne2) {
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1)
        return kn_error(KILN_ERR_FORMAT, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]",
                        name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                        (long long)ne0, (long long)ne1, (long long)ne2);
    return KILN_OK;
}

static kiln_status check_shape(const kn_gguf_tensor *t, const char *name, int64_t ne0, int64_t ne1) {
    return check_shape3(t, name, ne0, ne1, 1);
}

/* A run of bytes to move into model memory, split into n_tasks contiguous shares of whole units (the
 * destination's first touch, the kernel's zeroing of its pages, is spread over the threads with it):
 * panels of `unit` bytes repacked (pack) or n bytes copied. */
typedef struct move_job {
    bool pack;
    kn_dtype type;
    const uint8_t *src;
    uint8_t *dst;
    size_t unit, n;                 /* bytes per unit (a panel when packing), bytes in all */
    int64_t cols, n_units, n_tasks; /* the matrix's columns (pack); set by run_move */
} move_job;

static void move_task(void *ctx, int64_t task, int worker) {
    (void)worker;
    const move_job *j = ctx;
    const size_t a = (size_t)(j->n_units * task / j->n_tasks) * j->unit,
                 b = KN_MIN((size_t)(j->n_units * (task + 1) / j->n_tasks) * j->unit, j->n);
    if (j->pack) kn_p16_pack(j->type, j->src + a, (int64_t)((b - a) / j->unit) * KN_P16_ROWS, j->cols, j->dst + a);
    else memcpy(j->dst + a, j->src + a, b - a);
}

/* Moves job's bytes on the loader's threads (4 shares per thread, at most one per unit). */
static void run_move(const loader *L, move_job *job) {
    job->n_units = (int64_t)((job->n + job->unit - 1) / job->unit);
    job->n_tasks = KN_MIN(job->n_units, 4 * (int64_t)kn_pool_threads(L->pool));
    kn_pool_run(L->pool, job->n_tasks, move_task, job);
}

/* A weight matrix [rows][cols] stored with ne = {cols, rows}. Pass 1 (copy == false) only checks
 * and counts bytes; pass 2 points the view at the copied (or mapped) bytes. */
static kiln_status get_matrix(loader *L, const char *name, int64_t cols, int64_t rows, kn_weight *w, bool may_pack) {
    const bool copy = L->fill;
    const kn_gguf_tensor *t = find_tensor(&L->m->gguf, name);
    if (!t) return kn_error(KILN_ERR_FORMAT, "missing tensor '%s'", name);
    /* an expert tensor {cols, rows / n, n} (kn_load_experts) is the same bytes as {cols, rows} */
    const int64_t n3 = t->ne[2] >= 1 && rows % t->ne[2] == 0 ? t->ne[2] : 1;
    kiln_status st = check_shape3(t, name, cols, rows / n3, n3);
    if (st) return st;
    if (!kn_dtype_is_weight(t->type))
        return kn_error(KILN_ERR_UNSUPPORTED, "tensor '%s' has type %s, which kiln cannot use as a weight", name,
                        kn_dtype_name(t->type));
    w->type = L->force_f32 ? KN_F32 : t->type;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = kn_row_bytes(w->type, cols);
    const size_t nbytes = w->row_bytes * (size_t)rows;
    size_t aligned = (nbytes + MAT_ALIGN - 1) & ~(size_t)(MAT_ALIGN - 1);
    if (L->m->weight_mem) {
        uint8_t *dst = L->m->weight_mem + L->mat_used;
        if (copy && L->force_f32) {
            const kn_type_traits *tr = kn_type_traits_get(t->type);
            size_t src_rb = kn_row_bytes(t->type, cols);
            for (int64_t r = 0; r < rows; r++)
                tr->to_float(t->data + (size_t)r * src_rb, (float *)(dst + (size_t)r * w->row_bytes), cols);
            if ((st = report(L, L->mat_used + nbytes))) return st;
        } else if (copy && may_pack && L->m->kernels->p16[w->type] && rows % KN_P16_ROWS == 0) {
            /* repacked into 16-row panels for the set's panel kernels, a step of panels at a time */
            const size_t pb = w->row_bytes * KN_P16_ROWS;
            const int64_t step = (int64_t)KN_MAX(PROGRESS_STEP / pb, 1);
            for (int64_t p0 = 0; p0 < rows / KN_P16_ROWS; p0 += step) {
                const int64_t np = KN_MIN(step, rows / KN_P16_ROWS - p0);
                move_job job = {
                    true, w->type, t->data + (size_t)p0 * pb, dst + (size_t)p0 * pb, pb, (size_t)np * pb, cols, 0, 0};
                run_move(L, &job);
                if ((st = report(L, L->mat_used + (size_t)(p0 + np) * pb))) return st;
            }
            w->packed = true;
        } else if (copy) {
            for (size_t off = 0; off < nbytes; off += PROGRESS_STEP) {
                const size_t n = KN_MIN(PROGRESS_STEP, nbytes - off);
                move_job job = {false, w->type, t->data + off, dst + off, (size_t)1 << 16, n, cols, 0, 0};
                run_move(L, &job);
                if ((st = report(L, L->mat_used + off + n))) return st;
            }
        }
        w->data = dst;
    } else {
        w->data = t->data;
    }
    L->mat_used += aligned;
    L->m->n_params += (uint64_t)(rows * cols);
    return KILN_OK;
}

/* A vector of n elements (any float or quantized type), converted to F32 in model memory. Absent
 * and optional: *out = NULL. */
static kiln_status get_vector(loader *L, const char *name, int64_t n, bool required, const float **out) {
    *out = NULL;
    const kn_gguf_tensor *t = find_tensor(&L->m->gguf, name);
    if (!t) return required ? kn_error(KILN_ERR_FORMAT, "missing tensor '%s'", name) : KILN_OK;
    kiln_status st = check_shape(t, name, n, 1);
    if (st) return st;
    const kn_type_traits *tr = kn_type_traits_get(t->type);
    if (!tr || !tr->to_float)
        return kn_error(KILN_ERR_UNSUPPORTED, "tensor '%s' has unsupported type %s", name, kn_dtype_name(t->type));
    if (L->m->vec_mem) {
        float *dst = L->m->vec_mem + L->vec_used;
        tr->to_float(t->data, dst, n);
        for (int64_t i = 0; i < n; i++)
            if (dst[i] != dst[i] || dst[i] - dst[i] != 0)
                return kn_error(KILN_ERR_FORMAT, "tensor '%s' holds a non-finite value at %lld", name, (long long)i);
        *out = dst;
    }
    L->vec_used += (size_t)((n + VEC_ALIGN_FLOATS - 1) & ~(VEC_ALIGN_FLOATS - 1));
    L->m->n_params += (uint64_t)n;
    return KILN_OK;
}

kiln_model *kn_loader_model(kn_loader *L) { return L->m; }

bool kn_load_has(kn_loader *L, const char *name) { return find_tensor(&L->m->gguf, name) != NULL; }

kiln_status kn_load_matrix(kn_loader *L, const char *name, int64_t cols, int64_t rows, kn_weight *w) {
    return get_matrix(L, name, cols, rows, w, true);
}

kiln_status kn_load_matrix_parts(kn_loader *L, const char *name, int64_t cols, int n_parts, const int64_t *rows,
                                 kn_weight *out) {
    int64_t total = 0;
    bool whole_panels = true;
    for (int i = 0; i < n_parts; i++) {
        total += rows[i];
        whole_panels = whole_panels && rows[i] % KN_P16_ROWS == 0;
    }
    kn_weight all = {0};
    kiln_status st = get_matrix(L, name, cols, total, &all, whole_panels);
    if (st) return st;
    int64_t r0 = 0;
    for (int i = 0; i < n_parts; i++) { /* a panel holds the bytes of its 16 rows: the same offset either way */
        out[i] = all;
        out[i].rows = rows[i];
        out[i].data = all.data ? all.data + (size_t)r0 * all.row_bytes : NULL;
        r0 += rows[i];
    }
    return KILN_OK;
}

kiln_status kn_load_vector(kn_loader *L, const char *name, int64_t n, bool required, const float **out) {
    return get_vector(L, name, n, required, out);
}

kiln_status kn_load_experts(kn_loader *L, const char *name, int64_t cols, int64_t rows, int64_t n_expert,
                            kn_weight *w) {
    const kn_gguf_tensor *t = find_tensor(&L->m->gguf, name);
    if (!t) return kn_error(KILN_ERR_FORMAT, "missing tensor '%s'", name);
    kiln_status st = check_shape3(t, name, cols, rows, n_expert);
    if (st) return st;
    /* panels never straddle two experts when each expert's rows are whole panels */
    return get_matrix(L, name, cols, rows * n_expert, w, rows % KN_P16_ROWS == 0);
}

kiln_status kn_load_vectors(kn_loader *L, const char *name, int64_t n, int64_t count, bool required,
                            const float **out) {
    *out = NULL;
    const kn_gguf_tensor *t = find_tensor(&L->m->gguf, name);
    if (!t) return required ? kn_error(KILN_ERR_FORMAT, "missing tensor '%s'", name) : KILN_OK;
    kiln_status st = check_shape(t, name, n, count);
    if (st) return st;
    if (!kn_dtype_is_weight(t->type) && t->type != KN_F32)
        return kn_error(KILN_ERR_UNSUPPORTED, "tensor '%s' has unsupported type %s", name, kn_dtype_name(t->type));
    /* the rows as one vector of n * count elements: get_vector checks a 1-row shape, so convert here */
    const kn_type_traits *tr = kn_type_traits_get(t->type);
    if (!tr || !tr->to_float)
        return kn_error(KILN_ERR_UNSUPPORTED, "tensor '%s' has unsupported type %s", name, kn_dtype_name(t->type));
    const int64_t total = n * count;
    if (L->m->vec_mem) {
        float *dst = L->m->vec_mem + L->vec_used;
        const size_t rb = kn_row_bytes(t->type, n);
        for (int64_t r = 0; r < count; r++) tr->to_float(t->data + (size_t)r * rb, dst + r * n, n);
        for (int64_t i = 0; i < total; i++)
            if (dst[i] != dst[i] || dst[i] - dst[i] != 0)
                return kn_error(KILN_ERR_FORMAT, "tensor '%s' holds a non-finite value at %lld", name, (long long)i);
        *out = dst;
    }
    L->vec_used += (size_t)((total + VEC_ALIGN_FLOATS - 1) & ~(VEC_ALIGN_FLOATS - 1));
    L->m->n_params += (uint64_t)total;
    return KILN_OK;
}

kn_rope_cfg kn_rope_default(const kiln_model *m) {
    const kn_hparams *hp = &m->hp;
    return (kn_rope_cfg){.style = hp->rope_style,
                         .n_rot = hp->n_rot,
                         .base = hp->rope_base,
                         .pos_scale = hp->rope_scale,
                         .freq_div = m->rope_freqs,
                         .freq_div_long = m->rope_freqs_long,
                         .n_ctx_orig = hp->rope_n_ctx_orig,
                         .mscale = hp->rope_mscale,
                         .yarn_ext = hp->yarn_ext,
                         .yarn_lo = hp->yarn_lo,
                         .yarn_hi = hp->yarn_hi};
}

const char *kn_blk_name(char buf[96], int l, const char *suffix) {
    snprintf(buf, 96, "blk.%d.%s", l, suffix);
    return buf;
}

int kn_layer_weights(const kn_layer *ly, const kn_weight **out, int cap) {
    const kn_weight *all[] = {&ly->wq,     &ly->wk,         &ly->wv,       &ly->wo,     &ly->w_gate,  &ly->w_up,
                              &ly->w_down, &ly->moe.router, &ly->moe.gate, &ly->moe.up, &ly->moe.down};
    int n = 0;
    for (size_t i = 0; i < KN_ARRAY_LEN(all) && n < cap; i++)
        if (all[i]->rows) out[n++] = all[i];
    return n;
}

/* Walks every tensor of the architecture: the model-wide ones, then the family's (model/arch.h).
 * Called twice: to size the buffers (fill == false), then to fill them. */
static kiln_status map_tensors(loader *L, bool fill) {
    kiln_model *m = L->m;
    const kn_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, V = hp->n_vocab;
    kiln_status st;
    L->fill = fill;
    L->vec_used = 0;
    L->mat_used = 0;
    m->n_params = 0;
    if ((st = get_matrix(L, "token_embd.weight", d, V, &m->tok_embd, true))) return st;
    if ((st = get_vector(L, "output_norm.weight", d, hp->causal, &m->output_norm))) return st;
    if (find_tensor(&m->gguf, "output.weight")) {
        if ((st = get_matrix(L, "output.weight", d, V, &m->output, true))) return st;
        m->hp.tied_output = false;
    } else {
        m->output = m->tok_embd;
        m->hp.tied_output = true;
    }
    if ((st = get_vector(L, "rope_freqs.weight", hp->n_rot / 2, false, &m->rope_freqs))) return st;
    for (int l = -1; l < hp->n_layer; l++)
        if ((st = m->arch->tensors(L, l))) return st;
    return KILN_OK;
}

/* ---- fingerprint ------------------------------------------------------------------------------- */

/* Bytes hashed from the start and from the end of every tensor's data. */
#define FP_SAMPLE_BYTES 4096

/* SHA-256 over general.architecture, every `{arch}.*` key with its value, the tensor table (name,
 * type, shape) and the first and last FP_SAMPLE_BYTES of every tensor's bytes (so that two
 * fine-tunes of one architecture differ without hashing gigabytes). */
static void compute_fingerprint(kiln_model *m) {
    const kn_gguf *g = &m->gguf;
    kn_sha256 h;
    kn_sha256_init(&h);
    size_t alen = strlen(m->arch_name);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kn_gguf_kv *kv = &g->kv[i];
        bool arch_key = kv->key.len > alen && memcmp(kv->key.ptr, m->arch_name, alen) == 0 && kv->key.ptr[alen] == '.';
        if (!arch_key && !kn_str_eq(kv->key, "general.architecture")) continue;
        kn_sha256_update(&h, kv->key.ptr, kv->key.len);
        kn_sha256_update(&h, &kv->type, sizeof kv->type);
        if (kv->type == KN_GGUF_STRING) {
            kn_sha256_update(&h, kv->str.ptr, kv->str.len);
        } else if (kv->type == KN_GGUF_ARRAY) {
            kn_sha256_update(&h, &kv->arr_n, sizeof kv->arr_n);
            if (kv->arr_type != KN_GGUF_STRING)
                kn_sha256_update(&h, kv->arr_data, kv->arr_n * kn_gguf_type_size(kv->arr_type));
        } else {
            kn_sha256_update(&h, &kv->v, sizeof kv->v);
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kn_gguf_tensor *t = &g->tensors[i];
        kn_sha256_update(&h, t->name.ptr, t->name.len);
        kn_sha256_update(&h, &t->type, sizeof t->type);
        kn_sha256_update(&h, t->ne, sizeof t->ne);
        const size_t head = KN_MIN(t->nbytes, FP_SAMPLE_BYTES);
        kn_sha256_update(&h, t->data, head);
        const size_t tail = KN_MIN(t->nbytes - head, FP_SAMPLE_BYTES); /* bytes after the head, at most a sample */
        if (tail) kn_sha256_update(&h, t->data + t->nbytes - tail, tail);
    }
    kn_sha256_hex(&h, m->fingerprint);
}

/* SHA-256 over every `tokenizer.*` key with its type and value (string arrays element by element,
 * each with its length), in file order: the vocabulary, merges, scores, token types, special ids
 * and pre-tokenizer name, i.e. everything that maps text to token ids. tokenizer.chat_template*
 * keys are left out: a template renders text and does not change which ids a text becomes, so
 * editing one must not invalidate KV caches keyed on this hash. */
static void compute_tokenizer_hash(kiln_model *m) {
    const kn_gguf *g = &m->gguf;
    kn_sha256 h;
    kn_sha256_init(&h);
    static const char pre[] = "tokenizer.", tmpl[] = "tokenizer.chat_template";
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kn_gguf_kv *kv = &g->kv[i];
        if (kv->key.len < sizeof pre - 1 || memcmp(kv->key.ptr, pre, sizeof pre - 1) != 0) continue;
        if (kv->key.len >= sizeof tmpl - 1 && memcmp(kv->key.ptr, tmpl, sizeof tmpl - 1) == 0) continue;
        const uint64_t klen = kv->key.len;
        kn_sha256_update(&h, &klen, sizeof klen);
        kn_sha256_update(&h, kv->key.ptr, kv->key.len);
        kn_sha256_update(&h, &kv->type, sizeof kv->type);
        if (kv->type == KN_GGUF_STRING) {
            kn_sha256_update(&h, &kv->str.len, sizeof kv->str.len);
            kn_sha256_update(&h, kv->str.ptr, kv->str.len);
        } else if (kv->type == KN_GGUF_ARRAY) {
            kn_sha256_update(&h, &kv->arr_type, sizeof kv->arr_type);
            kn_sha256_update(&h, &kv->arr_n, sizeof kv->arr_n);
            if (kv->arr_type == KN_GGUF_STRING) {
                const uint8_t *cur = kv->arr_data;
                for (uint64_t k = 0; k < kv->arr_n; k++) {
                    const kn_str s = kn_gguf_next_str(&cur);
                    kn_sha256_update(&h, &s.len, sizeof s.len);
                    kn_sha256_update(&h, s.ptr, s.len);
                }
            } else {
                kn_sha256_update(&h, kv->arr_data, kv->arr_n * kn_gguf_type_size(kv->arr_type));
            }
        } else {
            kn_sha256_update(&h, &kv->v, sizeof kv->v);
        }
    }
    kn_sha256_final(&h, m->tok_hash);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        m->tokenizer_hash[2 * i] = hex[m->tok_hash[i] >> 4];
        m->tokenizer_hash[2 * i + 1] = hex[m->tok_hash[i] & 15];
    }
    m->tokenizer_hash[64] = 0;
}

/* Keeps a NUL-terminated copy of tokenizer.chat_template (the file mapping may close). A template
 * containing a NUL byte is a format error rather than silently truncated. */
static kiln_status copy_chat_template(kiln_model *m) {
    kn_str t;
    if (!kn_gguf_get_str(&m->gguf, "tokenizer.chat_template", &t)) return KILN_OK;
    if (memchr(t.ptr, 0, t.len)) return kn_error(KILN_ERR_FORMAT, "tokenizer.chat_template contains a NUL byte");
    if (!(m->chat_template = malloc(t.len + 1))) return KILN_ERR_NOMEM;
    memcpy(m->chat_template, t.ptr, t.len);
    m->chat_template[t.len] = 0;
    return KILN_OK;
}

/* The generation settings a model's author recommends (general.sampling.*), over the library's
 * defaults. A value outside the sampling parameter table's range (kiln_sampler_param_range) is
 * ignored with a warning. */
static void read_sampling_defaults(kiln_model *m) {
    static const struct {
        const char *key;
        kiln_sampler_param param;
    } keys[] = {
        {"general.sampling.temp", KILN_SAMPLER_TEMPERATURE},
        {"general.sampling.top_k", KILN_SAMPLER_TOP_K},
        {"general.sampling.top_p", KILN_SAMPLER_TOP_P},
        {"general.sampling.min_p", KILN_SAMPLER_MIN_P},
        {"general.sampling.penalty_repeat", KILN_SAMPLER_REPEAT_PENALTY},
        {"general.sampling.penalty_last_n", KILN_SAMPLER_PENALTY_LAST_N},
    };
    m->sampling = kiln_sampler_default_params();
    for (size_t i = 0; i < KN_ARRAY_LEN(keys); i++) {
        double v;
        if (!kn_gguf_get_f64(&m->gguf, keys[i].key, &v)) continue;
        if (kiln_sampler_param_set(&m->sampling, keys[i].param, v) != KILN_OK)
            kn_log(KILN_LOG_WARN, "ignoring %s: %s", keys[i].key, kn_error_msg());
    }
    kn_error_clear();
}

/* ---- load -------------------------------------------------------------------------------------- */

static kiln_status load(kiln_model *m, const char *path, const kiln_model_params *p, bool force_f32) {
    const bool hf = kn_hf_is_dir(path); /* a Hugging Face / MLX directory, presented as GGUF (model/hf.h) */
    kiln_status st = hf ? kn_hf_open(path, &m->gguf) : kn_gguf_open(path, &m->gguf);
    if (st) return st;
    if ((st = read_hparams(m))) return st;
    if ((st = hf ? kn_hf_tokenizer(&m->gguf, &m->tok) : kn_tokenizer_load(&m->gguf, &m->tok))) return st;
    m->hp.n_vocab = kn_tok_n_vocab(m->tok);
    if (hf) kn_hf_fit_vocab(&m->gguf, m->hp.n_vocab);
    if ((st = copy_chat_template(m))) return st;
    read_sampling_defaults(m);
    compute_fingerprint(m);
    compute_tokenizer_hash(m);
    if (m->vocab_only) {
        snprintf(m->desc, sizeof m->desc, "%s vocabulary, %d tokens", m->arch_name, m->hp.n_vocab);
        return KILN_OK;
    }
    m->layers = kn_calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) return KILN_ERR_NOMEM;
    loader L = {.m = m, .force_f32 = force_f32, .progress = p->progress, .progress_user = p->progress_user};
    const bool keep_mapping = p->use_mmap && !force_f32;
    if ((st = map_tensors(&L, false))) return st; /* pass 1: check and size */
    L.mat_total = L.mat_used;
    if ((st = report(&L, 0))) return st;
    m->vec_mem = kn_alloc_aligned(KN_MAX(L.vec_used, 1) * sizeof(float));
    if (!m->vec_mem) return KILN_ERR_NOMEM;
    if (!keep_mapping) {
        m->weight_bytes = L.mat_used;
        m->weight_mem = kn_alloc_aligned(KN_MAX(L.mat_used, 1));
        if (!m->weight_mem) return KILN_ERR_NOMEM;
    }
    /* the copy and repack of the weights run on the machine's cores (up to 8: then memory bounds it) */
    if (!keep_mapping && kn_pool_new(KN_MAX(KN_MIN(kn_physical_cores(), 8), 1), &L.pool) != KILN_OK) L.pool = NULL;
    st = map_tensors(&L, true); /* pass 2: convert and copy */
    kn_pool_free(L.pool);
    if (st) return st;
    if ((st = report(&L, L.mat_total))) return st;
    if (!keep_mapping) {
        kn_gguf_close(&m->gguf); /* everything needed was copied */
    } else {
        m->weight_bytes = L.mat_used;
    }
    const char *wtype = kn_dtype_name(m->layers[0].wq.type);
    snprintf(m->desc, sizeof m->desc, "%s %dd %dL %dH/%dKV ff%d %s, vocab %d, %.2f M params", m->arch_name,
             m->hp.n_embd, m->hp.n_layer, m->hp.n_head, m->hp.n_head_kv, m->hp.n_ff, wtype, m->hp.n_vocab,
             (double)m->n_params / 1e6);
    return KILN_OK;
}

kiln_status kiln_model_load(const char *path, const kiln_model_params *params, kiln_model **out) {
    return kn_model_load_ex(path, params, false, out);
}

kiln_status kn_model_load_ex(const char *path, const kiln_model_params *params, bool force_f32, kiln_model **out) {
    kn_error_clear();
    if (!out) return kn_error(KILN_ERR_INVALID_ARG, "kiln_model_load: out is NULL");
    *out = NULL;
    kiln_model_params p = params ? *params : kiln_model_default_params();
    kiln_model *m = kn_calloc(1, sizeof *m);
    if (!m) return KILN_ERR_NOMEM;
    kn_errslot_init(&m->err);
    m->vocab_only = p.vocab_only;
    if (p.kernels != KILN_KERNELS_AUTO && p.kernels != KILN_KERNELS_REF) {
        kiln_model_free(m);
        return kn_error(KILN_ERR_INVALID_ARG, "unknown kernels choice %d", (int)p.kernels);
    }
    m->kernels = kn_kernels_get(p.kernels == KILN_KERNELS_REF ? KN_KERNELS_REF : KN_KERNELS_AUTO);
    kiln_status st = load(m, path ? path : "", &p, force_f32);
    if (st) {
        kn_error_prefix("%s", path ? path : "(null)");
        kiln_model_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}

void kiln_model_free(kiln_model *m) {
    if (!m) return;
    kn_vtrie_free(atomic_load(&m->vtrie));
    kn_vtrie_free(atomic_load(&m->vtrie_special));
    kn_tokenizer_free(m->tok);
    free(m->chat_template);
    kn_gguf_close(&m->gguf);
    kn_free_aligned(m->weight_mem);
    kn_free_aligned(m->vec_mem);
    free(m->layers);
    kn_errslot_destroy(&m->err);
    free(m);
}

void kn_weight_row_f32(const kn_weight *w, int64_t r, float *out) {
    if (w->packed) kn_p16_row_f32(w->type, w->data, w->cols, r, out);
    else kn_type_traits_get(w->type)->to_float(w->data + (size_t)r * w->row_bytes, out, w->cols);
}

/* ---- accessors --------------------------------------------------------------------------------- */

const char *kiln_model_last_error(const kiln_model *m) {
    return m ? kn_errslot_read((kn_errslot *)&m->err) : kn_error_msg();
}
const char *kiln_model_arch(const kiln_model *m) { return m->arch_name; }
const char *kiln_model_desc(const kiln_model *m) { return m->desc; }
const char *kiln_model_kernels(const kiln_model *m) { return m->kernels->name; }
const char *kiln_model_fingerprint(const kiln_model *m) { return m->fingerprint; }
const char *kiln_model_tokenizer_hash(const kiln_model *m) { return m->tokenizer_hash; }
kiln_sampler_params kiln_model_sampler_params(const kiln_model *m) { return m->sampling; }
int32_t kiln_model_n_vocab(const kiln_model *m) { return m->hp.n_vocab; }
int32_t kiln_model_n_ctx_train(const kiln_model *m) { return m->hp.n_ctx_train; }
int32_t kiln_model_n_embd(const kiln_model *m) { return m->hp.n_embd; }
int32_t kiln_model_n_layer(const kiln_model *m) { return m->hp.n_layer; }
uint64_t kiln_model_n_params(const kiln_model *m) { return m->n_params; }
uint64_t kiln_model_size_bytes(const kiln_model *m) { return m->weight_bytes; }
