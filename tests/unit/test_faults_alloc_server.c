/*
 * test_faults_alloc_server.c - allocation failures injected into the server: requests of each API
 * to a kiln server running inside this program (tests/fuzz/fuzz_server.h: the real HTTP layer,
 * routes and engine over stories260K), with the N-th allocation failing, for N = 1..K (K: every
 * allocation a clean exchange makes): the server's code, the library under it, and jansson's (the
 * server points jansson at malloc: json_alloc in http.c).
 *
 * What each N must give: the reference reply (the failure was absorbed), or an error the client can
 * tell from an answer: a 500 or 503 with an error object that has a message; once a stream has
 * begun, an error event in it, or the stream cut off (its chunked body never ends) with no part of
 * its end sent. Never a 4xx (the request was fine), never a stream that ends as if it had succeeded
 * with other content, never silence. Then the same request without failures must give the reference
 * reply again (the server still serves, its caches unharmed), and the heap holds no more than
 * before, less the engine's KV blocks (faults_alloc.h; LeakSanitizer under `make asan`).
 *
 * A reply is compared with what varies between runs taken out: the HTTP head's Date, the chunk
 * sizes of a stream (how the bytes were cut depends on timing), ids, creation times, durations.
 * The isolated server's supervisor (a second process) is not run here; what it reads of a request to
 * route it (pool.c's peek) is, with each of its allocations failing (test_supervisor_alloc_peek).
 *
 * KILN_FAULT_N=N tries one N alone (KILN_FAULT_BT=1 shows where it fails), KILN_FAULT_PATH=TEXT
 * the paths whose name holds TEXT; KILN_FAULT_VERBOSE prints each reply.
 */
#include "faults_alloc.h"
#include "harness.h"

#include "fuzz_server.h"
#include "pool.h"

#include <jansson.h>
#include <regex.h>

#define REPLY_MAX (1u << 16)

static char reply[FZ_SRV_REPLY_MAX];

/* ---- replies --------------------------------------------------------------------------------- */

/* The body of an HTTP reply in raw (de-chunked when the head says chunked) into out (cap bytes,
 * NUL-terminated). False when a chunked body was cut off (no last chunk). */
static bool reply_body(const char *raw, char *out, size_t cap) {
    out[0] = 0;
    const char *body = strstr(raw, "\r\n\r\n");
    if (!body) return false;
    body += 4;
    const bool chunked = memmem(raw, (size_t)(body - raw), "chunked", 7) != NULL;
    bool whole = !chunked;
    size_t o = 0;
    if (!chunked) {
        o = strlen(body) < cap - 1 ? strlen(body) : cap - 1;
        memcpy(out, body, o);
    } else {
        const char *p = body;
        for (;;) {
            char *end;
            const unsigned long len = strtoul(p, &end, 16);
            whole = end != p && !len && strncmp(end, "\r\n", 2) == 0;
            if (end == p || !len || strncmp(end, "\r\n", 2) != 0) break;
            p = end + 2;
            if (strlen(p) < len) break; /* cut short: what came is kept */
            const size_t k = len < cap - 1 - o ? len : cap - 1 - o;
            memcpy(out + o, p, k);
            o += k;
            p += len;
            if (strncmp(p, "\r\n", 2) != 0) break;
            p += 2;
        }
    }
    out[o] = 0;
    return whole;
}

/* Replaces, in s, each match of the extended regular expression re by with. */
static void replace_all(char *s, size_t cap, const char *re, const char *with) {
    regex_t rx;
    if (regcomp(&rx, re, REG_EXTENDED)) abort();
    regmatch_t m;
    size_t from = 0;
    while (regexec(&rx, s + from, 1, &m, from ? REG_NOTBOL : 0) == 0) {
        const size_t a = from + (size_t)m.rm_so, b = from + (size_t)m.rm_eo, w = strlen(with);
        const size_t tail = strlen(s + b);
        if (a + w + tail + 1 > cap) break;
        memmove(s + a + w, s + b, tail + 1);
        memcpy(s + a, with, w);
        from = a + w;
        if (m.rm_eo == m.rm_so) from++;
    }
    regfree(&rx);
}

static int compare_lines(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorts the lines of s in place. */
static void sort_lines(char *s) {
    static char *line[4096], copy[REPLY_MAX];
    size_t n = 0, len = strlen(s);
    memcpy(copy, s, len + 1);
    for (char *p = strtok(copy, "\n"); p && n < 4096; p = strtok(NULL, "\n")) line[n++] = p;
    qsort(line, n, sizeof line[0], compare_lines);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)sprintf(s + o, "%s\n", line[i]);
}

/* The status and the body of the reply in raw, with what varies between runs taken out; *whole:
 * false when a stream was cut off. */
static int normalize(const char *raw, char *out, size_t cap, bool *whole) {
    const int status = fz_srv_status(raw);
    *whole = reply_body(raw, out, cap);
    replace_all(out, cap, "\"(id|item_id|response_id)\": ?\"[^\"]*\"", "\"id\":\"*\"");
    replace_all(out, cap, "\"(created|created_at|completed_at)\": ?(\"[^\"]*\"|[0-9]+)", "\"created\":0");
    replace_all(out, cap, "\"[a-z_]*(duration|_ms|per_second)\": ?[0-9.e+-]+", "\"time\":0");
    return status;
}

/* ---- the paths ------------------------------------------------------------------------------- */

typedef struct path {
    const char *name;  /* what the request is */
    const char *route; /* its URL */
    const char *body;  /* its JSON */
    const char *error; /* a stream's error event holds this */
    const char *end;   /* a stream that ends well ends with this */
    bool unordered;    /* the lines of its reply may come in any order (the events of two choices) */
} path;

static const path paths[] = {
    {"chat completion under a JSON Schema, with logprobs and a stop string", "/v1/chat/completions",
     "{\"messages\":[{\"role\":\"system\",\"content\":\"Answer in JSON.\"},{\"role\":\"user\",\"content\":\"Name a "
     "cat\"}],\"temperature\":0,\"max_tokens\":8,\"logprobs\":true,\"top_logprobs\":2,\"stop\":[\"zz\"],"
     "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"cat\",\"schema\":{\"type\":\"object\","
     "\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12}},\"required\":[\"name\"]}}}}",
     "\"error\"", NULL, false},
    {"chat completion streamed with a tool the model must call", "/v1/chat/completions",
     "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"stream\":true,\"stream_options\":"
     "{\"include_usage\":true},\"temperature\":0,\"max_tokens\":8,\"tool_choice\":\"required\",\"tools\":[{\"type\":"
     "\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"The weather\",\"parameters\":{\"type\":"
     "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]}",
     "\"error\"", "data: [DONE]", false},
    {"Anthropic message streamed", "/v1/messages",
     "{\"model\":\"stories260K\",\"max_tokens\":8,\"temperature\":0,\"stream\":true,\"system\":\"Be brief.\","
     "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Once upon a time\"}]}]}",
     "event: error", "event: message_stop", false},
    {"Ollama chat streamed", "/api/chat",
     "{\"model\":\"stories260K\",\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"options\":"
     "{\"num_predict\":8,\"temperature\":0}}",
     "\"error\"", "\"done\":true", false},
    {"Responses API streamed", "/v1/responses",
     "{\"instructions\":\"Be brief.\",\"input\":\"Once upon a time\",\"max_output_tokens\":8,\"temperature\":0,"
     "\"stream\":true,\"store\":false}",
     "response.failed", "response.completed", false},
    {"chat completion streamed, two choices with usage", "/v1/chat/completions",
     "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"n\":2,\"seed\":3,\"stream\":true,"
     "\"stream_options\":{\"include_usage\":true},\"max_tokens\":8}",
     "\"error\"", "data: [DONE]", true},
    {"Anthropic message with tools, a tool_use and its tool_result in the history", "/v1/messages",
     "{\"model\":\"stories260K\",\"max_tokens\":8,\"temperature\":0,\"system\":[{\"type\":\"text\",\"text\":\"sys\"}],"
     "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},{\"role\":\"assistant\",\"content\":[{"
     "\"type\":\"text\",\"text\":\"Let me look.\"},{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"get_weather\","
     "\"input\":{\"city\":\"Paris\"}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
     "\"t1\",\"content\":\"sunny\"}]}],\"tools\":[{\"name\":\"get_weather\",\"description\":\"The weather\","
     "\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}]}",
     "\"error\"", NULL, false},
    {"Ollama chat with tools, a call and its tool message in the history", "/api/chat",
     "{\"model\":\"stories260K\",\"stream\":false,\"options\":{\"num_predict\":8,\"temperature\":0},\"messages\":["
     "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{"
     "\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}}]},{\"role\":\"tool\",\"content\":"
     "\"sunny\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
     "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]}",
     "\"error\"", NULL, false},
    {"Ollama's model description", "/api/show", "{\"model\":\"stories260K\",\"verbose\":true}", "\"error\"", NULL,
     false},
    {"tokenize with pieces", "/tokenize",
     "{\"content\":\"Once upon a time, caf\\u00e9\",\"add_special\":true,\"with_pieces\":true}", "\"error\"", NULL,
     false},
    {"completions, two choices", "/v1/completions",
     "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"n\":2,\"temperature\":0.8,\"seed\":7,\"echo\":true}",
     "\"error\"", NULL, false},
};

/* Waits for the engine to finish with every request (the reply can come before it has). */
static void engine_idle(void) {
    for (int i = 0; i < 20000; i++) {
        kiln_engine_stats es;
        kiln_engine_get_stats(fz_srv.engine, &es);
        if (!es.active && !es.queued) return;
        nanosleep(&(struct timespec){0, 100000}, NULL);
    }
}

/* One exchange of path p with the fail-th allocation failing (0: none): the normalized reply into
 * out; its status (0: no reply). *whole: false when a stream was cut off. */
static int exchange(const path *p, long fail, char *out, size_t cap, bool *whole) {
    char msg[8192];
    const int h = snprintf(msg, sizeof msg,
                           "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
                           p->route, strlen(p->body), p->body);
    size_t n = 0;
    fa_arm(fail);
    const bool ok = fz_srv_exchange(msg, (size_t)h, false, reply, &n);
    engine_idle();
    fa_disarm();
    if (!ok) abort();
    if (getenv("KILN_FAULT_VERBOSE")) printf("# N=%ld: %s\n", fail, reply);
    const int st = normalize(reply, out, cap, whole);
    if (p->unordered) sort_lines(out);
    return st;
}

/* The heap's bytes in use less the engine's KV memory, which grows to its cap as rows need it and
 * is kept (a failure that costs a cached prefix makes the next request take a block), once two
 * readings 0.2 ms apart agree (a connection's thread may still be ending); *cache: the
 * prefix cache's entries and bytes, which change when a request cut short stores a shorter prefix. */
static size_t heap_less_kv(uint64_t *cache) {
    size_t last = SIZE_MAX;
    for (int i = 0; i < 50; i++) {
        kiln_engine_stats es;
        kiln_engine_get_stats(fz_srv.engine, &es);
        const size_t now = fa_heap_in_use() - (size_t)es.kv_bytes;
        *cache = (uint64_t)es.cache_entries << 40 ^ es.cache_bytes;
        if (now == last) break;
        last = now;
        nanosleep(&(struct timespec){0, 200000}, NULL);
    }
    return last;
}

/* Whether body is an error object with a non-empty message (OpenAI's, Anthropic's, Ollama's). */
static bool error_body(const char *body) {
    json_t *j = json_loads(body, 0, NULL);
    json_t *e = json_object_get(j, "error");
    const char *msg = json_string_value(json_is_object(e) ? json_object_get(e, "message") : e);
    const bool ok = msg && *msg;
    json_decref(j);
    return ok;
}

static void run_path(const path *p) {
    const char *model = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(model)) SKIP("no %s", model);
    const char *want = getenv("KILN_FAULT_PATH"); /* the paths whose name holds this, alone */
    if (want && !strstr(p->name, want)) SKIP("KILN_FAULT_PATH=%s", want);
    fz_srv_start();
    fz_srv.cfg.max_tokens = fz_srv.cfg.max_tokens_limit = 8;
    mallopt(M_ARENA_MAX, 1); /* srv_http_start allows two (faults_alloc.h) */
    static char ref[REPLY_MAX], out[REPLY_MAX];
    /* clean runs: the reference (the second a prefix-cache hit, as every later attempt is) */
    bool whole;
    CHECK(exchange(p, 0, ref, sizeof ref, &whole) == 200);
    CHECKF(exchange(p, 0, ref, sizeof ref, &whole) == 200 && whole, "%s", ref);
    const long K = fa_calls;
    CHECKF(K > 10, "only %ld allocations counted: is the allocator wrapped?", K);
    long tried = 0, absorbed = 0, refused = 0, in_stream = 0, cut = 0, beyond = 0;
    const char *only = getenv("KILN_FAULT_N"); /* one N alone (to look at it with KILN_FAULT_BT) */
    if (only && !*only) only = NULL;
    for (long n = only ? atol(only) : 1; n <= K; n = only ? K + 1 : n + 1) {
        /* up to three times: an attempt may leave what is made once (libc's text of an error, a
         * buffer grown to a new high-water mark), at times a second one too, and an attempt that
         * changed the prefix cache (bounded by its budget) may hold more; a leak grows the heap
         * every time, so one of the later attempts must leave nothing */
        for (int round = 0; round < 3; round++) {
            uint64_t cache_before, cache_after;
            const size_t before = heap_less_kv(&cache_before);
            __atomic_store_n(&fa_failed, 0, __ATOMIC_RELAXED);
            const int st = exchange(p, n, out, sizeof out, &whole);
            const long failed = __atomic_load_n(&fa_failed, __ATOMIC_RELAXED);
            /* the engine's thread and the connection's interleave, so a run may make a few fewer
             * allocations than the reference (a stream's output taken in fewer pieces) */
            if (!failed && fa_calls < n && n > K - K / 8) {
                beyond++;
                break;
            }
            CHECKF(failed == 1, "N=%ld: %ld failures injected (the exchange made %ld allocations, the reference %ld)",
                   n, failed, fa_calls, K);
            const bool first = round == 0;
            tried += first;
            if (st == 200 && whole && strcmp(out, ref) == 0) {
                absorbed += first;
            } else if (st == 500 || st == 503) {
                CHECKF(error_body(out), "N=%ld: %d without an error message: %s", n, st, out);
                refused += first;
            } else {
                CHECKF(st == 200, "N=%ld: status %d: %s", n, st, out);
                CHECKF(!whole || strstr(out, p->error) != NULL,
                       "N=%ld: a reply that is not the reference and has no error:\n%s\nvs\n%s", n, out, ref);
                CHECKF(whole || !p->end || !strstr(out, p->end), "N=%ld: a stream cut off after its end:\n%s", n, out);
                in_stream += first && whole;
                cut += first && !whole;
            }
            /* the same request again, clean: the reference */
            CHECKF(exchange(p, 0, out, sizeof out, &whole) == 200 && whole && strcmp(out, ref) == 0,
                   "N=%ld: the next request did not get the reference reply:\n%s\nvs\n%s", n, out, ref);
            const size_t after = heap_less_kv(&cache_after);
#ifndef __SANITIZE_ADDRESS__
            if (!first && (after <= before || cache_after != cache_before)) break;
            CHECKF(round < 2, "N=%ld: %zu bytes more in use after each of three attempts", n, after - before);
#else
            (void)before;
            (void)after;
            (void)cache_after;
            break; /* LeakSanitizer looks at exit */
#endif
        }
    }
    printf("# %s: %ld allocations; %ld failure points: %ld absorbed, %ld refused (500/503), %ld errors in the stream, "
           "%ld streams cut off, %ld past a shorter run's end\n",
           p->name, K, tried, absorbed, refused, in_stream, cut, beyond);
}

static void test_server_alloc_chat_schema(void) { run_path(&paths[0]); }
static void test_server_alloc_chat_tools_stream(void) { run_path(&paths[1]); }
static void test_server_alloc_anthropic_stream(void) { run_path(&paths[2]); }
static void test_server_alloc_ollama_stream(void) { run_path(&paths[3]); }
static void test_server_alloc_responses_stream(void) { run_path(&paths[4]); }
static void test_server_alloc_chat_choices_stream(void) { run_path(&paths[5]); }
static void test_server_alloc_anthropic_tools(void) { run_path(&paths[6]); }
static void test_server_alloc_ollama_tools(void) { run_path(&paths[7]); }
static void test_server_alloc_ollama_show(void) { run_path(&paths[8]); }
static void test_server_alloc_tokenize(void) { run_path(&paths[9]); }
static void test_server_alloc_completions(void) { run_path(&paths[10]); }

/* What an isolated server's supervisor reads of a request before routing it (pool.c), with the N-th
 * allocation failing (jansson's, through the server's counting allocator): the model, the keep_alive
 * and the route must come out as without the failure, and a failure must be reported (nomem: the
 * supervisor then answers 503). Before nomem, a failure could leave the model unread, and the request
 * went to the default model's engine, which refused it with a 400 "model_not_routed". */
static bool peek_same(const srv_pool_peek *a, const srv_pool_peek *b) {
    return a->complete == b->complete && a->health == b->health && a->api == b->api && a->ps == b->ps &&
           !strcmp(a->model, b->model) && a->keep.applies == b->keep.applies && a->keep.ms == b->keep.ms &&
           a->keep.unload == b->keep.unload && a->keep.chat == b->keep.chat;
}

static void test_supervisor_alloc_peek(void) {
    static const struct {
        const char *url, *body;
        size_t declared; /* the Content-Length (0: the body's): more, and the body is still coming */
    } requests[] = {
        /* the whole body: "model" after the messages */
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":4,"
         "\"stream\":true,\"model\":\"stories15M\",\"n\":1}",
         0},
        /* Ollama: "name" when "model" is null, and an unload call's keep_alive */
        {"/api/chat", "{\"model\":null,\"name\":\"stories260K\",\"messages\":[],\"keep_alive\":0}", 0},
        /* a body still coming (routed when stalled): "model" read alone, its escapes decoded */
        {"/v1/completions", "{\"model\":\"stories\\u0031\\u0035M\",\"prompt\":\"Once upon", 5000},
    };
    srv_json_alloc_install();
    for (size_t k = 0; k < sizeof requests / sizeof *requests; k++) {
        char rq[1024];
        const size_t len = strlen(requests[k].body);
        snprintf(rq, sizeof rq, "POST %s HTTP/1.1\r\nHost: k\r\nContent-Length: %zu\r\n\r\n%s", requests[k].url,
                 requests[k].declared ? requests[k].declared : len, requests[k].body);
        const bool stalled = requests[k].declared != 0;
        srv_pool_peek want, got;
        fa_arm(0);
        CHECK(srv_pool_peek_request(rq, strlen(rq), stalled, 1u << 20, &want));
        const long n_calls = fa_calls;
        fa_disarm();
        CHECK(!want.nomem && want.model[0]);
        long reported = 0;
        for (long n = 1; n <= n_calls; n++) {
            const size_t heap = fa_heap_in_use();
            const long failed = fa_failed;
            fa_arm(n);
            CHECK(srv_pool_peek_request(rq, strlen(rq), stalled, 1u << 20, &got));
            fa_disarm();
            CHECK(fa_failed == failed + 1);
            if (!got.nomem || !peek_same(&got, &want)) {
                CHECK(got.nomem);
                CHECK(peek_same(&got, &want));
                printf("# request %zu, allocation %ld: nomem %d, model '%s' (want '%s')\n", k, n, got.nomem, got.model,
                       want.model);
                return;
            }
            reported++;
            CHECK(fa_heap_in_use() <= heap);
        }
        printf("# request %zu: model '%s', %ld allocations, each failure reported\n", k, want.model, reported);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    fa_setup(argv);
    RUN(test_server_alloc_chat_schema);
    RUN(test_server_alloc_chat_tools_stream);
    RUN(test_server_alloc_anthropic_stream);
    RUN(test_server_alloc_ollama_stream);
    RUN(test_server_alloc_responses_stream);
    RUN(test_server_alloc_chat_choices_stream);
    RUN(test_server_alloc_anthropic_tools);
    RUN(test_server_alloc_ollama_tools);
    RUN(test_server_alloc_ollama_show);
    RUN(test_server_alloc_tokenize);
    RUN(test_server_alloc_completions);
    RUN(test_supervisor_alloc_peek);
    return kt_summary();
}
