/*
 * test_model_lowbit.c - whole models in the low-bit weight types (Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4)
 * against their F32 twins: tools/kiln-gen writes the same random weights (same preset and seed) once
 * in F32 and once quantized, and the last position's logits of a fixed prompt must agree within a
 * per-type bound on the relative RMS difference, rms(quant - f32) / rms(f32).
 *
 * Unlike test_model_types.c (the quantized file against itself dequantized to F32, which isolates the
 * kernels), this includes the weight quantization error, so it checks the quantizers and the layouts
 * end to end: a wrong layout or a broken quantizer gives differences of order 1 or more. Q8_0 and
 * Q4_K run alongside as yardsticks.
 */
#include "harness.h"

#include "engine/session.h"
#include "model/model.h"

typedef struct type_case {
    const char *name;
    double tol;
} type_case;

/* Bounds: the larger of the two models' measured values (tiny-llama / tiny-qwen3, seed 7) plus about
 * 20%. On these random models the logit difference is about 3.5 x the weights' relative RMS error
 * (test_quant.c), and logits of an unrelated model differ by about 1.4 (sqrt 2), which bounds Q2_K's
 * check from above. */
static const type_case types[] = {
    {"Q8_0", 0.04},   /* measured 0.026 / 0.032 */
    {"Q4_K", 0.39},   /* 0.232 / 0.318: the yardstick of the formats in use */
    {"Q2_K", 1.17},   /* 0.816 / 0.970 */
    {"Q3_K", 0.69},   /* 0.512 / 0.572 */
    {"IQ4_NL", 0.46}, /* 0.286 / 0.380 */
    {"IQ4_XS", 0.48}, /* 0.274 / 0.398 */
    {"MXFP4", 0.49},  /* 0.368 / 0.407 */
};
static const char *archs[] = {"tiny-llama", "tiny-qwen3"};

static const char *gen_path(void) {
    static char p[512];
    const char *b = getenv("BUILD");
    snprintf(p, sizeof p, "%s/kiln-gen", b && *b ? b : "build");
    return p;
}

/* Generates preset in type; returns the path (static buffer) or NULL. */
static const char *generate(const char *preset, const char *type) {
    static char out[512];
    char cmd[1536];
    snprintf(out, sizeof out, "%s/%s-%s.gguf", kt_tmpdir(), preset, type);
    if (kt_exists(out)) return out;
    snprintf(cmd, sizeof cmd, "%s --preset %s --type %s --seed 7 -o %s >/dev/null 2>&1", gen_path(), preset, type, out);
    return system(cmd) == 0 ? out : NULL;
}

/* Last-position logits of a fixed token sequence of the model at path (into a malloc'd array). */
static float *last_logits(const char *path, int *n_vocab) {
    kiln_model *m = NULL;
    if (kiln_model_load(path, NULL, &m) != KILN_OK) return NULL;
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 64;
    sp.n_threads = 1;
    kiln_session *s = NULL;
    float *out = NULL;
    if (kiln_session_new(m, &sp, &s) == KILN_OK) {
        const int V = kiln_model_n_vocab(m);
        kiln_token t[12];
        for (int i = 0; i < 12; i++) t[i] = (kiln_token)((i * 131 + 17) % V);
        if (kiln_session_eval(s, t, 12, false) == KILN_OK && (out = malloc(sizeof(float) * (size_t)V))) {
            memcpy(out, kiln_session_logits(s, -1), sizeof(float) * (size_t)V);
            *n_vocab = V;
        }
    }
    kiln_session_free(s);
    kiln_model_free(m);
    return out;
}

static void check_arch(const char *arch) {
    if (!kt_exists(gen_path())) SKIP("no %s", gen_path());
    const char *p32 = generate(arch, "F32");
    CHECKF(p32, "kiln-gen failed for %s F32", arch);
    char ref_path[512];
    snprintf(ref_path, sizeof ref_path, "%s", p32);
    int V = 0, Vq = 0;
    float *ref = last_logits(ref_path, &V);
    CHECKF(ref, "%s F32: %s", arch, kiln_last_error());
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const char *path = generate(arch, types[i].name);
        CHECKF(path, "kiln-gen failed for %s %s", arch, types[i].name);
        float *q = last_logits(path, &Vq);
        CHECKF(q && Vq == V, "%s %s: %s", arch, types[i].name, kiln_last_error());
        double d2 = 0, r2 = 0;
        for (int k = 0; k < V; k++) {
            d2 += (double)(q[k] - ref[k]) * (q[k] - ref[k]);
            r2 += (double)ref[k] * ref[k];
        }
        free(q);
        double rel = sqrt(d2 / (r2 > 0 ? r2 : 1));
        printf("  %s %-6s vs F32: rel. RMS logit difference %.3f (bound %.2f)\n", arch, types[i].name, rel,
               types[i].tol);
        CHECKF(r2 > 0, "reference logits are all zero");
        CHECKF(rel <= types[i].tol, "%s %s: %.3f > %.2f", arch, types[i].name, rel, types[i].tol);
    }
    free(ref);
}

static void test_llama_twins(void) { check_arch(archs[0]); }
static void test_qwen3_twins(void) { check_arch(archs[1]); }

int main(void) {
    RUN(test_llama_twins);
    RUN(test_qwen3_twins);
    return kt_summary();
}
