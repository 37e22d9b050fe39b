/*
 * fuzz_api.c - libFuzzer harness of the JSON request parsers of every endpoint.
 *
 * Feeds: the first byte picks the route (OpenAI /v1/chat/completions and /v1/completions, the
 * Responses API /v1/responses, Anthropic /v1/messages and /v1/messages/count_tokens, Ollama
 * /api/chat, /api/generate and /api/show, and /tokenize, /detokenize, /apply-template); the rest is
 * the request body, sent in a well-formed POST (Content-Type: application/json, Connection: close)
 * to a server running inside the harness (fuzz_server.h: the real routes and engine over
 * stories260K with a context of 128 tokens, every request capped at 2 new tokens by the server's
 * max_tokens_limit). The body goes as it is: messages, tools, tool_choice, response_format, grammar,
 * stop, logit_bias, stream, token limits, ... reach validation, template rendering, constraint
 * compilation and the engine unchanged. Fails on a crash, a sanitizer report, a hang (20 s) or a 500.
 * Seeds: typical requests of each API (tests/fuzz/corpus/api/).
 */
#include "fuzz_server.h"

static char reply[FZ_SRV_REPLY_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > (256u << 10)) return 0;
    size_t n = 0, got = 0;
    char *msg = fz_api_request(data[0], data + 1, size - 1, &n);
    if (fz_srv_exchange(msg, n, false, reply, &got)) fz_srv_check(msg, n, reply);
    free(msg);
    return 0;
}
