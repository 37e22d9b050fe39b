/*
 * test_toolcall_grammar.c - the grammar of tool calls (kiln_tool_grammar, src/text/toolcall_grammar.c)
 * against the replies of ../shared/data/tool-calls/vectors.json.
 *
 * For every vector with tool calls whose format has a call grammar, built with the vector's tools:
 *   - the lazy grammar (tool_choice auto) accepts the raw reply, whatever text precedes the calls;
 *   - a reply of calls only (and reasoning: the vector expects no content) is accepted by the eager
 *     grammar of tool_choice "required", and by that of the first call's function named; another
 *     function named rejects it; a reply of several calls is rejected with parallel_tool_calls false;
 *   - mutated calls are rejected by both: the function's name changed to an undeclared one, and an
 *     integer argument given as a string.
 * Then: every format without a grammar fails with KILN_ERR_UNSUPPORTED naming it, bad tools fail
 * naming the field, the generated grammars of a few formats hold parallel calls (1..N), thinking
 * before a required call, and a prompt that left thinking open.
 */
#include "harness.h"

#include "kiln.h"

#include <jansson.h>

/* The vectors' tools, by the names vectors use. */
#define S(n) "\"" n "\": {\"type\": \"string\"}"
#define I(n) "\"" n "\": {\"type\": \"integer\"}"
#define FN(name, props)                                                                                                \
    "{\"type\": \"function\", \"function\": {\"name\": \"" name                                                        \
    "\", \"parameters\": {\"type\": \"object\", \"properties\": {" props "}}}}"

/* clang-format off */
static const char *const TOOLS[][2] = {
    {"special_function_tool", FN("special_function", I("arg1"))},
    {"special_function_tool_with_optional_param", FN("special_function_with_opt", I("arg1") ", " I("arg2"))},
    {"python_tool", FN("python", S("code"))},
    {"code_interpreter_tool", FN("code_interpreter", S("code"))},
    {"html_tool", FN("html", S("markup"))},
    {"todo_list", FN("todo_list", "\"todos\": {\"type\": \"array\"}")},
    {"get_time_tool", FN("get_time", S("city"))},
    {"get_weather_tool", FN("get_weather", S("city"))},
    {"empty_args_tool", FN("empty_args", "")},
    {"empty_args_tool_no_properties", "{\"type\": \"function\", \"function\": {\"name\": \"empty_args_no_props\", "
                                      "\"parameters\": {\"type\": \"object\"}}}"},
    {"magic_int_tool", FN("magic_int", I("ref") ", " S("name"))},
    {"amount_tool", FN("amount", "\"orig\": {\"type\": \"number\"}")},
    {"config_tool", FN("set_config", "\"config\": {\"type\": \"object\"}")},
    {"tool_2req_5opt", FN("tool_2req_5opt", S("req1") ", " I("req2") ", " S("opt1") ", " I("opt2") ", " S("opt3") ", "
                          I("opt4") ", " S("opt5"))},
    {"no_args_tool", FN("read_file_diff_md", S("review_id") ", " S("file_id"))},
    {"nullable_string_tool", FN("set_nullable_str", "\"name\": {\"type\": [\"string\", \"null\"]}")},
    {"nullable_int_tool", FN("set_nullable_int", "\"count\": {\"type\": [\"integer\", \"null\"]}")},
    {"quoted_unquoted_tool", FN("quoted_unquoted", S("quoted") ", " S("unquoted"))},
    {"string_param_tool", FN("string_param", S("text"))},
};
/* clang-format on */

static const char *const OLD_TOOLS[] = {"special_function_tool",
                                        "special_function_tool_with_optional_param",
                                        "python_tool",
                                        "code_interpreter_tool",
                                        "html_tool",
                                        "todo_list"};

/* The vectors' format names -> kiln's format. */
static const char *const FORMAT_MAP[][2] = {
    {"COMMAND_R7B", "command-r7b"},
    {"DEEPSEEK_R1", "deepseek-r1"},
    {"DEEPSEEK_V3_1", "deepseek-v3.1"},
    {"FIREFUNCTION_V2", "firefunction-v2"},
    {"FUNCTIONARY_V3_1_LLAMA_3_1", "functionary-v3.1"},
    {"FUNCTIONARY_V3_2", "functionary-v3.2"},
    {"GENERIC", "generic"},
    {"GLM_4_5", "glm-4.5"},
    {"GPT_OSS", "gpt-oss"},
    {"GRANITE", "granite"},
    {"GRANITE_4", "hermes"},
    {"HERMES_2_PRO", "hermes"},
    {"KIMI_K2", "kimi-k2"},
    {"LLAMA_3_X", "llama3"},
    {"MISTRAL_NEMO", "mistral-nemo"},
    {"MISTRAL_REASONING", "mistral"},
    {"MISTRAL_SMALL_3_2", "mistral"},
    {"NEMOTRON_V3", "qwen3-coder"},
    {"QWEN3_CODER_XML", "qwen3-coder"},
    {"QWEN3_XML", "qwen3-coder"},
    {"STEPFUN_3_5", "qwen3-coder"},
    {"REKA_EDGE", "hermes"},
};

/* Replies of calls only that the eager grammar cannot accept, by vector index, and why. */
static const struct {
    int index;
    const char *why;
} EAGER_EXCEPTIONS[] = {
    {42, "Functionary v3.2's python code block: raw code, which the grammar does not write"},
    {90, "how the template renders a past call, not what the model writes"},
    {117, "the call section opens inside the unclosed thinking block"},
    {96, "markup the parser reads but the grammar does not write (it writes <tool_call>)"},
    {97, "markup the parser reads but the grammar does not write (it writes <tool_call>)"},
    {98, "markup the parser reads but the grammar does not write (it writes <tool_call>)"},
    {102, "markup the parser reads but the grammar does not write (it writes <tool_call>)"},
    {104, "markup the parser reads but the grammar does not write (it writes <tool_call>)"},
    {107, "markup the parser reads but the grammar does not write (it writes <tool_call>)"},
    {111, "markup the parser reads but the grammar does not write (it writes <tool_call>)"},
    {113, "markup the parser reads but the grammar does not write (it writes <tool_call>)"},
};

static const char *eager_exception(int i) {
    for (size_t k = 0; k < sizeof EAGER_EXCEPTIONS / sizeof EAGER_EXCEPTIONS[0]; k++)
        if (EAGER_EXCEPTIONS[k].index == i) return EAGER_EXCEPTIONS[k].why;
    return NULL;
}

static const char *format_of(const char *vf) {
    for (size_t i = 0; i < sizeof FORMAT_MAP / sizeof FORMAT_MAP[0]; i++)
        if (strcmp(FORMAT_MAP[i][0], vf) == 0) return FORMAT_MAP[i][1];
    return NULL;
}

static const char *tool_json(const char *key) {
    for (size_t i = 0; i < sizeof TOOLS / sizeof TOOLS[0]; i++)
        if (strcmp(TOOLS[i][0], key) == 0) return TOOLS[i][1];
    return NULL;
}

/* The vector's tools as a JSON array (caller frees), NULL when it names none. */
static char *tools_of(json_t *v) {
    json_t *names = json_object_get(v, "tools"), *arr = json_array();
    if (json_is_array(names)) {
        for (size_t k = 0; k < json_array_size(names); k++) {
            const char *t = tool_json(json_string_value(json_array_get(names, k)));
            if (t) json_array_append_new(arr, json_loads(t, 0, NULL));
        }
    } else
        for (size_t k = 0; k < sizeof OLD_TOOLS / sizeof *OLD_TOOLS; k++)
            json_array_append_new(arr, json_loads(tool_json(OLD_TOOLS[k]), 0, NULL));
    char *s = json_array_size(arr) ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return s;
}

static const char *g_template; /* the chat template build() passes (NULL: none) */

static kiln_grammar *build(const char *format, const char *tools, kiln_tool_choice choice, const char *name,
                           bool parallel, const char *prompt) {
    kiln_tool_grammar_params p = kiln_tool_grammar_default_params();
    p.format = format;
    p.tools = tools;
    p.choice = choice;
    p.name = name;
    p.parallel = parallel;
    p.prompt = prompt;
    p.chat_template = g_template;
    kiln_grammar *g = NULL;
    kiln_status st = kiln_tool_grammar(&p, &g);
    if (st && st != KILN_ERR_UNSUPPORTED) printf("  %s: %s\n", format, kiln_last_error());
    return g;
}

static bool accepts(const kiln_grammar *g, const char *s) { return kiln_grammar_accepts(g, s, strlen(s)); }

/* s with the first occurrence of from replaced by to (caller frees), NULL when from is absent. */
static char *replace(const char *s, const char *from, const char *to) {
    const char *at = strstr(s, from);
    if (!at) return NULL;
    size_t a = (size_t)(at - s), fl = strlen(from), tl = strlen(to), n = strlen(s);
    char *r = malloc(n - fl + tl + 1);
    memcpy(r, s, a);
    memcpy(r + a, to, tl);
    memcpy(r + a + tl, at + fl, n - a - fl + 1);
    return r;
}

/* s with the last occurrence of the function name as markup writes it (after one of =".>]| or a
 * newline, before one of ">:[<( or a newline) replaced by an undeclared name; NULL when none. */
static char *rename_call(const char *s, const char *name) {
    const char *best = NULL;
    const size_t nl = strlen(name);
    for (const char *at = strstr(s, name); at; at = strstr(at + 1, name)) {
        const char before = at == s ? '\n' : at[-1], after = at[nl];
        if (strchr("=\".>]|\n", before) && after && strchr("\">:[<(\n", after)) best = at;
    }
    if (!best) return NULL;
    size_t a = (size_t)(best - s), n = strlen(s);
    char *r = malloc(n + 16);
    snprintf(r, n + 16, "%.*sundeclared_fn%s", (int)a, s, best + nl);
    return r;
}

static json_t *g_vectors;

/* The text of the vector's (first) template, from either template folder; caller frees. */
static char *read_template(const char *tl) {
    char name[512];
    snprintf(name, sizeof name, "%s", strrchr(tl, '/') ? strrchr(tl, '/') + 1 : tl);
    name[strcspn(name, " |")] = 0;
    const char *dirs[] = {"chat-templates/llama.cpp-2026", "chat-templates/llama.cpp"};
    for (int d = 0; d < 2; d++) {
        char rel[600];
        snprintf(rel, sizeof rel, "%s/%s", dirs[d], name);
        FILE *f = fopen(kt_data(rel), "rb");
        if (!f) continue;
        char *buf = calloc(1, 1 << 20);
        size_t n = fread(buf, 1, (1 << 20) - 1, f);
        buf[n] = 0;
        fclose(f);
        return buf;
    }
    return NULL;
}

/* A prompt that leaves the thinking block open when the reply closes one it did not open (the
 * vector was made against such a prompt), else NULL. */
static const char *prompt_of(const char *raw) {
    static const char *const pairs[][2] = {
        {"<think>", "</think>"}, {"[THINK]", "[/THINK]"}, {"<|START_THINKING|>", "<|END_THINKING|>"}};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++)
        if (strstr(raw, pairs[k][1]) && !strstr(raw, pairs[k][0])) return pairs[k][0];
    return NULL;
}

/* Whether every call is of the function name. */
static bool all_of(json_t *calls, const char *name) {
    for (size_t k = 0; k < json_array_size(calls); k++)
        if (strcmp(json_string_value(json_object_get(json_object_get(json_array_get(calls, k), "function"), "name")),
                   name) != 0)
            return false;
    return true;
}

/* Whether the lazy grammar constrains the end of s (a trigger appeared): s with junk appended is
 * then rejected. */
static bool engaged(const kiln_grammar *g, const char *s) {
    size_t n = strlen(s);
    char *t = malloc(n + 8);
    memcpy(t, s, n);
    memcpy(t + n, "\x01@@\x01", 5);
    bool r = !kiln_grammar_accepts(g, t, n + 4);
    free(t);
    return r;
}

static void test_vectors(void) {
    if (!g_vectors) SKIP("no tool-calls/vectors.json");
    json_t *vs = json_object_get(g_vectors, "vectors");
    int n_lazy = 0, n_eager = 0, n_mut = 0, fail = 0, excused = 0;
    for (size_t i = 0; i < json_array_size(vs); i++) {
        json_t *v = json_array_get(vs, i);
        json_t *calls = json_object_get(v, "expected_tool_calls");
        const char *fmt = format_of(json_string_value(json_object_get(v, "format")));
        if (!json_array_size(calls) || !fmt || json_is_true(json_object_get(v, "is_partial"))) continue;
        char *tools = tools_of(v);
        if (!tools) continue;
        const char *raw = json_string_value(json_object_get(v, "raw"));
        char *tmpl = read_template(json_string_value(json_object_get(v, "template")));
        g_template = tmpl;
        /* the eager grammar ends at the last call's close: white space after it is not written */
        char *trimmed = strdup(raw);
        for (size_t tn = strlen(trimmed); tn && strchr(" \t\r\n", trimmed[tn - 1]);) trimmed[--tn] = 0;
        const char *first =
            json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "name"));
        bool declared = strstr(tools, first) != NULL;
        kiln_grammar *lazy = build(fmt, tools, KILN_TOOL_CHOICE_AUTO, NULL, true, NULL);
        const char *prompt = prompt_of(raw);
        kiln_grammar *eager = build(fmt, tools, KILN_TOOL_CHOICE_REQUIRED, NULL, true, prompt);
        kiln_grammar *single = build(fmt, tools, KILN_TOOL_CHOICE_REQUIRED, NULL, false, prompt);
        const bool one_fn = all_of(calls, first);
        kiln_grammar *named = declared ? build(fmt, tools, KILN_TOOL_CHOICE_NAMED, first, true, prompt) : NULL;
        if (!lazy || !eager || !single || (declared && !named)) {
            printf("  vector %zu (%s): no grammar\n", i, fmt);
            fail++;
            goto next;
        }
        if (!accepts(lazy, raw)) {
            printf("  vector %zu (%s): the lazy grammar rejects %s\n", i, fmt, raw);
            fail++;
            goto next;
        }
        n_lazy++;
        const char *content = json_string_value(json_object_get(v, "expected_content"));
        bool only_calls = declared && (!content || strspn(content, " \n\t") == strlen(content));
        if (only_calls && eager_exception((int)i)) {
            excused++;
            only_calls = false;
        }
        if (only_calls) {
            if (!accepts(eager, trimmed) || (one_fn && !accepts(named, trimmed))) {
                printf("  vector %zu (%s): the %s grammar rejects %s\n", i, fmt,
                       accepts(eager, trimmed) ? "named" : "required", raw);
                fail++;
                goto next;
            }
            if (json_array_size(calls) > 1 && accepts(single, trimmed)) {
                printf("  vector %zu (%s): %zu calls accepted without parallel_tool_calls\n", i, fmt,
                       json_array_size(calls));
                fail++;
            }
            json_t *ta = json_loads(tools, 0, NULL);
            for (size_t k = 0; k < json_array_size(ta); k++) { /* another function named rejects it */
                const char *other =
                    json_string_value(json_object_get(json_object_get(json_array_get(ta, k), "function"), "name"));
                if (strcmp(other, first) == 0 || strstr(raw, other)) continue;
                kiln_grammar *on = build(fmt, tools, KILN_TOOL_CHOICE_NAMED, other, true, NULL);
                if (on && accepts(on, trimmed)) {
                    printf("  vector %zu (%s): naming %s accepts a call of %s\n", i, fmt, other, first);
                    fail++;
                }
                kiln_grammar_free(on);
                break;
            }
            json_decref(ta);
            n_eager++;
        }
        /* mutations: an undeclared name, an integer argument as a string */
        char *m1 = rename_call(raw, first); /* the call's name, not a mention in the text */
        char *m2 = strstr(raw, "\"arg1\": 1") ? replace(raw, "\"arg1\": 1", "\"arg1\": \"one\"")
                                              : replace(raw, "\"arg1\":1", "\"arg1\":\"one\"");
        char *m3 = !m2 && strstr(raw, "<parameter=arg1>\n1\n")
                       ? replace(raw, "<parameter=arg1>\n1\n", "<parameter=arg1>\none\n")
                       : NULL;
        char *m4 = !m2 && !m3 && strstr(raw, "<arg_value>1</arg_value>")
                       ? replace(raw, "<arg_value>1</arg_value>", "<arg_value>one</arg_value>")
                       : NULL;
        const char *ms[4] = {m1, m2, m3, m4};
        for (int k = 0; k < 4; k++) {
            if (!ms[k] || !declared) continue;
            /* the lazy grammar can only reject what follows its trigger */
            if (accepts(eager, ms[k]) || (engaged(lazy, raw) && accepts(lazy, ms[k]))) {
                printf("  vector %zu (%s): mutation %d accepted: %s\n", i, fmt, k, ms[k]);
                fail++;
            } else n_mut++;
        }
        free(m1);
        free(m2);
        free(m3);
        free(m4);
    next:
        kiln_grammar_free(lazy);
        kiln_grammar_free(eager);
        kiln_grammar_free(single);
        kiln_grammar_free(named);
        free(tools);
        free(tmpl);
        free(trimmed);
        g_template = NULL;
    }
    printf("  lazy accepts %d replies; required and named accept %d replies of calls only (%d excused); %d "
           "mutations rejected\n",
           n_lazy, n_eager, excused, n_mut);
    CHECKF(fail == 0, "%d failures", fail);
    CHECK(n_lazy >= 50 && n_eager >= 35 && n_mut >= 40);
}

/* Formats without a call grammar fail cleanly, naming the format; bad tools name the field. */
static void test_errors(void) {
    const char *tools = "[" FN("f", I("a")) "]";
    kiln_tool_grammar_params p = kiln_tool_grammar_default_params();
    kiln_grammar *g = NULL;
    p.format = "lfm2";
    p.tools = tools;
    CHECK(kiln_tool_grammar(&p, &g) == KILN_ERR_UNSUPPORTED && !g);
    CHECKF(strstr(kiln_last_error(), "lfm2"), "%s", kiln_last_error());
    p.format = "no-such-format";
    CHECK(kiln_tool_grammar(&p, &g) == KILN_ERR_INVALID_ARG);
    p.format = "hermes";
    p.tools = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"wat\"}}}]";
    CHECK(kiln_tool_grammar(&p, &g) == KILN_ERR_INVALID_ARG && !g);
    CHECKF(strncmp(kiln_last_error(), "tools[0].function.parameters", 28) == 0, "%s", kiln_last_error());
    /* converts, but no finite value satisfies it (found by the compile): the tool is named, not dropped */
    p.tools = "[{\"type\": \"function\", \"function\": {\"name\": \"g\"}}, {\"type\": \"function\", \"function\": "
              "{\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#\"}}, "
              "\"required\": [\"a\"]}}}]";
    CHECK(kiln_tool_grammar(&p, &g) == KILN_ERR_INVALID_ARG && !g);
    CHECKF(strncmp(kiln_last_error(), "tools[1].function.parameters: schema #: no finite", 49) == 0, "%s",
           kiln_last_error());
    p.tools = "[{\"type\": \"function\", \"function\": {\"name\": \"f g\"}}]";
    CHECK(kiln_tool_grammar(&p, &g) == KILN_ERR_INVALID_ARG);
    CHECKF(strncmp(kiln_last_error(), "tools[0].function.name", 22) == 0, "%s", kiln_last_error());
    p.tools = "{}";
    CHECK(kiln_tool_grammar(&p, &g) == KILN_ERR_INVALID_ARG);
    p.tools = tools;
    p.choice = KILN_TOOL_CHOICE_NAMED;
    p.name = "nope";
    CHECK(kiln_tool_grammar(&p, &g) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_tool_grammar(NULL, &g) == KILN_ERR_INVALID_ARG);
}

/* Parallel calls, reasoning before a required call, and a prompt that opened the thinking block. */
static void test_shapes(void) {
    const char *tools = "[" FN("f", I("a")) ", " FN("g", S("s")) "]";
    kiln_grammar *g = build("hermes", tools, KILN_TOOL_CHOICE_REQUIRED, NULL, true, NULL);
    CHECK(g);
    const char *one = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
    const char *two = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
                      "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"s\": \"x\"}}\n</tool_call>";
    CHECK(accepts(g, one) && accepts(g, two));
    CHECK(!accepts(g, "")); /* at least one call */
    CHECK(!accepts(g, "Sure. <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>"));
    const char *thought =
        "<think>let me see</think>\n<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 2}}</tool_call>";
    CHECK(!accepts(g, thought)); /* no template that thinks */
    kiln_grammar_free(g);
    g_template = "{{ '<think>' }}"; /* a thinking model's template */
    g = build("hermes", tools, KILN_TOOL_CHOICE_REQUIRED, NULL, true, NULL);
    CHECK(g && accepts(g, thought) && accepts(g, one));
    kiln_grammar_free(g);
    g = build("hermes", tools, KILN_TOOL_CHOICE_REQUIRED, NULL, true, "<think>\n\n</think>\n\n"); /* disabled */
    CHECK(g && !accepts(g, thought) && accepts(g, one));
    kiln_grammar_free(g);
    g_template = NULL;
    g = build("hermes", tools, KILN_TOOL_CHOICE_REQUIRED, NULL, false, NULL);
    CHECK(g && accepts(g, one) && !accepts(g, two));
    kiln_grammar_free(g);
    /* the prompt opened the thinking block: the reply starts inside it */
    g = build("hermes", tools, KILN_TOOL_CHOICE_REQUIRED, NULL, true, "<|im_start|>assistant\n<think>\n");
    CHECK(g && accepts(g, "hmm</think>\n<tool_call>{\"name\": \"g\", \"arguments\": {\"s\": \"\"}}</tool_call>"));
    CHECK(!accepts(g, one));
    kiln_grammar_free(g);
    /* lazy: free text, then calls; the trigger inside text that then is no call is rejected */
    g = build("hermes", tools, KILN_TOOL_CHOICE_AUTO, NULL, true, NULL);
    CHECK(g && accepts(g, "Just text.") && accepts(g, "Let me check. ") && !accepts(g, "a <tool_call> b"));
    char buf[512];
    snprintf(buf, sizeof buf, "Let me check.\n%s", two);
    CHECK(accepts(g, buf));
    kiln_grammar_free(g);
    /* Mistral Small: several [TOOL_CALLS] blocks; Kimi: indices; Qwen3-Coder: any parameter order */
    g = build("mistral", tools, KILN_TOOL_CHOICE_REQUIRED, NULL, true, NULL);
    CHECK(g && accepts(g, "[TOOL_CALLS]f[ARGS]{\"a\": 1}[TOOL_CALLS]g[ARGS]{\"s\": \"t\"}"));
    CHECK(!accepts(g, "[THINK]hm[/THINK][TOOL_CALLS]f[ARGS]{\"a\": 1}")); /* Devstral does not think */
    CHECK(!accepts(g, "[TOOL_CALLS]f[ARGS]{\"a\": \"1\"}"));
    kiln_grammar_free(g);
    const char *xt = "[{\"type\": \"function\", \"function\": {\"name\": \"h\", \"parameters\": {\"type\": \"object\", "
                     "\"properties\": {\"x\": {\"type\": \"integer\"}, \"y\": {\"type\": \"string\"}}, \"required\": "
                     "[\"x\"]}}}]";
    g = build("qwen3-coder", xt, KILN_TOOL_CHOICE_REQUIRED, NULL, true, NULL);
    CHECK(g);
    CHECK(accepts(g, "<tool_call>\n<function=h>\n<parameter=y>\nA </parameter> B\n</parameter>\n<parameter=x>\n5\n"
                     "</parameter>\n</function>\n</tool_call>") == false); /* the close ends a string value */
    CHECK(accepts(g, "<tool_call>\n<function=h>\n<parameter=y>\nA <b>c</b>\n</parameter>\n<parameter=x>\n5\n"
                     "</parameter>\n</function>\n</tool_call>"));
    CHECK(!accepts(g, "<tool_call>\n<function=h>\n<parameter=y>\nA\n</parameter>\n</function>\n</tool_call>"));
    CHECK(!accepts(g, "<tool_call>\n<function=h>\n<parameter=x>\n5\n</parameter>\n<parameter=x>\n6\n</parameter>\n"
                      "</function>\n</tool_call>"));
    kiln_grammar_free(g);
    g = build("gpt-oss", tools, KILN_TOOL_CHOICE_NAMED, "g", true, NULL);
    CHECK(g && accepts(g, "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary "
                          "to=functions.g <|constrain|>json<|message|>{\"s\": \"v\"}"));
    CHECK(!accepts(g, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}"));
    kiln_grammar_free(g);
    /* lengths are counted (GBNF counter operations): spliced under the tool's prefix, they stay
     * operations (a prefixed "@t0-count" did not compile) */
    const char *lt = "[{\"type\": \"function\", \"function\": {\"name\": \"k\", \"parameters\": {\"type\": \"object\", "
                     "\"properties\": {\"s\": {\"type\": \"string\", \"maxLength\": 3}, \"h\": {\"type\": \"string\", "
                     "\"format\": \"hostname\", \"maxLength\": 5}}, \"required\": [\"s\", \"h\"]}}}]";
    g = build("hermes", lt, KILN_TOOL_CHOICE_REQUIRED, NULL, true, NULL);
    CHECK(
        g &&
        accepts(g, "<tool_call>\n{\"name\": \"k\", \"arguments\": {\"s\": \"abc\", \"h\": \"a.b.c\"}}\n</tool_call>"));
    CHECK(
        !accepts(g, "<tool_call>\n{\"name\": \"k\", \"arguments\": {\"s\": \"abcd\", \"h\": \"a.b\"}}\n</tool_call>"));
    CHECK(
        !accepts(g, "<tool_call>\n{\"name\": \"k\", \"arguments\": {\"s\": \"ab\", \"h\": \"a.b.cd\"}}\n</tool_call>"));
    kiln_grammar_free(g);
    g = build("qwen3-coder", lt, KILN_TOOL_CHOICE_REQUIRED, NULL, true, NULL);
    CHECK(g);
    kiln_grammar_free(g);
}

/* XML-like formats compile each parameter's schema alone: a parameter that is a $ref, or whose
 * schema refers into the parameters' $defs (as Pydantic writes nested models), is still enforced
 * under the schema it names (it used to be taken as raw text, or to fail: "does not resolve"). */
static void test_xml_refs(void) {
    const char *tools =
        "[{\"type\": \"function\", \"function\": {\"name\": \"put\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"item\": {\"$ref\": \"#/$defs/Item\"}, \"opt\": {\"anyOf\": [{\"$ref\": "
        "\"#/$defs/Item\"}, {\"type\": \"null\"}]}, \"tags\": {\"type\": \"array\", \"items\": "
        "{\"$ref\": \"#/$defs/Tag\"}}, \"label\": {\"$ref\": \"#/$defs/Label\"}}, \"required\": [\"item\"], "
        "\"$defs\": {\"Item\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}, \"next\": "
        "{\"$ref\": \"#/$defs/Item\"}}, \"required\": [\"n\"]}, \"Tag\": {\"enum\": [\"a\", \"b\"]}, "
        "\"Label\": {\"type\": \"string\"}}}}}]";
    kiln_grammar *g = build("qwen3-coder", tools, KILN_TOOL_CHOICE_REQUIRED, NULL, true, NULL);
    CHECK(g);
    if (!g) return;
#define CALL(item, rest)                                                                                               \
    "<tool_call>\n<function=put>\n<parameter=item>\n" item "\n</parameter>\n" rest "</function>\n</tool_call>"
    CHECK(accepts(g, CALL("{\"n\": 1}", "")));
    CHECK(accepts(
        g, CALL("{\"n\": 1, \"next\": {\"n\": 2}}",
                "<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n<parameter=label>\nany <b>text</b>\n</parameter>\n")));
    CHECK(!accepts(g, CALL("hello", "")));                    /* the $ref'd object is JSON, not raw text */
    CHECK(!accepts(g, CALL("{\"n\": \"1\"}", "")));           /* under the schema it names */
    CHECK(!accepts(g, CALL("{\"n\": 1, \"next\": {}}", ""))); /* recursively */
    CHECK(!accepts(g, CALL("{\"n\": 1}", "<parameter=tags>\n[\"c\"]\n</parameter>\n"))); /* a nested $ref */
    /* Optional[Item]: JSON under anyOf [Item, null] */
    CHECK(accepts(g, CALL("{\"n\": 1}", "<parameter=opt>\nnull\n</parameter>\n")));
    CHECK(accepts(g, CALL("{\"n\": 1}", "<parameter=opt>\n{\"n\": 2}\n</parameter>\n")));
    CHECK(!accepts(g, CALL("{\"n\": 1}", "<parameter=opt>\nnone\n</parameter>\n")));
#undef CALL
    kiln_grammar_free(g);
    /* JSON pointers: an escaped key ("x~1y" is "x/y"), a sibling parameter, an array index */
    const char *ptrs =
        "[{\"type\": \"function\", \"function\": {\"name\": \"q\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"a\": {\"$ref\": \"#/$defs/x~1y\"}, \"b\": {\"$ref\": \"#/properties/a\"}, \"c\": "
        "{\"$ref\": \"#/$defs/list/1\"}}, \"required\": [\"a\", \"b\", \"c\"], \"$defs\": {\"x/y\": {\"type\": "
        "\"integer\"}, \"list\": [{\"type\": \"string\"}, {\"type\": \"boolean\"}]}}}}]";
    g = build("qwen3-coder", ptrs, KILN_TOOL_CHOICE_REQUIRED, NULL, true, NULL);
    CHECK(g);
#define Q(a, b, c)                                                                                                     \
    "<tool_call>\n<function=q>\n<parameter=a>\n" a "\n</parameter>\n<parameter=b>\n" b                                 \
    "\n</parameter>\n<parameter=c>\n" c "\n</parameter>\n</function>\n</tool_call>"
    CHECK(g && accepts(g, Q("1", "2", "true")));
    CHECK(g && !accepts(g, Q("x", "2", "true")) && !accepts(g, Q("1", "x", "true")) && !accepts(g, Q("1", "2", "x")));
#undef Q
    kiln_grammar_free(g);
    g = build("glm-4.5", tools, KILN_TOOL_CHOICE_REQUIRED, NULL, true, NULL);
    CHECK(g && accepts(g, "<tool_call>put\n<arg_key>item</arg_key>\n<arg_value>{\"n\": 3}</arg_value>\n</tool_call>"));
    CHECK(g && !accepts(g, "<tool_call>put\n<arg_key>item</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"));
    kiln_grammar_free(g);
}

/* A string parameter with listed values (enum, const) in an XML-like format: one of them, as raw
 * text, with the newlines the format's parser trims around it (Qwen3-Coder) or none (GLM). */
static void test_xml_enums(void) {
    const char *tools =
        "[{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"deg F\"]}, \"mode\": "
        "{\"$ref\": \"#/$defs/Mode\"}, \"note\": {\"enum\": [\"a</parameter>b\", \"c\"]}}, \"required\": [\"unit\"], "
        "\"$defs\": {\"Mode\": {\"const\": \"fast\"}}}}}]";
    kiln_grammar *g = build("qwen3-coder", tools, KILN_TOOL_CHOICE_REQUIRED, NULL, true, NULL);
    CHECK(g);
#define W(v, rest) "<tool_call>\n<function=w>\n<parameter=unit>" v "</parameter>\n" rest "</function>\n</tool_call>"
    CHECK(g && accepts(g, W("\ncelsius\n", "")) && accepts(g, W("deg F", "")));
    CHECK(g && accepts(g, W("\ncelsius\n", "<parameter=mode>\nfast\n</parameter>\n")));
    CHECK(g && !accepts(g, W("\nkelvin\n", "")) && !accepts(g, W("\n celsius\n", "")));
    CHECK(g && !accepts(g, W("\ncelsius\n", "<parameter=mode>\nslow\n</parameter>\n")));
    /* a listed value that holds the close marker: free text, as before */
    CHECK(g && accepts(g, W("\ncelsius\n", "<parameter=note>\nanything\n</parameter>\n")));
#undef W
    kiln_grammar_free(g);
    g = build("glm-4.5", tools, KILN_TOOL_CHOICE_REQUIRED, NULL, true, NULL);
    CHECK(g && accepts(g, "<tool_call>w\n<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>"));
    CHECK(g && !accepts(g, "<tool_call>w\n<arg_key>unit</arg_key>\n<arg_value>\ncelsius</arg_value>\n</tool_call>"));
    kiln_grammar_free(g);
}

/* Many tools in an XML-like format write a grammar larger than a client's grammar may be (one
 * schema's rules per parameter): it compiles all the same, bounded by the program's size. */
static void test_large_tool_set(void) {
    enum { N_TOOLS = 64, N_PARAMS = 6 };
    size_t cap = 1u << 20, n = 0;
    char *tools = malloc(cap);
    CHECK(tools);
    if (!tools) return;
    n += (size_t)snprintf(tools + n, cap - n, "[");
    for (int t = 0; t < N_TOOLS; t++) {
        n += (size_t)snprintf(tools + n, cap - n,
                              "%s{\"type\": \"function\", \"function\": {\"name\": \"tool_%d\", \"parameters\": "
                              "{\"type\": \"object\", \"properties\": {",
                              t ? ", " : "", t);
        for (int k = 0; k < N_PARAMS; k++)
            n += (size_t)snprintf(tools + n, cap - n,
                                  "%s\"p%d\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, "
                                  "\"b\": {\"type\": \"array\", \"items\": {\"type\": \"number\"}}}}",
                                  k ? ", " : "", k);
        n += (size_t)snprintf(tools + n, cap - n, "}}}}");
    }
    snprintf(tools + n, cap - n, "]");
    kiln_grammar *g = build("qwen3-coder", tools, KILN_TOOL_CHOICE_AUTO, NULL, true, NULL);
    CHECK(g);
    if (g) {
        CHECKF(strlen(kiln_grammar_gbnf(g)) > KILN_GRAMMAR_MAX_TEXT, "%zu bytes", strlen(kiln_grammar_gbnf(g)));
        CHECK(accepts(g, "ok <tool_call>\n<function=tool_63>\n<parameter=p5>\n{\"a\": 1, \"b\": [2.5]}\n</parameter>\n"
                         "</function>\n</tool_call>"));
    }
    kiln_grammar_free(g);
    free(tools);
}

/* kiln_grammar_approximation of a tool grammar names the first tool whose schema kiln enforces only
 * approximately, in the JSON formats (the whole schema) and the XML-like ones (per parameter, through
 * a $ref too); exact schemas leave it NULL. */
static void test_approximation(void) {
    const char *exact = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
                        "\"object\", \"properties\": {\"x\": {\"type\": \"string\", \"description\": \"d\"}, "
                        "\"n\": {\"type\": \"integer\", \"minimum\": 1}}}}}]";
    const char *approx =
        "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}, "
        "{\"type\": \"function\", \"function\": {\"name\": \"g\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"to\": {\"$ref\": \"#/$defs/E\"}, \"n\": {\"oneOf\": [{\"type\": \"integer\"}]}}, "
        "\"$defs\": {\"E\": {\"type\": \"string\", \"format\": \"url\"}}}}}]";
    static const struct {
        const char *format, *tools, *want; /* want NULL: exact */
    } cases[] = {
        {"hermes", NULL, NULL},
        {"hermes", NULL, "tools[1].function.parameters: #/$defs/E/format: the format's usual shape"},
        {"qwen3-coder", NULL, NULL},
        {"qwen3-coder", NULL, "tools[1].function.parameters.properties.to: #/format: the value is raw text"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kiln_grammar *g =
            build(cases[i].format, cases[i].want ? approx : exact, KILN_TOOL_CHOICE_REQUIRED, NULL, true, NULL);
        const char *a = kiln_grammar_approximation(g);
        CHECKF(g && (cases[i].want ? a && strstr(a, cases[i].want) == a : !a), "%s: %s", cases[i].format,
               a ? a : "(exact)");
        kiln_grammar_free(g);
    }
}

int main(void) {
    const char *path = kt_data("tool-calls/vectors.json");
    if (kt_exists(path)) g_vectors = json_load_file(path, 0, NULL);
    RUN(test_vectors);
    RUN(test_errors);
    RUN(test_shapes);
    RUN(test_xml_refs);
    RUN(test_xml_enums);
    RUN(test_large_tool_set);
    RUN(test_approximation);
    json_decref(g_vectors);
    return kt_summary();
}
