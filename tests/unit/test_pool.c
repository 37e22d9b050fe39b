/*
 * test_pool.c - the persistent worker pool (base/pool.h): every task of a run runs exactly once,
 * for many task and thread counts (including fewer tasks than threads, one task and none); runs
 * are back to back on one pool (100k of them); a worker that sleeps inside a task changes no
 * result; the task's worker index is in range; every task's writes are visible when the run
 * returns; and the thread count of a forward pass leaves the logits bit-identical.
 */
#include "harness.h"

#include "base/pool.h"
#include "engine/session.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

typedef struct count_ctx {
    _Atomic int *hits; /* [n] times each task ran */
    int64_t n;
    int n_threads;
    _Atomic int bad_worker;
    int sleep_worker; /* a worker index that sleeps in each of its tasks, or -1 */
    long sleep_ns;
} count_ctx;

static void count_task(void *arg, int64_t task, int worker) {
    count_ctx *c = arg;
    if (task < 0 || task >= c->n || worker < 0 || worker >= c->n_threads) {
        atomic_store(&c->bad_worker, 1);
        return;
    }
    if (worker == c->sleep_worker) {
        struct timespec ts = {0, c->sleep_ns};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add(&c->hits[task], 1);
}

/* One run of n tasks on p; returns 1 when every task ran once and worker indices were valid. */
static int run_counted(kn_pool *p, int n_threads, int64_t n, int sleep_worker, long sleep_ns) {
    _Atomic int *hits = calloc((size_t)(n > 0 ? n : 1), sizeof *hits);
    count_ctx c = {.hits = hits, .n = n, .n_threads = n_threads, .sleep_worker = sleep_worker, .sleep_ns = sleep_ns};
    kn_pool_run(p, n, count_task, &c);
    int ok = !atomic_load(&c.bad_worker);
    for (int64_t i = 0; i < n; i++) ok &= atomic_load(&hits[i]) == 1;
    free(hits);
    return ok;
}

static void test_every_task_once(void) {
    const int threads[] = {1, 2, 3, 4, 8};
    const int64_t tasks[] = {0, 1, 2, 3, 5, 7, 8, 16, 31, 100, 1000, 4097};
    for (size_t a = 0; a < KN_ARRAY_LEN(threads); a++) {
        kn_pool *p = NULL;
        CHECK(kn_pool_new(threads[a], &p) == KILN_OK);
        CHECK(kn_pool_threads(p) == threads[a]);
        for (size_t b = 0; b < KN_ARRAY_LEN(tasks); b++)
            for (int rep = 0; rep < 20; rep++)
                CHECKF(run_counted(p, threads[a], tasks[b], -1, 0), "%d threads, %lld tasks", threads[a],
                       (long long)tasks[b]);
        kn_pool_free(p);
    }
}

static void test_null_pool_inline(void) {
    CHECK(kn_pool_threads(NULL) == 1);
    CHECK(run_counted(NULL, 1, 0, -1, 0));
    CHECK(run_counted(NULL, 1, 17, -1, 0));
    kn_pool_free(NULL);
}

static void test_bad_thread_count(void) {
    kn_pool *p = (kn_pool *)1;
    CHECK(kn_pool_new(0, &p) == KILN_ERR_INVALID_ARG && p == NULL);
    CHECK(kn_pool_new(5000, &p) == KILN_ERR_INVALID_ARG && p == NULL);
}

/* Each task writes its own slot (plain memory); the sum read after the run must be complete. */
typedef struct write_ctx {
    int64_t *out;
    int64_t round;
} write_ctx;

static void write_task(void *arg, int64_t task, int worker) {
    write_ctx *c = arg;
    c->out[task] = c->round * 1000 + task;
}

static void test_stress_100k_runs(void) {
    kn_pool *p = NULL;
    CHECK(kn_pool_new(3, &p) == KILN_OK);
    int64_t out[9];
    for (int64_t r = 0; r < 100000; r++) {
        const int64_t n = 1 + r % 9;
        write_ctx c = {out, r};
        kn_pool_run(p, n, write_task, &c);
        for (int64_t i = 0; i < n; i++)
            CHECKF(out[i] == r * 1000 + i, "run %lld task %lld", (long long)r, (long long)i);
    }
    kn_pool_free(p);
}

/* A worker that is slow (it sleeps in every task it takes) changes nothing: the caller takes over
 * the unclaimed tasks. The worker also sleeps past runs' ends, so it often wakes into a later run. */
static void test_slow_worker(void) {
    kn_pool *p = NULL;
    CHECK(kn_pool_new(3, &p) == KILN_OK);
    for (int rep = 0; rep < 200; rep++) CHECKF(run_counted(p, 3, 1 + rep % 40, 1 + rep % 2, 200000), "rep %d", rep);
    kn_pool_free(p);
}

/* Pools created and freed repeatedly, some without any run, some right after one. */
static void test_create_free(void) {
    for (int i = 0; i < 50; i++) {
        kn_pool *p = NULL;
        CHECK(kn_pool_new(1 + i % 4, &p) == KILN_OK);
        if (i % 2) CHECK(run_counted(p, 1 + i % 4, 1 + i, -1, 0));
        kn_pool_free(p);
    }
}

/* Two pools used from two threads at once never mix their tasks. */
typedef struct pool_thread_arg {
    int ok;
} pool_thread_arg;

static void *pool_thread(void *arg) {
    pool_thread_arg *a = arg;
    kn_pool *p = NULL;
    a->ok = kn_pool_new(2, &p) == KILN_OK;
    for (int r = 0; a->ok && r < 2000; r++) a->ok = run_counted(p, 2, 1 + r % 13, -1, 0);
    kn_pool_free(p);
    return NULL;
}

static void test_two_pools_concurrently(void) {
    pthread_t t[2];
    pool_thread_arg a[2] = {{0}, {0}};
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, pool_thread, &a[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK(a[0].ok && a[1].ok);
}

/* Logits of a prompt and a few decode steps on a generated model: identical bits for 1, 2 and 3
 * threads (every operation is parallel only over independent outputs). The tiny presets are widened
 * (dim 512, ffn 2048) and the prompt is 128 tokens, so that every parallel path runs: norms,
 * activation conversions, fused and single matmuls, per-token RoPE, attention, swiglu; and in
 * decode the FFN matmuls. */
static const char *gen_model(const char *preset, const char *type) {
    static char out[512], gen[512];
    const char *b = getenv("BUILD");
    snprintf(gen, sizeof gen, "%s/kiln-gen", b && *b ? b : "build");
    if (!kt_exists(gen)) return NULL;
    snprintf(out, sizeof out, "%s/pool-%s-%s.gguf", kt_tmpdir(), preset, type);
    if (kt_exists(out)) return out;
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "%s --preset %s --dim 512 --ffn 2048 --type %s --seed 5 -o %s >/dev/null 2>&1", gen,
             preset, type, out);
    return system(cmd) == 0 ? out : NULL;
}

/* Runs a 128-token prompt then 6 single-token steps; appends every step's logits to out[7][V]. */
static int logits_trace(kiln_model *m, int threads, float *out) {
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_batch = 128;
    sp.n_threads = threads;
    kiln_session *s = NULL;
    if (kiln_session_new(m, &sp, &s)) return -1;
    const int V = kiln_model_n_vocab(m);
    kiln_token t[128];
    for (int i = 0; i < 128; i++) t[i] = (kiln_token)((i * 7919 + 3) % V);
    int rc = kiln_session_eval(s, t, 128, false) == KILN_OK ? 0 : -1;
    for (int step = 0; !rc && step < 7; step++) {
        const float *l = kiln_session_logits(s, -1);
        memcpy(out + (size_t)step * V, l, sizeof(float) * (size_t)V);
        kiln_token next = (kiln_token)((step * 31 + 5) % V);
        if (step < 6) rc = kiln_session_eval(s, &next, 1, false) == KILN_OK ? 0 : -1;
    }
    kiln_session_free(s);
    return rc;
}

static void check_threads_bit_identical(const char *preset, const char *type) {
    const char *path = gen_model(preset, type);
    if (!path) SKIP("kiln-gen unavailable");
    kiln_model *m = NULL;
    CHECKF(kiln_model_load(path, NULL, &m) == KILN_OK, "%s", kiln_last_error());
    const size_t V = (size_t)kiln_model_n_vocab(m);
    float *ref = malloc(sizeof(float) * 7 * V), *got = malloc(sizeof(float) * 7 * V);
    int ok = logits_trace(m, 1, ref) == 0;
    int same = 1;
    for (int th = 2; ok && th <= 3; th++) {
        ok = logits_trace(m, th, got) == 0;
        if (ok && memcmp(ref, got, sizeof(float) * 7 * V) != 0) {
            printf("  %s %s: %d threads differ from 1 thread\n", preset, type, th);
            same = 0;
        }
    }
    free(ref);
    free(got);
    kiln_model_free(m);
    CHECK(ok);
    CHECK(same);
}

static void test_threads_bit_identical_llama_q4_0(void) { check_threads_bit_identical("tiny-llama", "Q4_0"); }
static void test_threads_bit_identical_qwen3_q4_k(void) { check_threads_bit_identical("tiny-qwen3", "Q4_K"); }
static void test_threads_bit_identical_qwen2_f16(void) { check_threads_bit_identical("tiny-qwen2", "F16"); }

int main(void) {
    RUN(test_every_task_once);
    RUN(test_null_pool_inline);
    RUN(test_bad_thread_count);
    RUN(test_stress_100k_runs);
    RUN(test_slow_worker);
    RUN(test_create_free);
    RUN(test_two_pools_concurrently);
    RUN(test_threads_bit_identical_llama_q4_0);
    RUN(test_threads_bit_identical_qwen3_q4_k);
    RUN(test_threads_bit_identical_qwen2_f16);
    return kt_summary();
}
