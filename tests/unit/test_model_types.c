/*
 * test_model_types.c - every architecture variant and weight type on generated tiny models: the
 * logits of the quantized path agree with the F32 reference path (the same file with every weight
 * matrix dequantized to F32 at load) within a per-type tolerance, and generation is deterministic.
 *
 * Tolerances are on the relative RMS difference of the last position's logits,
 * rms(quant - ref) / rms(ref). Float weight types run their dot products on F32 activations and
 * must agree to rounding. Quantized types also quantize the activations (to Q8_0 / Q8_1 / Q8_K); on
 * these random-weight models that dominates: measured 1.8e-2 .. 3.2e-2 for every quantized type, so
 * one bound of 6e-2 applies to all (a wrong block layout gives differences of order 1).
 */
#include "harness.h"

#include <errno.h>
#include <sys/stat.h>

#include "engine/session.h"
#include "model/model.h"

typedef struct type_case {
    const char *name;
    double tol;
} type_case;

static const type_case types[] = {
    {"F32", 1e-6},  {"F16", 1e-5},    {"BF16", 1e-5},   {"Q8_0", 0.06},  {"Q4_0", 0.06}, {"Q4_1", 0.06},
    {"Q5_0", 0.06}, {"Q5_1", 0.06},   {"Q4_K", 0.06},   {"Q5_K", 0.06},  {"Q6_K", 0.06}, {"Q2_K", 0.06},
    {"Q3_K", 0.06}, {"IQ4_NL", 0.06}, {"IQ4_XS", 0.06}, {"MXFP4", 0.06},
};
static const char *archs[] = {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma2", "tiny-gemma3", "tiny-phi3"};

static const char *gen_path(void) {
    static char p[512];
    const char *b = getenv("BUILD");
    snprintf(p, sizeof p, "%s/kiln-gen", b && *b ? b : "build");
    return p;
}

/* Where the generated models live: $BUILD/test-models, shared by the runs of this program (the native
 * one and the one under qemu, tests/cli/test_arm64.sh, generate the same files), else the test's own
 * folder. A file is reused while it is newer than kiln-gen (which links the library, so any change of
 * the generator or the file format makes it older); new ones are written under a temporary name and
 * renamed, so a concurrent run never reads half a file. */
static const char *model_dir(void) {
    static char d[256];
    if (!d[0]) {
        const char *b = getenv("BUILD");
        if (snprintf(d, sizeof d, "%s/test-models", b && *b ? b : "build") >= (int)sizeof d ||
            (mkdir(d, 0755) != 0 && errno != EEXIST))
            snprintf(d, sizeof d, "%s", kt_tmpdir());
    }
    return d;
}

static bool fresh(const char *path) {
    struct stat a, g;
    return stat(path, &a) == 0 && stat(gen_path(), &g) == 0 && a.st_mtime >= g.st_mtime && a.st_size > 0;
}

/* The shell command that generates preset in type into path (via a temporary name). */
static void gen_cmd(char *cmd, size_t cap, const char *preset, const char *type, const char *path) {
    if (snprintf(cmd, cap, "%s --preset %s --type %s --seed 7 -o %s.%d.tmp >/dev/null 2>&1 && mv -f %s.%d.tmp %s",
                 gen_path(), preset, type, path, (int)getpid(), path, (int)getpid(), path) >= (int)cap)
        snprintf(cmd, cap, "false"); /* too long: generation fails */
}

/* Generates preset in type (once); returns the path (static buffer) or NULL. */
static const char *generate(const char *preset, const char *type) {
    static char out[512];
    char cmd[2048];
    if (snprintf(out, sizeof out, "%s/%s-%s.gguf", model_dir(), preset, type) >= (int)sizeof out) return NULL;
    if (fresh(out)) return out;
    gen_cmd(cmd, sizeof cmd, preset, type, out);
    return system(cmd) == 0 ? out : NULL;
}

/* Generates every architecture x type model that is missing, two kiln-gen processes at a time (one
 * thread each): the machines have two cores. generate() makes any that this could not. */
static void generate_all(void) {
    if (!kt_exists(gen_path())) return;
    char list[512], cmd[2048];
    if (snprintf(list, sizeof list, "%s/gen.%d.sh", model_dir(), (int)getpid()) >= (int)sizeof list) return;
    FILE *f = fopen(list, "w");
    if (!f) return;
    for (size_t a = 0; a < KN_ARRAY_LEN(archs); a++) {
        for (size_t i = 0; i < KN_ARRAY_LEN(types); i++) {
            char path[512];
            if (snprintf(path, sizeof path, "%s/%s-%s.gguf", model_dir(), archs[a], types[i].name) >=
                    (int)sizeof path ||
                fresh(path))
                continue;
            gen_cmd(cmd, sizeof cmd, archs[a], types[i].name, path);
            fprintf(f, "%s\n", cmd);
        }
    }
    fclose(f);
    if (snprintf(cmd, sizeof cmd, "tr '\\n' '\\0' <%s | OMP_NUM_THREADS=1 xargs -0 -r -P 2 -n 1 sh -c; rm -f %s", list,
                 list) >= (int)sizeof cmd)
        return;
    if (system(cmd) != 0) printf("  some models were not generated in advance\n");
}

/* Last-position logits of a fixed token sequence (into out[n_vocab]). */
static int last_logits(kiln_model *m, float *out) {
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 64;
    sp.n_batch = 5;
    sp.n_threads = 1;
    kiln_session *s = NULL;
    if (kiln_session_new(m, &sp, &s)) return -1;
    const int V = kiln_model_n_vocab(m);
    kiln_token t[12];
    for (int i = 0; i < 12; i++) t[i] = (kiln_token)((i * 131 + 17) % V);
    int rc = kiln_session_eval(s, t, 12, false) == KILN_OK ? 0 : -1;
    if (!rc) memcpy(out, kiln_session_logits(s, -1), sizeof(float) * (size_t)V);
    kiln_session_free(s);
    return rc;
}

static void check_arch(const char *arch) {
    if (!kt_exists(gen_path())) SKIP("no %s", gen_path());
    for (size_t i = 0; i < KN_ARRAY_LEN(types); i++) {
        const char *path = generate(arch, types[i].name);
        CHECKF(path, "kiln-gen failed for %s %s", arch, types[i].name);
        kiln_model *q = NULL, *r = NULL;
        CHECKF(kiln_model_load(path, NULL, &q) == KILN_OK, "%s", kiln_last_error());
        CHECKF(kn_model_load_ex(path, NULL, true, &r) == KILN_OK, "%s", kiln_last_error());
        const int V = kiln_model_n_vocab(q);
        float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
        int ok = last_logits(q, a) == 0 && last_logits(r, b) == 0;
        double d2 = 0, r2 = 0;
        int finite = 1;
        for (int k = 0; ok && k < V; k++) {
            d2 += (double)(a[k] - b[k]) * (a[k] - b[k]);
            r2 += (double)b[k] * b[k];
            if (!isfinite(a[k])) finite = 0;
        }
        free(a);
        free(b);
        kiln_model_free(q);
        kiln_model_free(r);
        CHECK(ok);
        CHECK(finite);
        double rel = sqrt(d2 / (r2 > 0 ? r2 : 1));
        printf("  %s %-5s rel. RMS logit difference %.2e (tolerance %.0e)\n", arch, types[i].name, rel, types[i].tol);
        CHECKF(r2 > 0, "reference logits are all zero");
        CHECKF(rel <= types[i].tol, "%s %s: %.3e > %.0e", arch, types[i].name, rel, types[i].tol);
    }
}

static void test_llama_all_types(void) { check_arch(archs[0]); }
static void test_qwen2_all_types(void) { check_arch(archs[1]); }
static void test_qwen3_all_types(void) { check_arch(archs[2]); }
static void test_gemma2_all_types(void) { check_arch(archs[3]); }
static void test_gemma3_all_types(void) { check_arch(archs[4]); }
static void test_phi3_all_types(void) { check_arch(archs[5]); }

/* Greedy generation on a quantized model is deterministic and identical with 1 and 2 threads. */
static void test_greedy_threads_q4k(void) {
    const char *path = generate("tiny-qwen3", "Q4_K");
    if (!path) SKIP("kiln-gen unavailable");
    kiln_model *m = NULL;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    kiln_token out[2][24];
    for (int t = 0; t < 2; t++) {
        kiln_session_params sp = kiln_session_default_params();
        sp.n_threads = t + 1;
        sp.n_ctx = 64;
        kiln_session *s = NULL;
        CHECK(kiln_session_new(m, &sp, &s) == KILN_OK);
        kiln_token p[3] = {1, 2, 3};
        CHECK(kiln_session_eval(s, p, 3, false) == KILN_OK);
        for (int i = 0; i < 24; i++) {
            const float *l = kiln_session_logits(s, -1);
            int best = 0;
            for (int k = 1; k < kiln_model_n_vocab(m); k++)
                if (l[k] > l[best]) best = k;
            out[t][i] = best;
            CHECK(kiln_session_eval(s, &out[t][i], 1, false) == KILN_OK);
        }
        kiln_session_free(s);
    }
    kiln_model_free(m);
    CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0);
}

/* Greedy tokens from a prompt of 3 tokens, 20 new tokens, with the given kernels. */
static int greedy(const char *path, kiln_kernels kernels, kiln_token out[20]) {
    kiln_model_params mp = kiln_model_default_params();
    mp.kernels = kernels;
    kiln_model *m = NULL;
    if (kiln_model_load(path, &mp, &m)) return -1;
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 64;
    sp.n_threads = 2;
    kiln_session *s = NULL;
    int rc = -1;
    if (kiln_session_new(m, &sp, &s) == KILN_OK) {
        kiln_token p[3] = {1, 2, 3};
        rc = kiln_session_eval(s, p, 3, false);
        for (int i = 0; !rc && i < 20; i++) {
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

/* --kernels ref and auto give identical greedy tokens for every architecture and weight type. */
static void test_kernels_ref_equals_auto(void) {
    if (!kt_exists(gen_path())) SKIP("no %s", gen_path());
    for (size_t a = 0; a < KN_ARRAY_LEN(archs); a++) {
        for (size_t i = 0; i < KN_ARRAY_LEN(types); i++) {
            const char *path = generate(archs[a], types[i].name);
            CHECK(path);
            kiln_token r[20], f[20];
            CHECK(greedy(path, KILN_KERNELS_REF, r) == 0);
            CHECK(greedy(path, KILN_KERNELS_AUTO, f) == 0);
            CHECKF(memcmp(r, f, sizeof r) == 0, "%s %s: greedy tokens differ between ref and auto kernels", archs[a],
                   types[i].name);
        }
    }
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib;
}

/* Weights are copied into anonymous memory and the file mapping is released: the resident set
 * grows by at most 1.1 x (weights + KV) plus the activation buffers. */
static void test_rss_bounded(void) {
#ifdef __SANITIZE_ADDRESS__
    SKIP("resident set sizes are not meaningful under AddressSanitizer");
#endif
    /* under qemu-user (tests/cli/test_arm64.sh) the resident set is the emulator's too, and the same
     * loading code is checked by the native run */
    const char *emu = getenv("KILN_TEST_EMULATED");
    if (emu && *emu && strcmp(emu, "0") != 0) SKIP("under emulation (the native run checks it)");
    const char *path = generate("stories15m", "Q8_0");
    if (!path) SKIP("kiln-gen unavailable");
    long before = rss_kib();
    if (before < 0) SKIP("no /proc/self/status");
    kiln_model *m = NULL;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_batch = 64;
    kiln_session *s = NULL;
    CHECK(kiln_session_new(m, &sp, &s) == KILN_OK);
    kiln_token t[64];
    for (int i = 0; i < 64; i++) t[i] = i + 1;
    for (int i = 0; i < 4; i++) CHECK(kiln_session_eval(s, t, 64, false) == KILN_OK); /* touch the whole KV */
    long grew = rss_kib() - before;
    double weights = (double)kiln_model_size_bytes(m) / 1024.0;
    double kv = 2.0 * 6 * 256 * 288 * 2 / 1024.0; /* layers x ctx x kv_dim x F16, K and V */
    /* activations [64 tokens][5 x dim + 2 x ffn] F32, one row of logits, 2 MiB of slack */
    double scratch = 64.0 * (288 * 5 + 768 * 2) * 4 / 1024.0 + 32000 * 4 / 1024.0 + 2048;
    kiln_session_free(s);
    kiln_model_free(m);
    printf("  RSS grew by %ld KiB for %.0f KiB of weights and %.0f KiB of KV\n", grew, weights, kv);
    CHECKF(grew <= 1.1 * (weights + kv) + scratch, "%ld KiB > 1.1 x %.0f KiB + %.0f KiB", grew, weights + kv, scratch);
}

int main(void) {
    generate_all();
    RUN(test_llama_all_types);
    RUN(test_qwen2_all_types);
    RUN(test_qwen3_all_types);
    RUN(test_gemma2_all_types);
    RUN(test_gemma3_all_types);
    RUN(test_phi3_all_types);
    RUN(test_greedy_threads_q4k);
    RUN(test_kernels_ref_equals_auto);
    RUN(test_rss_bounded);
    return kt_summary();
}
