/*
 * fuzz_server.h - a kiln server inside a harness (fuzz_http.c, fuzz_api.c): the real HTTP layer,
 * routes and engine of `kiln serve`, over stories260K, listening on a loopback port of its own, and
 * one exchange over a fresh connection per input.
 *
 * The server is started once per process with small bounds so that an input costs milliseconds: a
 * context of 128 tokens per row, two rows, a queue of 8, at most 2 new tokens per request (whatever
 * it asks: --max-tokens-limit), a body cap of 1 MiB and a read timeout of 2 s. It is never stopped
 * (the fuzzing process ends with it).
 */
#ifndef KILN_FUZZ_SERVER_H
#define KILN_FUZZ_SERVER_H

#include "fuzz.h"
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>

#define FZ_SRV_REPLY_MAX (1u << 20) /* response bytes kept per exchange (the rest is read and dropped) */
#define FZ_SRV_WAIT_MS   20000      /* an exchange taking longer than this is a hang: abort */

static srv fz_srv;

/* Starts the server (once); skips the harness when the model cannot be loaded. */
static void fz_srv_start(void) {
    if (fz_srv.daemon) return;
    signal(SIGPIPE, SIG_IGN);
    kiln_model *m = fz_model("models/stories260K/stories260K.gguf", false);
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 128;
    ep.n_threads = 1;
    ep.max_rows = 2;
    ep.max_queue = 8;
    ep.prompt_cache = 1u << 20;
    kiln_engine *engine = NULL;
    if (kiln_engine_new(m, &ep, &engine) != KILN_OK) {
        fprintf(stderr, "cannot start the engine: %s\n", kiln_last_error());
        abort();
    }
    srv *s = &fz_srv;
    s->cfg = (srv_config){
        .host = "127.0.0.1",
        .port = 0,
        .max_tokens = 2,
        .max_tokens_limit = 2,
        .max_body = 1u << 20,
        .max_queue = 8,
        .timeout_s = 2,
        .max_conns = 64,
        .max_conns_per_ip = 64,
        .sampling = kiln_model_sampler_params(m),
    };
    s->model = m;
    s->engine = engine;
    s->model_id = "stories260K";
    s->model_path = NULL;
    s->n_ctx = kiln_engine_n_ctx(engine);
    snprintf(s->fingerprint, sizeof s->fingerprint, "fp_%.12s", kiln_model_fingerprint(m));
    s->started = (long)time(NULL);
    atomic_init(&s->stopping, false);
    srv_stats_init(&s->stats);
    if (!srv_http_start(s)) abort();
}

static double fz_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* After a connect() that returned an error: whether the connection was made all the same. A signal
 * (libFuzzer's timer: SIGALRM) interrupts connect() with EINTR while the connection goes on, and
 * connect() is never restarted; then it is waited for. */
static bool fz_srv_connected(int fd) {
    if (errno != EINTR && errno != EINPROGRESS) return false;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int r;
    while ((r = poll(&p, 1, FZ_SRV_WAIT_MS)) < 0 && errno == EINTR) {}
    int err = 0;
    socklen_t len = sizeof err;
    return r > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
}

/* Sends req[n] on a new connection (then half-closes it when half_close), and reads the reply
 * until the server closes the connection, keeping its first FZ_SRV_REPLY_MAX bytes in reply
 * (NUL-terminated; *reply_len their count). Aborts when the exchange hangs. False when the
 * connection could not be made. */
static bool fz_srv_exchange(const void *req, size_t n, bool half_close, char *reply, size_t *reply_len) {
    fz_srv_start();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fz_srv.bound_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && !fz_srv_connected(fd)) {
        close(fd);
        return false;
    }
    const double end = fz_now_ms() + FZ_SRV_WAIT_MS;
    size_t off = 0;
    *reply_len = 0;
    reply[0] = 0;
    bool wr_open = true;
    if (n == 0 && half_close) shutdown(fd, SHUT_WR); /* nothing to send: the write side closes at once */
    while (true) {
        const int left = (int)(end - fz_now_ms());
        if (left <= 0) {
            fprintf(stderr, "fuzz: no end of the server's reply after %d ms\n", FZ_SRV_WAIT_MS);
            abort();
        }
        struct pollfd p = {.fd = fd, .events = POLLIN | (wr_open && off < n ? POLLOUT : 0)};
        if (poll(&p, 1, left) < 0 && errno != EINTR) break;
        if (p.revents & POLLOUT) {
            ssize_t w = send(fd, (const char *)req + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && errno != EAGAIN && errno != EINTR) wr_open = false; /* the server closed it */
            if (w > 0) off += (size_t)w;
            if (off == n && half_close) shutdown(fd, SHUT_WR);
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            char buf[16384];
            ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) break;
            if (r > 0) {
                size_t keep = FZ_SRV_REPLY_MAX - 1 - *reply_len;
                if (keep > (size_t)r) keep = (size_t)r;
                memcpy(reply + *reply_len, buf, keep);
                *reply_len += keep;
                reply[*reply_len] = 0;
            }
        }
    }
    close(fd);
    /* Let the server finish with the connection (its thread frees the request's state after the
     * close): an input that ends with as many frees as mallocs spares libFuzzer its leak check,
     * which runs the input again and scans the whole heap (most of a server harness's time). */
    for (int i = 0; i < 2000 && atomic_load(&fz_srv.conns) > 0; i++) nanosleep(&(struct timespec){0, 50000}, NULL);
    return true;
}

/* The request the api harnesses (fuzz_api.c, fuzz_api_faults.c) send: body[len] POSTed as JSON to
 * the route that b picks (OpenAI chat/completions and completions, Responses, Anthropic messages and
 * count_tokens, Ollama chat, generate and show, tokenize, detokenize, apply-template), on a connection
 * that closes after it. malloc'd; *n its length. */
static inline char *fz_api_request(uint8_t b, const uint8_t *body, size_t len, size_t *n) {
    static const char *const routes[] = {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/api/chat",
        "/api/generate",
        "/api/show",
        "/tokenize",
        "/detokenize",
        "/apply-template",
    };
    const size_t head_cap = 256;
    char *msg = malloc(head_cap + len);
    if (!msg) abort();
    const int h = snprintf(msg, head_cap,
                           "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Connection: close\r\nContent-Length: %zu\r\n\r\n",
                           routes[b % (sizeof routes / sizeof routes[0])], len);
    memcpy(msg + h, body, len);
    *n = (size_t)h + len;
    return msg;
}

/* The status code of an HTTP reply, or 0 when it has no status line. */
static int fz_srv_status(const char *reply) {
    int code = 0;
    if (sscanf(reply, "HTTP/1.%*d %d", &code) != 1) return 0;
    return code;
}

/* A reply is sound: a 500 means the server failed on a client's input (libmicrohttpd's own 501 and
 * 505 for a method or HTTP version it does not know, and 503 when busy, are answers to the client),
 * so the harness aborts with the reply. With KILN_FUZZ_VERBOSE set, every exchange is shown. */
static inline void fz_srv_check(const char *req, size_t n, const char *reply) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("KILN_FUZZ_VERBOSE") != NULL;
    if (verbose) /* the request line and the reply's head, to look at what the seeds reach */
        fprintf(stderr, "%.*s -> %.300s\n\n", (int)strcspn(req, "\r\n"), req, reply);
    if (fz_srv_status(reply) == 500) {
        fprintf(stderr, "fuzz: the server answered 500 to a request of %zu bytes:\n%.2000s\n", n, reply);
        abort();
    }
}

#endif
