/*
 * kernels.h - CPU-feature detection and the dispatch table of compute kernels.
 *
 * A kernel set supplies, per weight type, a GEMM tile kernel (weight rows x activation rows), and per
 * activation type (Q8_0, Q8_1, Q8_K) a quantizer. The reference set wraps the scalar kernels of the
 * type-traits table (dtype.h), which stay the source of truth; SIMD sets ("avx2": AVX2+FMA+F16C,
 * "avx2vnni": the same with 256-bit AVX-VNNI, "avx512": AVX-512 with VNNI/BF16) are tested against it.
 * `--kernels ref` selects the reference set; the environment variable KILN_KERNELS=NAME makes the
 * automatic choice take the named set instead of the best one (where this CPU can run it), so the
 * weaker sets can be measured and tested on a CPU that has a stronger one.
 *
 * Tile contract (what makes greedy output independent of batch size and of the tile shape): every
 * output of a tile call is bit-identical to the output of a 1x1 call on the same weight row and
 * activation row; and for a given kernel set, a kernel's value for (row, token) never depends on
 * which other rows or tokens share the call.
 */
#ifndef KN_KERNELS_H
#define KN_KERNELS_H

#include "tensor/dtype.h"
#include "tensor/kvq.h"
#include "tensor/pack.h"

typedef struct kn_cpu {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16;
    bool avxvnni;
    bool amd;   /* x86: the vendor is AMD */
    int family; /* x86: the family, extended family included (AMD: 0x17 Zen 1/2, 0x19 Zen 3/4, 0x1A Zen 5) */
    bool neon, dotprod, i8mm; /* ARM64 (base/cpu.h) */
} kn_cpu;

/* Features of the running CPU (detected once; also honours OS support for the register state). */
const kn_cpu *kn_cpu_features(void);

/* GEMM tile: for r < nr and t < nt,
 *   out[t * ldo + r] = dot(weight row r, activation row t)
 * over n elements, where weight row r starts at w + r * w_stride and activation row t (already in
 * the weight type's vec_dot_type) at x + t * x_stride. 1 <= nr <= set->tile_r, 1 <= nt <= set->tile_t. */
typedef void (*kn_gemm_fn)(int64_t n, const uint8_t *w, size_t w_stride, int nr, const uint8_t *x, size_t x_stride,
                           int nt, float *out, size_t ldo);

/* Row helpers over one KV row of n elements in F16 (raw binary16 bits) or F32, in the reference's
 * order (attend.c):
 *   dot:  returns sum_i k[i] * q[i]
 *   axpy: y[i] += a * v[i] */
typedef float (*kn_kv_dot_fn)(const void *k, const float *q, int n);
typedef void (*kn_kv_axpy_fn)(float a, const void *v, float *y, int n);

/* Where the K and V rows of an attention call lie: the call's position p (0 <= p < n) is row
 * i = first + p of a block table, in block i / bt at row i % bt; its K head slice starts at
 * kb[i / bt] + koff + (i % bt) * kstride and its V head slice at vb[i / bt] + voff + (i % bt) * vstride
 * (bytes). A contiguous cache is one block (kn_attend_rows_flat); a paged one (cache/pool.h) has blocks
 * of a few positions, which the kernels read in place: they take the row pointers of each group of 16
 * positions from kn_attend_rows_at and compute exactly as over a contiguous cache.
 * A call may cover nkv KV heads of the same rows (0 or 1: one): head g's slices lie g * khead and
 * g * vhead bytes after head 0's. The kernels then sweep the positions once for all of them, block by
 * block, so that a position's heads, stored side by side, are read together: one head at a time strides
 * through the cache a whole row per position, which the hardware prefetchers follow poorly. */
typedef struct kn_attend_rows {
    const uint8_t *const *kb, *const *vb; /* block base addresses */
    size_t koff, voff;                    /* added to every block's base */
    size_t kstride, vstride;              /* bytes from one position's row to the next within a block */
    int32_t first, bt;                    /* row of position 0; positions per block (>= 1) */
    int32_t nkv;                          /* KV heads of the call (0 or 1: one) */
    size_t khead, vhead;                  /* bytes from one KV head's slice to the next (nkv > 1) */
} kn_attend_rows;

/* The KV heads of a call (at least 1). */
static inline int kn_attend_nkv(const kn_attend_rows *r) { return r->nkv > 1 ? r->nkv : 1; }

/* The rows of KV head g of a call, as a call of that one head. */
static inline kn_attend_rows kn_attend_rows_head(const kn_attend_rows *r, int g) {
    kn_attend_rows h = *r;
    h.koff += (size_t)g * r->khead;
    h.voff += (size_t)g * r->vhead;
    h.nkv = 1;
    return h;
}

/* The rows of one contiguous range: position p's K at *k + p * kstride, its V at *v + p * vstride (k and v
 * must outlive the use of the result). */
static inline kn_attend_rows kn_attend_rows_flat(const uint8_t *const *k, const uint8_t *const *v, size_t kstride,
                                                 size_t vstride) {
    return (kn_attend_rows){.kb = k, .vb = v, .kstride = kstride, .vstride = vstride, .first = 0, .bt = INT32_MAX};
}

/* The K and V row addresses of positions p0 .. p0 + cnt - 1 into kp[cnt] and vp[cnt]. */
static inline void kn_attend_rows_at(const kn_attend_rows *r, int32_t p0, int cnt, const uint8_t **kp,
                                     const uint8_t **vp) {
    const int32_t i = r->first + p0;
    int32_t b = i / r->bt, o = i % r->bt;
    for (int j = 0; j < cnt; j++) {
        kp[j] = r->kb[b] + r->koff + (size_t)o * r->kstride;
        vp[j] = r->vb[b] + r->voff + (size_t)o * r->vstride;
        if (++o == r->bt) {
            b++;
            o = 0;
        }
    }
}

/* Prefetches (into L1) the K and V rows of positions p .. p + 15 (those below n): the call's heads'
 * slices, `bytes` each (the format's head vector, kn_kvq_head_bytes), and what lies between them: an
 * attention kernel's look-ahead a block or two before it reads them. A head's rows lie a whole cache row
 * apart (every KV head of a position is stored together), a stride the hardware prefetchers follow
 * poorly: one core read the caches of a batched decode step (every row's, every layer's, from memory,
 * paged) at 5.5 GB/s without it, 8 with it, one head a call (bench/attend.c, Zen 5). */
static inline void kn_attend_prefetch(const kn_attend_rows *r, int32_t p, int32_t n, size_t bytes) {
    if (p >= n) return;
    const uint8_t *kp[16], *vp[16];
    const int cnt = n - p < 16 ? (int)(n - p) : 16;
    const size_t more = (size_t)(kn_attend_nkv(r) - 1), kb = more * r->khead + bytes, vb = more * r->vhead + bytes;
    kn_attend_rows_at(r, p, cnt, kp, vp);
    for (int j = 0; j < cnt; j++) kn_prefetch_piece(kp[j], kb, 0), kn_prefetch_piece(vp[j], vb, 0);
}

/* Blocks of 16 positions an attention kernel prefetches ahead of the one it computes (kn_attend_prefetch;
 * 1 to 4 measured alike). */
#define KN_ATTEND_PF_BLOCKS 2

/* Attention of nq query heads (1 <= nq <= KN_ATTEND_MAX_Q) per KV head, for the nkv KV heads of *r
 * (kn_attend_nkv; nkv * nq <= KN_ATTEND_MAX_HEADS), over n cached positions (rows as *r says), K and V
 * in one format: q[nkv][nq][hd] -> out[nkv][nq][hd], for each KV head g and query head h,
 *   out[g][h][hd] = sum_p softmax_p(scale * k_gp . q[g][h]) v_gp
 * with the blocked online softmax of attend.c, which every set computes bit for bit: each head's
 * output is the one-head algorithm's, whatever nq and nkv (the heads only share the loads of K and V,
 * and the sweep over the positions), and whatever the blocks the rows lie in. */
#define KN_ATTEND_MAX_Q     8
#define KN_ATTEND_MAX_HEADS 32
typedef void (*kn_attend_fn)(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale,
                             float *out);
void kn_attend_f16_ref(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale, float *out);
void kn_attend_f32_ref(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale, float *out);
/* The blocked attention of attend.c over the given row helpers (kn_attend_fn contract otherwise). */
void kn_attend_blocked(kn_kv_dot_fn dot, kn_kv_axpy_fn axpy, const kn_attend_rows *r, int32_t n, const float *q, int nq,
                       int hd, float scale, float *out);

/* The reference attention with soft-capped scores, score = cap * tanh(scale * k . q / cap) (cap > 0),
 * over F16 (f16) or F32 rows; otherwise the kn_attend_fn contract. Every kernel set uses this one. */
void kn_attend_softcap_ref(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale, float cap,
                           bool f16, float *out);

/* Attention over K rows in KV format tk and V rows in format tv (kvq.h), scores soft-capped when
 * cap > 0; otherwise the kn_attend_fn contract. The reference
 * for every format and pair of formats (an element's value is kn_kvq_elem's; the steps are attend.c's). */
void kn_attend_kv_ref(kn_kvt tk, kn_kvt tv, const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd,
                      float scale, float cap, float *out);
/* The reference kn_attend_fn for K and V both in format t (NULL for an unknown format). */
kn_attend_fn kn_attend_ref_for(kn_kvt t);

/* e^x as every kernel set computes it in attention (attend.c): 0 below KN_EXPF_MIN (and for NaN),
 * x clamped to KN_EXPF_MAX, else within 2 ulp of e^x through fixed float steps. */
#define KN_EXPF_MIN (-87.0f)
#define KN_EXPF_MAX 88.0f
float kn_expf_ref(float x);

/* The gated activation of a feed-forward block over n elements: gate[i] = act(gate[i]) * up[i], act
 * SiLU (gelu false) or the tanh form of GELU, through kn_expf_ref and the fixed float steps of act.c,
 * which every set computes bit for bit. */
typedef void (*kn_glu_fn)(float *gate, const float *up, int64_t n, bool gelu);
void kn_glu_ref(float *gate, const float *up, int64_t n, bool gelu);
void kn_glu_avx2(float *gate, const float *up, int64_t n, bool gelu);   /* x86-64, AVX2 + FMA */
void kn_glu_avx512(float *gate, const float *up, int64_t n, bool gelu); /* x86-64, AVX-512F */
void kn_glu_neon(float *gate, const float *up, int64_t n, bool gelu);   /* ARM64 */

/* The normalizer of a softmax over n elements: sum_i e_i in double, e_i = kn_expf_ref((x[i] - sub) *
 * scale) (stored to e[i] unless e is NULL), element i added to lane i % 16 in index order, the 16 lanes
 * then added from 0 to 15 (sumexp.c), which every set computes bit for bit. */
typedef double (*kn_sumexp_fn)(const float *x, int64_t n, float sub, float scale, float *e);
double kn_sumexp_ref(const float *x, int64_t n, float sub, float scale, float *e);
double kn_sumexp_avx2(const float *x, int64_t n, float sub, float scale, float *e);   /* x86-64, AVX2 + FMA */
double kn_sumexp_avx512(const float *x, int64_t n, float sub, float scale, float *e); /* x86-64, AVX-512F */
double kn_sumexp_neon(const float *x, int64_t n, float sub, float scale, float *e);   /* ARM64 */

/* The sampler's passes over a logits row (logit_scan.c), each giving the reference's result on every
 * set (n below 2^31):
 *   clean:  w[i] = x[i] with NaN read as -inf (x may be w); *count = the w[i] above -inf; returns the
 *           greatest w[i], -inf when none (a -0.0 / +0.0 tie may give either zero);
 *   argmax: the first index of the greatest non-NaN x[i] (-0.0 equals +0.0), -1 when every x[i] is NaN;
 *   above:  the first index i with x[i] > t (a NaN never is), n when none. */
typedef float (*kn_logits_clean_fn)(const float *x, float *w, int64_t n, int64_t *count);
typedef int64_t (*kn_argmax_fn)(const float *x, int64_t n);
typedef int64_t (*kn_above_fn)(const float *x, int64_t n, float t);
float kn_logits_clean_ref(const float *x, float *w, int64_t n, int64_t *count);
float kn_logits_clean_avx2(const float *x, float *w, int64_t n, int64_t *count);   /* x86-64, AVX2 */
float kn_logits_clean_avx512(const float *x, float *w, int64_t n, int64_t *count); /* x86-64, AVX-512F */
float kn_logits_clean_neon(const float *x, float *w, int64_t n, int64_t *count);   /* ARM64 */
int64_t kn_argmax_ref(const float *x, int64_t n);
int64_t kn_argmax_avx2(const float *x, int64_t n);
int64_t kn_argmax_avx512(const float *x, int64_t n);
int64_t kn_argmax_neon(const float *x, int64_t n);
int64_t kn_above_ref(const float *x, int64_t n, float t);
int64_t kn_above_avx2(const float *x, int64_t n, float t);
int64_t kn_above_avx512(const float *x, int64_t n, float t);
int64_t kn_above_neon(const float *x, int64_t n, float t);

typedef struct kn_kernels {
    const char *name; /* "ref", "avx2", "avx2vnni", "avx512", "neon", "neon+dotprod", "neon+i8mm" */
    kn_attend_fn attend_f16, attend_f32;
    kn_attend_fn attend_kv[KN_KVT_COUNT]; /* per KV format (kvq.h), K and V alike; NULL: attend_f16 /
                                             attend_f32 for those formats, else the reference */
    kn_glu_fn glu;                        /* the gated activation (never NULL) */
    kn_sumexp_fn sumexp;                  /* a softmax's normalizer (never NULL) */
    kn_logits_clean_fn logits_clean;      /* the sampler's passes (never NULL) */
    kn_argmax_fn argmax;
    kn_above_fn above;
    int tile_r, tile_t;                        /* largest tile the gemm kernels take */
    kn_gemm_fn gemm[KN_DTYPE_COUNT];           /* per weight type; NULL: use the reference */
    kn_from_float_fn quantize[KN_DTYPE_COUNT]; /* per activation type; NULL: use the reference */
    /* Panel kernels (pack.h) per weight type; NULL: matrices of that type stay in the plain layout.
     * A model loaded with this set repacks every matrix that has one (and 16 | rows). */
    kn_p16_fn p16[KN_DTYPE_COUNT];
    int p16_tile_t;  /* tokens per panel-kernel call at most */
    int p16_tile_pf; /* tokens per call of a long prefill (<= p16_tile_t): the kernels' best width */
} kn_kernels;

/* Tokens per panel-kernel call of set k for a run of L tokens over the same panels: all of them in one
 * call when they fit (L <= p16_tile_t), else p16_tile_pf per call. The first call over a panel streams it
 * from memory, and the more tokens it takes, the more of that stream hides under its compute: a
 * server's batched decode step (one token per row) is such a short run, which AVX-512 computes in one
 * pass of up to 8 tokens where a long prefill takes 5 at a time. */
static inline int kn_p16_tile(const kn_kernels *k, int64_t L) { return L <= k->p16_tile_t ? (int)L : k->p16_tile_pf; }

typedef enum kn_kernel_choice { KN_KERNELS_AUTO = 0, KN_KERNELS_REF = 1 } kn_kernel_choice;

/* The kernel set to use: the reference set, or the best this CPU supports (or the one KILN_KERNELS
 * names, when this CPU can run it; an unknown or unsupported name is reported once on stderr and
 * ignored). Never NULL. */
const kn_kernels *kn_kernels_get(kn_kernel_choice choice);

/* The set called name ("ref", "avx2", "avx2vnni", "avx512"), or NULL when the name is unknown or this
 * CPU cannot run that set. */
const kn_kernels *kn_kernels_named(const char *name);

/* The attention kernel of set k for K and V in KV format t (kn_attend_fn; NULL for an unknown format). */
kn_attend_fn kn_kernels_attend(const kn_kernels *k, kn_kvt t);

/* The GEMM kernel of set k for weight type t (falls back to the reference one). */
kn_gemm_fn kn_kernels_gemm(const kn_kernels *k, kn_dtype t);
/* The quantizer of set k for activation type t (falls back to the reference one). */
kn_from_float_fn kn_kernels_quantize(const kn_kernels *k, kn_dtype t);

/* The GEMM entry (kn_gemm_fn) NAME of a K-quant weight type KIND, over a SIMD set's two tiles:
 * DEC(KIND, n_superblocks, w, ws, nr, x, out) for one token and T4(KIND, n_superblocks, w, ws, nr, x,
 * xs, nt, out, ldo) for 2..4 tokens, both computing every output in the canonical order (so they
 * agree with each other and the reference bit for bit). The common shapes (4 rows x 1..4 tokens)
 * each get an inlined copy with constant loop bounds, other shapes (the last rows of a matrix) the
 * generic copy. Used by every SIMD set's K-quant file, so the ladder exists once. */
#define KN_K_GEMM(NAME, KIND, DEC, T4)                                                                                 \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        const int64_t nb = n / KN_QK_K;                                                                                \
        if (nr == 4 && nt == 1) DEC(KIND, nb, w, ws, 4, x, out);                                                       \
        else if (nr == 4 && nt == 4) T4(KIND, nb, w, ws, 4, x, xs, 4, out, ldo);                                       \
        else if (nr == 4 && nt == 3) T4(KIND, nb, w, ws, 4, x, xs, 3, out, ldo);                                       \
        else if (nr == 4 && nt == 2) T4(KIND, nb, w, ws, 4, x, xs, 2, out, ldo);                                       \
        else if (nt == 1) DEC(KIND, nb, w, ws, nr, x, out);                                                            \
        else T4(KIND, nb, w, ws, nr, x, xs, nt, out, ldo);                                                             \
    }

/* The Q8_0 and Q8_1 activation quantizers (kn_from_float_fn) of a SIMD set, over its block function
 * BLOCK(x[32], qs[32], &sum) -> fp16 scale (sum: the sum of the quants). Byte-identical to
 * kn_q8_0_from_float / kn_q8_1_from_float (quant.h conventions; a partial block is ignored). */
#define KN_Q8_QUANTIZERS(BLOCK)                                                                                        \
    static void quantize_q8_0(const float *src, void *dst, int64_t n) {                                                \
        kn_block_q8_0 *b = dst;                                                                                        \
        int sum;                                                                                                       \
        for (int64_t i = 0; i < n / KN_QK8_0; i++) b[i].d = BLOCK(src + i * KN_QK8_0, b[i].qs, &sum);                  \
    }                                                                                                                  \
    static void quantize_q8_1(const float *src, void *dst, int64_t n) {                                                \
        kn_block_q8_1 *b = dst;                                                                                        \
        int sum;                                                                                                       \
        for (int64_t i = 0; i < n / KN_QK8_1; i++) {                                                                   \
            b[i].d = BLOCK(src + i * KN_QK8_1, b[i].qs, &sum);                                                         \
            b[i].s = kn_fp32_to_fp16_sat(kn_fp16_to_fp32(b[i].d) * (float)sum);                                        \
        }                                                                                                              \
    }

/* SIMD sets, each in its own files; each init fills the entries it implements and leaves the others.
 * The tile is 4x4 for every set (tile_r = tile_t = 4); a kernel may process sub-tiles internally. */
void kn_kernels_init_avx2(kn_kernels *k);                 /* kernels_avx2.c: attention, then the three below */
void kn_kernels_init_avx2_vnni(kn_kernels *k, bool vnni); /* the same, AVX-VNNI kernels where vnni (and the CPU) */
void kn_avx2_init_legacy(kn_kernels *k);  /* kernels_avx2_legacy.c: F32/F16/BF16, Q4_0..Q8_0, Q8_0/Q8_1 quantizers */
void kn_avx2_init_kquants(kn_kernels *k); /* kernels_avx2_k.c: Q4_K, Q5_K, Q6_K, Q8_K quantizer */
void kn_avx2_init_lowbit(kn_kernels *k);  /* kernels_avx2_lowbit.c: Q2_K, Q3_K, IQ4_XS */
void kn_avx2_init_p16(kn_kernels *k, bool vnni); /* kernels_avx2_p16.c: panel kernels (AVX-VNNI ones where vnni) */
void kn_avx2_init_attn(kn_kernels *k);           /* kernels_avx2_attn.c: attention */
void kn_kernels_init_avx512(kn_kernels *k);      /* kernels_avx512.c: calls the two below */
void kn_avx512_init_legacy(kn_kernels *k);       /* kernels_avx512_legacy.c */
void kn_avx512_init_kquants(kn_kernels *k);      /* kernels_avx512_k.c */
void kn_avx512_init_lowbit(kn_kernels *k);       /* kernels_avx512_lowbit.c: Q2_K, Q3_K, IQ4_XS */
void kn_avx512_init_p16(kn_kernels *k);  /* kernels_avx512_p16.c: Q4_0, Q8_0, IQ4_NL, MXFP4, MLX8, Q4_K panels */
void kn_avx512_init_attn(kn_kernels *k); /* kernels_avx512_attn.c: attention */
/* kernels_avx2_p16_lowbit.c: the IQ4_XS panel kernel (the AVX-VNNI one where vnni); from init_all */
void kn_avx2_init_p16_lowbit(kn_kernels *k, bool vnni);
void kn_avx512_init_p16_lowbit(kn_kernels *k); /* kernels_avx512_p16_lowbit.c: the same; from init_all */
/* ARM64: the NEON set (kernels_neon.c: F32/F16/BF16, attention, the three quantizers, then the block
 * formats when the CPU has dotprod, and over those the i8mm ones when it has i8mm too). The parts return false (and
 * change nothing) when kiln is not built for ARM64. */
void kn_kernels_init_neon(kn_kernels *k);
bool kn_neon_init_float(kn_kernels *k);   /* kernels_neon.c */
bool kn_neon_init_dotprod(kn_kernels *k); /* kernels_neon_q.c: Q4_0..Q8_0, IQ4_NL, MXFP4, Q4_K..Q6_K, lowbit, MLX8 */
bool kn_neon_init_i8mm(kn_kernels *k);    /* kernels_neon_mm.c: the same but Q5_0 and MLX8, in 2x2 SMMLA blocks */
bool kn_neon_init_lowbit(kn_kernels *k);  /* kernels_neon_lowbit.c: Q2_K, Q3_K, IQ4_XS (dotprod) */
bool kn_neon_init_mlx(kn_kernels *k);     /* kernels_neon_mlx.c: MLX8, MLX8_F32 (dotprod) */
bool kn_neon_init_attn(kn_kernels *k);    /* kernels_neon_attn.c: attention over Q8_0 and TQ4 KV (neon) */

#endif
