/*
 * harness.h - the tiny unit-test harness every tests/unit/test_*.c includes.
 *
 * A test is a void function; RUN(fn) runs it and prints "PASS name", "FAIL name" (with the failing
 * check's file, line and expression) or "SKIP name: why". tests/run.sh counts those lines across all
 * test programs. A CHECK failure returns from the test function at once.
 *
 * Test data: kt_data(rel) returns the path of ../shared/data/rel (or $KILN_TEST_DATA/rel); a test
 * whose data is absent calls SKIP.
 *
 * Tests of the KV cache and the engine define KT_ENGINE_HELPERS before including this file to get
 * the helpers they share (at the end): a KV filled with values that encode their place, a row
 * comparison, and one greedy request run to its end with its tokens collected.
 */
#ifndef KT_HARNESS_H
#define KT_HARNESS_H

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/kernels.h"

static int kt_pass, kt_fail, kt_skip;
static int kt_cur_failed, kt_cur_skipped;
static char kt_skip_why[256];

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            printf("  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                                          \
            kt_cur_failed = 1;                                                                                         \
            return;                                                                                                    \
        }                                                                                                              \
    } while (0)

#define CHECKF(cond, ...)                                                                                              \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            printf("  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                                          \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
            kt_cur_failed = 1;                                                                                         \
            return;                                                                                                    \
        }                                                                                                              \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                                          \
    CHECKF(fabs((double)(a) - (double)(b)) <= (tol), "%g vs %g (tol %g)", (double)(a), (double)(b), (double)(tol))

#define SKIP(...)                                                                                                      \
    do {                                                                                                               \
        snprintf(kt_skip_why, sizeof kt_skip_why, __VA_ARGS__);                                                        \
        kt_cur_skipped = 1;                                                                                            \
        return;                                                                                                        \
    } while (0)

#define RUN(fn)                                                                                                        \
    do {                                                                                                               \
        kt_cur_failed = kt_cur_skipped = 0;                                                                            \
        fflush(stdout);                                                                                                \
        fn();                                                                                                          \
        if (kt_cur_failed) {                                                                                           \
            printf("FAIL %s\n", #fn);                                                                                  \
            kt_fail++;                                                                                                 \
        } else if (kt_cur_skipped) {                                                                                   \
            printf("SKIP %s: %s\n", #fn, kt_skip_why);                                                                 \
            kt_skip++;                                                                                                 \
        } else {                                                                                                       \
            printf("PASS %s\n", #fn);                                                                                  \
            kt_pass++;                                                                                                 \
        }                                                                                                              \
        fflush(stdout);                                                                                                \
    } while (0)

static inline int kt_summary(void) {
    printf("# %d passed, %d failed, %d skipped\n", kt_pass, kt_fail, kt_skip);
    return kt_fail ? 1 : 0;
}

/* Path of a file under the shared test data folder (static buffer, one call at a time). */
static inline const char *kt_data(const char *rel) {
    static char buf[4][1024];
    static int slot;
    const char *root = getenv("KILN_TEST_DATA");
    if (!root || !*root) root = "../shared/data";
    char *b = buf[slot++ & 3];
    snprintf(b, sizeof buf[0], "%s/%s", root, rel);
    return b;
}

static inline int kt_exists(const char *path) { return access(path, R_OK) == 0; }

/* The part of a kernel test that checks the set called name ("avx2", "avx2vnni", "avx512"): check(set)
 * must return 0 where this CPU runs that set, after the "KSET name: what tested" line tests/run.sh sums
 * up (so a green run says which sets it covered); skipped where it cannot. */
static inline void kt_check_named_set(const char *name, const char *what, int (*check)(const kn_kernels *)) {
    const kn_kernels *set = kn_kernels_named(name);
    if (!set) SKIP("this CPU cannot run the %s kernel set", name);
    printf("KSET %s: %s tested\n", name, what);
    CHECK(check(set) == 0);
}

/* Reads a whole file into a malloc'd NUL-terminated buffer; NULL on failure. */
static inline char *kt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) {
        p[n] = 0;
        if (len) *len = (size_t)n;
    }
    return p;
}

static char kt_dir[256];
static pid_t kt_dir_owner;

static inline int kt_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* atexit: removes the scratch directory and all it holds, in the process that made it only (a forked
 * child that exits must not delete it under its parent). */
static inline void kt_rm_tmpdir(void) {
    if (kt_dir[0] && getpid() == kt_dir_owner) nftw(kt_dir, kt_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A writable scratch directory for this test program (created once, removed when it exits). */
static inline const char *kt_tmpdir(void) {
    if (!kt_dir[0]) {
        snprintf(kt_dir, sizeof kt_dir, "/tmp/kiln-test-XXXXXX");
        if (!mkdtemp(kt_dir)) {
            perror("mkdtemp");
            exit(2);
        }
        kt_dir_owner = getpid();
        atexit(kt_rm_tmpdir);
    }
    return kt_dir;
}

#ifdef KT_ENGINE_HELPERS
#include "cache/kv.h"
#include "kiln.h"

/* The kiln-gen binary of this build ($BUILD/kiln-gen, build/kiln-gen by default). */
static inline const char *kt_gen_path(void) {
    static char p[512];
    const char *b = getenv("BUILD");
    snprintf(p, sizeof p, "%s/kiln-gen", b && *b ? b : "build");
    return p;
}

/* Generates `kiln-gen ARGS` into the test directory as NAME.gguf (once); the path (a static buffer
 * per call slot, 8 slots) or NULL when kiln-gen fails. */
static inline const char *kt_gen(const char *name, const char *args) {
    static char out[8][512];
    static int slot;
    char *o = out[slot++ % 8];
    char cmd[2048];
    snprintf(o, 512, "%s/%s.gguf", kt_tmpdir(), name);
    if (kt_exists(o)) return o;
    snprintf(cmd, sizeof cmd, "%s %s -o %s >/dev/null 2>&1", kt_gen_path(), args, o);
    return system(cmd) == 0 ? o : NULL;
}

/* The model at path (NULL path or a failed load: NULL). */
static inline kiln_model *kt_load(const char *path) {
    kiln_model *m = NULL;
    if (!path || kiln_model_load(path, NULL, &m) != KILN_OK) return NULL;
    return m;
}

/* Fills positions [0, n) of every layer of kv (kv_dim <= 8) with values that encode (layer,
 * position, element, tag), V the negation of K, so copies can be checked; sets kv->n_past = n. */
static inline void kt_fill_kv(kn_kv *kv, int32_t n, float tag) {
    for (int32_t l = 0; l < kv->n_layer; l++)
        for (int32_t p = 0; p < n; p++) {
            float k[8], v[8];
            for (int i = 0; i < kv->kv_dim; i++) {
                k[i] = tag + (float)(l * 10000 + p * 10 + i);
                v[i] = -k[i];
            }
            kn_kv_store(kv, l, p, k, v);
        }
    kv->n_past = n;
}

/* True when positions [0, n) of every layer hold the same K and V bytes in a and b. */
static inline bool kt_same_rows(const kn_kv *a, const kn_kv *b, int32_t n) {
    for (int32_t l = 0; l < a->n_layer; l++)
        if (memcmp(kn_kv_k_at(a, l, 0, 0), kn_kv_k_at(b, l, 0, 0), (size_t)n * a->k_row) ||
            memcmp(kn_kv_v_at(a, l, 0, 0), kn_kv_v_at(b, l, 0, 0), (size_t)n * a->v_row))
            return false;
    return true;
}

/* The tokens a request generated (the first 512). */
typedef struct kt_out {
    kiln_token toks[512];
    int n;
} kt_out;

/* on_token callback collecting into the kt_out given as user. */
static inline int kt_on_token(const kiln_token_event *ev, void *user) {
    kt_out *o = user;
    if (ev->token >= 0 && o->n < 512) o->toks[o->n++] = ev->token;
    return 0;
}

static inline bool kt_same_out(const kt_out *a, const kt_out *b) {
    return a->n == b->n && memcmp(a->toks, b->toks, sizeof(kiln_token) * (size_t)a->n) == 0;
}

/* Runs one greedy request (temperature 0, end-of-text ignored, at most max tokens) for p[n] on e
 * and waits for it: tokens into *o, the result into *res. */
static inline kiln_status kt_generate(kiln_engine *e, const kiln_token *p, size_t n, int max, kt_out *o,
                                      kiln_generate_result *res) {
    kiln_generate_params gp = kiln_generate_default_params();
    gp.sampling.temperature = 0;
    gp.max_tokens = max;
    gp.ignore_eos = true;
    gp.on_token = kt_on_token;
    gp.user = o;
    o->n = 0;
    kiln_request *r;
    kiln_status st = kiln_engine_submit(e, p, n, &gp, &r);
    if (st) return st;
    st = kiln_request_wait(r, res);
    kiln_request_free(r);
    return st;
}
#endif

#endif
