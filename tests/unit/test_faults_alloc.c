/*
 * test_faults_alloc.c - allocation failures injected into the library: loading a model and
 * generating with the N-th allocation failing, for N = 1..K (K: every allocation a clean load and
 * generation make), ends with a clean error status and a message, or succeeds with the same text;
 * it never crashes, and it leaks nothing. Eight paths: a session; a session drafting with a draft
 * model; the engine with its prefix cache; a generation under a JSON Schema compiled in the attempt;
 * the engine with the SSD tier, n-gram drafts, a schema, logprobs and a stop string; a Hugging Face
 * directory; the tool-call grammars of two formats; chat templates and reply parsing
 * (docs/reliability.md has the table).
 *
 * The failing allocator is faults_alloc.h's: the library's calls of malloc, calloc, realloc,
 * posix_memalign and strdup (and kn_calloc / kn_alloc_aligned in src/base/util.c) are wrapped at
 * link time, counted while armed, and the N-th fails. Allocations inside other libraries (libc's
 * own, jansson, pcre2, sqlite) are not counted.
 *
 * Leaks: the heap's bytes in use are the same after an attempt as before it (each N runs twice: the
 * first may leave what libc makes once, such as the text of an error); under AddressSanitizer (`make
 * asan`) LeakSanitizer checks instead, and every N runs; otherwise a sample of N (the first ones, then
 * evenly spread) keeps `make test` cheap where a path does not ask for every N.
 */
#include "faults_alloc.h"
#include "harness.h"

#include "engine/session.h"
#include "kiln.h"

#include <jansson.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROMPT   "Once upon a time"
#define N_TOKENS 8

typedef struct text_buf {
    char *p;
    size_t n, cap;
} text_buf;

/* Collects the generated text (into a fixed buffer: nothing allocated here). */
static int on_token(const kiln_token_event *ev, void *user) {
    text_buf *b = user;
    const size_t n = ev->text_len < b->cap - 1 - b->n ? ev->text_len : b->cap - 1 - b->n;
    memcpy(b->p + b->n, ev->text, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* A session of n_ctx positions over m, two threads. */
static kiln_status open_session(kiln_model *m, int n_ctx, kiln_session **s) {
    kiln_session_params sp = kiln_session_default_params();
    sp.n_threads = 2;
    sp.n_ctx = n_ctx;
    return kiln_session_new(m, &sp, s);
}

/* max_tokens greedy tokens after PROMPT (under g when not NULL), their text appended to b; res (may
 * be NULL) gets the generation's result. */
static kiln_status greedy(kiln_session *s, const kiln_grammar *g, int32_t max_tokens, bool ignore_eos, text_buf *b,
                          kiln_generate_result *res) {
    kiln_generate_params gp = kiln_generate_default_params();
    gp.max_tokens = max_tokens;
    gp.ignore_eos = ignore_eos;
    gp.sampling.temperature = 0;
    gp.grammar = g;
    gp.on_token = on_token;
    gp.user = b;
    return kiln_generate(s, PROMPT, &gp, res);
}

/* One load + generation with the fail-th allocation failing (0: none). Returns the status; the
 * text generated goes to out (cap bytes), the library's message to why. */
static kiln_status attempt(const char *path, long fail, char *out, size_t cap, char *why, size_t why_cap) {
    out[0] = why[0] = 0;
    kiln_model *m = NULL;
    kiln_session *s = NULL;
    fa_arm(fail);
    kiln_status st = kiln_model_load(path, NULL, &m);
    if (!st) st = open_session(m, 64, &s);
    text_buf b = {out, 0, cap};
    if (!st) st = greedy(s, NULL, N_TOKENS, true, &b, NULL);
    fa_disarm();
    if (st) snprintf(why, why_cap, "%s", kiln_last_error());
    kiln_session_free(s);
    kiln_model_free(m);
    return st;
}

/* Speculative decoding with a draft model: the model loaded twice (the second as the draft, the
 * same vocabulary), a session whose draft proposes 3 tokens every step, and 24 greedy tokens. draft_proposed:
 * the tokens the draft proposed in the clean attempt (a failure may leave the row undrafted). */
static int32_t draft_proposed;
static kiln_status attempt_draft(const char *path, long fail, char *out, size_t cap, char *why, size_t why_cap) {
    out[0] = why[0] = 0;
    kiln_model *m = NULL, *d = NULL;
    kiln_session *s = NULL;
    fa_arm(fail);
    kiln_status st = kiln_model_load(path, NULL, &m);
    if (!st) st = kiln_model_load(path, NULL, &d);
    if (!st) {
        kiln_session_params sp = kiln_session_default_params();
        sp.n_threads = 2;
        sp.n_ctx = 64;
        sp.spec = KILN_SPEC_DRAFT;
        sp.draft_model = d;
        sp.spec_max = 4;
        st = kiln_session_new(m, &sp, &s);
    }
    /* a draft as costly as the model would be kept off by the cost model: 3 proposals every step */
    if (!st) s->spec.force_k = 3;
    text_buf b = {out, 0, cap};
    kiln_generate_result res = {0};
    if (!st) st = greedy(s, NULL, 24, true, &b, &res);
    if (!st && fail == 0) draft_proposed = res.n_spec_proposed;
    fa_disarm();
    if (st) snprintf(why, why_cap, "%s", kiln_last_error());
    kiln_session_free(s);
    kiln_model_free(d);
    kiln_model_free(m);
    return st;
}

/* Constrained output: a JSON Schema with a pattern of a Unicode class (regex, automaton, GBNF,
 * matcher) compiled, then a greedy generation under it (the grammar's masks over the vocabulary).
 * An allocation failure absorbed must leave the grammar whole: the same text comes out. */
#define SCHEMA                                                                                                         \
    "{\"type\":\"object\",\"required\":[\"name\",\"n\"],\"properties\":{"                                              \
    "\"name\":{\"type\":\"string\",\"pattern\":\"^\\\\p{Lu}[a-z_]{0,6}$\"},"                                           \
    "\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},"                                                       \
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2}}}"
static kiln_status attempt_grammar(const char *path, long fail, char *out, size_t cap, char *why, size_t why_cap) {
    out[0] = why[0] = 0;
    kiln_model *m = NULL;
    kiln_session *s = NULL;
    kiln_grammar *g = NULL;
    fa_arm(fail);
    kiln_status st = kiln_model_load(path, NULL, &m);
    if (!st) {
        kiln_grammar_params p = kiln_grammar_default_params();
        p.kind = KILN_GRAMMAR_JSON_SCHEMA;
        st = kiln_grammar_compile(SCHEMA, strlen(SCHEMA), &p, &g);
    }
    if (!st) st = open_session(m, 96, &s);
    text_buf b = {out, 0, cap};
    if (!st) st = greedy(s, g, 40, false, &b, NULL);
    fa_disarm();
    if (st) snprintf(why, why_cap, "%s", kiln_last_error());
    kiln_session_free(s);
    kiln_grammar_free(g);
    kiln_model_free(m);
    return st;
}

/* The server's path: an engine (scheduler thread, prefix cache) serving the same prompt twice, the
 * second from the cache; the texts of both go to out. With all: also the cache's SSD tier (a fresh
 * directory per attempt, entries written by a flush after each request) and n-gram speculative decoding, and the
 * requests under SCHEMA with logprobs (2 alternatives) and a stop string. */
static kiln_status engine_attempt(const char *path, long fail, char *out, size_t cap, char *why, size_t why_cap,
                                  bool all) {
    static kiln_grammar *g;
    static unsigned serial;
    if (all && !g) {
        kiln_grammar_params gp = kiln_grammar_default_params();
        gp.kind = KILN_GRAMMAR_JSON_SCHEMA;
        if (kiln_grammar_compile(SCHEMA, strlen(SCHEMA), &gp, &g)) {
            snprintf(why, why_cap, "%s", kiln_last_error());
            return KILN_ERR_INVALID_ARG;
        }
    }
    char dir[600];
    snprintf(dir, sizeof dir, "%s/ssd-%u", kt_tmpdir(), serial++);
    out[0] = why[0] = 0;
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    fa_arm(fail);
    kiln_status st = kiln_model_load(path, NULL, &m);
    if (!st) {
        kiln_engine_params ep = kiln_engine_default_params();
        ep.n_ctx = all ? 128 : 64;
        ep.max_rows = 2;
        ep.n_threads = 2;
        ep.prompt_cache = 1 << 20;
        if (all) {
            ep.ssd_dir = dir;
            ep.ssd_demote_idle_s = 86400; /* never by the clock: written by the flush after each request */
            ep.spec = KILN_SPEC_NGRAM;
        }
        st = kiln_engine_new(m, &ep, &e);
    }
    kiln_token prompt[64];
    size_t n_prompt = 0;
    if (!st) st = kiln_tokenize(m, PROMPT, strlen(PROMPT), true, false, prompt, 64, &n_prompt);
    text_buf b = {out, 0, cap};
    static const char *const stop[] = {"\"n\""};
    for (int k = 0; k < 2 && !st; k++) {
        kiln_generate_params gp = kiln_generate_default_params();
        gp.sampling.temperature = 0;
        gp.on_token = on_token;
        gp.user = &b;
        if (all) {
            gp.max_tokens = 24;
            gp.grammar = g;
            gp.logprobs = 2;
            gp.stop = stop;
            gp.n_stop = 1;
        } else {
            gp.max_tokens = N_TOKENS;
            gp.ignore_eos = true;
        }
        kiln_request *req = NULL;
        st = kiln_engine_submit(e, prompt, n_prompt, &gp, &req);
        if (!st) {
            kiln_generate_result res;
            st = kiln_request_wait(req, &res);
            if (st) snprintf(why, why_cap, "%s", res.error[0] ? res.error : kiln_last_error());
            kiln_request_free(req);
        }
        /* the request's entries to SSD now, while this thread waits: the same allocations every run
         * (a writer woken by the clock wrote an entry or not, as the requests' timing fell) */
        if (all && !st) st = kiln_engine_flush_cache(e, 60000);
    }
    kiln_engine_free(e);
    fa_disarm();
    if (st && !why[0]) snprintf(why, why_cap, "%s", kiln_last_error());
    kiln_model_free(m);
    if (all) nftw(dir, kt_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return st;
}

static kiln_status attempt_engine(const char *path, long fail, char *out, size_t cap, char *why, size_t why_cap) {
    return engine_attempt(path, fail, out, cap, why, why_cap, false);
}

static kiln_status attempt_engine_all(const char *path, long fail, char *out, size_t cap, char *why, size_t why_cap) {
    return engine_attempt(path, fail, out, cap, why, why_cap, true);
}

/* A Hugging Face directory (config.json, model.safetensors, tokenizer.json: stories260K written by
 * kiln-hf, once, unarmed) loaded and 8 greedy tokens generated; path names the GGUF it came from. */
static kiln_status attempt_hf(const char *path, long fail, char *out, size_t cap, char *why, size_t why_cap) {
    static char dir[600];
    if (!dir[0]) {
        const char *b = getenv("BUILD");
        char cmd[2048];
        snprintf(dir, sizeof dir, "%s/stories-hf", kt_tmpdir());
        snprintf(cmd, sizeof cmd, "%s/kiln-hf %s %s 2>/dev/null", b && *b ? b : "build", path, dir);
        if (system(cmd) != 0) {
            snprintf(why, why_cap, "%s failed", cmd);
            dir[0] = 0;
            return KILN_ERR_IO;
        }
    }
    return attempt(dir, fail, out, cap, why, why_cap);
}

/* Tool calls: the call grammars of two formats (JSON arguments in hermes, XML-like in qwen3-coder)
 * for two tools, each compiled and generated under (tool_choice "required"), one after the other. */
#define TOOLS                                                                                                          \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"strict\":true,\"parameters\":{"                  \
    "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},"                             \
    "\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}}},"           \
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\",\"properties\":{"       \
    "\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"number\",\"minimum\":0}},\"required\":[\"a\"]}}}]"
static kiln_status attempt_tools(const char *path, long fail, char *out, size_t cap, char *why, size_t why_cap) {
    static const char *const formats[] = {"hermes", "qwen3-coder"};
    out[0] = why[0] = 0;
    kiln_model *m = NULL;
    kiln_session *s = NULL;
    text_buf b = {out, 0, cap};
    fa_arm(fail);
    kiln_status st = kiln_model_load(path, NULL, &m);
    if (!st) st = open_session(m, 96, &s);
    for (int f = 0; f < 2 && !st; f++) {
        kiln_tool_grammar_params tp = kiln_tool_grammar_default_params();
        tp.format = formats[f];
        tp.tools = TOOLS;
        tp.choice = KILN_TOOL_CHOICE_REQUIRED;
        kiln_grammar *g = NULL;
        st = kiln_tool_grammar(&tp, &g);
        if (!st) st = greedy(s, g, 32, false, &b, NULL);
        kiln_grammar_free(g);
    }
    fa_disarm();
    if (st) snprintf(why, why_cap, "%s", kiln_last_error());
    kiln_session_free(s);
    kiln_model_free(m);
    return st;
}

/* Chat text: two chat templates (Qwen3's and Llama 3.1's, with tools and a tool call in the history)
 * rendered, and replies with calls parsed into messages, 7 bytes a feed. out gets each text's length
 * and hash (the prompts are longer than out). */
#define CHAT                                                                                                           \
    "{\"messages\":[{\"role\":\"system\",\"content\":\"You are terse.\"},{\"role\":\"user\",\"content\":\"Weather "    \
    "in Paris?\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","      \
    "\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"unit\":\"c\"}}}]},{\"role\":\"tool\"," \
    "\"tool_call_id\":\"c1\",\"content\":\"21 C\"},{\"role\":\"user\",\"content\":\"And in "                           \
    "\u00c5re?\"}],\"tools\":" TOOLS ",\"add_generation_prompt\":true}"
/* Replies in four families' markup, each with a call (reasoning, XML parameters, a Python-like list,
 * harmony channels). */
static const struct {
    const char *format, *reply;
} replies[] = {
    {"hermes", "<think>Look it up.</think>Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
               "\"\u00c5re\", \"unit\": \"c\"}}\n</tool_call>"},
    {"qwen3-coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\n\u00c5re\n</parameter>\n<parameter=unit>"
                    "\nc\n</parameter>\n</function>\n</tool_call>"},
    {"lfm2", "<|tool_call_start|>[add(a=1, b=2.5), get_weather(city='it\\'s', unit=\"f\")]<|tool_call_end|>"},
    {"gpt-oss", "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary "
                "to=functions.add <|constrain|>json<|message|>{\"a\":1}<|call|>"},
};
/* Appends "len:hash " of text[len] to b. */
static void put_digest(text_buf *b, const char *text, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)text[i]) * 1099511628211ull;
    const int n = snprintf(b->p + b->n, b->cap - b->n, "%zu:%016llx ", len, (unsigned long long)h);
    if (n > 0 && (size_t)n < b->cap - b->n) b->n += (size_t)n;
}

static kiln_status attempt_chat(const char *path, long fail, char *out, size_t cap, char *why, size_t why_cap) {
    (void)path;
    static const char *const names[] = {"chat-templates/llama.cpp-2026/Qwen-Qwen3-0.6B.jinja",
                                        "chat-templates/llama.cpp-2026/meta-llama-Llama-3.1-8B-Instruct.jinja"};
    static char *tmpl[2];
    static size_t tmpl_len[2];
    for (int t = 0; t < 2; t++)
        if (!tmpl[t] && !(tmpl[t] = kt_read_file(kt_data(names[t]), &tmpl_len[t]))) {
            snprintf(why, why_cap, "no %s", names[t]);
            return KILN_ERR_IO;
        }
    out[0] = why[0] = 0;
    text_buf b = {out, 0, cap};
    fa_arm(fail);
    kiln_status st = KILN_OK;
    for (int t = 0; t < 2 && !st; t++) {
        char *text = NULL;
        size_t len = 0;
        if (!(st = kiln_template_render(tmpl[t], tmpl_len[t], CHAT, strlen(CHAT), &text, &len)))
            put_digest(&b, text, len);
        kiln_free(text);
    }
    for (size_t r = 0; r < sizeof replies / sizeof *replies && !st; r++) {
        kiln_chat_parser_params pp = kiln_chat_parser_default_params();
        pp.format = replies[r].format;
        pp.tools = TOOLS;
        pp.id_seed = 7;
        kiln_chat_parser *p = NULL;
        st = kiln_chat_parser_new(&pp, &p);
        const char *reply = replies[r].reply;
        for (size_t at = 0, n = strlen(reply); !st && at < n; at += 7)
            st = kiln_chat_parser_feed(p, reply + at, n - at < 7 ? n - at : 7);
        if (!st) st = kiln_chat_parser_finish(p);
        char *msg = NULL;
        size_t msg_len = 0;
        if (!st && !(st = kiln_chat_parser_message(p, &msg, &msg_len))) put_digest(&b, msg, msg_len);
        kiln_free(msg);
        kiln_chat_parser_free(p);
    }
    fa_disarm();
    if (st) snprintf(why, why_cap, "%s", kiln_last_error());
    return st;
}

typedef kiln_status (*attempt_fn)(const char *path, long fail, char *out, size_t cap, char *why, size_t why_cap);

/* Runs try_one with the N-th allocation failing: every N under AddressSanitizer or when every_n, else
 * the first 64 and ~96 spread over the rest. */
static void run_failures(attempt_fn try_one, const char *what, bool every_n) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no %s", path);
    const char *want = getenv("KILN_FAULT_PATH"); /* the paths whose name holds this, alone */
    if (want && !strstr(what, want)) SKIP("KILN_FAULT_PATH=%s", want);
    char ref[4096], out[4096], why[1024];
    /* clean runs: the reference text, the number of allocations K, the heap's resting size */
    CHECKF(try_one(path, 0, ref, sizeof ref, why, sizeof why) == KILN_OK, "%s", why);
    CHECK(try_one(path, 0, ref, sizeof ref, why, sizeof why) == KILN_OK);
    const long K = fa_calls;
    CHECKF(K > 10, "only %ld allocations counted: is the allocator wrapped?", K);
    CHECK(strlen(ref) > 0);
#ifdef __SANITIZE_ADDRESS__
    every_n = true;
#endif
    const long dense = every_n ? K : 64, step = every_n || K / 96 <= 1 ? 1 : K / 96;
    long tried = 0, failed_clean = 0, succeeded = 0;
    const char *only = getenv("KILN_FAULT_N"); /* one N alone (to look at it under valgrind or gdb) */
    for (long n = only ? atol(only) : 1; n <= K; n = only ? K + 1 : n < dense ? n + 1 : n + step) {
        /* twice: the first may leave what libc keeps once made (its message catalogue for the
         * error's text, say); the second must leave nothing */
        try_one(path, n, out, sizeof out, why, sizeof why);
        const size_t before = fa_heap_in_use();
        fa_failed = 0;
        const kiln_status st = try_one(path, n, out, sizeof out, why, sizeof why);
        const size_t after = fa_heap_in_use();
        tried++;
        CHECKF(fa_failed == 1, "N=%ld: %ld failures injected", n, fa_failed);
        if (st) {
            CHECKF(why[0] != 0, "N=%ld: status %s without a message", n, kiln_status_str(st));
            failed_clean++;
        } else {
            /* the failure was absorbed (an optional buffer): the text must not change */
            CHECKF(strcmp(out, ref) == 0, "N=%ld: succeeded with other text: '%s' vs '%s'", n, out, ref);
            succeeded++;
        }
#ifndef __SANITIZE_ADDRESS__ /* else LeakSanitizer checks at exit */
        CHECKF(after <= before, "N=%ld: %zu bytes more in use after the attempt (status %s: %s)", n, after - before,
               kiln_status_str(st), why);
#else
        (void)before;
        (void)after;
#endif
    }
    printf("# %s: %ld allocations; %ld failure points tried: %ld clean errors, %ld absorbed\n", what, K, tried,
           failed_clean, succeeded);
}

static void test_alloc_failures_session(void) {
    run_failures(attempt, "model load + session + generation of 8 tokens", false);
}
static void test_alloc_failures_draft(void) {
    run_failures(attempt_draft, "two model loads + a session drafting with the second + 24 greedy tokens", true);
    if (kt_cur_skipped || kt_cur_failed) return;
    CHECKF(draft_proposed > 0, "the draft proposed %d tokens: speculation did not run", (int)draft_proposed);
}
static void test_alloc_failures_engine(void) {
    run_failures(attempt_engine, "model load + engine + two requests (the second a prefix-cache hit)", false);
}

static void test_alloc_failures_grammar(void) {
    /* every N: a failure the compiler absorbs wrongly is one allocation among a thousand */
    run_failures(attempt_grammar, "model load + JSON Schema compile + constrained generation of 40 tokens", true);
}

static void test_alloc_failures_engine_all(void) {
    run_failures(attempt_engine_all,
                 "model load + engine with SSD tier and n-gram drafts + two constrained requests with logprobs", true);
}

static void test_alloc_failures_hf(void) {
    run_failures(attempt_hf, "Hugging Face directory load (safetensors, tokenizer.json) + generation of 8 tokens",
                 true);
}

static void test_alloc_failures_tools(void) {
    run_failures(attempt_tools, "model load + tool-call grammars of two formats + generations under them", true);
    if (kt_cur_skipped || kt_cur_failed) return;
    char out[4096], why[512];
    if (attempt_tools(kt_data("models/stories260K/stories260K.gguf"), 0, out, sizeof out, why, sizeof why)) return;
    /* the calls begin as each format writes them (white space as the grammars allow) */
    const char *json = strstr(out, "<tool_call>"), *xml = json ? strstr(json + 1, "<tool_call>") : NULL;
    CHECKF(json && xml && strstr(json, "\"name\"") && strstr(xml, "<function="),
           "the grammars did not shape the text: %s", out);
}

static void test_alloc_failures_chat(void) {
    run_failures(attempt_chat, "two chat templates rendered + replies in four formats parsed into messages", true);
}

int main(int argc, char **argv) {
    (void)argc;
    fa_setup(argv);
    /* jansson's allocations fail too (malloc: the wrapper); the library's allocator for jansson
     * (src/base/json.c) stands on this one from its first use */
    json_set_alloc_funcs(malloc, free);
    RUN(test_alloc_failures_session);
    RUN(test_alloc_failures_draft);
    RUN(test_alloc_failures_engine);
    RUN(test_alloc_failures_grammar);
    RUN(test_alloc_failures_engine_all);
    RUN(test_alloc_failures_hf);
    RUN(test_alloc_failures_tools);
    RUN(test_alloc_failures_chat);
    return kt_summary();
}
