/*
 * fuzz_jinja.c - libFuzzer harness of the Jinja engine (src/text/jinja: lexer, parser, evaluator).
 *
 * Feeds: the input up to its first NUL byte as a template's source; what follows the NUL, when it
 * parses as a JSON object, as the render context, else a fixed chat context (system, user,
 * assistant with a tool call, tool messages; two tools; bos/eos tokens, add_generation_prompt,
 * date strings), the shape the server renders chat templates with. A template that parses is
 * rendered; errors must come back as statuses, within the engine's step, depth, output and
 * memory limits. Seeds: small templates covering the statements, filters, tests and methods
 * (tests/fuzz/corpus/jinja/); the smoke run adds the real chat templates of the test data.
 */
#include "fuzz.h"

#include "text/jinja/jinja.h"

static json_t *chat_ctx;

static json_t *fixed_context(void) {
    static const char *src =
        "{\"messages\": ["
        "{\"role\": \"system\", \"content\": \"You are helpful.\"},"
        "{\"role\": \"user\", \"content\": \"Hi <b>there</b>\"},"
        "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\","
        "  \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}}]},"
        "{\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"{\\\"t\\\": 21.5}\"},"
        "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"and \\u00e9t\\u00e9?\"}]}],"
        "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\","
        "  \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}},"
        "  \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"noop\"}}],"
        "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true,"
        "\"date_string\": \"26 Jul 2024\", \"enable_thinking\": false, \"n\": 3, \"f\": 2.5}";
    json_error_t err;
    return json_loads(src, 0, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!chat_ctx && !(chat_ctx = fixed_context())) abort();
    fz_in in = {data, size};
    const uint8_t *src, *ctx_src;
    size_t src_len, ctx_len;
    fz_until_nul(&in, &src, &src_len);
    ctx_src = in.p;
    ctx_len = in.n;
    kn_jtmpl *t = NULL;
    if (kn_jinja_parse((const char *)src, src_len, &t) != KILN_OK) return 0;
    json_t *ctx = NULL;
    if (ctx_len) {
        json_error_t err;
        ctx = json_loadb((const char *)ctx_src, ctx_len, JSON_DECODE_ANY, &err);
        if (ctx && !json_is_object(ctx)) {
            json_decref(ctx);
            ctx = NULL;
        }
    }
    char *out = NULL;
    size_t n = 0;
    if (kn_jinja_render(t, ctx ? ctx : chat_ctx, &out, &n) == KILN_OK && strlen(out) > n) abort();
    free(out);
    json_decref(ctx);
    kn_jinja_free(t);
    return 0;
}
