/*
 * test_prefix.c - the prefix cache's RAM tier: lookup of the longest prefix, exact K/V copies,
 * supersession, coverage, LRU eviction under the byte budget; and through the engine: greedy
 * output bit-identical with and without a cache hit, multi-turn reuse, two concurrent requests
 * starting from one cached prefix.
 */
#define KT_ENGINE_HELPERS
#include "harness.h"

#include "cache/prefix.h"
#include "kiln.h"

#include <stdatomic.h>

static void test_unit(void) {
    kn_kv src, dst;
    CHECK(kn_kv_init(&src, KN_F32, 2, 64, 8) == KILN_OK);
    CHECK(kn_kv_init(&dst, KN_F32, 2, 64, 8) == KILN_OK);
    kn_prefix_cache pc;
    kn_pc_init(&pc, 1 << 20);
    int32_t a[40], b[40];
    for (int i = 0; i < 40; i++) a[i] = b[i] = i + 1;
    b[20] = 999;
    CHECK(kn_pc_restore(&pc, a, 40, 39, &dst) == 0); /* empty: a miss */
    kt_fill_kv(&src, 30, 0.5f);
    kn_pc_publish(&pc, a, 30, &src, 2);
    kn_pc_stats st;
    kn_pc_get_stats(&pc, &st);
    CHECK(st.entries == 1 && st.misses == 1);
    CHECK(kn_pc_restore(&pc, a, 40, 39, &dst) == 30); /* the whole entry */
    CHECK(dst.n_past == 30 && kt_same_rows(&src, &dst, 30));
    CHECK(kn_pc_restore(&pc, a, 40, 12, &dst) == 12); /* capped */
    CHECK(kn_pc_restore(&pc, b, 40, 39, &dst) == 20); /* a prefix of an entry */
    CHECK(kt_same_rows(&src, &dst, 20));
    kn_pc_publish(&pc, a, 25, &src, 2); /* covered: no new entry */
    kn_pc_get_stats(&pc, &st);
    CHECK(st.entries == 1);
    kt_fill_kv(&src, 40, 0.5f);
    kn_pc_publish(&pc, a, 40, &src, 2); /* extends: supersedes */
    kn_pc_get_stats(&pc, &st);
    CHECK(st.entries == 1);
    CHECK(kn_pc_restore(&pc, a, 40, 39, &dst) == 39);
    kt_fill_kv(&src, 40, 7.0f);
    kn_pc_publish(&pc, b, 40, &src, 2); /* diverges at 20: a second entry */
    kn_pc_get_stats(&pc, &st);
    CHECK(st.entries == 2);
    CHECK(kn_pc_restore(&pc, b, 40, 39, &dst) == 39 && kt_same_rows(&src, &dst, 39));
    kn_pc_publish(&pc, a, 1, &src, 2); /* below min_tokens: ignored */
    /* Budget: room for about one 40-token entry (2 layers x 40 x 8 floats x 2 = 5 KiB). */
    kn_prefix_cache small;
    kn_pc_init(&small, 7000);
    kt_fill_kv(&src, 40, 1.0f);
    kn_pc_publish(&small, a, 40, &src, 2);
    kn_pc_publish(&small, b, 40, &src, 2);
    kn_pc_get_stats(&small, &st);
    CHECK(st.entries == 1 && st.evictions == 1 && st.bytes <= 7000);
    CHECK(kn_pc_restore(&small, b, 40, 39, &dst) == 39); /* the newer one stayed */
    CHECK(kn_pc_restore(&small, a, 40, 39, &dst) == 20); /* only the shared part */
    kn_pc_free(&small);
    /* Disabled cache. */
    kn_prefix_cache off;
    kn_pc_init(&off, 0);
    kn_pc_publish(&off, a, 40, &src, 2);
    CHECK(kn_pc_restore(&off, a, 40, 39, &dst) == 0);
    kn_pc_free(&off);
    /* Another layout never matches. */
    kn_kv other;
    CHECK(kn_kv_init(&other, KN_F16, 2, 64, 8) == KILN_OK);
    CHECK(kn_pc_restore(&pc, a, 40, 39, &other) == 0);
    kn_kv_free(&other);
    kn_pc_free(&pc);
    kn_kv_free(&src);
    kn_kv_free(&dst);
}

static kiln_engine *engine(kiln_model *m, int64_t cache) {
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 256;
    ep.max_rows = 4;
    ep.prefill_chunk = 16;
    ep.prompt_cache = cache;
    kiln_engine *e = NULL;
    kiln_engine_new(m, &ep, &e);
    return e;
}

static void test_engine_hits(void) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no model");
    kiln_model *m;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    kiln_engine *cold = engine(m, 0), *warm = engine(m, 64 << 20);
    CHECK(cold && warm);
    kiln_token p1[60];
    for (int i = 0; i < 60; i++) p1[i] = (kiln_token)(1 + (i * 37) % 500);
    kt_out a, b;
    kiln_generate_result ra, rb;
    /* Turn 1: a miss. */
    CHECK(kt_generate(warm, p1, 60, 20, &a, &ra) == KILN_OK && ra.n_cached == 0);
    /* Turn 2: turn 1's prompt + its reply + more tokens: hits prompt and reply. */
    kiln_token p2[120];
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + 60, a.toks, 20 * sizeof(kiln_token));
    for (int i = 0; i < 20; i++) p2[80 + i] = (kiln_token)(3 + i * 11);
    CHECK(kt_generate(warm, p2, 100, 20, &a, &ra) == KILN_OK);
    CHECKF(ra.n_cached == 79, "cached %d (prompt 60 + 19 fed reply tokens)",
           ra.n_cached); /* the last reply token was never fed */
    CHECK(kt_generate(cold, p2, 100, 20, &b, &rb) == KILN_OK && rb.n_cached == 0);
    CHECK(a.n == 20 && b.n == 20 && memcmp(a.toks, b.toks, sizeof(kiln_token) * 20) == 0);
    /* The same prompt again: all but its last token come from the cache. */
    CHECK(kt_generate(warm, p2, 100, 20, &a, &ra) == KILN_OK && ra.n_cached == 99);
    CHECK(memcmp(a.toks, b.toks, sizeof(kiln_token) * 20) == 0);
    /* Two concurrent requests sharing a cached prefix: both hit, both correct. */
    kiln_token p3[110], p4[110];
    memcpy(p3, p2, 100 * sizeof(kiln_token));
    memcpy(p4, p2, 100 * sizeof(kiln_token));
    for (int i = 0; i < 10; i++) p3[100 + i] = (kiln_token)(50 + i), p4[100 + i] = (kiln_token)(90 + i);
    kt_out c3, c4, w3, w4;
    kiln_generate_result r3, r4;
    CHECK(kt_generate(cold, p3, 110, 16, &c3, &r3) == KILN_OK && kt_generate(cold, p4, 110, 16, &c4, &r4) == KILN_OK);
    kiln_generate_params gp = kiln_generate_default_params();
    gp.sampling.temperature = 0;
    gp.max_tokens = 16;
    gp.ignore_eos = true;
    gp.on_token = kt_on_token;
    kiln_request *q3, *q4;
    w3.n = w4.n = 0;
    gp.user = &w3;
    CHECK(kiln_engine_submit(warm, p3, 110, &gp, &q3) == KILN_OK);
    gp.user = &w4;
    CHECK(kiln_engine_submit(warm, p4, 110, &gp, &q4) == KILN_OK);
    CHECK(kiln_request_wait(q3, &r3) == KILN_OK && kiln_request_wait(q4, &r4) == KILN_OK);
    kiln_request_free(q3);
    kiln_request_free(q4);
    CHECKF(r3.n_cached >= 100 && r4.n_cached >= 100, "cached %d and %d", r3.n_cached, r4.n_cached);
    CHECK(memcmp(w3.toks, c3.toks, sizeof(kiln_token) * 16) == 0 &&
          memcmp(w4.toks, c4.toks, sizeof(kiln_token) * 16) == 0);
    kiln_engine_stats es;
    kiln_engine_get_stats(warm, &es);
    CHECK(es.cache_hits >= 4 && es.cache_misses >= 1 && es.cache_entries >= 1 && es.cache_bytes > 0);
    kiln_engine_get_stats(cold, &es);
    CHECK(es.cache_hits == 0 && es.cache_entries == 0 && es.cache_budget == 0);
    kiln_engine_free(cold);
    kiln_engine_free(warm);
    kiln_model_free(m);
}

int main(void) {
    RUN(test_unit);
    RUN(test_engine_hits);
    return kt_summary();
}
