/*
 * http.c - the HTTP layer of `kiln serve` on libmicrohttpd (see server.h).
 *
 * Threading: one thread per connection, so a handler may block (waiting for its generation, or
 * feeding a stream) while /health, /v1/models and /metrics answer at once on other connections.
 *
 * Hostile or broken clients must not take the server down, so every connection is bounded:
 *   - cfg.timeout_s: a connection waiting that long on its client (for the bytes of a request, for
 *     the next request, or for the client to take response bytes) is closed. Time the server itself
 *     spends (a generation the handler waits for, a stream waiting for its next token) does not
 *     count: the clock is stopped while a handler runs and restarted when a stream hands over bytes.
 *   - cfg.max_conns_per_ip connections per client address and cfg.max_conns in all; a connection
 *     beyond either is closed as soon as it is accepted.
 *   - A request body is collected into a buffer grown up to cfg.max_body. A declared length over it
 *     gets 413 at once, without reading the body; the connection then closes (after a lingering
 *     read, so that the client gets to read the answer); a chunked body that grows past the limit
 *     is read and dropped up to as much again, then gets 413, and one longer still is cut off by
 *     closing the connection.
 * While a handler waits on a job it polls the connection's socket for a hang-up, so a client that
 * goes away cancels its generation within ~50 ms; the connection then closes (a handler that queued
 * no response ends it: libmicrohttpd would otherwise call again and run the request again).
 *
 * Isolated (isolate.h): the engine's child process runs libmicrohttpd without a listening socket;
 * a receiver thread takes each connection the supervisor hands over (MHD_add_connection), and the
 * callbacks below report what each connection does (busy, responding, streaming, idle, closed) so
 * that the supervisor can answer for the child should it die.
 */
#include "isolate.h"
#include "pool.h"
#include "server.h"

#include <microhttpd.h>

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Connections libmicrohttpd may hold beyond cfg.max_conns: kiln refuses those itself (at once),
 * so libmicrohttpd's own limit, which leaves new connections waiting in the backlog instead, is
 * never reached. */
#define MHD_LIMIT_SLACK  16u
#define LISTEN_BACKLOG   256u        /* connections the kernel holds for accept() */
#define LINGER_MAX_BYTES (64u << 20) /* a lingering close reads and drops at most this much */
#define LINGER_MAX_MS    10000       /* ... for at most this long */

/* Per-request state, kept by libmicrohttpd between access-handler calls. */
typedef struct conn_ctx {
    char *body;
    size_t len, cap;
    bool too_large;
    bool no_memory;      /* the body could not be held: answered 503 (its bytes are dropped like too_large's) */
    bool answered_early; /* answered before its body was read: linger before closing */
    size_t dropped;      /* bytes read and dropped after the body passed the limit */
    double t_start;
} conn_ctx;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Appends an upload chunk, growing the buffer up to the cap; marks the request too large (and
 * drops the body) when the cap would be passed. False when the body has grown past twice the cap:
 * the connection is then closed instead of read on. */
static bool collect(conn_ctx *c, const char *data, size_t n, size_t max) {
    if (c->too_large) {
        c->dropped += n;
        return c->dropped <= max;
    }
    if (n > max - c->len) {
        c->too_large = true;
        c->dropped = c->len + n - max;
        free(c->body);
        c->body = NULL;
        c->len = c->cap = 0;
        return c->dropped <= max;
    }
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 4096;
        while (cap < c->len + n + 1) cap *= 2;
        char *b = realloc(c->body, cap);
        if (!b) { /* read on and dropped like an oversized body, answered as the server's fault */
            c->too_large = c->no_memory = true;
            c->dropped = c->len + n;
            free(c->body);
            c->body = NULL;
            c->len = c->cap = 0;
            return true;
        }
        c->body = b;
        c->cap = cap;
    }
    memcpy(c->body + c->len, data, n);
    c->len += n;
    c->body[c->len] = 0;
    return true;
}

/* Constant-time comparison of the key a request gives against the server's: the Authorization
 * header "Bearer KEY" (OpenAI's clients), else the x-api-key header "KEY" (Anthropic's). */
static bool authorized(struct MHD_Connection *conn, const char *key) {
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h && strncmp(h, "Bearer ", 7) == 0) h += 7;
    else if (!(h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key"))) return false;
    size_t a = strlen(h), b = strlen(key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < b; i++)
        diff |= (unsigned)(unsigned char)key[i] ^ (unsigned)(unsigned char)(i < a ? h[i] : 0);
    return diff == 0;
}

/* The request's declared body length is over the cap (a chunked body declares none). */
static bool declared_too_large(struct MHD_Connection *conn, size_t max) {
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!h) return false;
    errno = 0;
    char *end;
    const unsigned long long n = strtoull(h, &end, 10);
    return errno == ERANGE || n > max; /* libmicrohttpd has checked the syntax */
}

static void send_too_large(srv_req *r) {
    srv_send_error(r, 413, "invalid_request_error", NULL, "request_too_large",
                   "the request body is larger than the limit of %zu bytes", r->server->cfg.max_body);
}

/* A request the server has no memory to hold (its state or its body): 503, which clients retry. */
static void send_no_memory(srv_req *r) {
    srv_send_error(r, 503, "server_error", NULL, NULL, "out of memory: the server cannot hold the request now");
}

/* jansson's allocations (srv_json_alloc_install: srv_http_start, and an isolated server's
 * supervisor), counted when they fail on this thread: during an access handler's call (on_request
 * resets the count), while the engine's thread makes a job's events (job.c), or while the
 * supervisor reads a request's model (pool.c). Callers cannot always tell by jansson's results: its parser
 * reports an allocation that failed as a syntax error, or not at all (a string comes out without
 * the bytes it could not save), and a value added to an array or object that could not be made is
 * left out. A request that met one is answered 503 (srv_send_response), whatever its route made of
 * it; a job that met one ends as failed (srv_job.lost).
 *
 * jansson itself should not see the failure at all: its lexer ignores an append to a string's text
 * that failed, and a string whose closing quote was not saved is then copied past the end of its
 * buffer (jansson 2.14: a heap overflow, seen when test_faults_alloc let jansson's allocations
 * fail). So a failed allocation lets go of JSON_RESERVE bytes of address space kept for the purpose
 * (a mapping never touched, outside the heap) and is tried once more (still counted); the reserve
 * is mapped again when the next call for a request begins (srv_json_alloc_begin). */
#define JSON_RESERVE (1u << 20)
static _Thread_local unsigned json_alloc_failures;
static void *json_reserve;

static void *json_alloc(size_t n) {
    void *p = malloc(n);
    if (p) return p;
    json_alloc_failures++;
    void *r = __atomic_exchange_n(&json_reserve, NULL, __ATOMIC_ACQ_REL);
    if (r) munmap(r, JSON_RESERVE);
    return malloc(n);
}

/* Maps the reserve again after json_alloc let go of it (or before the first request). */
static void json_reserve_refill(void) {
    if (__atomic_load_n(&json_reserve, __ATOMIC_ACQUIRE)) return;
    void *r = mmap(NULL, JSON_RESERVE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *none = NULL;
    if (r == MAP_FAILED) return;
    if (!__atomic_compare_exchange_n(&json_reserve, &none, r, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        munmap(r, JSON_RESERVE);
}

unsigned srv_json_alloc_failures(void) { return json_alloc_failures; }

void srv_json_alloc_install(void) {
    json_set_alloc_funcs(json_alloc, free);
    json_reserve_refill();
}

void srv_json_alloc_begin(void) {
    json_alloc_failures = 0;
    json_reserve_refill();
}

/* The state of every connection whose own could not be allocated: its request was answered at once
 * (send_no_memory) and what it sends is dropped. Shared and never written. */
static conn_ctx no_memory_ctx = {.answered_early = true};

/* ---- the child's side of isolation (isolate.h) ------------------------------------------------- */

static int iso_ctl = -1;  /* the control socket to the supervisor; -1: a single process */
static bool iso_crash;    /* --debug-crash */
static uint32_t *iso_ids; /* [iso_n_ids] the supervisor's id of each connection, by socket */
static size_t iso_n_ids;
static pthread_mutex_t iso_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t iso_thread;
static atomic_bool iso_quit;
_Thread_local unsigned srv_iso_abort_at;
_Thread_local bool srv_iso_hang;
static pthread_t iso_alive_thread; /* the watchdog's heartbeat (iso_alive) */
static bool iso_alive_started;
static _Thread_local bool iso_queueing_stream; /* srv_send_response queues a stream (send_stream) */
static _Thread_local bool queued;              /* the request being served has queued its response */

static unsigned iso_restarts;

void srv_iso_set_ctl(int ctl, unsigned restarts) {
    iso_ctl = ctl;
    iso_restarts = restarts;
    if (ctl >= 0) fcntl(ctl, F_SETFD, FD_CLOEXEC);
}

void srv_iso_debug_crash(bool on) { iso_crash = on; }

bool srv_iso_child(unsigned *restarts) {
    *restarts = iso_restarts;
    return iso_ctl >= 0;
}

static void iso_send(uint32_t type, uint32_t id, uint32_t api, uint32_t flags) {
    if (iso_ctl < 0 || !id) return;
    srv_iso_msg m = {.type = type, .conn = id - 1, .api = api, .flags = flags};
    send(iso_ctl, &m, sizeof m, MSG_NOSIGNAL);
}

/* The supervisor's id of a connection, plus one (0: none, a single process). */
static uint32_t iso_id(struct MHD_Connection *conn) {
    if (iso_ctl < 0) return 0;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (uint32_t)(uintptr_t)ci->socket_context : 0;
}

/* Reports a request whose headers are in, with the bytes its connection has written so far. */
static void iso_busy(struct MHD_Connection *conn, const srv_req *r, const char *version) {
    const uint32_t id = iso_id(conn);
    if (!id) return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    srv_iso_msg m = {.type = SRV_ISO_BUSY,
                     .conn = id - 1,
                     .api = (uint32_t)r->api,
                     .flags = (strcmp(version, MHD_HTTP_VERSION_1_1) == 0 ? SRV_ISO_HTTP11 : 0) |
                              (strncmp(r->url, "/v1/responses", 13) == 0 ? SRV_ISO_RESPONSES : 0),
                     .sent = ci ? srv_iso_sent(ci->connect_fd) : 0};
    send(iso_ctl, &m, sizeof m, MSG_NOSIGNAL);
}

/* Takes the connections the supervisor hands over until iso_quit. */
static void *iso_receive(void *arg) {
    srv *s = arg;
    while (!atomic_load(&iso_quit)) {
        struct pollfd p = {.fd = iso_ctl, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        srv_iso_msg m;
        struct iovec iov = {.iov_base = &m, .iov_len = sizeof m};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } u;
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
        const ssize_t n = recvmsg(iso_ctl, &mh, MSG_CMSG_CLOEXEC);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break; /* the supervisor is gone */
        const struct cmsghdr *cm = n == (ssize_t)sizeof m ? CMSG_FIRSTHDR(&mh) : NULL;
        if (!cm || cm->cmsg_type != SCM_RIGHTS || m.type != SRV_ISO_CONN) continue;
        int fd;
        memcpy(&fd, CMSG_DATA(cm), sizeof fd);
        pthread_mutex_lock(&iso_mu);
        const bool fits = fd >= 0 && (size_t)fd < iso_n_ids;
        if (fits) iso_ids[fd] = m.conn + 1;
        pthread_mutex_unlock(&iso_mu);
        if (!fits || atomic_load(&s->stopping)) {
            if (fd >= 0) close(fd);
            iso_send(SRV_ISO_CLOSED, m.conn + 1, 0, 0);
            continue;
        }
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        if (getpeername(fd, (struct sockaddr *)&sa, &len) != 0) len = 0;
        if (MHD_add_connection(s->daemon, fd, len ? (struct sockaddr *)&sa : NULL, len) != MHD_YES)
            iso_send(SRV_ISO_CLOSED, m.conn + 1, 0, 0); /* libmicrohttpd closed it */
    }
    return NULL;
}

#define TRIM_IDLE_LOOKS 4 /* looks of the heartbeat (1 s) the engine stays idle before the heap is trimmed */

/* The watchdog's heartbeat (isolate.h): every SRV_ISO_ALIVE_MS, SRV_ISO_ALIVE when the engine is
 * idle or ran a step since the last look. kiln_engine_get_stats takes the engine's lock, so an
 * engine deadlocked under it silences this thread too. Once the engine has been idle for
 * TRIM_IDLE_LOOKS looks after running steps, the heap's free pages go back to the system
 * (malloc_trim: the connection threads' arenas keep what they freed otherwise; docs/reliability.md). */
static void *iso_alive(void *arg) {
    srv *s = arg;
    uint64_t last = UINT64_MAX;
    int idle = 0;
    while (!atomic_load(&iso_quit)) {
        bool alive = true;
        if (s->engine) {
            kiln_engine_stats es;
            kiln_engine_get_stats(s->engine, &es);
            alive = (es.active == 0 && es.queued == 0) || es.steps != last;
            idle = es.active == 0 && es.queued == 0 && es.steps == last ? idle + 1 : 0;
            if (idle == TRIM_IDLE_LOOKS) malloc_trim(0);
            last = es.steps;
        }
        if (alive) iso_send(SRV_ISO_ALIVE, 1, 0, 0);
        usleep(SRV_ISO_ALIVE_MS * 1000);
    }
    return NULL;
}

/* --debug-crash: the header X-Kiln-Debug-Crash: N aborts the process now (0) or at the request's
 * N-th token event (srv_job_submit reads srv_iso_abort_at on this thread); X-Kiln-Debug-Hang: N
 * makes the engine's thread hang at the N-th token event. */
static void debug_crash(srv_req *r) {
    srv_iso_abort_at = 0;
    srv_iso_hang = false;
    if (!iso_crash) return;
    const char *hang = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Kiln-Debug-Hang");
    if (hang && strtoul(hang, NULL, 10) > 0) {
        fprintf(stderr, "kiln serve: --debug-crash: the engine will hang during the generation\n");
        srv_iso_abort_at = (unsigned)strtoul(hang, NULL, 10);
        srv_iso_hang = true;
        return;
    }
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Kiln-Debug-Crash");
    if (!h) return;
    const unsigned long n = strtoul(h, NULL, 10);
    fprintf(stderr, "kiln serve: --debug-crash: aborting %s\n", n ? "during the generation" : "now");
    if (n == 0) abort();
    srv_iso_abort_at = (unsigned)n;
}

/* One line per request on stderr (-v); the URL as text that cannot disturb a terminal or log. */
static void log_request(srv_req *r, double t_start) {
    if (!r->server->cfg.verbose) return;
    char url[512];
    srv_text_sanitize(url, sizeof url, r->url, strlen(r->url), false);
    fprintf(stderr, "%s %s %u %.1f ms%s%s\n", r->method, url, r->status, now_ms() - t_start,
            r->approx[0] ? "; schema enforced approximately: " : "", r->approx);
}

/* Serves a request whose body has been read: the guards of guard.c, the size limit, the chat
 * page, the API key, then the route. */
static void serve(srv_req *r, const conn_ctx *c) {
    srv *s = r->server;
    if (!srv_guard(r)) {
        /* refused, or a preflight answered */
    } else if (c->no_memory) {
        send_no_memory(r);
    } else if (c->too_large) {
        send_too_large(r);
    } else if (srv_web_serve(r)) {
        /* the chat page and its files: public, the page itself asks for the API key */
    } else if (s->cfg.api_key && strcmp(r->url, "/health") != 0 && strcmp(r->url, "/v1/health") != 0 &&
               !authorized(r->conn, s->cfg.api_key)) {
        srv_send_error(r, 401, "invalid_request_error", NULL, "invalid_api_key",
                       "missing or incorrect API key: send the header 'Authorization: Bearer KEY' (or "
                       "'x-api-key: KEY')");
    } else {
        debug_crash(r);
        srv_route(r);
        srv_iso_abort_at = 0;
        srv_iso_hang = false;
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv *s = cls;
    conn_ctx *c = *con_cls;
    srv_json_alloc_begin(); /* this call's failures; the reserve back if one used it */
    srv_req r = {
        .server = s, .conn = conn, .method = method, .url = url, .api = srv_route_api(url), .body = "", .body_len = 0};
    if (c == &no_memory_ctx) { /* answered already: the body is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (!c) { /* the headers are in, the body (if any) is not */
        if (!(c = calloc(1, sizeof *c))) {
            queued = false;
            send_no_memory(&r);
            *con_cls = &no_memory_ctx;
            return queued ? MHD_YES : MHD_NO; /* nothing could be queued either: the connection closes */
        }
        c->t_start = now_ms();
        *con_cls = c;
        srv_stats_request(&s->stats);
        iso_busy(conn, &r, version);
        if (declared_too_large(conn, s->cfg.max_body)) { /* not worth reading: answer and close */
            send_too_large(&r);
            c->answered_early = true;
            log_request(&r, c->t_start);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        const bool go_on = collect(c, upload, *upload_size, s->cfg.max_body);
        *upload_size = 0;
        return go_on ? MHD_YES : MHD_NO;
    }
    r.body = c->body ? c->body : "";
    r.body_len = c->len;
    /* What the handler waits for (a generation) is the server's time, not the client's. */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    queued = false;
    serve(&r, c);
    if (!queued && json_alloc_failures) send_no_memory(&r); /* the route gave up without an answer */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, s->cfg.timeout_s); /* restarts the clock */
    log_request(&r, c->t_start);
    /* No response (the client went away while its request ran, or one could not be made): the
     * connection closes. Returning MHD_YES would make libmicrohttpd call again for the same
     * request, which would run it again. */
    return queued || c->answered_early ? MHD_YES : MHD_NO;
}

/* A lingering close, after a response sent before the request's body was read: the client may
 * still be sending that body, and closing the socket with unread bytes makes the kernel answer
 * with a reset, which can destroy the response before the client has read it. So the end of the
 * response is signalled (shutdown) and what the client still sends is read and dropped until it
 * stops, for at most LINGER_MAX_BYTES and LINGER_MAX_MS (and the read timeout between reads). Runs
 * on the connection's thread, which ends right after. */
static void linger(struct MHD_Connection *conn, unsigned timeout_s) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return;
    const int fd = ci->connect_fd;
    const double end = now_ms() + LINGER_MAX_MS;
    const int idle_ms = timeout_s && timeout_s * 1000u < LINGER_MAX_MS ? (int)(timeout_s * 1000u) : LINGER_MAX_MS;
    size_t total = 0;
    char buf[16384];
    shutdown(fd, SHUT_WR);
    while (total <= LINGER_MAX_BYTES && now_ms() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, idle_ms) <= 0) return;
        const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;
        if (n > 0) total += (size_t)n;
    }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode t) {
    const srv *s = cls;
    conn_ctx *c = *con_cls;
    if (!c) return;
    if (c->answered_early && t == MHD_REQUEST_TERMINATED_COMPLETED_OK) linger(conn, s->cfg.timeout_s);
    iso_send(SRV_ISO_IDLE, iso_id(conn), 0, 0);
    if (c != &no_memory_ctx) {
        free(c->body);
        free(c);
    }
    *con_cls = NULL;
}

/* Counts open connections (libmicrohttpd calls this on its listening thread, where on_accept
 * runs too). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    srv *s = cls;
    if (iso_ctl >= 0 && code == MHD_CONNECTION_NOTIFY_STARTED) { /* its id, kept with the connection */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        pthread_mutex_lock(&iso_mu);
        if (ci && ci->connect_fd >= 0 && (size_t)ci->connect_fd < iso_n_ids)
            *socket_context = (void *)(uintptr_t)iso_ids[ci->connect_fd];
        pthread_mutex_unlock(&iso_mu);
    } else if (iso_ctl >= 0) {
        iso_send(SRV_ISO_CLOSED, (uint32_t)(uintptr_t)*socket_context, 0, 0);
    }
    if (code == MHD_CONNECTION_NOTIFY_STARTED) atomic_fetch_add(&s->conns, 1);
    else atomic_fetch_sub(&s->conns, 1);
}

/* A new connection beyond cfg.max_conns is closed at once (a client gets a reset at once instead
 * of waiting in the backlog for a slot that hostile connections may hold). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    srv *s = cls;
    return atomic_load(&s->conns) < s->cfg.max_conns ? MHD_YES : MHD_NO;
}

/* The isolated child's daemon: no listening socket, connections from the supervisor. */
static bool start_isolated(srv *s, unsigned flags) {
    struct rlimit rl;
    iso_n_ids = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (1u << 20) ? (size_t)rl.rlim_cur : (1u << 20);
    if (!(iso_ids = calloc(iso_n_ids, sizeof *iso_ids))) {
        fprintf(stderr, "kiln serve: out of memory\n");
        return false;
    }
    atomic_init(&s->conns, 0);
    s->daemon =
        MHD_start_daemon(flags | MHD_USE_NO_LISTEN_SOCKET, 0, on_accept, s, on_request, s, MHD_OPTION_NOTIFY_COMPLETED,
                         on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_CONNECTION_TIMEOUT,
                         s->cfg.timeout_s, MHD_OPTION_CONNECTION_LIMIT, s->cfg.max_conns + MHD_LIMIT_SLACK,
                         MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->cfg.max_conns_per_ip, MHD_OPTION_END);
    if (!s->daemon) {
        fprintf(stderr, "kiln serve: cannot start the HTTP server\n");
        return false;
    }
    atomic_init(&iso_quit, false);
    if (pthread_create(&iso_thread, NULL, iso_receive, s) != 0) {
        MHD_stop_daemon(s->daemon);
        s->daemon = NULL;
        fprintf(stderr, "kiln serve: cannot start a thread\n");
        return false;
    }
    iso_alive_started = pthread_create(&iso_alive_thread, NULL, iso_alive, s) == 0;
    s->bound_port = s->cfg.port;
    iso_send(SRV_ISO_READY, 1, 0, 0);
    return true;
}

/* glibc arenas the connection threads may make; a thread that finds none free shares one. One
 * thread per connection would otherwise spread the heap over up to 8 arenas per core, each
 * keeping the high-water mark of what its threads freed (docs/reliability.md has the runs). */
#define SRV_ARENA_MAX 2

bool srv_http_start(srv *s) {
    mallopt(M_ARENA_MAX, SRV_ARENA_MAX); /* before the connection threads; the engine's keep theirs */
    srv_json_alloc_install();
    /* poll, not select: connection sockets may be numbered past FD_SETSIZE */
    if (iso_ctl >= 0)
        return start_isolated(s, MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                                     MHD_USE_POLL);
    char port[16];
    snprintf(port, sizeof port, "%d", s->cfg.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(s->cfg.host, port, &hints, &ai);
    if (rc || !ai) {
        fprintf(stderr, "kiln serve: cannot resolve host '%s': %s\n", s->cfg.host, gai_strerror(rc));
        return false;
    }
    atomic_init(&s->conns, 0);
    /* poll, not select: connection sockets may be numbered past FD_SETSIZE */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->daemon =
        MHD_start_daemon(flags, 0, on_accept, s, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                         MHD_OPTION_CONNECTION_TIMEOUT, s->cfg.timeout_s, MHD_OPTION_CONNECTION_LIMIT,
                         s->cfg.max_conns + MHD_LIMIT_SLACK, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                         s->cfg.max_conns_per_ip, MHD_OPTION_LISTEN_BACKLOG_SIZE, LISTEN_BACKLOG, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        fprintf(stderr, "kiln serve: cannot listen on %s:%d (address in use or not available)\n", s->cfg.host,
                s->cfg.port);
        return false;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->bound_port = di ? di->port : s->cfg.port;
    return true;
}

void srv_http_quiesce(srv *s) {
    if (!s->daemon || iso_ctl >= 0) return; /* isolated: the supervisor stops handing connections over */
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void srv_http_stop(srv *s) {
    if (iso_ctl >= 0 && iso_ids) {
        atomic_store(&iso_quit, true);
        pthread_join(iso_thread, NULL);
        if (iso_alive_started) pthread_join(iso_alive_thread, NULL);
        iso_alive_started = false;
        free(iso_ids);
        iso_ids = NULL;
    }
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}

/* ---- responses --------------------------------------------------------------------------------- */

void srv_send_response(srv_req *r, unsigned status, struct MHD_Response *resp) {
    if (json_alloc_failures && status != 500 && status != 503) { /* what was made may lack a part */
        if (resp) MHD_destroy_response(resp);
        send_no_memory(r);
        return;
    }
    if (!resp) {
        r->status = 500;
        srv_stats_error(&r->server->stats, 500);
        return;
    }
    srv_cors_headers(r, resp);
    if (r->approx[0]) MHD_add_response_header(resp, SRV_APPROX_HEADER, r->approx);
    if (srv_pool_close_connections()) /* each request is routed by the supervisor (pool.c) */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (!iso_queueing_stream) iso_send(SRV_ISO_RESP, iso_id(r->conn), 0, 0);
    if (MHD_queue_response(r->conn, status, resp) == MHD_YES) queued = true;
    MHD_destroy_response(resp);
    r->status = status;
    if (status >= 400) srv_stats_error(&r->server->stats, status);
}

static void send_typed(srv_req *r, unsigned status, struct MHD_Response *resp, const char *content_type) {
    if (resp) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    srv_send_response(r, status, resp);
}

void srv_send_text(srv_req *r, unsigned status, const char *content_type, const char *text, size_t len) {
    send_typed(r, status, MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY), content_type);
}

void srv_send_json(srv_req *r, unsigned status, json_t *body) {
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s) { /* an allocation failed, or a value was not valid UTF-8: a fault of the server */
        static const char fault[] = "{\"error\":{\"message\":\"internal error: the response could not be encoded\","
                                    "\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        srv_send_text(r, 500, "application/json", fault, sizeof fault - 1);
        return;
    }
    send_typed(r, status, MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE), "application/json");
}

/* Longest error message, in bytes of UTF-8; longer ones are cut and end with "...". */
#define ERROR_MESSAGE_MAX 1024

void srv_send_error(srv_req *r, unsigned status, const char *type, const char *param, const char *code, const char *fmt,
                    ...) {
    /* Formatted in a buffer larger than the message may be, so that a cut by vsnprintf (perhaps
     * inside a character) is never reached by the sanitized, shorter message. */
    char raw[4 * ERROR_MESSAGE_MAX], msg[ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    srv_text_sanitize(msg, sizeof msg, raw, (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1, true);
    if (r->api == SRV_API_OLLAMA) {
        srv_send_json(r, status, json_pack("{s:s}", "error", msg));
        return;
    }
    if (r->api == SRV_API_ANTHROPIC) {
        srv_send_json(r, status, srv_anthropic_error(status, msg));
        return;
    }
    json_t *err = json_pack("{s:s, s:s, s:s?, s:s?}", "message", msg, "type", type, "param", param, "code", code);
    srv_send_json(r, status, err ? json_pack("{s:o}", "error", err) : NULL);
}

/* ---- waiting on jobs and streaming ------------------------------------------------------------ */

/* True when the peer closed or reset the connection. */
static bool client_gone(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Waits on the job's condition for up to ms milliseconds (lock held). */
static void timed_wait(srv_job *j, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

bool srv_wait_job(srv_req *r, srv_job *job) {
    pthread_mutex_lock(&job->mu);
    while (!job->done) {
        timed_wait(job, 50);
        if (!job->done && client_gone(r->conn)) {
            pthread_mutex_unlock(&job->mu);
            srv_job_cancel(job);
            return false;
        }
    }
    pthread_mutex_unlock(&job->mu);
    return true;
}

typedef struct stream_ctx {
    srv_job *job;
    struct MHD_Connection *conn;
    unsigned timeout_s; /* the connection's read/write timeout */
    double last_ms;     /* when bytes were last handed to the connection */
    bool keepalive;     /* SSE: comment lines keep a silent stream alive */
} stream_ctx;

/* Restarts the connection's inactivity clock: the time a stream spent waiting for its next token
 * was the server's, not the client's (libmicrohttpd restarts the clock when a timeout is set on a
 * connection that has none). */
static void restart_clock(struct MHD_Connection *conn, unsigned timeout_s) {
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, timeout_s);
}

/* A stream silent this long (a long prompt being prefilled) gets an SSE comment line, which
 * clients ignore, so proxies and clients with idle timeouts keep the connection. */
#define KEEPALIVE_MS 10000.0

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *sc = cls;
    const bool keepalive = sc->keepalive;
    srv_job *j = sc->job;
    static const char ka[] = ": keep-alive\n\n";
    bool waited = false;
    ssize_t ret;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->n_out) {
            size_t n = j->n_out < max ? j->n_out : max;
            memcpy(buf, j->out, n);
            memmove(j->out, j->out + n, j->n_out - n);
            j->n_out -= n;
            ret = (ssize_t)n;
            break;
        }
        if (j->done) { /* a stream whose end was lost is cut off: the client sees it did not end */
            ret = j->lost ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
        timed_wait(j, 50);
        waited = true;
        if (!j->n_out && !j->done && client_gone(sc->conn)) {
            pthread_mutex_unlock(&j->mu);
            srv_job_cancel(j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        /* Nothing pending means the last event went out whole: a comment may go in between. */
        if (keepalive && !j->n_out && !j->done && now_ms() - sc->last_ms >= KEEPALIVE_MS && max >= sizeof ka - 1) {
            memcpy(buf, ka, sizeof ka - 1);
            ret = (ssize_t)(sizeof ka - 1);
            break;
        }
    }
    pthread_mutex_unlock(&j->mu);
    if (ret > 0) sc->last_ms = now_ms();
    if (waited) restart_clock(sc->conn, sc->timeout_s);
    return ret;
}

static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    srv_job_cancel(sc->job); /* no effect once done; stops a job whose client left */
    srv_job_unref(sc->job);
    free(sc);
}

/* A stream of job->out with this content type (keepalive: SSE comments in silences). */
static void send_stream(srv_req *r, srv_job *job, const char *content_type, bool keepalive) {
    stream_ctx *sc = malloc(sizeof *sc);
    if (!sc) {
        srv_job_cancel(job);
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    srv_job_ref(job);
    sc->job = job;
    sc->conn = r->conn;
    sc->timeout_s = r->server->cfg.timeout_s;
    sc->last_ms = now_ms();
    sc->keepalive = keepalive;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sc, stream_free);
    if (!resp) {
        stream_free(sc);
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    iso_send(SRV_ISO_STREAM, iso_id(r->conn), 0, 0);
    iso_queueing_stream = true;
    send_typed(r, 200, resp, content_type);
    iso_queueing_stream = false;
}

void srv_send_stream(srv_req *r, srv_job *job) { send_stream(r, job, "text/event-stream", true); }

void srv_send_ndjson(srv_req *r, srv_job *job) { send_stream(r, job, "application/x-ndjson", false); }

bool srv_get_bool(srv_req *r, json_t *o, const char *key, bool *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) {
        srv_send_error(r, 400, "invalid_request_error", key, "invalid_type", "'%s' must be a boolean", key);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

json_t *srv_parse_body(srv_req *r) {
    if (r->body_len && !srv_json_body(r)) return NULL;
    json_error_t e;
    json_t *j = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &e);
    if (json_alloc_failures) { /* not a syntax error, whatever jansson says, nor a whole value */
        json_decref(j);
        send_no_memory(r);
        return NULL;
    }
    if (!j) {
        srv_send_error(r, 400, "invalid_request_error", NULL, "invalid_json",
                       "the request body is not valid JSON: %s (line %d, column %d)", e.text, e.line, e.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        srv_send_error(r, 400, "invalid_request_error", NULL, "invalid_json", "the request body must be a JSON object");
        return NULL;
    }
    return j;
}
