/*
 * test_toolcall.c - the tool-call and reasoning parser (kiln_chat_parser_*, src/text/toolcall*.c).
 *
 * The reference is ../shared/data/tool-calls/vectors.json: 180 raw model replies over 32 formats
 * with the message each must give (content, reasoning, tool calls), taken from another engine's
 * tests. Each vector runs with the format kiln detects from the vector's template (which must be
 * the family the table below expects), the vector's tools, reasoning format and partial flag; for
 * vectors written against a rendered prompt ("peg" kind), the template is rendered with kiln's
 * Jinja engine and the prompt's end decides whether thinking is open, as a server does. Every
 * vector is fed whole, in two pieces split at every byte, and one byte at a time; each way, the
 * message must be the expected one, and the streamed deltas must rebuild it exactly (content,
 * reasoning, every call's arguments), with each call's id and name on its first delta and never
 * changed, and the same final message as the whole feed.
 *
 * Deltas are append-only, so "the deltas rebuild the expected message" also means no delta ever
 * showed text that is not in it: markup never reaches content, even for a moment.
 *
 * Comparison rules follow the vectors' source: arguments are compared as JSON values (a partial
 * reply's unfinished arguments as text without insignificant spaces); ids only where the vector
 * gives one; content and reasoning exactly, except that "peg" vectors compare them with white space
 * trimmed at both ends (their source did). Three vectors cannot be met from their raw text alone and
 * are listed in EXCEPTIONS with the reason.
 *
 * Then: format detection for every template in chat-templates/llama.cpp and llama.cpp-2026
 * against the expected table, API errors, generated ids, UTF-8 split inside characters, streaming
 * order, limits, and a fuzz pass (mutated vectors, random bytes) that must never crash and must
 * keep the deltas equal to the message.
 */
#include "harness.h"

#include "kiln.h"

#include <dirent.h>
#include <jansson.h>
#include <stdint.h>

/* ---- the vectors' tools ------------------------------------------------------------------------ */

#define STR_PARAM(n) "\"" n "\": {\"type\": \"string\"}"
#define INT_PARAM(n) "\"" n "\": {\"type\": \"integer\"}"
#define FN(name, props)                                                                                                \
    "{\"type\": \"function\", \"function\": {\"name\": \"" name                                                        \
    "\", \"parameters\": {\"type\": \"object\", \"properties\": {" props "}}}}"

static const char *const TOOLS_JSON =
    "{"
    "\"special_function_tool\": " FN(
        "special_function",
        INT_PARAM(
            "arg1")) ","
                     "\"special_function_tool_with_optional_param\": " FN(
                         "special_function_with_opt",
                         INT_PARAM("arg1") ", " INT_PARAM(
                             "arg2")) ","
                                      "\"python_tool\": " FN(
                                          "python",
                                          STR_PARAM(
                                              "code")) ","
                                                       "\"code_interpreter_tool\": " FN(
                                                           "code_interpreter",
                                                           STR_PARAM(
                                                               "code")) ","
                                                                        "\"html_tool\": " FN(
                                                                            "html", STR_PARAM(
                                                                                        "markup")) ","
                                                                                                   "\"t"
                                                                                                   "odo"
                                                                                                   "_li"
                                                                                                   "st"
                                                                                                   "\":"
                                                                                                   " " FN("todo_list", "\"todos\": {\"type\": \"array\"}") ","
                                                                                                                                                           "\"get_time_tool\": " FN("get_time", STR_PARAM("city")) ","
                                                                                                                                                                                                                   "\"get_weather_tool\": " FN("get_weather", STR_PARAM("city")) ","
                                                                                                                                                                                                                                                                                 "\"empty_args_tool\": " FN("empty_args", "") ","
                                                                                                                                                                                                                                                                                                                              "\"empty_args_tool_no_properties\": {\"type\": \"function\", \"function\": {\"name\": \"empty_args_no_props\", \"parameters\": {\"type\": \"object\"}}},"
                                                                                                                                                                                                                                                                                                                              "\"magic_int_tool\": " FN("magic_int", INT_PARAM(
                                                                                                                                                                                                                                                                                                                                                                         "ref") ", " STR_PARAM("name")) ","
                                                                                                                                                                                                                                                                                                                                                                                                        "\"amount_tool\": " FN("amount",
                                                                                                                                                                                                                                                                                                                                                                                                                               "\"orig\": {\"type\": \"number\"}") ","
                                                                                                                                                                                                                                                                                                                                                                                                                                                                   "\"config_tool\": " FN("set_config", "\"config\": {\"type\": \"object\"}") ","
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                              "\"tool_2req_5opt\": " FN("tool_2req_5opt", STR_PARAM(
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                              "req1") ", " INT_PARAM("req2") ", " STR_PARAM("opt1") ", " INT_PARAM("opt2") ", " STR_PARAM("opt3") ", " INT_PARAM("opt4") ", " STR_PARAM("opt5")) ","
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                 "\"no_args_tool\": " FN(
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                     "read_file_diff_md",
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                     STR_PARAM("review_id") ", " STR_PARAM("file_id")) ","
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                       "\"nullable_string_tool\": " FN(
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "set_nullable_str", "\"name\": {\"type\": [\"string\", \"null\"]}") ","
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                               "\"nullable_int_tool\": " FN(
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                   "set_nullable_int", "\"count\": {\"type\": [\"integer\", \"null\"]}") ","
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                         "\"quoted_unquoted_tool\": " FN("quoted_unquoted",
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                         STR_PARAM("quoted") ", " STR_PARAM(
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                             "unquoted")) ","
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                          "\"string_param_tool\": " FN(
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                              "string_param",
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                              STR_PARAM(
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                  "text")) "}";

/* The tools the older vectors (no "tools" field) were parsed with. */
static const char *const OLD_TOOLS[] = {"special_function_tool",
                                        "special_function_tool_with_optional_param",
                                        "python_tool",
                                        "code_interpreter_tool",
                                        "html_tool",
                                        "todo_list",
                                        NULL};

/* The vectors' format names -> kiln's format (what detection must say for the vector's template). */
static const char *const FORMAT_MAP[][2] = {
    {"APERTUS", "apertus"},
    {"APRIEL", "apriel"},
    {"COMMAND_R7B", "command-r7b"},
    {"COMMAND_R_PLUS", "command-r-plus"},
    {"DEEPSEEK_R1", "deepseek-r1"},
    {"DEEPSEEK_V3_1", "deepseek-v3.1"},
    {"DEEPSEEK_V3_2", "deepseek-v3.2"},
    {"FIREFUNCTION_V2", "firefunction-v2"},
    {"FUNCTIONARY_V3_1_LLAMA_3_1", "functionary-v3.1"},
    {"FUNCTIONARY_V3_2", "functionary-v3.2"},
    {"GEMMA4", "gemma4"},
    {"GENERIC", "generic"},
    {"GIGACHAT3", "gigachat3"},
    {"GLM_4_5", "glm-4.5"},
    {"GPT_OSS", "gpt-oss"},
    {"GRANITE", "granite"},
    {"GRANITE_4", "hermes"},
    {"HERMES_2_PRO", "hermes"},
    {"KIMI_K2", "kimi-k2"},
    {"LFM2", "lfm2"},
    {"LLAMA_3_X", "llama3"},
    {"MINIMAX_M2", "minimax-m2"},
    {"MISTRAL_NEMO", "mistral-nemo"},
    {"MISTRAL_REASONING", "mistral"},
    {"MISTRAL_SMALL_3_2", "mistral"},
    {"NEMOTRON_V2", "nemotron-v2"},
    {"NEMOTRON_V3", "qwen3-coder"},
    {"QWEN3_CODER_XML", "qwen3-coder"},
    {"QWEN3_XML", "qwen3-coder"},
    {"REKA_EDGE", "hermes"},
    {"SEED_OSS", "seed-oss"},
    {"STEPFUN_3_5", "qwen3-coder"},
};

/* Vectors whose expected message cannot be derived from their raw text, by index. */
static const struct {
    int index;
    const char *why;
} EXCEPTIONS[] = {
    {13, "round trip the source did not parse: the template drops the reasoning it expects"},
    {90, "round trip the source did not parse: the raw is how the template renders a past call, not "
         "what the model writes"},
    {140, "made with a JSON response schema (not in the vector) whose parser strips a ```json fence"},
};

/* The expected format of every template file, by name (both template folders). */
static const char *const DETECT[][2] = {
    {"Apertus-8B-Instruct", "apertus"},
    {"Apriel-1.6-15b-Thinker-fixed", "apriel"},
    {"Bielik-11B-v3.0-Instruct", "hermes"},
    {"ByteDance-Seed-OSS", "seed-oss"},
    {"CohereForAI-c4ai-command-r-plus-tool_use", "command-r-plus"},
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", "command-r7b"},
    {"GLM-4.6", "glm-4.5"},
    {"GLM-4.7-Flash", "glm-4.5"},
    {"GigaChat3-10B-A1.8B", "gigachat3"},
    {"GigaChat3.1-10B-A1.8B", "gigachat3"},
    {"HuggingFaceTB-SmolLM3-3B", "hermes"},
    {"Kimi-K2-Instruct", "kimi-k2"},
    {"Kimi-K2-Thinking", "kimi-k2"},
    {"LFM2-8B-A1B", "lfm2"},
    {"LFM2.5-Instruct", "lfm2"},
    {"MiMo-VL", "hermes"},
    {"MiniMax-M2", "minimax-m2"},
    {"Mistral-Small-3.2-24B-Instruct-2506", "mistral"},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "qwen3-coder"},
    {"NVIDIA-Nemotron-Nano-v2", "nemotron-v2"},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "hermes"},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes"},
    {"Qwen-QwQ-32B", "hermes"},
    {"Qwen-Qwen2.5-7B-Instruct", "hermes"},
    {"Qwen-Qwen3-0.6B", "hermes"},
    {"Qwen3-Coder", "qwen3-coder"},
    {"Qwen3.5-4B", "qwen3-coder"},
    {"Reka-Edge", "hermes"},
    {"StepFun3.5-Flash", "qwen3-coder"},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "deepseek-r1"},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-r1"},
    {"deepseek-ai-DeepSeek-V3.1", "deepseek-v3.1"},
    {"deepseek-ai-DeepSeek-V3.2", "deepseek-v3.2"},
    {"fireworks-ai-llama-3-firefunction-v2", "firefunction-v2"},
    {"google-gemma-2-2b-it", "generic"},
    {"google-gemma-4-31B-it-interleaved", "gemma4"},
    {"google-gemma-4-31B-it", "gemma4"},
    {"ibm-granite-granite-3.3-2B-Instruct", "granite"},
    {"ibm-granite-granite-4.0", "hermes"},
    {"llama-cpp-deepseek-r1", "deepseek-r1"},
    {"llama-cpp-rwkv-world", "generic"},
    {"meetkai-functionary-medium-v3.1", "functionary-v3.1"},
    {"meetkai-functionary-medium-v3.2", "functionary-v3.2"},
    {"meta-llama-Llama-3.1-8B-Instruct", "llama3"},
    {"meta-llama-Llama-3.2-3B-Instruct", "llama3"},
    {"meta-llama-Llama-3.3-70B-Instruct", "llama3"},
    {"microsoft-Phi-3.5-mini-instruct", "generic"},
    {"mistralai-Ministral-3-14B-Reasoning-2512", "mistral"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "mistral-nemo"},
    {"moonshotai-Kimi-K2", "kimi-k2"},
    {"openai-gpt-oss-120b", "gpt-oss"},
    {"stepfun-ai-Step-3.5-Flash", "qwen3-coder"},
    {"unsloth-Apriel-1.5", "apriel"},
    {"unsloth-mistral-Devstral-Small-2507", "mistral"},
    {"upstage-Solar-Open-100B", "solar-open"},
};

/* ---- helpers ------------------------------------------------------------------------------------ */

static char *read_template(const char *name, size_t *len) {
    char rel[512];
    snprintf(rel, sizeof rel, "chat-templates/llama.cpp-2026/%s", name);
    char *t = kt_read_file(kt_data(rel), len);
    if (!t) {
        snprintf(rel, sizeof rel, "chat-templates/llama.cpp/%s", name);
        t = kt_read_file(kt_data(rel), len);
    }
    return t;
}

/* JSON text with the spaces outside strings removed (to compare unfinished arguments). */
static void squeeze(const char *s, char *out, size_t cap) {
    size_t k = 0;
    bool str = false, esc = false;
    for (; *s && k + 1 < cap; s++) {
        char c = *s;
        if (str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') str = false;
        } else if (c == '"') {
            str = true;
        } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
            continue;
        }
        out[k++] = c;
    }
    out[k] = 0;
}

/* Whether JSON texts a and b are the same value (both parse), or failing that the same text
 * without insignificant spaces. */
static bool same_args(const char *a, const char *b) {
    json_error_t e;
    json_t *ja = json_loads(a, JSON_DECODE_ANY, &e), *jb = json_loads(b, JSON_DECODE_ANY, &e);
    bool same;
    if (ja && jb) same = json_equal(ja, jb);
    else if (ja || jb) same = false;
    else {
        static char sa[8192], sb[8192];
        squeeze(a, sa, sizeof sa);
        squeeze(b, sb, sizeof sb);
        same = strcmp(sa, sb) == 0;
    }
    json_decref(ja);
    json_decref(jb);
    return same;
}

/* s without leading and trailing white space, into buf. */
static const char *strip(const char *s, char *buf, size_t cap) {
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    if (n >= cap) n = cap - 1;
    memcpy(buf, s, n);
    buf[n] = 0;
    return buf;
}

/* One vector, ready to run. */
typedef struct vcase {
    int index;
    const char *raw;
    size_t raw_len;
    json_t *v;
    kiln_chat_parser_params pp;
    bool partial, trim;
    char *tools, *prompt, *tmpl;
    const char *format;
} vcase;

/* Everything the deltas of one run rebuilt. */
typedef struct streamed {
    char content[16384], reasoning[16384];
    size_t nc, nr;
    int ncalls;
    char ids[16][160], names[16][300], args[16][8192];
    size_t nargs[16];
    bool bad; /* a delta broke a rule (printed) */
    char why[256];
} streamed;

static void take_deltas(kiln_chat_parser *p, streamed *s) {
    kiln_chat_delta d;
    while (kiln_chat_parser_next(p, &d)) {
        if (d.kind == KILN_DELTA_CONTENT || d.kind == KILN_DELTA_REASONING) {
            char *buf = d.kind == KILN_DELTA_CONTENT ? s->content : s->reasoning;
            size_t *n = d.kind == KILN_DELTA_CONTENT ? &s->nc : &s->nr;
            if (*n + d.len < sizeof s->content) memcpy(buf + *n, d.text, d.len), *n += d.len, buf[*n] = 0;
            if (d.index != -1 || d.id) s->bad = true, snprintf(s->why, sizeof s->why, "text delta with call fields");
            continue;
        }
        int i = d.index;
        if (i < 0 || i >= 16) {
            s->bad = true;
            snprintf(s->why, sizeof s->why, "call index %d", i);
            continue;
        }
        if (d.id) {
            if (i != s->ncalls) {
                s->bad = true;
                snprintf(s->why, sizeof s->why, "first delta of call %d after %d calls (ids change?)", i, s->ncalls);
                continue;
            }
            s->ncalls++;
            snprintf(s->ids[i], sizeof s->ids[i], "%s", d.id);
            snprintf(s->names[i], sizeof s->names[i], "%s", d.name);
            if (!d.id[0] || !d.name[0]) s->bad = true, snprintf(s->why, sizeof s->why, "empty id or name");
        } else if (i >= s->ncalls) {
            s->bad = true;
            snprintf(s->why, sizeof s->why, "arguments of call %d before its first delta", i);
            continue;
        }
        if (s->nargs[i] + d.len < sizeof s->args[i])
            memcpy(s->args[i] + s->nargs[i], d.text, d.len), s->nargs[i] += d.len, s->args[i][s->nargs[i]] = 0;
    }
}

/* Checks the deltas against the message (json): they must rebuild it. pending_ok: calls not yet
 * released may be missing from the deltas (a partial reply). */
static bool deltas_match(const streamed *s, json_t *msg, bool pending_ok, char *why, size_t cap) {
    if (s->bad) return snprintf(why, cap, "%s", s->why), false;
    const char *c = json_string_value(json_object_get(msg, "content"));
    const char *r = json_string_value(json_object_get(msg, "reasoning_content"));
    if (strcmp(c ? c : "", s->content) != 0)
        return snprintf(why, cap, "content deltas '%.300s' != message '%.300s'", s->content, c ? c : ""), false;
    if (strcmp(r ? r : "", s->reasoning) != 0)
        return snprintf(why, cap, "reasoning deltas '%.300s' != message '%.300s'", s->reasoning, r ? r : ""), false;
    json_t *calls = json_object_get(msg, "tool_calls");
    int n = (int)json_array_size(calls);
    if (s->ncalls > n || (!pending_ok && s->ncalls != n))
        return snprintf(why, cap, "%d calls streamed, %d in the message", s->ncalls, n), false;
    for (int i = 0; i < s->ncalls; i++) {
        json_t *tc = json_array_get(calls, (size_t)i);
        const char *id = json_string_value(json_object_get(tc, "id"));
        json_t *fn = json_object_get(tc, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        if (strcmp(id, s->ids[i]) || strcmp(name, s->names[i]) || strcmp(args, s->args[i]))
            return snprintf(why, cap, "call %d streamed as %.60s %.60s %.200s, message %.60s %.60s %.200s", i,
                            s->ids[i], s->names[i], s->args[i], id, name, args),
                   false;
    }
    return true;
}

/* Compares a message with the vector's expectation. */
static bool message_ok(const vcase *vc, json_t *msg, char *why, size_t cap) {
    static char b1[16384], b2[16384];
    const char *keys[2][2] = {{"expected_content", "content"}, {"expected_reasoning", "reasoning_content"}};
    for (int k = 0; k < 2; k++) {
        const char *want = json_string_value(json_object_get(vc->v, keys[k][0]));
        const char *got = json_string_value(json_object_get(msg, keys[k][1]));
        if (!want) want = "";
        if (!got) got = "";
        if (vc->trim) want = strip(want, b1, sizeof b1), got = strip(got, b2, sizeof b2);
        if (strcmp(want, got) != 0) return snprintf(why, cap, "%s: want '%s' got '%s'", keys[k][1], want, got), false;
    }
    json_t *want = json_object_get(vc->v, "expected_tool_calls"), *got = json_object_get(msg, "tool_calls");
    if (json_array_size(want) != json_array_size(got))
        return snprintf(why, cap, "%zu tool calls, want %zu", json_array_size(got), json_array_size(want)), false;
    for (size_t i = 0; i < json_array_size(want); i++) {
        json_t *w = json_array_get(want, i), *g = json_array_get(got, i);
        json_t *wf = json_object_get(w, "function"), *gf = json_object_get(g, "function");
        const char *wn = json_string_value(json_object_get(wf, "name")),
                   *gn = json_string_value(json_object_get(gf, "name"));
        const char *wa = json_string_value(json_object_get(wf, "arguments"));
        const char *ga = json_string_value(json_object_get(gf, "arguments"));
        const char *wid = json_string_value(json_object_get(w, "id")),
                   *gid = json_string_value(json_object_get(g, "id"));
        if (strcmp(wn, gn)) return snprintf(why, cap, "call %zu name %s, want %s", i, gn, wn), false;
        if (!same_args(wa, ga)) return snprintf(why, cap, "call %zu arguments %s, want %s", i, ga, wa), false;
        if (wid && *wid && strcmp(wid, gid)) return snprintf(why, cap, "call %zu id %s, want %s", i, gid, wid), false;
        if ((!gid || !*gid) && !vc->partial) return snprintf(why, cap, "call %zu has no id", i), false;
    }
    return true;
}

/* Runs vc fed in the pieces that cuts[0..ncut) bound (ascending offsets inside raw). The final
 * message JSON (malloc'd) goes to *msg_out when not NULL. */
static bool run_fed(const vcase *vc, const size_t *cuts, size_t ncut, char *why, size_t cap, char **msg_out) {
    kiln_chat_parser *p;
    if (kiln_chat_parser_new(&vc->pp, &p) != KILN_OK) return snprintf(why, cap, "new: %s", kiln_last_error()), false;
    static streamed s;
    memset(&s, 0, sizeof s);
    size_t off = 0;
    bool ok = true;
    for (size_t i = 0; i <= ncut && ok; i++) {
        size_t end = i < ncut ? cuts[i] : vc->raw_len;
        if (kiln_chat_parser_feed(p, vc->raw + off, end - off) != KILN_OK) {
            snprintf(why, cap, "feed: %s", kiln_last_error());
            ok = false;
        }
        off = end;
        take_deltas(p, &s);
    }
    if (ok && !vc->partial) {
        ok = kiln_chat_parser_finish(p) == KILN_OK;
        if (!ok) snprintf(why, cap, "finish: %s", kiln_last_error());
        take_deltas(p, &s);
    }
    char *m = NULL;
    json_t *msg = NULL;
    if (ok && kiln_chat_parser_message(p, &m, NULL) == KILN_OK) {
        json_error_t e;
        msg = json_loads(m, 0, &e);
    }
    if (ok && !msg) ok = false, snprintf(why, cap, "no message");
    if (ok) ok = deltas_match(&s, msg, vc->partial, why, cap) && message_ok(vc, msg, why, cap);
    json_decref(msg);
    if (msg_out && ok) *msg_out = m;
    else kiln_free(m);
    kiln_chat_parser_free(p);
    return ok;
}

/* Renders tmpl the way the vector's source did (one user message, its tools, enable_thinking true
 * unless the vector says false): the prompt whose end tells the parser what the generation prompt
 * left open. NULL when the template does not render. */
static char *render_prompt(const char *tmpl, size_t tlen, const char *tools, json_t *v) {
    json_t *ctx = json_pack("{s:[{s:s, s:s}], s:b, s:s, s:s}", "messages", "role", "user", "content", "Hey there!",
                            "add_generation_prompt", 1, "bos_token", "<s>", "eos_token", "</s>");
    json_error_t e;
    json_t *t = tools ? json_loads(tools, 0, &e) : NULL;
    if (json_array_size(t)) json_object_set(ctx, "tools", t);
    json_decref(t);
    const char *et = json_string_value(json_object_get(v, "enable_thinking"));
    json_object_set_new(ctx, "enable_thinking", json_boolean(!et || strcmp(et, "false") != 0));
    char *cj = json_dumps(ctx, JSON_COMPACT);
    json_decref(ctx);
    char *out = NULL;
    size_t n;
    if (kiln_template_render(tmpl, tlen, cj, strlen(cj), &out, &n) != KILN_OK) out = NULL;
    free(cj);
    return out;
}

static const char *kiln_format_of(const char *vf) {
    for (size_t i = 0; i < sizeof FORMAT_MAP / sizeof FORMAT_MAP[0]; i++)
        if (strcmp(FORMAT_MAP[i][0], vf) == 0) return FORMAT_MAP[i][1];
    return NULL;
}

/* Sets up vector v (index i) with template file tname. False with *why when it cannot run. */
static bool setup_case(vcase *vc, json_t *v, int i, const char *tname, json_t *all_tools, char *why, size_t cap) {
    memset(vc, 0, sizeof *vc);
    vc->index = i;
    vc->v = v;
    vc->raw = json_string_value(json_object_get(v, "raw"));
    vc->raw_len = json_string_length(json_object_get(v, "raw"));
    vc->partial = json_is_true(json_object_get(v, "is_partial"));
    const char *kind = json_string_value(json_object_get(v, "kind"));
    bool peg = kind && strncmp(kind, "peg", 3) == 0;
    vc->trim = peg;
    size_t tlen;
    vc->tmpl = read_template(tname, &tlen);
    if (!vc->tmpl) return snprintf(why, cap, "no template %s", tname), false;
    /* tools */
    json_t *names = json_object_get(v, "tools"), *arr = json_array();
    if (json_is_array(names)) {
        for (size_t k = 0; k < json_array_size(names); k++)
            json_array_append(arr, json_object_get(all_tools, json_string_value(json_array_get(names, k))));
    } else {
        for (int k = 0; OLD_TOOLS[k]; k++) json_array_append(arr, json_object_get(all_tools, OLD_TOOLS[k]));
    }
    vc->tools = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    vc->pp = kiln_chat_parser_default_params();
    vc->pp.chat_template = vc->tmpl;
    vc->pp.tools = vc->tools;
    vc->pp.id_seed = 42;
    const char *rf = json_string_value(json_object_get(v, "reasoning_format"));
    vc->pp.reasoning = strcmp(rf, "NONE") == 0       ? KILN_REASONING_NONE
                       : strcmp(rf, "DEEPSEEK") == 0 ? KILN_REASONING_DEEPSEEK
                                                     : KILN_REASONING_AUTO;
    if (json_is_true(json_object_get(v, "reasoning_in_content"))) vc->pp.reasoning = KILN_REASONING_NONE;
    if (json_is_false(json_object_get(v, "parse_tool_calls"))) vc->pp.parse_tool_calls = false;
    vc->pp.thinking_open = json_is_true(json_object_get(v, "thinking_forced_open"));
    if (peg) vc->pp.prompt = vc->prompt = render_prompt(vc->tmpl, tlen, vc->tools, v);
    vc->format = kiln_chat_format_detect(vc->tmpl);
    return true;
}

static void free_case(vcase *vc) {
    free(vc->tmpl);
    free(vc->tools);
    kiln_free(vc->prompt);
}

static const char *exception_of(int i) {
    for (size_t k = 0; k < sizeof EXCEPTIONS / sizeof EXCEPTIONS[0]; k++)
        if (EXCEPTIONS[k].index == i) return EXCEPTIONS[k].why;
    return NULL;
}

/* ---- the vectors ---------------------------------------------------------------------------------- */

static json_t *g_vectors, *g_tools;

/* Runs every vector (and every template a vector names) with `mode`: 0 whole, 1 two pieces split
 * at every byte, 2 one byte at a time. Prints the pass count. */
static void run_vectors(int mode) {
    if (!g_vectors) SKIP("no tool-calls/vectors.json");
    json_t *vs = json_object_get(g_vectors, "vectors");
    int pass = 0, fail = 0, total = 0, excused = 0, runs = 0;
    static const char *const mode_name[] = {"whole", "split", "bytewise"};
    for (size_t i = 0; i < json_array_size(vs); i++) {
        json_t *v = json_array_get(vs, i);
        const char *tl = json_string_value(json_object_get(v, "template"));
        const char *vf = json_string_value(json_object_get(v, "format"));
        total++;
        if (exception_of((int)i)) {
            excused++;
            continue;
        }
        bool ok = true;
        char why[1024] = "";
        /* "a | b": the vector holds for every template named */
        char list[1024];
        snprintf(list, sizeof list, "%s", tl);
        for (char *save = NULL, *tok = strtok_r(list, "|", &save); tok && ok; tok = strtok_r(NULL, "|", &save)) {
            while (*tok == ' ') tok++;
            size_t tn = strlen(tok);
            while (tn && tok[tn - 1] == ' ') tok[--tn] = 0;
            const char *base = strrchr(tok, '/') ? strrchr(tok, '/') + 1 : tok;
            vcase vc;
            if (!setup_case(&vc, v, (int)i, base, g_tools, why, sizeof why)) {
                ok = false;
                break;
            }
            const char *want_fmt = kiln_format_of(vf);
            if (!want_fmt || strcmp(want_fmt, vc.format) != 0) {
                snprintf(why, sizeof why, "%s detected as %s, want %s", base, vc.format, want_fmt ? want_fmt : "?");
                ok = false;
            }
            char *whole = NULL;
            if (ok) ok = run_fed(&vc, NULL, 0, why, sizeof why, &whole);
            runs++;
            if (ok && mode == 1) {
                for (size_t k = 1; k < vc.raw_len && ok; k++) {
                    char *m = NULL;
                    ok = run_fed(&vc, &k, 1, why, sizeof why, &m);
                    if (ok && strcmp(m, whole) != 0) {
                        snprintf(why, sizeof why, "split at %zu: message %s differs from %s", k, m, whole);
                        ok = false;
                    } else if (!ok) {
                        size_t wl = strlen(why);
                        snprintf(why + wl, sizeof why - wl, " (split at byte %zu)", k);
                    }
                    kiln_free(m);
                }
            } else if (ok && mode == 2) {
                size_t *cuts = malloc(vc.raw_len * sizeof *cuts);
                for (size_t k = 1; k < vc.raw_len; k++) cuts[k - 1] = k;
                char *m = NULL;
                ok = run_fed(&vc, cuts, vc.raw_len ? vc.raw_len - 1 : 0, why, sizeof why, &m);
                if (ok && strcmp(m, whole) != 0) {
                    snprintf(why, sizeof why, "byte by byte: message %s differs from %s", m, whole);
                    ok = false;
                }
                kiln_free(m);
                free(cuts);
            }
            kiln_free(whole);
            free_case(&vc);
        }
        if (ok) pass++;
        else {
            fail++;
            printf("  vector %zu (%s, %s): %s\n", i, vf, tl, why);
        }
    }
    printf("  vectors %s: %d/%d pass, %d failed, %d excused (see EXCEPTIONS), %d runs\n", mode_name[mode], pass, total,
           fail, excused, runs);
    CHECKF(fail == 0, "%d vectors failed", fail);
}

static void test_vectors_whole(void) { run_vectors(0); }
static void test_vectors_split(void) { run_vectors(1); }
static void test_vectors_bytewise(void) { run_vectors(2); }

/* ---- detection ---------------------------------------------------------------------------------- */

static void test_detection(void) {
    const char *dirs[] = {"chat-templates/llama.cpp-2026", "chat-templates/llama.cpp"};
    int n = 0;
    for (int d = 0; d < 2; d++) {
        DIR *dir = opendir(kt_data(dirs[d]));
        if (!dir) SKIP("no %s", dirs[d]);
        struct dirent *e;
        while ((e = readdir(dir))) {
            size_t l = strlen(e->d_name);
            if (l < 7 || strcmp(e->d_name + l - 6, ".jinja") != 0) continue;
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)(l - 6), e->d_name);
            const char *want = NULL;
            for (size_t k = 0; k < sizeof DETECT / sizeof DETECT[0]; k++)
                if (strcmp(DETECT[k][0], name) == 0) want = DETECT[k][1];
            char rel[512];
            snprintf(rel, sizeof rel, "%s/%s", dirs[d], e->d_name);
            char *t = kt_read_file(kt_data(rel), NULL);
            CHECKF(t, "cannot read %s", rel);
            const char *got = kiln_chat_format_detect(t);
            free(t);
            if (!want || strcmp(want, got) != 0) closedir(dir);
            CHECKF(want, "%s has no expected format in DETECT", rel);
            CHECKF(strcmp(want, got) == 0, "%s detected as %s, want %s", rel, got, want);
            n++;
        }
        closedir(dir);
    }
    CHECKF(n == 72, "%d templates, want 55 + 17", n);
    CHECK(strcmp(kiln_chat_format_detect(NULL), "generic") == 0);
    CHECK(strcmp(kiln_chat_format_detect("{{ messages }}"), "generic") == 0);
    /* every table row has a unique name and a description */
    const char *name, *models;
    size_t rows = 0;
    for (size_t i = 0; kiln_chat_format_get(i, &name, &models); i++, rows++) {
        CHECK(name && *name && models && *models);
        for (size_t j = 0; j < i; j++) {
            const char *other;
            kiln_chat_format_get(j, &other, NULL);
            CHECKF(strcmp(other, name) != 0, "format %s twice", name);
        }
    }
    CHECK(rows >= 25);
}

/* ---- API, ids, streaming rules ------------------------------------------------------------------ */

/* Parses text whole with params pp; the message into msg (a static buffer). */
static kiln_status parse_whole(const kiln_chat_parser_params *pp, const char *text, char *msg, size_t cap) {
    kiln_chat_parser *p;
    kiln_status st = kiln_chat_parser_new(pp, &p);
    if (st) return st;
    if (!(st = kiln_chat_parser_feed(p, text, strlen(text)))) st = kiln_chat_parser_finish(p);
    char *m = NULL;
    if (kiln_chat_parser_message(p, &m, NULL) == KILN_OK) snprintf(msg, cap, "%s", m);
    kiln_free(m);
    kiln_chat_parser_free(p);
    return st;
}

static void test_api_errors(void) {
    kiln_chat_parser *p = NULL;
    kiln_chat_parser_params pp = kiln_chat_parser_default_params();
    CHECK(pp.parse_tool_calls && pp.reasoning == KILN_REASONING_AUTO && !pp.format);
    CHECK(kiln_chat_parser_new(&pp, NULL) == KILN_ERR_INVALID_ARG);
    pp.format = "no-such-format";
    CHECK(kiln_chat_parser_new(&pp, &p) == KILN_ERR_INVALID_ARG && !p);
    CHECK(strstr(kiln_last_error(), "no-such-format"));
    pp.format = "hermes";
    const char *bad_tools[][2] = {{"[{\"type\": \"function\"", "not valid JSON"},
                                  {"{\"a\": 1}", "array"},
                                  {"[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}, 7]", "tools[1]"},
                                  {"[{\"type\": \"function\", \"function\": {\"description\": \"x\"}}]", "tools[0]"},
                                  {"[{\"function\": {\"name\": \"f\", \"parameters\": \"x\"}}]", "parameters"}};
    for (size_t i = 0; i < sizeof bad_tools / sizeof bad_tools[0]; i++) {
        pp.tools = bad_tools[i][0];
        CHECKF(kiln_chat_parser_new(&pp, &p) == KILN_ERR_INVALID_ARG, "tools %s", bad_tools[i][0]);
        CHECKF(strstr(kiln_last_error(), bad_tools[i][1]), "tools %s: %s", bad_tools[i][0], kiln_last_error());
    }
    pp.tools = "[{\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}]"; /* the inner object alone */
    CHECK(kiln_chat_parser_new(&pp, &p) == KILN_OK);
    CHECK(strcmp(kiln_chat_parser_format(p), "hermes") == 0);
    CHECK(kiln_chat_parser_feed(p, NULL, 1) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_chat_parser_feed(p, "hi", 2) == KILN_OK);
    CHECK(kiln_chat_parser_finish(p) == KILN_OK && kiln_chat_parser_finish(p) == KILN_OK);
    CHECK(kiln_chat_parser_feed(p, "more", 4) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_chat_parser_last_error(p), "finished"));
    kiln_chat_parser_free(p);
    /* NULL handles */
    kiln_chat_delta d;
    char *m;
    CHECK(kiln_chat_parser_feed(NULL, "x", 1) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_chat_parser_finish(NULL) == KILN_ERR_INVALID_ARG);
    CHECK(!kiln_chat_parser_next(NULL, &d));
    CHECK(kiln_chat_parser_message(NULL, &m, NULL) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_chat_parser_n_tool_calls(NULL) == 0);
    kiln_chat_parser_free(NULL);
    /* defaults: no params, no template: generic, plain content */
    CHECK(kiln_chat_parser_new(NULL, &p) == KILN_OK);
    CHECK(strcmp(kiln_chat_parser_format(p), "generic") == 0);
    kiln_chat_parser_free(p);
    /* aliases */
    pp = kiln_chat_parser_default_params();
    pp.format = "Qwen3";
    CHECK(kiln_chat_parser_new(&pp, &p) == KILN_OK && strcmp(kiln_chat_parser_format(p), "hermes") == 0);
    kiln_chat_parser_free(p);
}

/* Generated ids: "call_" and 24 alphanumerics (9 alphanumerics for Mistral's formats), the same for
 * the same seed, other for another seed; ids the model writes are kept. */
static void test_ids(void) {
    static char m1[4096], m2[4096], m3[4096];
    kiln_chat_parser_params pp = kiln_chat_parser_default_params();
    pp.format = "hermes";
    pp.id_seed = 7;
    const char *two = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", "
                      "\"arguments\": {}}</tool_call>";
    CHECK(parse_whole(&pp, two, m1, sizeof m1) == KILN_OK);
    CHECK(parse_whole(&pp, two, m2, sizeof m2) == KILN_OK);
    pp.id_seed = 8;
    CHECK(parse_whole(&pp, two, m3, sizeof m3) == KILN_OK);
    CHECK(strcmp(m1, m2) == 0 && strcmp(m1, m3) != 0);
    json_error_t e;
    json_t *j = json_loads(m1, 0, &e);
    json_t *calls = json_object_get(j, "tool_calls");
    CHECK(json_array_size(calls) == 2);
    const char *id0 = json_string_value(json_object_get(json_array_get(calls, 0), "id"));
    const char *id1 = json_string_value(json_object_get(json_array_get(calls, 1), "id"));
    CHECKF(strlen(id0) == 29 && strncmp(id0, "call_", 5) == 0 && strcmp(id0, id1) != 0, "%s %s", id0, id1);
    for (const char *c = id0 + 5; *c; c++)
        CHECK((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'));
    json_decref(j);
    pp.format = "mistral";
    CHECK(parse_whole(&pp, "[TOOL_CALLS]f[ARGS]{\"x\": 1}", m1, sizeof m1) == KILN_OK);
    j = json_loads(m1, 0, &e);
    const char *mid = json_string_value(json_object_get(json_array_get(json_object_get(j, "tool_calls"), 0), "id"));
    CHECKF(mid && strlen(mid) == 9, "%s", m1);
    json_decref(j);
    CHECK(parse_whole(&pp, "[TOOL_CALLS]f[CALL_ID]abcDEF123[ARGS]{\"x\": 1}", m1, sizeof m1) == KILN_OK);
    CHECKF(strstr(m1, "\"id\":\"abcDEF123\""), "%s", m1);
}

/* Deltas come in the order of the reply: reasoning, content, then a call's first delta with id and
 * name, then its argument fragments without them. */
static void test_delta_order(void) {
    kiln_chat_parser_params pp = kiln_chat_parser_default_params();
    pp.format = "hermes";
    pp.id_seed = 1;
    kiln_chat_parser *p;
    CHECK(kiln_chat_parser_new(&pp, &p) == KILN_OK);
    const char *pieces[] = {"<th",
                            "ink>Let me",
                            " think.</think>\n\nSure",
                            ": <tool_",
                            "call>\n{\"name\": \"get\", \"arg",
                            "uments\": {\"city\": \"Par",
                            "is\"}}\n</tool_call>"};
    int kinds[32], n = 0;
    bool first_seen = false;
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        CHECK(kiln_chat_parser_feed(p, pieces[i], strlen(pieces[i])) == KILN_OK);
        kiln_chat_delta d;
        while (kiln_chat_parser_next(p, &d) && n < 32) {
            if (n == 0 || kinds[n - 1] != (int)d.kind) kinds[n++] = (int)d.kind;
            if (d.kind == KILN_DELTA_TOOL_CALL) {
                CHECK(d.index == 0);
                CHECKF(!first_seen == (d.id != NULL), "id on delta %d", n);
                CHECK(!d.id || (strcmp(d.name, "get") == 0 && strncmp(d.id, "call_", 5) == 0));
                first_seen = true;
            }
            if (d.kind == KILN_DELTA_CONTENT)
                CHECKF(!memchr(d.text, '<', d.len), "markup in content: %.*s", (int)d.len, d.text);
        }
    }
    CHECK(kiln_chat_parser_finish(p) == KILN_OK);
    CHECK(n == 3 && kinds[0] == KILN_DELTA_REASONING && kinds[1] == KILN_DELTA_CONTENT &&
          kinds[2] == KILN_DELTA_TOOL_CALL);
    CHECK(kiln_chat_parser_n_tool_calls(p) == 1);
    char *m;
    CHECK(kiln_chat_parser_message(p, &m, NULL) == KILN_OK);
    CHECKF(strcmp(m, "{\"role\":\"assistant\",\"content\":\"Sure: \",\"reasoning_content\":\"Let me think.\","
                     "\"tool_calls\":[{\"id\":\"call_zvlZ6MRqCXMUnxuYUQYyy6NH\",\"type\":\"function\",\"function\":{"
                     "\"name\":\"get\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]}") == 0,
           "%s", m);
    kiln_free(m);
    kiln_chat_parser_free(p);
}

/* A reply cut inside UTF-8 characters: every delta holds whole characters. */
static void test_utf8_pieces(void) {
    const char *text =
        "<think>d\xc3\xa9j\xc3\xa0 \xe2\x82\xac</think>na\xc3\xafve \xf0\x9f\x99\x82 <tool_call>{\"name\": \"f\", "
        "\"arguments\": {\"s\": \"\xe6\x97\xa5\xe6\x9c\xac\"}}</tool_call>";
    kiln_chat_parser_params pp = kiln_chat_parser_default_params();
    pp.format = "hermes";
    kiln_chat_parser *p;
    CHECK(kiln_chat_parser_new(&pp, &p) == KILN_OK);
    for (size_t i = 0; text[i]; i++) {
        CHECK(kiln_chat_parser_feed(p, text + i, 1) == KILN_OK);
        kiln_chat_delta d;
        while (kiln_chat_parser_next(p, &d)) {
            json_t *s = json_stringn(d.text, d.len); /* jansson accepts valid UTF-8 only */
            CHECKF(s || d.len == 0, "delta not whole UTF-8 after byte %zu: %.*s", i, (int)d.len, d.text);
            json_decref(s);
        }
    }
    CHECK(kiln_chat_parser_finish(p) == KILN_OK);
    char *m;
    CHECK(kiln_chat_parser_message(p, &m, NULL) == KILN_OK);
    CHECKF(strstr(m, "\"content\":\"na\xc3\xafve \xf0\x9f\x99\x82 \"") && strstr(m, "d\xc3\xa9j\xc3\xa0 \xe2\x82\xac"),
           "%s", m);
    kiln_free(m);
    kiln_chat_parser_free(p);
}

/* Families on inputs the vectors do not cover: parallel calls, content around calls, arguments as
 * a JSON string, typed XML values, malformed JSON inside a call, calls inside reasoning. */
static void test_family_cases(void) {
    static char m[8192];
    kiln_chat_parser_params pp = kiln_chat_parser_default_params();
    pp.id_seed = 3;
    struct {
        const char *format, *tools, *raw, *want[4];
    } cases[] = {
        {"hermes",
         NULL,
         "Checking both.\n<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": [1, "
         "2]}}</tool_call>\n<tool_call>{\"arguments\": "
         "{\"y\": \"z\"}, \"name\": \"b\"}</tool_call>",
         {"\"content\":\"Checking both.\\n\"", "\"name\":\"a\",\"arguments\":\"{\\\"x\\\":[1,2]}\"",
          "\"name\":\"b\",\"arguments\":\"{\\\"y\\\":\\\"z\\\"}\""}},
        {"hermes",
         NULL,
         "<tool_call>{\"name\": \"s\", \"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>",
         {"\"arguments\":\"{\\\"q\\\": 1}\""}},
        {"hermes",
         NULL,
         "<tool_call>{\"name\": \"bad\", \"arguments\": {\"a\": tr<ue}}</tool_call> and on",
         {"\"name\":\"bad\"", "and on"}},
        {"hermes",
         NULL,
         "<think>maybe <tool_call>{\"name\": \"no\", \"arguments\": {}}</tool_call></think>ok",
         {"\"reasoning_content\":\"maybe <tool_call>", "\"content\":\"ok\""}},
        {"qwen3-coder",
         "[{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": {\"properties\": {\"s\": "
         "{\"type\": \"string\"}, \"n\": {\"type\": \"number\"}}}}}]",
         "<tool_call>\n<function=w>\n<parameter=s>\n42\n</parameter>\n<parameter=n>\n4.5\n</"
         "parameter>\n<parameter=o>\n{\"k\": "
         "[true, null]}\n</parameter>\n</function>\n</tool_call>",
         {"\"arguments\":\"{\\\"s\\\":\\\"42\\\",\\\"n\\\":4.5,\\\"o\\\":{\\\"k\\\":[true,null]}}\""}},
        /* a parameter that is a $ref to a string (Pydantic's shape) is a string, whatever it looks like */
        {"qwen3-coder",
         "[{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": {\"properties\": {\"s\": "
         "{\"$ref\": \"#/$defs/Code\"}, \"o\": {\"$ref\": \"#/$defs/Obj\"}}, \"$defs\": {\"Code\": {\"type\": "
         "\"string\"}, \"Obj\": {\"type\": \"object\"}}}}}]",
         "<tool_call>\n<function=w>\n<parameter=s>\n42\n</parameter>\n<parameter=o>\n{\"k\": 1}\n</parameter>\n"
         "</function>\n</tool_call>",
         {"\"arguments\":\"{\\\"s\\\":\\\"42\\\",\\\"o\\\":{\\\"k\\\":1}}\""}},
        {"lfm2",
         NULL,
         "<|tool_call_start|>[f(a='it\\'s', b=[1, (2, 3)], c=None, d=True)]<|tool_call_end|>",
         {"\"arguments\":\"{\\\"a\\\":\\\"it's\\\",\\\"b\\\":[1,[2,3]],\\\"c\\\":null,\\\"d\\\":true}\""}},
        {"gemma4",
         NULL,
         "<|tool_call>call:f{a:<|\"|>x, y<|\"|>,b:{c:[1,2]},d:false}<tool_call|>",
         {"\"arguments\":\"{\\\"a\\\":\\\"x, y\\\",\\\"b\\\":{\\\"c\\\":[1,2]},\\\"d\\\":false}\""}},
        {"gpt-oss",
         NULL,
         "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary to=functions.f "
         "<|constrain|>json<|message|>{\"a\":1}<|call|>",
         {"\"reasoning_content\":\"think\"", "\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\""}},
        {"gpt-oss", NULL, "plain text, no harmony", {"\"content\":\"plain text, no harmony\""}},
        {"deepseek-v3.1",
         NULL,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁call▁begin｜>b<"
         "｜tool▁sep｜>{\"x\":"
         "2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>done",
         {"\"name\":\"a\",\"arguments\":\"{}\"", "\"name\":\"b\",\"arguments\":\"{\\\"x\\\":2}\"",
          "\"content\":\"done\""}},
        {"functionary-v3.2",
         NULL,
         "all\nLet me check.>>>get\n{\"q\": 1}>>>all\nDone.",
         {"\"content\":\"Let me check.Done.\"", "\"name\":\"get\""}},
        {"kimi-k2",
         NULL,
         "<think>plan<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_"
         "call_end|><|"
         "tool_calls_section_end|>",
         {"\"reasoning_content\":\"plan\"", "\"id\":\"functions.f:0\""}},
        {"command-r7b", NULL, "<|START_RESPONSE|>Hi<|END_RESPONSE|>", {"\"content\":\"Hi\""}},
        {"hermes",
         NULL,
         "no calls here: a < b and {\"name\": 1}",
         {"\"content\":\"no calls here: a < b and {\\\"name\\\": 1}\""}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pp.format = cases[i].format;
        pp.tools = cases[i].tools;
        CHECKF(parse_whole(&pp, cases[i].raw, m, sizeof m) == KILN_OK, "case %zu: %s", i, kiln_last_error());
        for (int k = 0; k < 4 && cases[i].want[k]; k++)
            CHECKF(strstr(m, cases[i].want[k]), "case %zu (%s): no %s in %s", i, cases[i].format, cases[i].want[k], m);
        /* and the same fed byte by byte */
        const char *raw = cases[i].raw;
        size_t raw_len = strlen(raw);
        char why[1024];
        kiln_chat_parser *p;
        CHECK(kiln_chat_parser_new(&pp, &p) == KILN_OK);
        static streamed st;
        memset(&st, 0, sizeof st);
        for (size_t k = 0; k < raw_len; k++) {
            CHECK(kiln_chat_parser_feed(p, raw + k, 1) == KILN_OK);
            take_deltas(p, &st);
        }
        CHECK(kiln_chat_parser_finish(p) == KILN_OK);
        take_deltas(p, &st);
        char *m2;
        CHECK(kiln_chat_parser_message(p, &m2, NULL) == KILN_OK);
        json_error_t e;
        json_t *msg = json_loads(m2, 0, &e);
        bool same = strcmp(m2, m) == 0, rebuilt = deltas_match(&st, msg, false, why, sizeof why);
        json_decref(msg);
        kiln_chat_parser_free(p);
        CHECKF(same, "case %zu byte by byte: %s vs %s", i, m2, m);
        kiln_free(m2);
        CHECKF(rebuilt, "case %zu: %s", i, why);
    }
}

/* The prompt's state: a thinking block the prompt opened (its end, white space aside, is an opening
 * marker), shown whole in content with reasoning "none"; the prompt is the caller's and may be gone
 * after kiln_chat_parser_new. */
static void test_prompt_state(void) {
    static char m[4096];
    kiln_chat_parser_params pp = kiln_chat_parser_default_params();
    pp.format = "hermes";
    char *prompt = strdup("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
    pp.prompt = prompt;
    CHECK(parse_whole(&pp, "Hmm.\n</think>\n\nHello", m, sizeof m) == KILN_OK);
    CHECKF(strcmp(m, "{\"role\":\"assistant\",\"content\":\"Hello\",\"reasoning_content\":\"Hmm.\"}") == 0, "%s", m);
    pp.reasoning = KILN_REASONING_NONE;
    kiln_chat_parser *p;
    CHECK(kiln_chat_parser_new(&pp, &p) == KILN_OK);
    memset(prompt, 'x', strlen(prompt)); /* the parser keeps what it needs */
    free(prompt);
    const char *r = "Hmm.\n</think>\n\nHello";
    CHECK(kiln_chat_parser_feed(p, r, strlen(r)) == KILN_OK && kiln_chat_parser_finish(p) == KILN_OK);
    char *j;
    CHECK(kiln_chat_parser_message(p, &j, NULL) == KILN_OK);
    CHECKF(strcmp(j, "{\"role\":\"assistant\",\"content\":\"<think>\\nHmm.\\n</think>\\n\\nHello\"}") == 0, "%s", j);
    kiln_free(j);
    kiln_chat_parser_free(p);
    /* a closed block in the prompt, or an opening marker earlier in it, leaves the reply in content */
    pp.reasoning = KILN_REASONING_AUTO;
    pp.prompt = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    CHECK(parse_whole(&pp, "Hmm.</think>Hello", m, sizeof m) == KILN_OK);
    CHECKF(strstr(m, "\"content\":\"Hmm.</think>Hello\""), "%s", m);
    pp.prompt = "user: what does <think> do?\nassistant:";
    CHECK(parse_whole(&pp, "It marks thinking.", m, sizeof m) == KILN_OK);
    CHECKF(strstr(m, "\"content\":\"It marks thinking.\"") && !strstr(m, "reasoning"), "%s", m);
    /* thinking_open without a prompt */
    pp.prompt = NULL;
    pp.thinking_open = true;
    CHECK(parse_whole(&pp, "Hmm.</think>Hello", m, sizeof m) == KILN_OK);
    CHECKF(strstr(m, "\"reasoning_content\":\"Hmm.\""), "%s", m);
}

/* Limits: a long streamed argument, too many calls. */
static void test_limits(void) {
    kiln_chat_parser_params pp = kiln_chat_parser_default_params();
    pp.format = "hermes";
    kiln_chat_parser *p;
    CHECK(kiln_chat_parser_new(&pp, &p) == KILN_OK);
    const char *head = "<tool_call>{\"name\": \"write\", \"arguments\": {\"text\": \"";
    CHECK(kiln_chat_parser_feed(p, head, strlen(head)) == KILN_OK);
    char chunk[1000];
    memset(chunk, 'x', sizeof chunk);
    size_t got = 0;
    kiln_chat_delta d;
    for (int i = 0; i < 2000; i++) { /* 2 MB in 1000-byte pieces: each piece streams out at once */
        CHECK(kiln_chat_parser_feed(p, chunk, sizeof chunk) == KILN_OK);
        size_t before = got;
        while (kiln_chat_parser_next(p, &d)) got += d.len;
        CHECK(got - before >= sizeof chunk || i == 0);
    }
    CHECK(kiln_chat_parser_feed(p, "\"}}</tool_call>", 15) == KILN_OK && kiln_chat_parser_finish(p) == KILN_OK);
    kiln_chat_parser_free(p);
    /* more calls than the limit: an error, not a crash */
    CHECK(kiln_chat_parser_new(&pp, &p) == KILN_OK);
    kiln_status st = KILN_OK;
    for (int i = 0; i < 1100 && st == KILN_OK; i++) {
        const char *c = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
        st = kiln_chat_parser_feed(p, c, strlen(c));
    }
    CHECK(st == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "tool calls"));
    CHECK(kiln_chat_parser_n_tool_calls(p) == 1024);
    kiln_chat_parser_free(p);
}

/* ---- fuzz --------------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull; /* FUZZSEED */
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* Runs text with pp whole and in random pieces: no crash, the deltas rebuild the message, and the
 * pieces give the same message as the whole. */
static bool fuzz_one(const kiln_chat_parser_params *pp, const char *text, size_t len, char *why, size_t cap) {
    char *whole = NULL;
    bool ok = true;
    for (int way = 0; way < 2 && ok; way++) {
        kiln_chat_parser *p;
        if (kiln_chat_parser_new(pp, &p) != KILN_OK) return snprintf(why, cap, "new"), false;
        static streamed st;
        memset(&st, 0, sizeof st);
        size_t off = 0;
        while (off < len) {
            size_t n = way == 0 ? len : 1 + rnd(6);
            if (n > len - off) n = len - off;
            kiln_chat_parser_feed(p, text + off, n);
            off += n;
            take_deltas(p, &st);
        }
        kiln_chat_parser_finish(p);
        take_deltas(p, &st);
        char *m = NULL;
        kiln_chat_parser_message(p, &m, NULL);
        json_error_t e;
        json_t *msg = m ? json_loads(m, JSON_ALLOW_NUL, &e) : NULL;
        if (!msg) snprintf(why, cap, "no message: %s", m ? e.text : kiln_last_error());
        ok = msg && deltas_match(&st, msg, false, why, cap);
        json_decref(msg);
        if (ok && way == 1 && strcmp(m, whole) != 0)
            ok = false, snprintf(why, cap, "pieces %.400s vs whole %.400s", m, whole);
        if (way == 0) whole = m;
        else kiln_free(m);
        kiln_chat_parser_free(p);
    }
    kiln_free(whole);
    return ok;
}

static void test_fuzz(void) {
    static const char *const atoms[] = {"<tool_call>",
                                        "</tool_call>",
                                        "<think>",
                                        "</think>",
                                        "{",
                                        "}",
                                        "[",
                                        "]",
                                        "\"name\"",
                                        "\"arguments\"",
                                        ":",
                                        ",",
                                        "\"f\"",
                                        " ",
                                        "\n",
                                        "x",
                                        "1",
                                        "\"",
                                        "\\",
                                        "<function=f>",
                                        "<parameter=a>",
                                        "</parameter>",
                                        "</function>",
                                        "[TOOL_CALLS]",
                                        "[ARGS]",
                                        "<|channel|>",
                                        "analysis",
                                        "<|message|>",
                                        "<|end|>",
                                        " to=functions.f",
                                        "<|start|>assistant",
                                        "<｜tool▁calls▁begin｜>",
                                        "<｜tool▁call▁begin｜>",
                                        "<｜tool▁sep｜>",
                                        ">>>",
                                        "all\n",
                                        "<|python_tag|>",
                                        ".call(",
                                        "(",
                                        ")",
                                        "=",
                                        "'",
                                        "<|tool_call>call:",
                                        "<|\"|>",
                                        "<tool_call|>",
                                        "```json\n",
                                        "é",
                                        "\xe2\x82"};
    const char *tools =
        "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"properties\": {\"a\": "
        "{\"type\": \"string\"}}}}}]";
    char buf[512], why[1024];
    const char *fname;
    int runs = 0;
    for (size_t f = 0; kiln_chat_format_get(f, &fname, NULL); f++) {
        for (int r = 0; r < 3; r++) {
            kiln_chat_parser_params pp = kiln_chat_parser_default_params();
            pp.format = fname;
            pp.tools = tools;
            pp.id_seed = 5;
            pp.reasoning = r == 1 ? KILN_REASONING_NONE : KILN_REASONING_AUTO;
            pp.thinking_open = r == 2;
            for (int t = 0; t < 60; t++) {
                size_t n = 0;
                int k = 1 + (int)rnd(24);
                for (int a = 0; a < k; a++) {
                    const char *at = atoms[rnd(sizeof atoms / sizeof atoms[0])];
                    size_t al = strlen(at);
                    if (n + al >= sizeof buf) break;
                    memcpy(buf + n, at, al);
                    n += al;
                }
                buf[n] = 0;
                runs++;
                if (!fuzz_one(&pp, buf, n, why, sizeof why)) {
                    FILE *df = fopen("/tmp/fuzzfail.bin", "wb");
                    fwrite(buf, 1, n, df);
                    fclose(df);
                }
                CHECKF(fuzz_one(&pp, buf, n, why, sizeof why), "%s (reasoning %d): %s\n  input: %s", fname, r, why,
                       buf);
            }
        }
    }
    /* the vectors with random bytes changed */
    json_t *vs = json_object_get(g_vectors, "vectors");
    for (size_t i = 0; i < json_array_size(vs); i++) {
        json_t *v = json_array_get(vs, i);
        const char *raw = json_string_value(json_object_get(v, "raw"));
        size_t n = strlen(raw);
        if (n == 0 || n >= sizeof buf) continue;
        const char *vf = kiln_format_of(json_string_value(json_object_get(v, "format")));
        kiln_chat_parser_params pp = kiln_chat_parser_default_params();
        pp.format = vf;
        pp.tools = tools;
        pp.id_seed = 5;
        for (int t = 0; t < 8; t++) {
            memcpy(buf, raw, n + 1);
            for (int k = 0; k < 3; k++) buf[rnd((uint32_t)n)] = "{}[]<>\"\\:, \nx|\0"[rnd(15)]; /* NUL too */
            runs++;
            CHECKF(fuzz_one(&pp, buf, n, why, sizeof why), "vector %zu mutated: %s\n  input: %.*s", i, why, (int)n,
                   buf);
        }
    }
    printf("  %d fuzz inputs\n", runs);
}

int main(void) {
    size_t len;
    char *text = kt_read_file(kt_data("tool-calls/vectors.json"), &len);
    json_error_t e;
    g_vectors = text ? json_loadb(text, len, 0, &e) : NULL;
    free(text);
    g_tools = json_loads(TOOLS_JSON, 0, &e);
    if (!g_tools) {
        printf("FAIL tools_json: %s at %d\n", e.text, e.column);
        return 1;
    }
    RUN(test_detection);
    RUN(test_vectors_whole);
    RUN(test_vectors_split);
    RUN(test_vectors_bytewise);
    RUN(test_api_errors);
    RUN(test_ids);
    RUN(test_delta_order);
    RUN(test_utf8_pieces);
    RUN(test_family_cases);
    RUN(test_prompt_state);
    RUN(test_limits);
    RUN(test_fuzz);
    json_decref(g_vectors);
    json_decref(g_tools);
    return kt_summary();
}
