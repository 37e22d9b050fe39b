/*
 * test_constrained.c - constrained generation on a real model (stories260K): greedy constrained
 * output bit-identical in a session, alone on an engine, in a batch mixing constrained and free
 * rows, and after a prefix-cache hit; seeded sampled generations all in the language (and valid
 * under the schema the grammar spells); max_tokens cuts report KILN_STOP_LENGTH; a complete sentence
 * ends the row without an end token; an end token sampled while the text is a sentence ends it even
 * with ignore_eos; logprobs of the constrained distribution; the first space of a SentencePiece text;
 * the engine keeps a grammar the caller freed alive.
 */
#include "harness.h"

#include "kiln.h"
#include "sample/gmask.h"

#include <jansson.h>

static const char *model_path(void) { return kt_data("models/stories260K/stories260K.gguf"); }

/* A JSON Schema written as GBNF: an object with a name matching ^[A-Z][a-z]{1,8}$, a color from an
 * enum, an integer age in [1, 100] and 2 to 4 tags of lowercase letters, with optional single
 * spaces. Nothing may follow the closing brace. */
static const char *SCHEMA_GBNF = "root  ::= \"{\" ws \"\\\"name\\\":\" ws name \",\" ws \"\\\"color\\\":\" ws color "
                                 "\",\" ws \"\\\"age\\\":\" ws age "
                                 "\",\" ws \"\\\"tags\\\":\" ws tags ws \"}\"\n"
                                 "name  ::= \"\\\"\" [A-Z] [a-z]{1,8} \"\\\"\"\n"
                                 "color ::= \"\\\"red\\\"\" | \"\\\"green\\\"\" | \"\\\"blue\\\"\"\n"
                                 "age   ::= [1-9] | [1-9] [0-9] | \"100\"\n"
                                 "tags  ::= \"[\" ws tag (\",\" ws tag){1,3} ws \"]\"\n"
                                 "tag   ::= \"\\\"\" [a-z]{1,6} \"\\\"\"\n"
                                 "ws    ::= \" \"?\n";

static kiln_model *g_model;

static kiln_grammar *compile(const char *gbnf) {
    kiln_grammar *g = NULL;
    if (kiln_grammar_compile(gbnf, strlen(gbnf), NULL, &g)) printf("  compile failed: %s\n", kiln_last_error());
    return g;
}

/* What a generation emitted. */
typedef struct out {
    kiln_token toks[1024];
    int n;
    char text[8192];
    size_t len;
    int eog_events; /* events carrying an end-of-generation token */
    int bad_top;    /* top-logprob lists that were not sorted or summed above 1 */
    float logprob[1024];
    size_t n_top[1024];
} out;

static int on_token(const kiln_token_event *ev, void *user) {
    out *o = user;
    if (ev->token >= 0 && kiln_token_is_eog(g_model, ev->token)) o->eog_events++;
    if (ev->token >= 0 && o->n < 1024) {
        o->logprob[o->n] = ev->logprob;
        o->n_top[o->n] = ev->n_top;
        o->toks[o->n++] = ev->token;
        double sum = 0;
        for (size_t i = 0; i < ev->n_top; i++) {
            sum += exp(ev->top[i].logprob);
            if (i && ev->top[i].logprob > ev->top[i - 1].logprob) o->bad_top++;
        }
        if (sum > 1.0 + 1e-4) o->bad_top++;
    }
    if (ev->text_len && o->len + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->len, ev->text, ev->text_len);
        o->len += ev->text_len;
    }
    o->text[o->len] = 0;
    return 0;
}

static kiln_generate_params params(out *o, const kiln_grammar *g, float temperature, uint64_t seed, int max) {
    kiln_generate_params gp = kiln_generate_default_params();
    gp.sampling.temperature = temperature;
    gp.sampling.seed = seed;
    gp.max_tokens = max;
    gp.grammar = g;
    gp.on_token = on_token;
    gp.user = o;
    memset(o, 0, sizeof *o);
    return gp;
}

static bool same_tokens(const out *a, const out *b) {
    return a->n == b->n && !memcmp(a->toks, b->toks, sizeof(kiln_token) * (size_t)a->n);
}

/* Whether text is a JSON object valid under the schema SCHEMA_GBNF spells (checked independently
 * of the grammar, with jansson). */
static bool schema_valid(const char *text, char *why, size_t cap) {
    json_error_t err;
    json_t *v = json_loads(text, 0, &err);
    bool ok = false;
    if (!v || !json_is_object(v)) {
        snprintf(why, cap, "not a JSON object: %s", text);
        goto done;
    }
    const char *name = json_string_value(json_object_get(v, "name"));
    const char *color = json_string_value(json_object_get(v, "color"));
    const json_t *age = json_object_get(v, "age"), *tags = json_object_get(v, "tags");
    size_t nl = name ? strlen(name) : 0;
    bool name_ok = name && nl >= 2 && nl <= 9 && name[0] >= 'A' && name[0] <= 'Z';
    for (size_t i = 1; name_ok && i < nl; i++) name_ok = name[i] >= 'a' && name[i] <= 'z';
    if (!name_ok) {
        snprintf(why, cap, "bad name in %s", text);
        goto done;
    }
    if (!color || (strcmp(color, "red") && strcmp(color, "green") && strcmp(color, "blue"))) {
        snprintf(why, cap, "bad color in %s", text);
        goto done;
    }
    if (!json_is_integer(age) || json_integer_value(age) < 1 || json_integer_value(age) > 100) {
        snprintf(why, cap, "bad age in %s", text);
        goto done;
    }
    if (!json_is_array(tags) || json_array_size(tags) < 2 || json_array_size(tags) > 4) {
        snprintf(why, cap, "bad tags in %s", text);
        goto done;
    }
    for (size_t i = 0; i < json_array_size(tags); i++)
        if (!json_is_string(json_array_get(tags, i))) {
            snprintf(why, cap, "a tag is not a string in %s", text);
            goto done;
        }
    ok = json_object_size(v) == 4;
    if (!ok) snprintf(why, cap, "extra properties in %s", text);
done:
    json_decref(v);
    return ok;
}

static kiln_token g_prompt[64];
static size_t g_n_prompt;

static kiln_engine *engine(int rows, uint64_t cache) {
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 256;
    ep.max_rows = rows;
    ep.n_threads = 1;
    ep.prompt_cache = cache;
    kiln_engine *e = NULL;
    if (kiln_engine_new(g_model, &ep, &e)) printf("  engine failed: %s\n", kiln_last_error());
    return e;
}

static kiln_status run(kiln_engine *e, const kiln_generate_params *gp, kiln_generate_result *res) {
    kiln_request *r;
    kiln_status st = kiln_engine_submit(e, g_prompt, g_n_prompt, gp, &r);
    if (st) return st;
    st = kiln_request_wait(r, res);
    kiln_request_free(r);
    return st;
}

/* Greedy constrained output: valid, ended by the complete sentence (no end token), and the same
 * tokens in a session, alone on an engine, in a batch of 4 with free rows, and after a prefix-cache
 * hit. */
static void test_greedy_identical_everywhere(void) {
    if (!g_model) SKIP("no model");
    kiln_grammar *g = compile(SCHEMA_GBNF);
    CHECK(g);
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    kiln_session *s = NULL;
    CHECK(kiln_session_new(g_model, &sp, &s) == KILN_OK);
    static out a, b, c[4], d;
    kiln_generate_params gp = params(&a, g, 0, 0, 200);
    kiln_generate_result res;
    CHECK(kiln_generate_tokens(s, g_prompt, g_n_prompt, &gp, &res) == KILN_OK);
    /* the complete sentence ended the row at once: its last token was never fed to the model */
    CHECK(kiln_session_n_past(s) == (int32_t)g_n_prompt + res.n_generated - 1);
    kiln_session_free(s);
    char why[256] = "";
    CHECKF(res.stop == KILN_STOP_EOS && a.eog_events == 0, "stop %d after %d tokens: %s", res.stop, a.n, a.text);
    if (getenv("KT_VERBOSE")) printf("  greedy: %s\n", a.text);
    CHECKF(kiln_grammar_accepts(g, a.text, a.len), "%s", a.text);
    CHECKF(schema_valid(a.text, why, sizeof why), "%s", why);
    CHECK(res.n_generated == a.n && a.text[a.len - 1] == '}');
    for (int i = 0; i < a.n; i++) CHECK(!kiln_token_is_eog(g_model, a.toks[i]));

    kiln_engine *e = engine(4, 0);
    CHECK(e);
    gp = params(&b, g, 0, 0, 200);
    CHECK(run(e, &gp, &res) == KILN_OK && res.stop == KILN_STOP_EOS);
    CHECKF(same_tokens(&a, &b), "engine alone: %s vs session: %s", b.text, a.text);

    /* a batch: constrained rows 0 and 2, free rows 1 and 3 */
    static out free_alone;
    kiln_generate_params fp = params(&free_alone, NULL, 0, 0, 40);
    fp.ignore_eos = true;
    CHECK(run(e, &fp, &res) == KILN_OK);
    kiln_request *r[4];
    for (int i = 0; i < 4; i++) {
        kiln_generate_params q = params(&c[i], i % 2 ? NULL : g, 0, 0, i % 2 ? 40 : 200);
        q.ignore_eos = i % 2 == 1;
        CHECK(kiln_engine_submit(e, g_prompt, g_n_prompt, &q, &r[i]) == KILN_OK);
    }
    for (int i = 0; i < 4; i++) {
        CHECK(kiln_request_wait(r[i], &res) == KILN_OK);
        kiln_request_free(r[i]);
    }
    for (int i = 0; i < 4; i++) CHECKF(same_tokens(i % 2 ? &free_alone : &a, &c[i]), "batch row %d: %s", i, c[i].text);
    CHECK(!same_tokens(&free_alone, &a)); /* the constraint changed something */
    kiln_engine_free(e);

    /* the prefix cache: the second run restores the prompt's KV */
    e = engine(2, 64u << 20);
    CHECK(e);
    gp = params(&d, g, 0, 0, 200);
    CHECK(run(e, &gp, &res) == KILN_OK && res.n_cached == 0);
    gp = params(&d, g, 0, 0, 200);
    CHECK(run(e, &gp, &res) == KILN_OK);
    CHECKF(res.n_cached > 0, "no prefix-cache hit");
    CHECKF(same_tokens(&a, &d), "after a cache hit: %s", d.text);
    kiln_engine_free(e);
    kiln_grammar_free(g);
}

/* 20 seeded sampled generations, 4 at a time: every one ends complete and is valid. */
static void test_sampled_all_valid(void) {
    if (!g_model) SKIP("no model");
    kiln_grammar *g = compile(SCHEMA_GBNF);
    CHECK(g);
    kiln_engine *e = engine(4, 0);
    CHECK(e);
    static out o[20];
    kiln_request *r[20];
    for (int i = 0; i < 20; i++) {
        kiln_generate_params gp = params(&o[i], g, 1.0f, 1000 + (uint64_t)i, 200);
        gp.sampling.top_k = 0;
        gp.sampling.top_p = 1.0f;
        gp.sampling.min_p = 0.0f;
        CHECK(kiln_engine_submit(e, g_prompt, g_n_prompt, &gp, &r[i]) == KILN_OK);
    }
    int distinct = 0;
    for (int i = 0; i < 20; i++) {
        kiln_generate_result res;
        CHECK(kiln_request_wait(r[i], &res) == KILN_OK);
        kiln_request_free(r[i]);
        CHECKF(res.stop == KILN_STOP_EOS, "generation %d stopped with %d: %s", i, res.stop, o[i].text);
        CHECKF(kiln_grammar_accepts(g, o[i].text, o[i].len), "generation %d: %s", i, o[i].text);
        char why[256] = "";
        CHECKF(schema_valid(o[i].text, why, sizeof why), "generation %d: %s", i, why);
        distinct += i == 0 || strcmp(o[i].text, o[0].text) != 0;
        if (getenv("KT_VERBOSE")) printf("  %d: %s\n", i, o[i].text);
    }
    CHECK(distinct > 10); /* seeds differ, so do the samples */
    kiln_engine_free(e);
    kiln_grammar_free(g);
}

/* A generation cut by max_tokens reports KILN_STOP_LENGTH; its text is a prefix of the language but
 * not a sentence. */
static void test_max_tokens_cut(void) {
    if (!g_model) SKIP("no model");
    kiln_grammar *g = compile(SCHEMA_GBNF);
    CHECK(g);
    kiln_session *s = NULL;
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    CHECK(kiln_session_new(g_model, &sp, &s) == KILN_OK);
    static out o;
    kiln_generate_params gp = params(&o, g, 0.8f, 7, 6);
    kiln_generate_result res;
    CHECK(kiln_generate_tokens(s, g_prompt, g_n_prompt, &gp, &res) == KILN_OK);
    CHECK(res.stop == KILN_STOP_LENGTH && res.n_generated == 6 && o.n == 6);
    CHECK(o.text[0] == '{' && !kiln_grammar_accepts(g, o.text, o.len));
    kiln_session_free(s);
    kiln_grammar_free(g);
}

/* An end token is allowed only when the text is a sentence, and then ends the generation even with
 * ignore_eos: with EOS pushed far up, the first token must still be a letter, the second is EOS. */
static void test_eos_when_accepting_even_with_ignore_eos(void) {
    if (!g_model) SKIP("no model");
    kiln_grammar *g = compile("root ::= [a-z]+\n");
    CHECK(g);
    const kiln_token eos = kiln_token_eos(g_model);
    CHECK(eos >= 0);
    kiln_session *s = NULL;
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    CHECK(kiln_session_new(g_model, &sp, &s) == KILN_OK);
    static out o;
    kiln_generate_params gp = params(&o, g, 0, 0, 50);
    gp.ignore_eos = true;
    kiln_logit_bias bias = {.token = eos, .bias = 1000.0f};
    gp.sampling.logit_bias = &bias;
    gp.sampling.n_logit_bias = 1;
    kiln_generate_result res;
    CHECK(kiln_generate_tokens(s, g_prompt, g_n_prompt, &gp, &res) == KILN_OK);
    CHECKF(res.stop == KILN_STOP_EOS && res.n_generated == 1, "stop %d after %d tokens", res.stop, res.n_generated);
    CHECK(o.len >= 1 && kiln_grammar_accepts(g, o.text, o.len));
    /* without the grammar, ignore_eos keeps going */
    gp = params(&o, NULL, 0, 0, 5);
    gp.ignore_eos = true;
    gp.sampling.logit_bias = &bias;
    gp.sampling.n_logit_bias = 1;
    CHECK(kiln_generate_tokens(s, g_prompt, g_n_prompt, &gp, &res) == KILN_OK);
    CHECK(res.stop == KILN_STOP_LENGTH && res.n_generated == 5);
    kiln_session_free(s);
    kiln_grammar_free(g);
}

/* Logprobs report the constrained distribution: top lists only hold allowed tokens (so at most as
 * many as are allowed), and a token that was the only one allowed has logprob 0. */
static void test_logprobs_constrained(void) {
    if (!g_model) SKIP("no model");
    kiln_grammar *g = compile(SCHEMA_GBNF);
    CHECK(g);
    const kn_vtrie *vt = kn_model_vtrie(g_model);
    CHECK(vt);
    kiln_session *s = NULL;
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    CHECK(kiln_session_new(g_model, &sp, &s) == KILN_OK);
    static out o;
    kiln_generate_params gp = params(&o, g, 0, 0, 200);
    gp.logprobs = 5;
    kiln_generate_result res;
    CHECK(kiln_generate_tokens(s, g_prompt, g_n_prompt, &gp, &res) == KILN_OK);
    CHECK(o.bad_top == 0 && o.n > 10);
    /* replay the tokens through a matcher to know what was allowed at each step */
    kn_gmatch *m;
    CHECK(kn_gmatch_new(g, vt, false, &m) == KILN_OK);
    int forced = 0;
    for (int i = 0; i < o.n; i++) {
        int32_t n_allowed;
        const uint64_t *mask = kn_gmatch_mask(m, &n_allowed);
        CHECK(mask[o.toks[i] >> 6] >> (o.toks[i] & 63) & 1);
        CHECKF(o.n_top[i] == (size_t)KN_MIN(5, n_allowed), "step %d: %zu top entries, %d allowed", i, o.n_top[i],
               n_allowed);
        CHECK(o.logprob[i] <= 0);
        if (n_allowed == 1) {
            CHECKF(o.logprob[i] == 0.0f, "step %d: the only allowed token has logprob %g", i, o.logprob[i]);
            forced++;
        }
        CHECK(kn_gmatch_accept(m, o.toks[i]) == KILN_OK);
    }
    CHECK(forced > 0);
    kn_gmatch_free(m);
    kiln_session_free(s);
    kiln_grammar_free(g);
}

/* From BOS alone a SentencePiece text starts: the first piece's leading space is not output, so
 * "▁Once" may begin a grammar that starts with "Once". */
static void test_first_space_of_a_text(void) {
    if (!g_model) SKIP("no model");
    kiln_grammar *g = compile("root ::= \"Once upon a time\" [a-z ,.]{0,40} \".\"\n");
    CHECK(g);
    kiln_session *s = NULL;
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    CHECK(kiln_session_new(g_model, &sp, &s) == KILN_OK);
    static out o;
    kiln_generate_params gp = params(&o, g, 0, 0, 100);
    kiln_generate_result res;
    CHECK(kiln_generate(s, "", &gp, &res) == KILN_OK); /* BOS only */
    CHECKF(kiln_grammar_accepts(g, o.text, o.len) && res.stop == KILN_STOP_EOS, "stop %d: [%s]", res.stop, o.text);
    if (getenv("KT_VERBOSE")) printf("  from BOS: %s\n", o.text);
    char piece[32];
    size_t n = 0;
    CHECK(kiln_token_piece(g_model, o.toks[0], false, piece, sizeof piece, &n) == KILN_OK);
    CHECKF(n > 1 && piece[0] == ' ', "first token [%.*s]", (int)n, piece); /* the model's own "▁Once" */
    kiln_session_free(s);
    kiln_grammar_free(g);
}

/* The engine holds its own reference: the caller frees the grammar right after submitting (the
 * requests wait in the queue behind one row), and every request still completes valid. */
static void test_engine_keeps_grammar(void) {
    if (!g_model) SKIP("no model");
    kiln_engine *e = engine(1, 0);
    CHECK(e);
    static out o[3];
    kiln_request *r[3];
    for (int i = 0; i < 3; i++) {
        kiln_grammar *g = compile(SCHEMA_GBNF);
        CHECK(g);
        kiln_generate_params gp = params(&o[i], g, 0.7f, 50 + (uint64_t)i, 200);
        CHECK(kiln_engine_submit(e, g_prompt, g_n_prompt, &gp, &r[i]) == KILN_OK);
        kiln_grammar_free(g);
    }
    kiln_grammar *check = compile(SCHEMA_GBNF);
    for (int i = 0; i < 3; i++) {
        kiln_generate_result res;
        CHECK(kiln_request_wait(r[i], &res) == KILN_OK);
        kiln_request_free(r[i]);
        CHECKF(res.stop == KILN_STOP_EOS && kiln_grammar_accepts(check, o[i].text, o[i].len), "%d: %s", i, o[i].text);
    }
    kiln_grammar_free(check);
    kiln_engine_free(e);
}

/* A grammar of 10,000 literals (the numbers 0..9999 after a phrase, left-factored into a trie when
 * compiled): greedy and seeded sampled generations all end accepted, with one of the numbers. */
static void test_big_enum(void) {
    if (!g_model) SKIP("no model");
    size_t cap = 10000 * 10 + 64;
    char *text = malloc(cap);
    CHECK(text);
    int k = snprintf(text, cap, "root ::= \"She was \" n \" years old.\"\nn ::= ");
    for (int i = 0; i < 10000; i++) k += snprintf(text + k, cap - (size_t)k, "%s\"%d\"", i ? " | " : "", i);
    kiln_grammar *g = NULL;
    CHECKF(kiln_grammar_compile(text, (size_t)k, NULL, &g) == KILN_OK, "%s", kiln_last_error());
    free(text);
    kiln_session *s = NULL;
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    CHECK(kiln_session_new(g_model, &sp, &s) == KILN_OK);
    static out o;
    for (int i = 0; i < 6; i++) {
        kiln_generate_params gp = params(&o, g, i ? 1.0f : 0.0f, (uint64_t)i, 60);
        kiln_generate_result res;
        kiln_status st = kiln_generate_tokens(s, g_prompt, g_n_prompt, &gp, &res);
        CHECKF(st == KILN_OK, "%d: %s", i, res.error);
        int age = -1;
        CHECKF(res.stop == KILN_STOP_EOS && kiln_grammar_accepts(g, o.text, o.len) &&
                   sscanf(o.text, "She was %d years old.", &age) == 1 && age >= 0 && age <= 9999,
               "%d: stop %d: [%s]", i, res.stop, o.text);
        if (getenv("KT_VERBOSE")) printf("  %s\n", o.text);
    }
    kiln_session_free(s);
    kiln_grammar_free(g);
}

/* A state too ambiguous for the matcher that the compile-time check does not reach (behind a long
 * literal): the generation ends with KILN_ERR_UNSUPPORTED and a message saying so, not with
 * KILN_ERR_NOMEM. */
static void test_too_ambiguous_mid_generation(void) {
    if (!g_model) SKIP("no model");
    kiln_grammar *g =
        compile("root ::= \"Once upon a time, there was a little girl named Lily. She liked to play outside "
                "in the park.\" (\" a\"?){5000} \"!\"\n");
    CHECK(g);
    kiln_session *s = NULL;
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    CHECK(kiln_session_new(g_model, &sp, &s) == KILN_OK);
    static out o;
    kiln_generate_params gp = params(&o, g, 0, 0, 100);
    kiln_generate_result res;
    kiln_status st = kiln_generate_tokens(s, g_prompt, g_n_prompt, &gp, &res);
    CHECKF(st == KILN_ERR_UNSUPPORTED, "status %d: %s", (int)st, res.error);
    CHECKF(res.error && strstr(res.error, "too ambiguous"), "%s", res.error);
    CHECK(o.n > 5); /* it got some way along the literal */
    kiln_session_free(s);
    kiln_grammar_free(g);
}

/* ---- lazy grammars ------------------------------------------------------------------------------ */

static kiln_grammar *compile_lazy(const char *gbnf, const char *trigger) {
    kiln_grammar_params gp = kiln_grammar_default_params();
    const char *trig[1] = {trigger};
    gp.triggers = trig;
    gp.n_triggers = 1;
    kiln_grammar *g = NULL;
    if (kiln_grammar_compile(gbnf, strlen(gbnf), &gp, &g)) printf("  compile failed: %s\n", kiln_last_error());
    return g;
}

/* Greedy text of the model alone and with a lazy grammar whose trigger is "Lily": the text before
 * the trigger is the same (free text stays free, token for token), the trigger and what follows are
 * the grammar's (digits, which the model never writes on its own), the generation ends when the
 * sentence is complete, and the whole text is accepted by the lazy grammar. A trigger that never
 * appears leaves the generation exactly as without a grammar. */
static void test_lazy_free_then_constrained(void) {
    if (!g_model) SKIP("no model");
    kiln_session *s = NULL;
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    CHECK(kiln_session_new(g_model, &sp, &s) == KILN_OK);
    static out free_o, lazy_o;
    kiln_generate_params gp = params(&free_o, NULL, 0, 0, 80);
    kiln_generate_result res;
    CHECK(kiln_generate_tokens(s, g_prompt, g_n_prompt, &gp, &res) == KILN_OK);
    const char *at = strstr(free_o.text, "Lily");
    CHECKF(at, "the model's own text has no trigger: %s", free_o.text);
    CHECKF(!strpbrk(free_o.text, "0123456789"), "the model wrote digits: %s", free_o.text);
    const size_t before = (size_t)(at - free_o.text);

    kiln_grammar *g = compile_lazy("root ::= \"Lily\" \" has \" [0-9]{3} \" apples.\"\n", "Lily");
    CHECK(g);
    CHECK(kiln_grammar_accepts(g, "free text", 9));
    CHECK(kiln_grammar_accepts(g, "free Lily has 123 apples.", 25));
    CHECK(!kiln_grammar_accepts(g, "free Lily has 12 apples.", 24));
    CHECK(!kiln_grammar_accepts(g, "free Lily has 123 apples. more", 30));
    gp = params(&lazy_o, g, 0, 0, 80);
    CHECK(kiln_generate_tokens(s, g_prompt, g_n_prompt, &gp, &res) == KILN_OK);
    CHECKF(lazy_o.len > before && memcmp(lazy_o.text, free_o.text, before) == 0, "free part differs: %s | %s",
           lazy_o.text, free_o.text);
    CHECKF(strcmp(lazy_o.text + before, "Lily has ") > 0 && strncmp(lazy_o.text + before, "Lily has ", 9) == 0, "%s",
           lazy_o.text);
    CHECKF(res.stop == KILN_STOP_EOS && kiln_grammar_accepts(g, lazy_o.text, lazy_o.len), "stop %d: %s", res.stop,
           lazy_o.text);
    CHECKF(strlen(lazy_o.text + before) == strlen("Lily has 123 apples."), "%s", lazy_o.text);
    kiln_grammar_free(g);

    /* a trigger that never appears: the same tokens as without a grammar */
    g = compile_lazy("root ::= \"QZX\" [0-9]\n", "QZX");
    CHECK(g);
    gp = params(&lazy_o, g, 0, 0, 80);
    CHECK(kiln_generate_tokens(s, g_prompt, g_n_prompt, &gp, &res) == KILN_OK);
    CHECK(same_tokens(&lazy_o, &free_o) && strcmp(lazy_o.text, free_o.text) == 0);
    kiln_grammar_free(g);
    kiln_session_free(s);
}

/* A trigger that ends inside a token: "Lil" completes within the model's token for "Lily", whose
 * remaining bytes the grammar rejects (it wants a digit), so that token is excluded and another drawn;
 * the text stays in the lazy language, with the trigger followed by digits. Also on an engine in a
 * batch with a free row, which the lazy row does not disturb. */
static void test_lazy_trigger_inside_a_token(void) {
    if (!g_model) SKIP("no model");
    kiln_grammar *g = compile_lazy("root ::= \"Lil\" [0-9]{2} \".\"\n", "Lil");
    CHECK(g);
    kiln_session *s = NULL;
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    CHECK(kiln_session_new(g_model, &sp, &s) == KILN_OK);
    static out o, o2, f;
    kiln_generate_params gp = params(&o, g, 0, 0, 80);
    kiln_generate_result res;
    CHECK(kiln_generate_tokens(s, g_prompt, g_n_prompt, &gp, &res) == KILN_OK);
    CHECKF(kiln_grammar_accepts(g, o.text, o.len), "%s", o.text);
    kiln_generate_params fp = params(&f, NULL, 0, 0, 80);
    CHECK(kiln_generate_tokens(s, g_prompt, g_n_prompt, &fp, &res) == KILN_OK);
    const char *at = strstr(f.text, "Lily");
    CHECKF(at, "the model's own text has no \"Lily\": %s", f.text);
    const size_t before = (size_t)(at - f.text);
    CHECKF(memcmp(o.text, f.text, before) == 0 && strncmp(o.text + before, "Lily", 4) != 0, "%s | %s", o.text, f.text);
    const char *lil = strstr(o.text, "Lil");
    CHECKF(!lil || (lil[3] >= '0' && lil[3] <= '9'), "%s", o.text);
    kiln_session_free(s);
    /* the same on an engine next to a free row */
    kiln_engine *e = engine(2, 0);
    CHECK(e);
    kiln_request *r1, *r2;
    gp = params(&o2, g, 0, 0, 80);
    kiln_generate_params fp2 = params(&f, NULL, 0, 0, 80);
    static out f2;
    fp2.user = &f2;
    memset(&f2, 0, sizeof f2);
    CHECK(kiln_engine_submit(e, g_prompt, g_n_prompt, &gp, &r1) == KILN_OK);
    CHECK(kiln_engine_submit(e, g_prompt, g_n_prompt, &fp2, &r2) == KILN_OK);
    CHECK(kiln_request_wait(r1, &res) == KILN_OK);
    CHECK(kiln_request_wait(r2, NULL) == KILN_OK);
    kiln_request_free(r1);
    kiln_request_free(r2);
    kiln_engine_free(e);
    CHECKF(strcmp(o2.text, o.text) == 0, "engine %s vs session %s", o2.text, o.text);
    CHECKF(!strpbrk(f2.text, "0123456789"), "the free row was constrained: %s", f2.text);
    kiln_grammar_free(g);
}

/* Bad triggers are refused at compile time, naming the trigger. */
static void test_lazy_bad_triggers(void) {
    const char *gbnf = "root ::= \"<call>\" [0-9]+\n";
    kiln_grammar_params gp = kiln_grammar_default_params();
    kiln_grammar *g = NULL;
    const char *bad[2] = {"<call>", "<nope>"};
    gp.triggers = bad;
    gp.n_triggers = 2;
    CHECK(kiln_grammar_compile(gbnf, strlen(gbnf), &gp, &g) == KILN_ERR_INVALID_ARG && !g);
    CHECKF(strstr(kiln_last_error(), "trigger 1"), "%s", kiln_last_error());
    const char *empty[1] = {""};
    gp.triggers = empty;
    gp.n_triggers = 1;
    CHECK(kiln_grammar_compile(gbnf, strlen(gbnf), &gp, &g) == KILN_ERR_INVALID_ARG && !g);
    gp.triggers = NULL;
    CHECK(kiln_grammar_compile(gbnf, strlen(gbnf), &gp, &g) == KILN_ERR_INVALID_ARG && !g);
    /* the trigger that completes first wins; a trigger may be a prefix of the grammar's opener */
    const char *two[2] = {"<call>", "ca"};
    gp.triggers = two;
    gp.n_triggers = 2;
    const char *g2 = "root ::= \"<call>\" [0-9]+ | \"ca\" [a-z]+\n";
    CHECK(kiln_grammar_compile(g2, strlen(g2), &gp, &g) == KILN_OK && g);
    CHECK(!kiln_grammar_accepts(g, "x <call>12", 10)); /* "ca" completes first: "call>12" is not a sentence */
    CHECK(kiln_grammar_accepts(g, "x cab", 5));
    kiln_grammar_free(g);
    const char *tie[2] = {"all>", "<call>"};
    gp.triggers = tie;
    const char *g3 = "root ::= \"<call>\" [0-9]+ | \"all>\" [a-z]+\n";
    CHECK(kiln_grammar_compile(g3, strlen(g3), &gp, &g) == KILN_OK && g);
    CHECK(kiln_grammar_accepts(g, "x <call>12", 10)); /* both end at byte 8: the earlier start counts */
    kiln_grammar_free(g);
}

/* With render_special a grammar matches special tokens by their texts: "<s>" can be the model's BOS
 * token (pushed up with a logit bias), which without render_special has no text and is never
 * allowed (the grammar then spells "<s>" with ordinary tokens). */
static void test_special_token_texts(void) {
    if (!g_model) SKIP("no model");
    kiln_grammar *g = compile("root ::= \"<s>\" [a-z]{1,3}\n");
    CHECK(g);
    const kiln_token bos = kiln_token_bos(g_model);
    CHECK(bos >= 0);
    kiln_session *s = NULL;
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 256;
    sp.n_threads = 1;
    CHECK(kiln_session_new(g_model, &sp, &s) == KILN_OK);
    kiln_logit_bias bias = {.token = bos, .bias = 100.0f};
    static out o;
    for (int special = 0; special < 2; special++) {
        kiln_generate_params gp = params(&o, g, 0, 0, 20);
        gp.render_special = special;
        gp.sampling.logit_bias = &bias;
        gp.sampling.n_logit_bias = 1;
        kiln_generate_result res;
        CHECK(kiln_generate_tokens(s, g_prompt, g_n_prompt, &gp, &res) == KILN_OK);
        CHECKF(kiln_grammar_accepts(g, o.text, o.len), "%s", o.text);
        if (special) CHECKF(o.n >= 2 && o.toks[0] == bos, "first token %d", o.toks[0]);
        else CHECKF(o.n >= 4 && o.toks[0] != bos, "first token %d of %d", o.toks[0], o.n);
    }
    kiln_session_free(s);
    kiln_grammar_free(g);
}

int main(void) {
    if (kt_exists(model_path())) {
        if (kiln_model_load(model_path(), NULL, &g_model) != KILN_OK) printf("  load failed: %s\n", kiln_last_error());
        const char *prompt = "Once upon a time, there was a little girl named Lily. She wrote down her friend:";
        if (g_model &&
            kiln_tokenize(g_model, prompt, strlen(prompt), true, false, g_prompt, 64, &g_n_prompt) != KILN_OK) {
            kiln_model_free(g_model);
            g_model = NULL;
        }
    }
    RUN(test_greedy_identical_everywhere);
    RUN(test_sampled_all_valid);
    RUN(test_max_tokens_cut);
    RUN(test_eos_when_accepting_even_with_ignore_eos);
    RUN(test_logprobs_constrained);
    RUN(test_first_space_of_a_text);
    RUN(test_engine_keeps_grammar);
    RUN(test_big_enum);
    RUN(test_too_ambiguous_mid_generation);
    RUN(test_lazy_free_then_constrained);
    RUN(test_lazy_trigger_inside_a_token);
    RUN(test_lazy_bad_triggers);
    RUN(test_special_token_texts);
    kiln_model_free(g_model);
    return kt_summary();
}
