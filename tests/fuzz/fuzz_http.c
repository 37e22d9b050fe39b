/*
 * fuzz_http.c - libFuzzer harness of the HTTP layer of `kiln serve`: raw bytes on a socket.
 *
 * Feeds: the input, as is, to a server running inside the harness (fuzz_server.h: the real
 * libmicrohttpd daemon, kiln's request handling of http.c and guard.c, every route, and the engine
 * over stories260K), on a new loopback connection that is half-closed once the bytes are sent; the
 * reply is read until the server closes the connection. Request lines, methods, paths, headers
 * (Host, Origin, Content-Type, Content-Length, Transfer-Encoding: chunked, Authorization), several
 * pipelined requests and bodies all come from the input. Fails on a crash, a sanitizer report in
 * any server thread, a reply that does not end within 20 s, or a 500. Seeds: one
 * request of each route, a chunked body, pipelined requests, a preflight (tests/fuzz/corpus/http/).
 */
#include "fuzz_server.h"

static char reply[FZ_SRV_REPLY_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (256u << 10)) return 0;
    size_t n = 0;
    if (fz_srv_exchange(data, size, true, reply, &n)) fz_srv_check((const char *)data, size, reply);
    return 0;
}
