/*
 * test_kv_paged.c - paged KV (cache/kv_pool.h, kv.h): the block pool (allocation, reference counts,
 * copy-on-write, reservations, exhaustion); a paged cache against a contiguous one (the same stored
 * bytes and the same attention bits for every KV format, whatever window); copy-on-write when a
 * row writes into a block it shares; the prefix cache mapping blocks instead of copying; and
 * through the engine: greedy output identical with paging on and off at batch 1 and 8, with
 * prefix hits and chunked prefill, and 8 rows sharing a 2,000-token prompt in at most 1.3x the
 * blocks of one row.
 */
#define KT_ENGINE_HELPERS
#include "harness.h"

#include "cache/kv.h"
#include "cache/kv_pool.h"
#include "cache/prefix.h"
#include "cache/ssd.h"
#include "kiln.h"

#include <math.h>

static void test_pool(void) {
    kn_kv_pool p;
    CHECK(kn_kvp_init(&p, 0, 4) == KILN_ERR_INVALID_ARG);
    CHECK(kn_kvp_init(&p, 256, 4) == KILN_OK);
    int32_t id[4];
    for (int i = 0; i < 4; i++) CHECK((id[i] = kn_kvp_alloc(&p, false)) >= 0);
    CHECK(kn_kvp_alloc(&p, false) == -1); /* exhausted */
    CHECK(kn_kvp_reserve(&p, 1) == KILN_ERR_BUSY);
    memset(kn_kvp_data(&p, id[0]), 7, 256);
    kn_kvp_ref(&p, id[0]);
    CHECK(kn_kvp_refs(&p, id[0]) == 2);
    kn_kvp_stats st;
    kn_kvp_get_stats(&p, &st);
    CHECK(st.total == 4 && st.used == 4 && st.shared == 1 && st.made == 4);
    CHECK(kn_kvp_cow(&p, id[0], false) == -1); /* no block to copy into: src untouched */
    CHECK(kn_kvp_refs(&p, id[0]) == 2);
    kn_kvp_unref(&p, id[3]);
    const int32_t c = kn_kvp_cow(&p, id[0], false);
    CHECK(c >= 0 && c != id[0] && kn_kvp_refs(&p, id[0]) == 1 && kn_kvp_refs(&p, c) == 1);
    CHECK(kn_kvp_data(&p, c)[0] == 7 && kn_kvp_data(&p, c)[255] == 7);
    kn_kvp_unref(&p, id[1]);
    kn_kvp_unref(&p, id[2]);
    CHECK(kn_kvp_available(&p) == 2);
    CHECK(kn_kvp_reserve(&p, 2) == KILN_OK && kn_kvp_reserve(&p, 1) == KILN_ERR_BUSY && kn_kvp_available(&p) == 0);
    CHECK(kn_kvp_alloc(&p, false) == -1); /* reserved for others */
    const int32_t r = kn_kvp_alloc(&p, true);
    CHECK(r >= 0 && p.reserved == 1);
    kn_kvp_unreserve(&p, 1);
    CHECK(kn_kvp_available(&p) == 1);
    kn_kvp_get_stats(&p, &st);
    CHECK(st.used == 3 && st.shared == 0 && st.cow == 1);
    kn_kvp_free(&p);
}

/* Random K/V rows of n positions of layer l into a and b alike. */
static void fill_both(kn_kv *a, kn_kv *b, int32_t n, unsigned seed) {
    srand(seed);
    float k[512], v[512];
    for (int32_t l = 0; l < a->n_layer; l++)
        for (int32_t p = 0; p < n; p++) {
            for (int i = 0; i < a->kv_dim; i++) {
                k[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
                v[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
            }
            kn_kv_store(a, l, p, k, v);
            kn_kv_store(b, l, p, k, v);
        }
    a->n_past = b->n_past = n;
}

/* Every format: a paged cache stores the same bytes as a contiguous one and attention over its
 * blocks (any window start, mixed formats, rotation, soft-capping) gives the same bits, with the
 * best kernel set and the reference. */
static void test_paged_equals_contiguous(void) {
    const int32_t L = 2, N = 100, NH = 2, HD = 64;
    const kn_kernels *sets[2] = {kn_kernels_get(KN_KERNELS_AUTO), kn_kernels_get(KN_KERNELS_REF)};
    int bad = 0;
    for (int t = 0; t < KN_KVT_COUNT; t++)
        for (int mixed = 0; mixed < 2; mixed++) {
            kn_kv_format f;
            CHECK(kn_kv_format_of((kiln_kv_type)t, mixed ? KILN_KV_Q8_0 : KILN_KV_SAME, KILN_KV_ROTATE_AUTO, &f) ==
                  KILN_OK);
            kn_kv_pool pool;
            CHECK(kn_kvp_init(&pool, kn_kv_block_bytes(&f, L, NH, HD, KN_KVP_BLOCK), 64) == KILN_OK);
            kn_kv c, pg;
            CHECK(kn_kv_init_fmt(&c, &f, L, N + 28, NH, HD) == KILN_OK);
            CHECK(kn_kv_init_paged(&pg, &pool, &f, L, N + 28, NH, HD) == KILN_OK);
            CHECK(kn_kv_prepare(&pg, 0, N) == KILN_OK && kn_kv_blocks_mapped(&pg) == (N + 15) / 16);
            fill_both(&c, &pg, N, (unsigned)t + 1);
            for (int32_t p = 0; p < N; p++)
                if (memcmp(kn_kv_k_at(&c, 1, p, HD), kn_kv_k_at(&pg, 1, p, HD), c.k_head) ||
                    memcmp(kn_kv_v_at(&c, 1, p, 0), kn_kv_v_at(&pg, 1, p, 0), c.v_row))
                    bad++;
            float q[6 * 64], o1[6 * 64], o2[6 * 64];
            for (int i = 0; i < 6 * HD; i++) q[i] = sinf((float)i * 0.37f);
            const int32_t p0s[] = {0, 5, 16, 33, 99};
            for (int s = 0; s < 2; s++)
                for (size_t a = 0; a < sizeof p0s / sizeof *p0s; a++)
                    for (int cap = 0; cap < 2; cap++)
                        for (int nkv = 1; nkv <= NH; nkv++) { /* the second head alone; both heads in one call */
                            const int32_t p0 = p0s[a], n = N - p0, off = (NH - nkv) * HD;
                            const float cp = cap ? 20.0f : 0.0f;
                            kn_kv_attend(sets[s], &c, 1, p0, n, off, HD, nkv, q, 3, 0.125f, cp, o1);
                            kn_kv_attend(sets[s], &pg, 1, p0, n, off, HD, nkv, q, 3, 0.125f, cp, o2);
                            if (memcmp(o1, o2, sizeof(float) * 3 * (size_t)(nkv * HD))) {
                                if (bad++ < 5)
                                    printf("  %s/%s %s p0 %d cap %d nkv %d: paged differs\n",
                                           kn_kvq_traits_get(f.k)->name, kn_kvq_traits_get(f.v)->name, sets[s]->name,
                                           p0, cap, nkv);
                            }
                        }
            kn_kv_free(&pg);
            kn_kv_free(&c);
            kn_kvp_get_stats(&pool, &(kn_kvp_stats){0});
            CHECK(pool.used == 0 && pool.reserved == 0); /* everything went back */
            kn_kvp_free(&pool);
        }
    CHECKF(bad == 0, "%d differences", bad);
}

/* Two caches sharing blocks: writing into a shared block copies it first (the other holder's bytes
 * stay), a rollback that rewrites positions of a shared block copies too, and a block held once is
 * written in place. The prefix cache hands out its blocks the same way. */
static void test_cow_and_prefix_sharing(void) {
    const kn_kv_format f = kn_kv_format_plain(KN_F32);
    kn_kv_pool pool;
    CHECK(kn_kvp_init(&pool, kn_kv_block_bytes(&f, 2, 1, 8, KN_KVP_BLOCK), 32) == KILN_OK);
    kn_kv a, b;
    CHECK(kn_kv_init_paged(&a, &pool, &f, 2, 64, 1, 8) == KILN_OK);
    CHECK(kn_kv_init_paged(&b, &pool, &f, 2, 64, 1, 8) == KILN_OK);
    CHECK(kn_kv_prepare(&a, 0, 40) == KILN_OK);
    kt_fill_kv(&a, 40, 0.5f);
    kn_prefix_cache pc;
    kn_pc_init(&pc, 1 << 20);
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = i + 3;
    kn_pc_publish(&pc, toks, 40, &a, 2); /* references, no copy */
    kn_kvp_stats st;
    kn_kvp_get_stats(&pool, &st);
    CHECK(st.used == 3 && st.shared == 3);
    CHECK(kn_pc_restore(&pc, toks, 64, 36, &b) == 36 && b.n_past == 36);
    kn_kvp_get_stats(&pool, &st);
    CHECK(st.used == 3 && st.shared == 3); /* mapped: still 3 blocks */
    CHECK(kn_kv_k_at(&b, 1, 20, 0) == kn_kv_k_at(&a, 1, 20, 0));
    /* b writes position 36 (block 2, shared): copied first; a's bytes stay */
    CHECK(kn_kv_prepare(&b, 36, 1) == KILN_OK);
    CHECK(kn_kv_k_at(&b, 1, 36, 0) != kn_kv_k_at(&a, 1, 36, 0));
    CHECK(memcmp(kn_kv_k_at(&b, 1, 33, 0), kn_kv_k_at(&a, 1, 33, 0), 3 * b.k_row) == 0);
    const float x[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    kn_kv_store(&b, 1, 36, x, x);
    CHECK(((const float *)kn_kv_k_at(&a, 1, 36, 0))[0] == 0.5f + 10000 + 360);
    kn_kvp_get_stats(&pool, &st);
    CHECK(st.used == 4 && st.shared == 3 && st.cow == 1); /* blocks 0, 1 by three holders, 2 by a and the entry */
    /* its own block now: written in place, no further copy */
    const void *own = kn_kv_k_at(&b, 1, 37, 0);
    CHECK(kn_kv_prepare(&b, 37, 5) == KILN_OK && kn_kv_k_at(&b, 1, 37, 0) == own);
    /* a (the publisher) rolls back to 10 and rewrites: block 0 is shared, so it is copied */
    a.n_past = 10;
    const void *before = kn_kv_k_at(&a, 0, 10, 0);
    CHECK(kn_kv_prepare(&a, 10, 1) == KILN_OK && kn_kv_k_at(&a, 0, 10, 0) != before);
    kn_kv_free(&a);
    kn_kv_free(&b);
    kn_kvp_get_stats(&pool, &st);
    CHECK(st.used == 3); /* the cache's entry keeps the original three */
    CHECK(kn_pc_evict_lru(&pc) && !kn_pc_evict_lru(&pc));
    kn_kvp_get_stats(&pool, &st);
    CHECK(st.used == 0);
    /* a paged cache cannot grow past its pool */
    kn_kv big;
    CHECK(kn_kv_init_paged(&big, &pool, &f, 2, 1024, 1, 8) == KILN_OK);
    CHECK(kn_kv_prepare(&big, 0, 512) == KILN_OK);
    CHECK(kn_kv_prepare(&big, 512, 16) == KILN_ERR_BUSY);
    CHECK(kn_kv_prepare(&big, 1020, 10) == KILN_ERR_INVALID_ARG);
    kn_kv_free(&big);
    kn_pc_free(&pc);
    kn_kvp_free(&pool);
}

/* Positions [0, n) of every layer hold the same bytes in a and b (any layouts). */
static bool same_positions(const kn_kv *a, const kn_kv *b, int32_t n) {
    for (int32_t l = 0; l < a->n_layer; l++)
        for (int32_t p = 0; p < n; p++)
            if (memcmp(kn_kv_k_at(a, l, p, 0), kn_kv_k_at(b, l, p, 0), a->k_row) ||
                memcmp(kn_kv_v_at(a, l, p, 0), kn_kv_v_at(b, l, p, 0), a->v_row))
                return false;
    return true;
}

/* The SSD tier: a paged entry is written from its blocks (flush), and restored into a paged row
 * (through a buffer, into blocks the row owns) and into a contiguous one, byte for byte. */
static void test_ssd_paged(void) {
    const kn_kv_format f = kn_kv_format_plain(KN_F32);
    kn_kv_pool pool;
    CHECK(kn_kvp_init(&pool, kn_kv_block_bytes(&f, 2, 1, 8, KN_KVP_BLOCK), 32) == KILN_OK);
    kn_kv src, dst, flat;
    CHECK(kn_kv_init_paged(&src, &pool, &f, 2, 64, 1, 8) == KILN_OK);
    CHECK(kn_kv_init_paged(&dst, &pool, &f, 2, 64, 1, 8) == KILN_OK);
    CHECK(kn_kv_init(&flat, KN_F32, 2, 64, 8) == KILN_OK);
    CHECK(kn_kv_prepare(&src, 0, 45) == KILN_OK);
    kt_fill_kv(&src, 45, 0.75f);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/ssd", kt_tmpdir());
    kn_ssd_params sp;
    memset(&sp, 0, sizeof sp);
    sp.dir = dir;
    sp.max_bytes = 1 << 20;
    sp.verify = true;
    memset(sp.key.model, 1, 32);
    sp.key.kv_type = kn_kv_format_code(&f, 8);
    sp.key.n_layer = 2;
    sp.key.kv_dim = 8;
    sp.max_pending = 1 << 20;
    kn_ssd *s = NULL;
    CHECK(kn_ssd_open(&sp, &s) == KILN_OK && s);
    if (!s) return;
    kn_prefix_cache pc;
    kn_pc_init(&pc, 1 << 20);
    kn_pc_attach_ssd(&pc, s, 1e9);
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 11 + i;
    kn_pc_publish(&pc, toks, 45, &src, 2);
    CHECK(kn_pc_flush(&pc, 5000) == KILN_OK);
    kn_ssd_stats ss;
    kn_ssd_get_stats(s, &ss);
    CHECK(ss.writes == 1 && ss.errors == 0);
    CHECK(kn_pc_evict_lru(&pc)); /* RAM empty (once the writer lets it go): the next hit comes from the file */
    CHECK(kn_pc_flush(&pc, 5000) == KILN_OK && pool.used == 3);
    for (int i = 0; i < 500 && pc.limbo; i++) usleep(2000);
    CHECK(kn_pc_restore(&pc, toks, 64, 40, &dst) == 40 && dst.n_past == 40 && same_positions(&src, &dst, 40));
    CHECK(kn_kv_blocks_mapped(&dst) == 3 && kn_kv_k_at(&dst, 0, 0, 0) != kn_kv_k_at(&src, 0, 0, 0)); /* its own */
    CHECK(kn_ssd_restore(s, toks, 64, 0, &flat) == 45 && same_positions(&src, &flat, 45));
    kn_ssd_close(s);
    kn_pc_detach_ssd(&pc);
    kn_pc_free(&pc);
    kn_kv_free(&src);
    kn_kv_free(&dst);
    kn_kv_free(&flat);
    CHECK(pool.used == 0);
    kn_kvp_free(&pool);
}

/* ---- through the engine ------------------------------------------------------------------------ */

typedef struct run {
    kt_out out[9];
} run;

/* Submits prompts p[i] (n[i] tokens) together on e, greedy with max tokens each, and waits. */
static bool submit_all(kiln_engine *e, kiln_token *const *p, const size_t *n, int k, int max, kt_out *out) {
    kiln_request *r[9];
    for (int i = 0; i < k; i++) {
        kiln_generate_params gp = kiln_generate_default_params();
        gp.sampling.temperature = 0;
        gp.max_tokens = max;
        gp.ignore_eos = true;
        gp.on_token = kt_on_token;
        gp.user = &out[i];
        out[i].n = 0;
        if (kiln_engine_submit(e, p[i], n[i], &gp, &r[i]) != KILN_OK) return false;
    }
    bool ok = true;
    for (int i = 0; i < k; i++) {
        ok &= kiln_request_wait(r[i], NULL) == KILN_OK;
        kiln_request_free(r[i]);
    }
    return ok;
}

/* One engine (paging on or off, rows at a time): a first request, then 8 sharing its prompt's
 * first 150 tokens (prefix hits), all with a prefill chunk of 32. */
static bool engine_run(kiln_model *m, bool paged, int rows, run *o, kiln_engine_stats *st, uint64_t budget) {
    kiln_engine_params ep = kiln_engine_default_params();
    ep.kv_budget = budget;
    ep.n_ctx = 256;
    ep.kv_paging = paged;
    ep.max_rows = rows;
    ep.prefill_chunk = 32;
    ep.prompt_cache = 64 << 20;
    ep.n_threads = 1;
    kiln_engine *e;
    if (kiln_engine_new(m, &ep, &e) != KILN_OK) return false;
    static kiln_token buf[9][200];
    kiln_token *p[9];
    size_t n[9];
    for (int i = 0; i < 9; i++) {
        for (int j = 0; j < 200; j++) buf[i][j] = (kiln_token)(1 + (j * 37 + (j >= 150 ? i * 11 : 0)) % 500);
        p[i] = buf[i];
        n[i] = 170 + (size_t)i;
    }
    bool ok = submit_all(e, p, n, 1, 24, &o->out[0]) && submit_all(e, p + 1, n + 1, 8, 24, &o->out[1]);
    kiln_engine_get_stats(e, st);
    kiln_engine_free(e);
    return ok;
}

static void test_engine_identity(void) {
    kiln_model *m = kt_load(kt_data("models/stories260K/stories260K.gguf"));
    if (!m) SKIP("stories260K not available");
    for (int rows = 1; rows <= 8; rows += 7) {
        run a, b;
        kiln_engine_stats sa, sb;
        CHECK(engine_run(m, false, rows, &a, &sa, 0) && engine_run(m, true, rows, &b, &sb, 0));
        for (int i = 0; i < 9; i++)
            CHECKF(kt_same_out(&a.out[i], &b.out[i]) && a.out[i].n == 24, "rows %d request %d", rows, i);
        CHECK(sa.cache_hits >= 8 && sb.cache_hits >= 8 && sa.cache_hit_tokens == sb.cache_hit_tokens);
        CHECK(sa.kv_blocks_total == 0 && sb.kv_blocks_total > 0 && sb.kv_block_tokens == KN_KVP_BLOCK);
        CHECK(sb.kv_blocks_used > 0 && sb.kv_blocks_shared > 0); /* the cache's entries share their prefix */
        if (rows == 1) continue;
        /* A pool of 40 blocks (one full row is 17): the rows wait for blocks, the cache gives its
         * blocks back, every request completes, with the same output. */
        run c;
        kiln_engine_stats sc;
        CHECK(engine_run(m, true, rows, &c, &sc, 40 * sb.kv_block_bytes));
        CHECK(sc.kv_blocks_total == 40 && sc.kv_blocks_used <= 40);
        for (int i = 0; i < 9; i++) CHECKF(kt_same_out(&a.out[i], &c.out[i]), "budget: request %d", i);
    }
    kiln_model_free(m);
}

/* The most pool blocks used while a row generated (on_token runs on the engine's thread). */
typedef struct watch {
    kiln_engine *e;
    int32_t max_used, max_shared;
    int n;
} watch;

static int watch_token(const kiln_token_event *ev, void *user) {
    watch *w = user;
    kiln_engine_stats st;
    kiln_engine_get_stats(w->e, &st);
    if (st.kv_blocks_used > w->max_used) w->max_used = st.kv_blocks_used;
    if (st.kv_blocks_shared > w->max_shared) w->max_shared = st.kv_blocks_shared;
    w->n += ev->token >= 0;
    return 0;
}

/* k requests of prompt + a suffix of its own each (the prompt published by a first request when
 * warm), max 4 tokens; the peak of blocks used while they ran. */
static int32_t shared_peak(kiln_model *m, const kiln_token *prompt, int32_t n, int k, bool warm) {
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 2176;
    ep.max_rows = 8;
    ep.prefill_chunk = 256;
    ep.n_threads = 1;
    kiln_engine *e;
    if (kiln_engine_new(m, &ep, &e) != KILN_OK) return -1;
    static kiln_token buf[2200];
    memcpy(buf, prompt, (size_t)n * sizeof *buf);
    watch w = {.e = e};
    kiln_generate_params gp = kiln_generate_default_params();
    gp.sampling.temperature = 0;
    gp.ignore_eos = true;
    kiln_request *r[8];
    if (warm) { /* publishes the prompt */
        gp.max_tokens = 1;
        if (kiln_engine_submit(e, buf, (size_t)n, &gp, &r[0]) || kiln_request_wait(r[0], NULL)) return -1;
        kiln_request_free(r[0]);
    }
    static kiln_token p[8][2200];
    gp.max_tokens = 4;
    gp.on_token = watch_token;
    gp.user = &w;
    for (int i = 0; i < k; i++) {
        memcpy(p[i], buf, (size_t)n * sizeof *buf);
        for (int j = 0; j < 5; j++) p[i][n + j] = 100 + i * 7 + j;
        if (kiln_engine_submit(e, p[i], (size_t)n + 5, &gp, &r[i])) return -1;
    }
    for (int i = 0; i < k; i++) {
        kiln_request_wait(r[i], NULL);
        kiln_request_free(r[i]);
    }
    kiln_engine_free(e);
    return w.n == 4 * k ? w.max_used : -1;
}

static void test_shared_prefix_memory(void) {
    kiln_model *m = kt_load(kt_gen("paged-llama", "--preset tiny-llama-plain --type F16 --ctx 4096 --seed 3"));
    if (!m) SKIP("kiln-gen failed");
    static kiln_token prompt[2000];
    for (int i = 0; i < 2000; i++) prompt[i] = 1 + (i * 131) % 500;
    const int32_t one = shared_peak(m, prompt, 2000, 1, false), eight = shared_peak(m, prompt, 2000, 8, true);
    printf("  pool blocks used: one row %d, 8 rows sharing a 2000-token prompt %d (%.2fx)\n", one, eight,
           (double)eight / one);
    CHECK(one >= 2005 / KN_KVP_BLOCK && eight > one);
    CHECKF(eight * 10 <= one * 13, "8 rows take %d blocks, one row %d", eight, one);
    kiln_model_free(m);
}

int main(void) {
    RUN(test_pool);
    RUN(test_paged_equals_contiguous);
    RUN(test_cow_and_prefix_sharing);
    RUN(test_ssd_paged);
    RUN(test_engine_identity);
    RUN(test_shared_prefix_memory);
    return kt_summary();
}
