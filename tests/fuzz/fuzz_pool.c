/*
 * fuzz_pool.c - libFuzzer harness of the model pool's request peek and model routing (pool.c): what
 * the supervisor of an isolated `kiln serve` reads of a request before it hands the connection to a
 * model's engine, from bytes no one has checked yet.
 *
 * Feeds: the first byte holds flags (whether the connection stalled, whether Ollama's "name" counts,
 * a small body limit, a cut point for the body); the rest is a request's start as the socket
 * holds it (request line, headers, body, possibly cut short). Runs srv_pool_peek_request on it (not
 * stalled, then stalled), srv_pool_body_model on the bytes as a whole body and as a cut one,
 * srv_pool_body_keep (Ollama's keep_alive, on /api/generate and /api/chat) and
 * srv_pool_keep_alive_parse on the bytes as a string, then resolves the model it names through the
 * pool (aliases, ":latest", the names cache, a resolver that knows names beginning with "k", the
 * table filling up and its entries being reused). Fails on a crash or a sanitizer report, and on
 * a broken promise: a name not NUL-terminated within its buffer, an unload call that is not a
 * keep_alive of 0, a whole JSON object body (unique keys) whose cut-short reading names a model
 * other than the whole one, or a request the stalled peek does not route.
 * Seeds: requests of each API with "model" first, last and absent, keep_alive values, chunked and
 * Expect: 100-continue requests, heads cut short (tests/fuzz/corpus/pool/).
 */
#include "fuzz.h"
#include "pool.h"

#include <jansson.h>

/* Names beginning with "k" (and short) are local models: id the name, path /models/<name>. */
static bool resolve(const char *name, char *id, size_t idc, char *path, size_t pathc, uint64_t *bytes) {
    if (name[0] != 'k' || strlen(name) > 40) return false;
    snprintf(id, idc, "%s", name);
    snprintf(path, pathc, "/models/%s", name);
    *bytes = strlen(name) << 20;
    return true;
}

static void setup(void) {
    static bool done;
    if (done) return;
    done = true;
    srv_pool_config pc = {.default_id = "default-model",
                          .default_path = "/models/default-model",
                          .default_bytes = 1 << 20,
                          .alias_name = {"small", "big"},
                          .alias_target = {"k-small", "k-big:latest"},
                          .n_aliases = 2,
                          .max_models = 2,
                          .load_timeout_s = 1,
                          .resolve = resolve};
    if (!srv_pool_init(&pc, NULL)) abort();
}

static void check_name(const char *s, size_t cap) {
    if (!memchr(s, 0, cap)) abort(); /* not NUL-terminated within its buffer */
}

static void check_keep(const srv_pool_keep *k) {
    if (k->unload && (!k->applies || k->ms != 0)) abort();
    if (!k->applies && (k->ms || k->unload || k->chat)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (64u << 10)) return 0;
    setup();
    const uint8_t flags = data[0];
    const char *buf = (const char *)data + 1;
    const size_t n = size - 1;
    const size_t max_body = flags & 4 ? 64 : 1u << 20;

    srv_pool_peek pk;
    srv_pool_peek_request(buf, n, false, max_body, &pk);
    check_name(pk.model, sizeof pk.model);
    check_keep(&pk.keep);
    if (!srv_pool_peek_request(buf, n, true, max_body, &pk)) abort(); /* stalled: always routed */
    check_name(pk.model, sizeof pk.model);
    check_keep(&pk.keep);

    /* the bytes as a body: whole, and cut where the flags say */
    const bool name_too = flags & 2;
    char whole[256], cut[256];
    srv_pool_body_model(buf, n, true, name_too, whole, sizeof whole);
    check_name(whole, sizeof whole);
    const size_t k = n ? (size_t)(flags >> 3) * n / 31 : 0;
    srv_pool_body_model(buf, k <= n ? k : n, false, name_too, cut, sizeof cut);
    check_name(cut, sizeof cut);
    srv_pool_body_model(buf, n, false, false, cut, sizeof cut);
    check_name(cut, sizeof cut);
    json_t *j = json_loadb(buf, n, JSON_REJECT_DUPLICATES, NULL);
    if (json_is_object(j)) {
        srv_pool_body_model(buf, n, true, false, whole, sizeof whole);
        /* a whole object read as if cut short: no model, or the same one */
        if (cut[0] && strcmp(cut, whole) != 0) abort();
    }
    json_decref(j);

    srv_pool_keep keep;
    srv_pool_body_keep(flags & 1 ? "/api/chat" : "/api/generate?x=1", buf, n, &keep);
    check_keep(&keep);
    json_t *str = json_stringn_nocheck(buf, n < 80 ? n : 80);
    int64_t ms = 0;
    if (srv_pool_keep_alive_parse(str, &ms) && ms < SRV_POOL_KEEP_FOREVER) abort();
    json_decref(str);

    /* routing: the name through aliases, tags, the cache and the table */
    const char *name = pk.model[0] ? pk.model : whole;
    char id[192], path[1024];
    uint64_t bytes;
    srv_pool_resolve(name, id, sizeof id, path, sizeof path, &bytes);
    check_name(id, sizeof id);
    check_name(path, sizeof path);
    const int idx = srv_pool_index(name);
    if (idx < -2 || idx >= SRV_POOL_MAX) abort();
    srv_pool_table *t = srv_pool_table_get();
    if (idx >= 0) t->e[idx].last_used_ms = (double)(flags + n); /* entries of other inputs get reused */
    if (srv_pool_any() < 0) abort();
    return 0;
}
