/*
 * test_gstore.c - the matcher's state store (gstore.c): deterministic ids, memoized steps that agree
 * with fresh computation, constant stack depth for repetitions over 100 KB, compaction that keeps
 * the current state working, the memory cap (full, then failure past twice the cap), the cap on
 * stacks per state, accepting and final states, a store outliving its grammar's last reference, and
 * steps over a range of bytes at once.
 */
#include "harness.h"
#include "sample/grammar_prog.h"

static kiln_grammar *compile(const char *g) {
    kiln_grammar *gr = NULL;
    if (kn_gbnf_compile(g, strlen(g), &gr)) {
        printf("  compile failed: %s\n", kn_error_msg());
        return NULL;
    }
    return gr;
}

static kiln_grammar *compile_file(const char *file) {
    char path[256];
    snprintf(path, sizeof path, "tests/grammars/%s", file);
    size_t len;
    char *text = kt_read_file(path, &len);
    if (!text) {
        printf("  %s is missing (run from the repository root)\n", path);
        return NULL;
    }
    kiln_grammar *g = NULL;
    if (kn_gbnf_compile(text, len, &g)) printf("  %s: %s\n", path, kn_error_msg());
    free(text);
    return g;
}

/* A JSON text of about n bytes with nesting, strings, escapes and numbers. */
static char *json_text(size_t n, size_t *len) {
    char *t = malloc(n + 256);
    if (!t) return NULL;
    size_t k = (size_t)sprintf(t, "[");
    for (int i = 0; k < n; i++)
        k += (size_t)sprintf(t + k,
                             "%s{\"id\": %d, \"name\": \"item %d \\u00e9 \\\"q\\\"\", \"tags\": [\"a\", [\"bc\", {}]], "
                             "\"ok\": %s, \"v\": -%d.%de+%d}",
                             i ? ",\n  " : "", i, i * 7, i % 2 ? "true" : "null", i, i % 10, i % 5);
    k += (size_t)sprintf(t + k, "]");
    *len = k;
    return t;
}

/* Two fresh stores fed the same calls give the same ids; a second pass over memoized transitions
 * gives them again. */
static void test_determinism(void) {
    kiln_grammar *g = compile_file("json.gbnf");
    CHECK(g);
    size_t len;
    char *text = json_text(4000, &len);
    CHECK(text);
    kn_gstore *a, *b;
    CHECK(kn_gstore_new(g, 0, &a) == KILN_OK && kn_gstore_new(g, 0, &b) == KILN_OK);
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    CHECK(ids);
    int32_t sa = kn_gstore_start(a), sb = kn_gstore_start(b);
    CHECK(sa == sb && sa >= 0);
    ids[0] = sa;
    for (size_t i = 0; i < len; i++) {
        sa = kn_gstore_step(a, sa, (uint8_t)text[i]);
        sb = kn_gstore_step(b, sb, (uint8_t)text[i]);
        CHECKF(sa == sb && sa >= 0, "byte %zu: %d vs %d", i, sa, sb);
        ids[i + 1] = sa;
    }
    CHECK(kn_gstore_accepting(a, sa));
    size_t bytes = kn_gstore_bytes(a);
    sa = kn_gstore_start(a);
    for (size_t i = 0; i < len; i++) {
        sa = kn_gstore_step(a, sa, (uint8_t)text[i]);
        CHECKF(sa == ids[i + 1], "byte %zu", i);
    }
    CHECK(kn_gstore_bytes(a) == bytes); /* nothing new was computed */
    free(ids);
    free(text);
    kn_gstore_free(a);
    kn_gstore_free(b);
    kiln_grammar_free(g);
}

/* A store whose states have been stepped over every byte agrees, along random walks, with a fresh
 * store on which steps are dead and which states accept. */
static void test_memo_agrees(void) {
    kiln_grammar *g = compile_file("c.gbnf");
    CHECK(g);
    kn_gstore *warm;
    CHECK(kn_gstore_new(g, 0, &warm) == KILN_OK);
    uint64_t rng = 12345;
    for (int walk = 0; walk < 40; walk++) {
        kn_gstore *fresh;
        CHECK(kn_gstore_new(g, 0, &fresh) == KILN_OK);
        int32_t w = kn_gstore_start(warm), f = kn_gstore_start(fresh);
        for (int i = 0; i < 200; i++) {
            int32_t wn[256];
            int m = 0;
            uint8_t opts[256];
            for (int b = 0; b < 256; b++)
                if ((wn[b] = kn_gstore_step(warm, w, (uint8_t)b)) >= 0) opts[m++] = (uint8_t)b;
            CHECK(kn_gstore_accepting(warm, w) == kn_gstore_accepting(fresh, f));
            CHECK(kn_gstore_final(warm, w) == kn_gstore_final(fresh, f));
            if (!m) break;
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            uint8_t b = opts[rng % (uint64_t)m];
            uint8_t other = (uint8_t)(rng >> 8);
            CHECK((kn_gstore_step(fresh, f, other) >= 0) == (wn[other] >= 0));
            CHECK(kn_gstore_step_slow(warm, w, other) == wn[other]); /* the plain path: no memo */
            CHECK(kn_gstore_step_slow(warm, w, b) == wn[b]);
            w = wn[b];
            f = kn_gstore_step(fresh, f, b);
            CHECK(f >= 0);
        }
        CHECK(!kn_gstore_failed(fresh));
        kn_gstore_free(fresh);
    }
    CHECK(!kn_gstore_failed(warm));
    kn_gstore_free(warm);
    kiln_grammar_free(g);
}

/* Walks n bytes of pattern (repeated) and checks the depth and the store's memory stop growing. */
static void check_constant(const char *gbnf, const char *head, const char *pattern, size_t n) {
    kiln_grammar *g = compile(gbnf);
    CHECK(g);
    kn_gstore *s;
    CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
    kiln_grammar_free(g); /* the store holds its own reference */
    int32_t st = kn_gstore_start(s);
    for (const char *h = head; *h; h++) st = kn_gstore_step(s, st, (uint8_t)*h);
    size_t plen = strlen(pattern), bytes_early = 0;
    int32_t depth_early = 0;
    for (size_t i = 0; i < n; i++) {
        st = kn_gstore_step(s, st, (uint8_t)pattern[i % plen]);
        CHECKF(st >= 0, "%s: dead at byte %zu", gbnf, i);
        if (i == 1000) depth_early = kn_gstore_depth(s, st), bytes_early = kn_gstore_bytes(s);
    }
    CHECKF(kn_gstore_depth(s, st) == depth_early, "%s: depth %d, was %d", gbnf, kn_gstore_depth(s, st), depth_early);
    CHECKF(kn_gstore_bytes(s) == bytes_early, "%s: %zu bytes, was %zu", gbnf, kn_gstore_bytes(s), bytes_early);
    CHECK(depth_early <= 3);
    kn_gstore_free(s);
}

/* x*, x+, right recursion and nested repetitions keep a constant stack depth over 100 KB. */
static void test_tail_depth(void) {
    check_constant("root ::= [a-z]*", "", "abcdefghij", 100000);
    check_constant("root ::= \"[\" item+ \"]\"\nitem ::= \"a\" | \"bc\" | [0-9]+ \",\"", "[", "abc12,a3,", 100000);
    check_constant("root ::= \"a\" root | \"b\" root | \"\"", "", "ab", 100000);
    check_constant("root ::= (\"x\" [0-9]{1,3})* \"!\"", "", "x1x22x333", 100000);
    /* a string of 100 KB inside an array inside an object */
    check_constant("root ::= \"{\\\"k\\\": [\\\"\" char* \"\\\"]}\"\nchar ::= [^\"\\\\] | \"\\\\\" [\"\\\\nt]",
                   "{\"k\": [\"", "text \\\" \xc3\xa9\\n", 100000);
    /* the control: nesting is not a tail call, and the depth follows it */
    kiln_grammar *g;
    CHECK((g = compile("root ::= \"(\" root \")\" | \"\"")));
    kn_gstore *s;
    CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
    int32_t st = kn_gstore_start(s);
    for (int i = 0; i < 100; i++) st = kn_gstore_step(s, st, '(');
    CHECK(st >= 0 && kn_gstore_depth(s, st) >= 100);
    kn_gstore_free(s);
    kiln_grammar_free(g);
}

/* Compaction keeps the current state (same stacks, same depth, same future) and frees the rest. */
static void test_compact(void) {
    kiln_grammar *g = compile_file("json.gbnf");
    CHECK(g);
    size_t len;
    char *text = json_text(20000, &len);
    CHECK(text);
    kn_gstore *s;
    CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
    int32_t st = kn_gstore_start(s);
    size_t half = len / 2;
    for (size_t i = 0; i < half; i++) st = kn_gstore_step(s, st, (uint8_t)text[i]);
    CHECK(st >= 0);
    for (int b = 0; b < 256; b++) kn_gstore_step(s, st, (uint8_t)b); /* more states to forget */
    int32_t n_stacks = kn_gstore_n_stacks(s, st), depth = kn_gstore_depth(s, st);
    bool acc = kn_gstore_accepting(s, st);
    size_t before = kn_gstore_bytes(s);
    st = kn_gstore_compact(s, st);
    CHECK(st == 0);
    CHECK(kn_gstore_bytes(s) < before);
    CHECK(kn_gstore_n_stacks(s, st) == n_stacks && kn_gstore_depth(s, st) == depth);
    CHECK(kn_gstore_accepting(s, st) == acc);
    CHECK(kn_gstore_step(s, 5, '{') == KN_GS_DEAD && kn_gstore_failed(s)); /* an id from before: refused */
    st = kn_gstore_compact(s, st);                                         /* compaction also clears the failure */
    CHECK(st == 0 && !kn_gstore_failed(s));
    for (size_t i = half; i < len; i++) {
        st = kn_gstore_step(s, st, (uint8_t)text[i]);
        CHECKF(st >= 0, "byte %zu", i);
        if (i % 997 == 0) st = kn_gstore_compact(s, st);
    }
    CHECK(kn_gstore_accepting(s, st));
    CHECK(kn_gstore_start(s) >= 0); /* the start state is computed again on demand */
    CHECK(!kn_gstore_failed(s));
    kn_gstore_free(s);
    free(text);
    kiln_grammar_free(g);
}

/* A grammar with a new state at every byte fills a small store: full() at the cap, steps fail past
 * twice the cap, and compacting whenever full carries it to the end. */
static void test_cap(void) {
    kiln_grammar *g = compile("root ::= \"<\" [a-z]{0,9000} \">\"");
    CHECK(g);
    size_t cap = 64 << 10;
    kn_gstore *s;
    CHECK(kn_gstore_new(g, cap, &s) == KILN_OK);
    int32_t st = kn_gstore_start(s);
    st = kn_gstore_step(s, st, '<');
    bool was_full = false;
    int i = 0;
    for (; i < 9000 && st >= 0; i++) {
        st = kn_gstore_step(s, st, (uint8_t)('a' + i % 26));
        was_full |= kn_gstore_full(s);
        CHECK(kn_gstore_bytes(s) <= 2 * cap);
    }
    CHECK(was_full);
    CHECK(st == KN_GS_DEAD && i < 9000);
    CHECKF(kn_gstore_failed(s) && strstr(kn_gstore_failed(s), "cap"), "%s", kn_gstore_failed(s));
    kn_gstore_free(s);

    CHECK(kn_gstore_new(g, cap, &s) == KILN_OK);
    st = kn_gstore_step(s, kn_gstore_start(s), '<');
    int compactions = 0;
    for (i = 0; i < 9000; i++) {
        st = kn_gstore_step(s, st, (uint8_t)('a' + i % 26));
        CHECKF(st >= 0, "byte %d: %s", i, kn_gstore_failed(s));
        if (kn_gstore_full(s)) st = kn_gstore_compact(s, st), compactions++;
    }
    CHECK(kn_gstore_step(s, st, 'a') == KN_GS_DEAD && !kn_gstore_failed(s)); /* 9,001 letters: the language */
    st = kn_gstore_step(s, st, '>');
    CHECK(st >= 0 && kn_gstore_final(s, st));
    CHECK(compactions > 0);
    kn_gstore_free(s);
    /* kiln_grammar_accepts compacts by itself */
    char *text = malloc(9002);
    CHECK(text);
    text[0] = '<';
    memset(text + 1, 'q', 9000);
    text[9001] = '>';
    CHECK(kiln_grammar_accepts(g, text, 9002));
    free(text);
    kiln_grammar_free(g);
}

/* Builds root ::= "x"{prefix} ("a"?){n}: after the x's, a state with one ready stack per optional
 * "a" (n of them). The prefix keeps that state beyond what the compile-time check walks. */
static kiln_grammar *nullable_run(int prefix, int n) {
    char text[96];
    int k = snprintf(text, sizeof text, "root ::= \"x\"{%d} (\"a\"?){%d}", prefix, n);
    kiln_grammar *g = NULL;
    if (kn_gbnf_compile(text, (size_t)k, &g)) printf("  compile failed: %s\n", kn_error_msg());
    return g;
}

/* 5,000 literals after a common byte: left-factored into a trie, so the state after the byte holds
 * one stack per next byte, not one per literal. */
static void test_many_literals(void) {
    size_t cap = 5000 * 16 + 64;
    char *text = malloc(cap);
    CHECK(text);
    int k = snprintf(text, cap, "root ::= \"x\" (");
    for (int i = 0; i < 5000; i++) k += snprintf(text + k, cap - (size_t)k, "%s\"a%d\"", i ? " | " : "", i);
    k += snprintf(text + k, cap - (size_t)k, ")");
    kiln_grammar *g = NULL;
    CHECK(kn_gbnf_compile(text, (size_t)k, &g) == KILN_OK);
    free(text);
    kn_gstore *s;
    CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
    int32_t st = kn_gstore_start(s);
    CHECK(st >= 0 && kn_gstore_n_stacks(s, st) == 1);
    CHECK(kn_gstore_step(s, st, 'y') == KN_GS_DEAD && !kn_gstore_failed(s));
    CHECK((st = kn_gstore_step(s, st, 'x')) >= 0 && kn_gstore_n_stacks(s, st) == 1);
    CHECK((st = kn_gstore_step(s, st, 'a')) >= 0);
    CHECKF(kn_gstore_n_stacks(s, st) <= 10, "%d stacks after \"xa\"", kn_gstore_n_stacks(s, st));
    CHECK(!kn_gstore_failed(s) && kn_gstore_fail_status(s) == KILN_OK);
    kn_gstore_free(s);
    CHECK(kiln_grammar_accepts(g, "xa17", 4));
    CHECK(kiln_grammar_accepts(g, "xa4999", 6));
    CHECK(!kiln_grammar_accepts(g, "xa5000", 6));
    CHECK(!kiln_grammar_accepts(g, "xa", 2));
    kiln_grammar_free(g);
}

/* More stacks than KN_GS_MAX_STACKS in one state the compile-time check does not reach: the step
 * fails (not a language fact), the failure is the grammar's (KILN_ERR_UNSUPPORTED, not memory),
 * it is not memoized, and kiln_grammar_accepts fails closed. */
static void test_too_many_stacks(void) {
    kiln_grammar *g = nullable_run(100, 5000);
    CHECK(g);
    kn_gstore *s;
    CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
    int32_t st = kn_gstore_start(s);
    for (int i = 0; i < 99 && st >= 0; i++) st = kn_gstore_step(s, st, 'x');
    CHECK(st >= 0 && kn_gstore_n_stacks(s, st) == 1);
    CHECK(kn_gstore_step(s, st, 'y') == KN_GS_DEAD && !kn_gstore_failed(s));
    CHECK(kn_gstore_step(s, st, 'x') == KN_GS_DEAD);
    CHECKF(kn_gstore_failed(s) && strstr(kn_gstore_failed(s), "too many parser stacks"), "%s", kn_gstore_failed(s));
    CHECK(kn_gstore_fail_status(s) == KILN_ERR_UNSUPPORTED);
    CHECK(kn_gstore_step(s, st, 'x') == KN_GS_DEAD); /* not memoized: computed (and refused) again */
    kn_gstore_free(s);
    char text[112];
    memset(text, 'x', 100);
    memcpy(text + 100, "aaa", 3);
    CHECK(!kiln_grammar_accepts(g, text, 103));
    kiln_grammar_free(g);
    /* at the cap exactly it works */
    CHECK((g = nullable_run(100, KN_GS_MAX_STACKS)));
    CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
    st = kn_gstore_start(s);
    for (int i = 0; i < 100 && st >= 0; i++) st = kn_gstore_step(s, st, 'x');
    CHECKF(st >= 0 && kn_gstore_n_stacks(s, st) == KN_GS_MAX_STACKS, "%s", kn_gstore_failed(s));
    kn_gstore_free(s);
    CHECK(kiln_grammar_accepts(g, text, 100));
    CHECK(kiln_grammar_accepts(g, text, 103));
    CHECK(!kiln_grammar_accepts(g, text, 99));
    kiln_grammar_free(g);
    /* a store that runs out of memory says so: KILN_ERR_NOMEM, not the grammar's ambiguity */
    CHECK((g = nullable_run(1, 3000)));
    CHECK(kn_gstore_new(g, 1, &s) == KILN_OK); /* the smallest cap */
    st = kn_gstore_start(s);
    for (int i = 0; i < 200 && st >= 0; i++) st = kn_gstore_step(s, st, i ? 'a' : 'x');
    CHECK(st == KN_GS_DEAD && kn_gstore_failed(s) && kn_gstore_fail_status(s) == KILN_ERR_NOMEM);
    kn_gstore_free(s);
    kiln_grammar_free(g);
}

static void test_accepting_final(void) {
    kiln_grammar *g = compile("root ::= \"a\" | \"ab\"");
    CHECK(g);
    kn_gstore *s;
    CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
    kiln_grammar_free(g);
    int32_t st = kn_gstore_start(s);
    CHECK(!kn_gstore_accepting(s, st) && !kn_gstore_final(s, st));
    st = kn_gstore_step(s, st, 'a');
    CHECK(kn_gstore_accepting(s, st) && !kn_gstore_final(s, st));
    st = kn_gstore_step(s, st, 'b');
    CHECK(kn_gstore_accepting(s, st) && kn_gstore_final(s, st));
    CHECK(kn_gstore_step(s, st, 'b') == KN_GS_DEAD && !kn_gstore_failed(s));
    CHECK(!kn_gstore_accepting(s, KN_GS_DEAD) && !kn_gstore_final(s, KN_GS_DEAD));
    CHECK(kn_gstore_step(s, KN_GS_DEAD, 'a') == KN_GS_DEAD && !kn_gstore_failed(s));
    kn_gstore_free(s);

    /* the empty language's sentence: the first state holds no stack at all */
    static const char *const empty[] = {"root ::= \"\"", "root ::= () | \"\"", "root ::= x\nx ::= \"a\"{0,0}",
                                        "root ::="};
    for (size_t i = 0; i < KN_ARRAY_LEN(empty); i++) {
        CHECK((g = compile(empty[i])));
        CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
        st = kn_gstore_start(s);
        CHECKF(st >= 0 && kn_gstore_final(s, st) && kn_gstore_n_stacks(s, st) == 0, "%s", empty[i]);
        CHECK(kn_gstore_step(s, st, 'a') == KN_GS_DEAD);
        CHECK(kn_gstore_compact(s, st) == 0 && kn_gstore_final(s, 0));
        CHECK(kiln_grammar_accepts(g, "", 0) && !kiln_grammar_accepts(g, " ", 1));
        kn_gstore_free(s);
        kiln_grammar_free(g);
    }

    CHECK((g = compile("root ::= \"a\"*")));
    CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
    kiln_grammar_free(g);
    st = kn_gstore_start(s);
    for (int i = 0; i < 5; i++) {
        CHECK(kn_gstore_accepting(s, st) && !kn_gstore_final(s, st));
        st = kn_gstore_step(s, st, 'a');
    }
    kn_gstore_free(s);
}

/* kn_gstore_step_range along random walks of grammars with byte classes, UTF-8 classes and a
 * schema's \p{L} pattern: where it names one destination for a range, every byte of the range,
 * stepped afresh (kn_gstore_step_slow) and through the memo, leads there; both answers occur. */
static void test_step_range(void) {
    static const uint8_t ranges[][2] = {{0x80, 0xBF}, {0xA0, 0xBF}, {0x80, 0x9F}, {0xC2, 0xDF}, {0xE1, 0xEC},
                                        {'a', 'z'},   {'0', '9'},   {0, 255},     {'a', 'a'}};
    const char *files[] = {"json.gbnf", "japanese.gbnf", "c.gbnf", NULL};
    const char *schema = "{\"type\":\"string\",\"pattern\":\"^[\\\\p{L} ]{0,30}$\"}";
    int uniform = 0, live = 0, mixed = 0;
    uint64_t rng = 99;
    for (size_t f = 0; f < KN_ARRAY_LEN(files); f++) {
        kiln_grammar *g = NULL;
        if (files[f]) {
            g = compile_file(files[f]);
        } else {
            kiln_grammar_params p = kiln_grammar_default_params();
            p.kind = KILN_GRAMMAR_JSON_SCHEMA;
            CHECK(kiln_grammar_compile(schema, strlen(schema), &p, &g) == KILN_OK);
        }
        CHECK(g);
        kn_gstore *s;
        CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
        for (int walk = 0; walk < 8; walk++) {
            int32_t st = kn_gstore_start(s);
            for (int i = 0; i < 60 && st >= 0; i++) {
                for (size_t r = 0; r < KN_ARRAY_LEN(ranges); r++) {
                    const uint8_t lo = ranges[r][0], hi = ranges[r][1];
                    const int32_t d = kn_gstore_step_range(s, st, lo, hi);
                    if (d == KN_GS_MIXED) {
                        mixed++;
                        continue;
                    }
                    uniform++;
                    live += d >= 0;
                    for (int b = lo; b <= hi; b++) {
                        CHECKF(kn_gstore_step_slow(s, st, (uint8_t)b) == d, "%s: byte %d of [%d, %d]",
                               files[f] ? files[f] : "schema", b, lo, hi);
                        CHECK(kn_gstore_step(s, st, (uint8_t)b) == d);
                    }
                }
                uint8_t opts[256];
                int m = 0;
                for (int b = 0; b < 256; b++)
                    if (kn_gstore_step(s, st, (uint8_t)b) >= 0) opts[m++] = (uint8_t)b;
                if (!m) break;
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                st = kn_gstore_step(s, st, opts[rng % (uint64_t)m]);
            }
        }
        CHECK(!kn_gstore_failed(s));
        CHECK(kn_gstore_step_range(s, KN_GS_DEAD, 0x80, 0xBF) == KN_GS_DEAD);
        kn_gstore_free(s);
        kiln_grammar_free(g);
    }
    CHECKF(live > 100 && mixed > 100 && uniform > live, "%d uniform (%d live), %d mixed", uniform, live, mixed);
}

int main(void) {
    RUN(test_determinism);
    RUN(test_memo_agrees);
    RUN(test_tail_depth);
    RUN(test_compact);
    RUN(test_cap);
    RUN(test_many_literals);
    RUN(test_too_many_stacks);
    RUN(test_accepting_final);
    RUN(test_step_range);
    return kt_summary();
}
