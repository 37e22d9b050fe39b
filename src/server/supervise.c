/*
 * supervise.c - the supervisor of an isolated `kiln serve` (the parent process; see isolate.h for
 * the design): it owns the listening socket, learns each request's model by peeking at it (pool.c),
 * hands the connection to that model's engine child process (starting it first, and stopping the
 * least recently used idle one when the pool is full), tracks what each connection is doing from
 * the children's reports, answers for a child when it dies, and restarts it.
 *
 * One thread, one poll loop: the signal descriptor (SIGINT, SIGTERM), the control socket of each
 * running child, and the listening socket. Connections being peeked at (state PEEK) and those
 * waiting for their model's child (WAIT) are looked at every few ms while there are any; a GET
 * /health while no child is ready is answered here (200 when no model is loaded because they
 * were unloaded, 503 "restarting" while one is starting), and so is GET /api/ps while none is loaded.
 * A model idle past its keep-alive (Ollama's keep_alive, read from the peeked body) is stopped like
 * a least recently used one (expire).
 */
#include "isolate.h"
#include "pool.h"
#include "server.h"

#include <errno.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POLL_MS       50
#define PEEK_POLL_MS  5          /* while a request being peeked at is still coming in */
#define BACKOFF_MS    100        /* the first restart's delay, doubled with each fast crash */
#define BACKOFF_MAX   5000       /* at most */
#define WRITE_WAIT_MS 1000       /* the parent's own answers wait this long at most for a slow client */
#define PEEK_MAX      (1u << 20) /* bytes of a request peeked at, at most */
#define PEEK_RCVBUF   (1 << 20)  /* the receive buffer asked for each connection (the kernel caps it) */
#define STALL_MS      200        /* a request over STALL_MIN bytes not growing this long: routed as it is */
#define STALL_MIN     16384

typedef enum conn_state {
    C_FREE = 0,
    C_PEEK,   /* accepted, its request's head and body being peeked at */
    C_WAIT,   /* routed to a model whose child is not ready */
    C_NEW,    /* handed over, no request seen yet */
    C_BUSY,   /* a request is in, no response queued */
    C_RESP,   /* a response is being sent */
    C_STREAM, /* a stream is being sent */
    C_IDLE,   /* between requests */
} conn_state;

typedef struct conn {
    int fd;
    conn_state state;
    int w; /* the model (pool entry) it is routed to */
    uint32_t api, flags;
    uint64_t sent;          /* srv_iso_sent when its request's headers were in */
    double deadline;        /* PEEK: the request must be in by then; WAIT: its model ready by then */
    size_t peeked;          /* PEEK: bytes seen so far */
    double grew_ms;         /* PEEK: when they last grew */
    bool continued;         /* PEEK: "100 Continue" was sent */
    uint8_t addr[16], alen; /* the client's address (per-address limit) */
} conn;

/* The engine child of one model of the pool. */
typedef struct worker {
    pid_t pid;       /* 0: none */
    int ctl;         /* its control socket (-1: none) */
    bool ready;      /* it reported READY */
    bool ever_ready; /* some child of this model did */
    bool unloading;  /* stopped to make room: its end is no crash */
    bool retry;      /* a hand-over found its socket full: connections wait (C_WAIT) */
    double started_ms, restart_at_ms;
    int fast;        /* fast crashes in a row */
    unsigned starts; /* children started */
    double alive_ms; /* the child's last sign of life (READY or ALIVE) */
    bool hung;       /* the watchdog killed the child */
} worker;

typedef struct sup {
    const srv_supervisor *sv;
    int lfd, sfd;    /* listening socket, signalfd */
    bool ever_ready; /* some child was ready */
    bool stopping;   /* a signal came: no restart */
    int port;
    conn *c; /* [cap] indexed by connection id */
    size_t cap, n_open;
    double accept_at_ms; /* out of descriptors: accept again from then on */
    worker w[SRV_POOL_MAX];
    char *peek; /* [PEEK_MAX] */
    int rc;     /* the exit status so far (a child that did not stop cleanly) */
} sup;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Writes all of buf to a non-blocking socket, waiting up to WRITE_WAIT_MS in all. */
static void write_all(int fd, const char *buf, size_t n) {
    const double end = now_ms() + WRITE_WAIT_MS;
    while (n) {
        const ssize_t w = send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            buf += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR) return;
        const double left = end - now_ms();
        if (left <= 0) return;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, (int)left);
    }
}

/* Closes a connection the parent answered: the end of the response is signalled first and what the
 * client still sends is dropped briefly, so that closing with unread bytes cannot reset the answer
 * away before the client read it. */
static void close_answered(int fd) {
    shutdown(fd, SHUT_WR);
    char buf[4096];
    for (int k = 0; k < 16 && recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0; k++) {}
    close(fd);
}

static void conn_close(sup *s, uint32_t id, bool answered) {
    conn *c = &s->c[id];
    if (c->state == C_FREE) return;
    if (answered) close_answered(c->fd);
    else close(c->fd);
    c->state = C_FREE;
    c->fd = -1;
    s->n_open--;
}

uint64_t srv_iso_sent(int fd) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    int queued = 0;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 || ioctl(fd, SIOCOUTQ, &queued) != 0) return 0;
    return ti.tcpi_bytes_acked + (uint64_t)(queued > 0 ? queued : 0);
}

/* ---- the parent's own answers ------------------------------------------------------------------ */

/* A whole HTTP response with a JSON body (a new reference, NULL when it could not be made); the
 * connection then closes. A body that could not be made or written out makes the answer a 503 "out
 * of memory" (no allocation is needed for it): a client must not take an empty body for the answer. */
static void answer(int fd, unsigned status, const char *reason, json_t *body) {
    char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    const char *text = b;
    if (!b) {
        status = 503;
        reason = "Service Unavailable";
        text = "{\"error\":{\"message\":\"out of memory: the server cannot answer now\",\"type\":\"server_error\"}}";
    }
    char buf[4096]; /* head and body in one write where they fit (one segment, no wait for an ACK) */
    const size_t tl = strlen(text);
    const int h = snprintf(buf, sizeof buf,
                           "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                           "Cache-Control: no-cache\r\nConnection: close\r\n\r\n",
                           status, reason, tl);
    if ((size_t)h + tl < sizeof buf) {
        memcpy(buf + h, text, tl);
        write_all(fd, buf, (size_t)h + tl);
    } else {
        write_all(fd, buf, (size_t)h);
        write_all(fd, text, tl);
    }
    free(b);
}

/* The 500 of a request the engine did not answer, in its API's error shape. */
static void answer_error(const conn *c, const char *msg) {
    json_t *body;
    if (c->api == SRV_API_OLLAMA) body = json_pack("{s:s}", "error", msg);
    else if (c->api == SRV_API_ANTHROPIC) body = srv_anthropic_error(500, msg);
    else
        body = json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", msg, "type", "server_error", "param", "code",
                         "engine_stopped");
    answer(c->fd, 500, "Internal Server Error", body);
}

/* The error event that ends a stream, in its format and framing. */
static void stream_error(const conn *c, const char *msg) {
    json_t *o;
    const char *event = NULL;
    if (c->api == SRV_API_OLLAMA) o = json_pack("{s:s}", "error", msg);
    else if (c->api == SRV_API_ANTHROPIC) o = srv_anthropic_error(500, msg), event = "error";
    else if (c->flags & SRV_ISO_RESPONSES)
        o = json_pack("{s:s, s:s, s:s, s:n}", "type", "error", "code", "server_error", "message", msg, "param"),
        event = "error";
    else
        o = json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", msg, "type", "server_error", "param", "code",
                      "engine_stopped");
    char *j = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!j) return;
    char *ev = NULL;
    int n;
    if (c->api == SRV_API_OLLAMA) n = asprintf(&ev, "%s\n", j);
    else if (event) n = asprintf(&ev, "event: %s\ndata: %s\n\n", event, j);
    else n = asprintf(&ev, "data: %s\n\n", j);
    free(j);
    if (n <= 0) return;
    if (c->flags & SRV_ISO_HTTP11) { /* a chunk, then the last chunk */
        char head[32];
        const int h = snprintf(head, sizeof head, "%x\r\n", n);
        write_all(c->fd, head, (size_t)h);
        write_all(c->fd, ev, (size_t)n);
        write_all(c->fd, "\r\n0\r\n\r\n", 7);
    } else {
        write_all(c->fd, ev, (size_t)n);
    }
    free(ev);
}

/* Whether the client has sent bytes nobody read yet; *health when they are a GET or HEAD of
 * /health or /v1/health (the request line is complete). */
static bool unread_request(int fd, bool *health) {
    char buf[64];
    const ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_PEEK | MSG_DONTWAIT);
    *health = false;
    if (n <= 0) return false;
    buf[n] = 0;
    static const char *const lines[] = {"GET /health ", "GET /v1/health ", "HEAD /health ", "HEAD /v1/health "};
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++)
        *health |= strncmp(buf, lines[k], strlen(lines[k])) == 0;
    return true;
}

/* ---- the children --------------------------------------------------------------------------- */

static srv_pool_entry *entry(int w) { return &srv_pool_table_get()->e[w]; }

/* Hands a connection to its model's ready child; on failure it waits for the next try. */
static void hand_over(sup *s, uint32_t id) {
    conn *c = &s->c[id];
    worker *wk = &s->w[c->w];
    srv_iso_msg m = {.type = SRV_ISO_CONN, .conn = id};
    struct iovec iov = {.iov_base = &m, .iov_len = sizeof m};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &c->fd, sizeof(int));
    /* never blocking: the child may be blocked itself, sending to this process */
    c->state = sendmsg(wk->ctl, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof m ? C_NEW : C_WAIT;
    if (c->state == C_WAIT) wk->retry = true;
}

static void start_child(sup *s, int w) {
    worker *wk = &s->w[w];
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) {
        fprintf(stderr, "kiln serve: cannot start the engine process: %s\n", strerror(errno));
        wk->restart_at_ms = now_ms() + BACKOFF_MAX;
        return;
    }
    const pid_t parent = getpid();

    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        /* the child: its own process group, dies with the parent, keeps only the stdio and ctl */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        setpgid(0, 0);
        if (dup2(sp[1], 3) < 0) _exit(1);
        struct rlimit rl;
        const int top = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (int)rl.rlim_cur : 65536;
        for (int fd = 4; fd < top; fd++) close(fd);
        _exit(s->sv->child_main(3, s->port, wk->starts, (size_t)w, s->sv->arg));
    }
    close(sp[1]);
    if (pid < 0) {
        fprintf(stderr, "kiln serve: cannot start the engine process: %s\n", strerror(errno));
        close(sp[0]);
        wk->restart_at_ms = now_ms() + BACKOFF_MAX;
        return;
    }
    wk->pid = pid;
    wk->starts++;
    wk->ctl = sp[0];
    wk->ready = wk->unloading = false;
    wk->started_ms = now_ms();
    wk->restart_at_ms = 0;
    srv_pool_entry *e = entry(w);
    e->state = SRV_POOL_LOADING;
    e->pid = pid;
    e->loading_since = wk->started_ms;
}

/* The words for how a child ended. */
static void describe(int st, char *out, size_t cap) {
    if (WIFSIGNALED(st)) snprintf(out, cap, "signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(out, cap, "exit status %d", WEXITSTATUS(st));
}

/* Whether a connection is with a child (handed over, not waiting). */
static bool handed(const conn *c) { return c->state >= C_NEW; }

/* Answers every connection waiting for model w with status and msg, and closes it. */
static void answer_waiting(sup *s, int w, unsigned status, const char *code, const char *msg) {
    for (uint32_t id = 0; id < s->cap; id++) {
        conn *c = &s->c[id];
        if (c->state != C_WAIT || c->w != w) continue;
        answer(c->fd, status, status == 503 ? "Service Unavailable" : "Internal Server Error",
               srv_pool_error_body(c->api, status, code, msg));
        conn_close(s, id, true);
    }
}

/* Model w's child is gone (its control socket closed): reaps it and answers for it. Returns -1 to
 * go on, else the supervisor's exit status. */
static int child_gone(sup *s, int w) {
    worker *wk = &s->w[w];
    srv_pool_entry *e = entry(w);
    int st = 0;
    while (waitpid(wk->pid, &st, 0) < 0 && errno == EINTR) {}
    close(wk->ctl);
    wk->ctl = -1;
    wk->pid = 0;
    e->pid = 0;
    const bool was_ready = wk->ready, unloaded = wk->unloading;
    wk->ready = wk->unloading = false;
    const bool clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!clean && s->stopping) s->rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1; /* the exit status */
    char cause[96], msg[512]; /* msg: room for the id and the error whole */
    if (wk->hung) snprintf(cause, sizeof cause, "no progress for %u s (--engine-timeout)", s->sv->engine_timeout_s);
    else describe(st, cause, sizeof cause);
    wk->hung = false;
    if (!s->ever_ready && w == 0 && !s->stopping) /* the first child did not start (the model did not load) */
        return WIFEXITED(st) && WEXITSTATUS(st) ? WEXITSTATUS(st) : 1;
    if (!wk->ever_ready && !s->stopping) { /* a model that could not be loaded: no restart */
        snprintf(e->error, sizeof e->error, "its engine exited before it was ready: %s (see the server's log)", cause);
        snprintf(msg, sizeof msg, "the model '%s' could not be loaded: %s", e->id, e->error);
        fprintf(stderr, "kiln serve: %s\n", msg);
        e->state = SRV_POOL_FAILED;
        answer_waiting(s, w, 500, "model_load_failed", msg);
        return -1;
    }
    if (w == 0) snprintf(msg, sizeof msg, "the engine stopped: %s%s", cause, s->stopping ? "" : "; restarting");
    else
        snprintf(msg, sizeof msg, "the engine of '%s' stopped: %s%s", e->id, cause,
                 s->stopping || unloaded ? "" : "; restarting");
    if (unloaded && !s->stopping) fprintf(stderr, "kiln serve: model '%s' unloaded\n", e->id);
    else if (!s->stopping || !clean) fprintf(stderr, "kiln serve: %s\n", msg);
    size_t answered = 0;
    for (uint32_t id = 0; id < s->cap; id++) {
        conn *c = &s->c[id];
        bool health;
        if (c->w != w || !handed(c)) continue;
        switch (c->state) {
            case C_NEW:
            case C_IDLE: /* a request the child never read is routed again */
                if (!s->stopping && unread_request(c->fd, &health)) {
                    c->state = C_PEEK;
                    c->peeked = 0;
                    c->grew_ms = now_ms();
                    c->deadline = s->sv->timeout_s ? now_ms() + 1000.0 * s->sv->timeout_s : 0;
                } else conn_close(s, id, false);
                break;
            case C_BUSY:
            case C_RESP:
            case C_STREAM:
                /* nothing of the response reached the socket: a whole 500; a stream under way: its
                 * error event; part of another response: only the close tells */
                if (srv_iso_sent(c->fd) == c->sent) answer_error(c, msg);
                else if (c->state == C_STREAM) stream_error(c, msg);
                else {
                    conn_close(s, id, false);
                    break;
                }
                conn_close(s, id, true);
                answered++;
                break;
            default: break;
        }
    }
    if (answered)
        fprintf(stderr, "kiln serve: %zu request%s in flight answered with the error\n", answered,
                answered == 1 ? "" : "s");
    e->state = SRV_POOL_UNLOADED;
    if (s->stopping) return -1;
    if (unloaded) {
        wk->fast = 0;
        return -1;
    }
    const double lived = now_ms() - wk->started_ms;
    wk->fast = was_ready && lived >= SRV_ISO_FAST_S * 1000.0 ? 1 : wk->fast + 1;
    e->restarts++;
    if (wk->fast >= SRV_ISO_MAX_FAST) {
        bool others = false;
        for (int k = 0; k < SRV_POOL_MAX; k++) others |= k != w && s->w[k].pid;
        fprintf(stderr,
                "kiln serve: the engine%s%s%s stopped %d times in a row within %d s of starting; giving up (the last: "
                "%s)\n",
                w ? " of '" : "", w ? e->id : "", w ? "'" : "", wk->fast, SRV_ISO_FAST_S, cause);
        if (!others) return 1;
        snprintf(e->error, sizeof e->error, "its engine stopped %d times in a row (the last: %s)", wk->fast, cause);
        e->state = SRV_POOL_FAILED;
        wk->ever_ready = false;
        wk->fast = 0;
        snprintf(msg, sizeof msg, "the model '%s' is not available: %s", e->id, e->error);
        answer_waiting(s, w, 500, "model_load_failed", msg);
        return -1;
    }
    double delay = BACKOFF_MS;
    for (int k = 1; k < wk->fast && delay < BACKOFF_MAX; k++) delay *= 2;
    if (delay > BACKOFF_MAX) delay = BACKOFF_MAX;
    wk->restart_at_ms = now_ms() + delay;
    return -1;
}

/* Applies one message of model w's child. */
static void on_msg(sup *s, int w, const srv_iso_msg *m) {
    worker *wk = &s->w[w];
    if (m->type == SRV_ISO_ALIVE) {
        wk->alive_ms = now_ms();
        return;
    }
    if (m->type == SRV_ISO_READY) {
        wk->ready = wk->ever_ready = s->ever_ready = true;
        wk->alive_ms = now_ms();
        srv_pool_entry *e = entry(w);
        e->state = SRV_POOL_READY;
        e->loads++;
        e->error[0] = 0;
        for (uint32_t id = 0; id < s->cap; id++)
            if (s->c[id].state == C_WAIT && s->c[id].w == w) hand_over(s, id);
        return;
    }
    if (m->conn >= s->cap || s->c[m->conn].state == C_FREE || s->c[m->conn].w != w || !handed(&s->c[m->conn])) return;
    conn *c = &s->c[m->conn];
    switch (m->type) {
        case SRV_ISO_BUSY:
            c->state = C_BUSY;
            c->api = m->api;
            c->flags = m->flags;
            c->sent = m->sent;
            break;
        case SRV_ISO_RESP: c->state = C_RESP; break;
        case SRV_ISO_STREAM: c->state = C_STREAM; break;
        case SRV_ISO_IDLE: c->state = C_IDLE; break;
        case SRV_ISO_CLOSED: conn_close(s, m->conn, false); break;
        default: break;
    }
}

/* Accepts what waits on the listening socket: each connection is peeked at first. */
static void accept_all(sup *s) {
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        const int fd = accept4(s->lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            /* out of descriptors: the connection waits in the backlog, not in a busy loop */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                s->accept_at_ms = now_ms() + POLL_MS;
            return;
        }
        if (s->n_open >= s->sv->max_conns) {
            close(fd);
            continue;
        }
        uint32_t id = 0;
        while (id < s->cap && s->c[id].state != C_FREE) id++;
        if (id == s->cap) {
            close(fd); /* cannot happen: cap > max_conns */
            continue;
        }
        uint8_t addr[16] = {0}, alen = 0;
        if (sa.ss_family == AF_INET) memcpy(addr, &((struct sockaddr_in *)&sa)->sin_addr, alen = 4);
        else if (sa.ss_family == AF_INET6) memcpy(addr, &((struct sockaddr_in6 *)&sa)->sin6_addr, alen = 16);
        unsigned same = 0;
        for (uint32_t k = 0; k < s->cap && alen; k++)
            same += s->c[k].state != C_FREE && s->c[k].alen == alen && memcmp(s->c[k].addr, addr, alen) == 0;
        if (s->sv->max_conns_per_ip && same >= s->sv->max_conns_per_ip) { /* as the engine's HTTP layer does */
            close(fd);
            continue;
        }
        const int rcv = PEEK_RCVBUF; /* room to hold a whole request unread */
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
        const double t = now_ms();
        s->c[id] = (conn){.fd = fd,
                          .state = C_PEEK,
                          .grew_ms = t,
                          .deadline = s->sv->timeout_s ? t + 1000.0 * s->sv->timeout_s : 0,
                          .alen = alen};
        memcpy(s->c[id].addr, addr, sizeof addr);
        s->n_open++;
    }
}

/* ---- routing ------------------------------------------------------------------------------------ */

/* Whether model w has connections with its child (requests in flight or kept). */
static bool busy(const sup *s, int w) {
    for (uint32_t id = 0; id < s->cap; id++)
        if (s->c[id].w == w && (handed(&s->c[id]) || s->c[id].state == C_WAIT)) return true;
    return false;
}

/* Routes connection id once its request is in: to its model's child (now, or once it is ready), or
 * answers it here (404 for an unknown model; /health while no child is ready). */
static void route(sup *s, uint32_t id, const srv_pool_peek *pk) {
    conn *c = &s->c[id];
    c->api = pk->api;
    if (pk->nomem) { /* its model unknown: routing by "" would hand it to the default model */
        answer(c->fd, 503, "Service Unavailable",
               srv_pool_error_body(c->api, 503, "out_of_memory",
                                   "out of memory: the server cannot read the request's model now"));
        conn_close(s, id, true);
        return;
    }
    int w = pk->model[0] && !pk->health ? srv_pool_index(pk->model) : srv_pool_any();
    bool running = false, ready = false; /* some engine is (being) started or restarted; one is ready */
    for (int k = 0; k < SRV_POOL_MAX; k++) {
        running |= s->w[k].pid || s->w[k].restart_at_ms;
        ready |= s->w[k].ready;
    }
    if (pk->health && !s->w[w].ready) { /* any ready engine answers /health; none: this process */
        /* no engine because every model was unloaded (keep_alive): the server is well, it loads on demand */
        if (running) answer(c->fd, 503, "Service Unavailable", json_pack("{s:s}", "status", "restarting"));
        else answer(c->fd, 200, "OK", json_pack("{s:s}", "status", "ok"));
        conn_close(s, id, true);
        return;
    }
    if (pk->ps && !pk->model[0] && !ready) { /* no model is loaded: none to list (and none loaded to say so) */
        answer(c->fd, 200, "OK", json_pack("{s:[]}", "models"));
        conn_close(s, id, true);
        return;
    }
    if (w == -1) {
        answer(c->fd, 404, "Not Found", srv_pool_unknown_body(c->api, pk->model));
        conn_close(s, id, true);
        return;
    }
    if (w < 0) {
        answer(c->fd, 503, "Service Unavailable",
               srv_pool_error_body(c->api, 503, "model_pool_full", "every model the server can hold is busy"));
        conn_close(s, id, true);
        return;
    }
    if (pk->keep.unload && !s->w[w].pid) { /* Ollama's unload call for a model that is not loaded */
        answer(c->fd, 200, "OK", srv_ollama_unload_body(pk->keep.chat, pk->model[0] ? pk->model : entry(w)->id));
        conn_close(s, id, true);
        return;
    }
    if (pk->keep.applies) entry(w)->keep_alive_ms = pk->keep.ms; /* its keep_alive (pool.h), or the default */
    entry(w)->expires_ms = 0;                                    /* in use */
    c->w = w;
    c->state = C_WAIT;
    const unsigned lt = srv_pool_cfg()->load_timeout_s;
    c->deadline = now_ms() + 1000.0 * (lt ? lt : 1);
    entry(w)->last_used_ms = now_ms();
    if (s->w[w].ready) hand_over(s, id);
}

/* Peeks at the connections whose request is coming in; true while one is still growing. */
static bool peek_all(sup *s) {
    bool growing = false;
    const double t = now_ms();
    for (uint32_t id = 0; id < s->cap; id++) {
        conn *c = &s->c[id];
        if (c->state != C_PEEK) continue;
        const ssize_t n = recv(c->fd, s->peek, PEEK_MAX, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) { /* gone before asking */
            conn_close(s, id, false);
            continue;
        }
        if (n > 0 && (size_t)n > c->peeked) {
            c->peeked = (size_t)n;
            c->grew_ms = t;
        }
        const bool stalled = c->peeked >= PEEK_MAX || (c->peeked >= STALL_MIN && t - c->grew_ms >= STALL_MS);
        srv_pool_peek pk;
        if (n > 0 && srv_pool_peek_request(s->peek, (size_t)n, stalled, s->sv->max_body, &pk)) {
            route(s, id, &pk);
            continue;
        }
        if (n > 0 && pk.expect_continue && !c->continued) { /* the engine's layer will say it again: harmless */
            write_all(c->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25);
            c->continued = true;
        }
        if (c->deadline && t >= c->deadline) { /* the client's time is up, as in the engine's HTTP layer */
            conn_close(s, id, false);
            continue;
        }
        growing |= t - c->grew_ms < STALL_MS;
    }
    return growing;
}

/* Starts the children that waiting connections need, making room first: while --max-models or
 * --models-memory leave none, the least recently used loaded model with no connection is stopped
 * (one at a time); when every loaded model is busy, the connections wait (up to their deadline). */
static void schedule(sup *s) {
    srv_pool_table *t = srv_pool_table_get();
    for (int w = 0; w < SRV_POOL_MAX && !s->stopping; w++) {
        worker *wk = &s->w[w];
        if (wk->pid) continue;
        if (wk->restart_at_ms) { /* a restart after a crash */
            if (now_ms() >= wk->restart_at_ms) start_child(s, w);
            continue;
        }
        bool wanted = false;
        for (uint32_t id = 0; id < s->cap && !wanted; id++) wanted = s->c[id].state == C_WAIT && s->c[id].w == w;
        if (!wanted) continue;
        unsigned n = 0;
        uint64_t bytes = 0;
        bool unloading = false;
        for (int k = 0; k < SRV_POOL_MAX; k++) {
            if (!s->w[k].pid) continue;
            n++;
            bytes += t->e[k].bytes;
            unloading |= s->w[k].unloading;
        }
        const bool fits = (!t->max_models || n < t->max_models) && (!t->memory || bytes + t->e[w].bytes <= t->memory);
        if (n == 0 || fits) {
            fprintf(stderr, "kiln serve: loading model '%s' (%s)\n", t->e[w].id, t->e[w].path);
            start_child(s, w);
            continue;
        }
        if (unloading) continue; /* room is being made */
        int victim = -1;
        for (int k = 0; k < SRV_POOL_MAX; k++)
            if (k != w && s->w[k].pid && s->w[k].ready && !busy(s, k) &&
                (victim < 0 || t->e[k].last_used_ms < t->e[victim].last_used_ms))
                victim = k;
        if (victim < 0) continue;
        fprintf(stderr, "kiln serve: unloading model '%s' (least recently used) to make room for '%s'\n",
                t->e[victim].id, t->e[w].id);
        s->w[victim].unloading = true;
        s->w[victim].ready = false;
        t->e[victim].state = SRV_POOL_UNLOADING;
        kill(s->w[victim].pid, SIGTERM);
    }
}

/* Connections whose model did not get ready in time get 503; the in-flight counts of the table. */
static void check_waiting(sup *s) {
    const double t = now_ms();
    uint32_t inflight[SRV_POOL_MAX] = {0};
    for (uint32_t id = 0; id < s->cap; id++) {
        conn *c = &s->c[id];
        if (handed(c)) inflight[c->w] += c->state != C_IDLE;
        if (c->state != C_WAIT || t < c->deadline) continue;
        const srv_pool_entry *e = entry(c->w);
        char msg[400];
        snprintf(msg, sizeof msg,
                 "the model '%s' is not ready after %u s (it is loading, or waiting for memory while the other "
                 "loaded models serve requests); try again later",
                 e->id, srv_pool_cfg()->load_timeout_s);
        answer(c->fd, 503, "Service Unavailable", srv_pool_error_body(c->api, 503, "model_loading", msg));
        conn_close(s, id, true);
    }
    srv_pool_table *tab = srv_pool_table_get();
    for (int w = 0; w < SRV_POOL_MAX; w++) tab->e[w].in_flight = inflight[w];
}

/* Unloads the models idle past their keep-alive (Ollama's keep_alive, pool.h): a model with a
 * connection is in use (its idle clock starts again when the last one ends); one idle since
 * expires_ms is stopped as the least recently used are (SIGTERM: its engine ends cleanly, its SSD
 * cache flushed). Returns the ms until the next model expires (-1: none does). */
static int expire(sup *s) {
    const double t = now_ms();
    double next = -1;
    for (int w = 0; w < SRV_POOL_MAX && !s->stopping; w++) {
        worker *wk = &s->w[w];
        srv_pool_entry *e = entry(w);
        if (!wk->pid || !wk->ready || wk->unloading) continue;
        if (e->keep_alive_ms < 0 || busy(s, w)) {
            e->expires_ms = 0;
            continue;
        }
        if (!e->expires_ms) e->expires_ms = t + (double)e->keep_alive_ms;
        if (t < e->expires_ms) {
            if (next < 0 || e->expires_ms - t < next) next = e->expires_ms - t;
            continue;
        }
        fprintf(stderr, "kiln serve: unloading model '%s' (idle for its keep_alive, %.3g s)\n", e->id,
                (double)e->keep_alive_ms / 1e3);
        wk->unloading = true;
        wk->ready = false;
        e->state = SRV_POOL_UNLOADING;
        e->expires_ms = 0;
        kill(wk->pid, SIGTERM);
    }
    return next < 0 ? -1 : (int)next + 1;
}

/* The watchdog (isolate.h): kills a ready child silent for longer than the engine timeout; its
 * end is then handled as a crash (child_gone names the timeout). Per model. */
static void watchdog(sup *s) {
    for (int w = 0; w < SRV_POOL_MAX; w++) {
        worker *wk = &s->w[w];
        if (!wk->pid || !wk->ready || s->stopping || wk->hung || !s->sv->engine_timeout_s) continue;
        if (now_ms() - wk->alive_ms <= s->sv->engine_timeout_s * 1000.0) continue;
        fprintf(stderr, "kiln serve: the engine%s%s%s made no progress for %u s; stopping it\n", w ? " of '" : "",
                w ? entry(w)->id : "", w ? "'" : "", s->sv->engine_timeout_s);
        wk->hung = true;
        kill(wk->pid, SIGKILL);
    }
}

/* Binds and listens on host:port; the socket, or -1 after a message. */
static int listen_on(const char *host, int port, int *bound) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    const int rc = getaddrinfo(host, ps, &hints, &ai);
    if (rc || !ai) {
        fprintf(stderr, "kiln serve: cannot resolve host '%s': %s\n", host, gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 256) != 0) {
        fprintf(stderr, "kiln serve: cannot listen on %s:%d (%s)\n", host, port, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    *bound = port;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        *bound = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                : ((struct sockaddr_in *)&sa)->sin_port);
    return fd;
}

int srv_supervise(const srv_supervisor *sv) {
    sup s = {.sv = sv, .lfd = -1, .sfd = -1};
    for (int w = 0; w < SRV_POOL_MAX; w++) s.w[w].ctl = -1;
    int rc = 1;
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    s.cap = (size_t)sv->max_conns + 1;
    s.c = calloc(s.cap, sizeof *s.c);
    s.peek = malloc(PEEK_MAX);
    srv_json_alloc_install(); /* the requests' models are read with it counting (pool.c) */
    if (!s.c || !s.peek || !srv_pool_table_get()) {
        fprintf(stderr, "kiln serve: out of memory\n");
        goto out;
    }
    if ((s.lfd = listen_on(sv->host, sv->port, &s.port)) < 0) goto out;
    if ((s.sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
        fprintf(stderr, "kiln serve: signalfd: %s\n", strerror(errno));
        goto out;
    }
    start_child(&s, 0);
    for (;;) {
        schedule(&s);
        bool any_child = false, waiting = false, retry = false;
        for (int w = 0; w < SRV_POOL_MAX; w++) {
            any_child |= s.w[w].pid != 0;
            retry |= s.w[w].retry || (!s.w[w].pid && s.w[w].restart_at_ms);
        }
        if (!any_child && s.stopping) {
            rc = s.rc;
            break;
        }
        for (uint32_t id = 0; id < s.cap && !waiting; id++)
            waiting = s.c[id].state == C_PEEK || s.c[id].state == C_WAIT;
        struct pollfd p[2 + SRV_POOL_MAX];
        p[0] = (struct pollfd){.fd = s.sfd, .events = POLLIN};
        p[1] = (struct pollfd){.fd = s.stopping || now_ms() < s.accept_at_ms ? -1 : s.lfd, .events = POLLIN};
        for (int w = 0; w < SRV_POOL_MAX; w++) p[2 + w] = (struct pollfd){.fd = s.w[w].ctl, .events = POLLIN};
        const bool growing = peek_all(&s);
        int wait_ms = growing ? PEEK_POLL_MS : waiting || retry || s.accept_at_ms ? POLL_MS : 1000;
        const int expiry_ms = expire(&s);
        if (expiry_ms >= 0 && expiry_ms < wait_ms) wait_ms = expiry_ms;
        if (poll(p, 2 + SRV_POOL_MAX, wait_ms) < 0 && errno != EINTR) break;
        if (s.accept_at_ms && now_ms() >= s.accept_at_ms) s.accept_at_ms = 0;
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(s.sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (!s.stopping) {
                    if (!any_child) /* else the children say so */
                        fprintf(stderr, "kiln serve: %s received, shutting down\n",
                                si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
                    close(s.lfd);
                    s.lfd = -1;
                    for (uint32_t id = 0; id < s.cap; id++)
                        if (s.c[id].state == C_WAIT || s.c[id].state == C_PEEK) conn_close(&s, id, false);
                }
                s.stopping = true;
                for (int w = 0; w < SRV_POOL_MAX; w++)
                    if (s.w[w].pid) kill(s.w[w].pid, SIGTERM);
            }
        }
        bool done = false;
        for (int w = 0; w < SRV_POOL_MAX && !done; w++) {
            if (s.w[w].ctl < 0) continue;
            short rev = p[2 + w].fd == s.w[w].ctl ? p[2 + w].revents : 0;
            if (rev & POLLIN) {
                srv_iso_msg m;
                ssize_t n;
                while ((n = recv(s.w[w].ctl, &m, sizeof m, MSG_DONTWAIT)) == (ssize_t)sizeof m) on_msg(&s, w, &m);
                if (n == 0) rev |= POLLHUP;
            }
            if (s.w[w].pid && (rev & (POLLHUP | POLLERR))) {
                const int r = child_gone(&s, w);
                if (r >= 0) {
                    rc = r;
                    done = true;
                }
            }
        }
        if (done) break;
        watchdog(&s);
        if (p[1].revents & POLLIN) accept_all(&s);
        peek_all(&s);
        check_waiting(&s);
        for (int w = 0; w < SRV_POOL_MAX; w++) {
            if (!s.w[w].ready || !s.w[w].retry) continue;
            s.w[w].retry = false;
            for (uint32_t id = 0; id < s.cap; id++)
                if (s.c[id].state == C_WAIT && s.c[id].w == w) hand_over(&s, id);
        }
    }
out:
    for (int w = 0; w < SRV_POOL_MAX; w++) {
        if (s.w[w].pid) {
            kill(s.w[w].pid, SIGKILL);
            waitpid(s.w[w].pid, NULL, 0);
        }
        if (s.w[w].ctl >= 0) close(s.w[w].ctl);
    }
    for (uint32_t id = 0; s.c && id < s.cap; id++)
        if (s.c[id].state != C_FREE) close(s.c[id].fd);
    free(s.c);
    free(s.peek);
    if (s.lfd >= 0) close(s.lfd);
    if (s.sfd >= 0) close(s.sfd);
    return rc;
}
