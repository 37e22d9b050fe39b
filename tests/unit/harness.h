/*
 * harness.h - the tiny unit-test harness every tests/unit/test_*.c includes.
 *
 * A test is a void function; RUN(fn) runs it and prints "PASS name", "FAIL name" (with the failing
 * check's file, line and expression) or "SKIP name: why". tests/run.sh counts those lines across all
 * test programs. A CHECK failure returns from the test function at once.
 *
 * Test data: kt_data(rel) returns the path of ../shared/data/rel (or $KILN_TEST_DATA/rel); a test
 * whose data is absent calls SKIP.
 */
#ifndef KT_HARNESS_H
#define KT_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int kt_pass, kt_fail, kt_skip;
static int kt_cur_failed, kt_cur_skipped;
static char kt_skip_why[256];

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            printf("  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);            \
            kt_cur_failed = 1;                                                           \
            return;                                                                      \
        }                                                                                \
    } while (0)

#define CHECKF(cond, ...)                                                                \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            printf("  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);            \
            printf(__VA_ARGS__);                                                         \
            printf("\n");                                                                \
            kt_cur_failed = 1;                                                           \
            return;                                                                      \
        }                                                                                \
    } while (0)

#define CHECK_NEAR(a, b, tol) \
    CHECKF(fabs((double)(a) - (double)(b)) <= (tol), "%g vs %g (tol %g)", (double)(a), (double)(b), (double)(tol))

#define SKIP(...)                                                                        \
    do {                                                                                 \
        snprintf(kt_skip_why, sizeof kt_skip_why, __VA_ARGS__);                          \
        kt_cur_skipped = 1;                                                              \
        return;                                                                          \
    } while (0)

#define RUN(fn)                                                                          \
    do {                                                                                 \
        kt_cur_failed = kt_cur_skipped = 0;                                              \
        fflush(stdout);                                                                  \
        fn();                                                                            \
        if (kt_cur_failed) { printf("FAIL %s\n", #fn); kt_fail++; }                       \
        else if (kt_cur_skipped) { printf("SKIP %s: %s\n", #fn, kt_skip_why); kt_skip++; } \
        else { printf("PASS %s\n", #fn); kt_pass++; }                                    \
        fflush(stdout);                                                                  \
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

/* Reads a whole file into a malloc'd NUL-terminated buffer; NULL on failure. */
static inline char *kt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    fclose(f);
    if (p) { p[n] = 0; if (len) *len = (size_t)n; }
    return p;
}

/* A writable scratch directory for this test program (created once). */
static inline const char *kt_tmpdir(void) {
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/kiln-test-XXXXXX");
        if (!mkdtemp(dir)) { perror("mkdtemp"); exit(2); }
    }
    return dir;
}

#endif
