/*
 * supervise.c - the supervisor of an isolated `kiln serve` (the parent process; see isolate.h for
 * the design): it owns the listening socket, hands each connection to the engine's child process,
 * tracks what each connection is doing from the child's reports, answers for the child when it
 * dies, and restarts it.
 *
 * One thread, one poll loop: the signal descriptor (SIGINT, SIGTERM), the control socket of the
 * running child, and the listening socket. While no child is ready, the connections accepted wait
 * in the table (state WAIT) and are checked every POLL_MS for a GET /health, answered here.
 */
#include "isolate.h"
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
#define BACKOFF_MS    100  /* the first restart's delay, doubled with each fast crash */
#define BACKOFF_MAX   5000 /* at most */
#define WRITE_WAIT_MS 1000 /* the parent's own answers wait this long at most for a slow client */

typedef enum conn_state {
    C_FREE = 0,
    C_WAIT,   /* accepted, not handed over (no child ready) */
    C_NEW,    /* handed over, no request seen yet */
    C_BUSY,   /* a request is in, no response queued */
    C_RESP,   /* a response is being sent */
    C_STREAM, /* a stream is being sent */
    C_IDLE,   /* between requests */
} conn_state;

typedef struct conn {
    int fd;
    conn_state state;
    uint32_t api, flags;
    uint64_t sent; /* srv_iso_sent when its request's headers were in */
} conn;

typedef struct sup {
    const srv_supervisor *sv;
    int lfd, sfd, ctl; /* listening socket, signalfd, the child's control socket (-1: none) */
    pid_t child;       /* 0: none */
    bool ready;        /* the child reported READY */
    bool ever_ready;   /* some child did */
    bool stopping;     /* a signal came: no restart */
    bool retry;        /* a hand-over found the child's socket full: connections wait (C_WAIT) */
    int port;
    conn *c; /* [cap] indexed by connection id */
    size_t cap, n_open;
    double started_ms, restart_at_ms;
    double accept_at_ms; /* out of descriptors: accept again from then on */
    double alive_ms;     /* the child's last sign of life (READY or ALIVE) */
    bool hung;           /* the watchdog killed the child */
    int fast;            /* fast crashes in a row */
    unsigned starts;     /* children started */
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

/* A whole HTTP response with a JSON body; the connection then closes. */
static void answer(int fd, unsigned status, const char *reason, json_t *body) {
    char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    const char *text = b ? b : "{}";
    char *resp = NULL;
    const int n = asprintf(&resp,
                           "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                           "Cache-Control: no-cache\r\nConnection: close\r\n\r\n%s",
                           status, reason, strlen(text), text);
    if (n > 0) write_all(fd, resp, (size_t)n);
    free(resp);
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

/* ---- the child --------------------------------------------------------------------------------- */

/* Hands a connection to the ready child; on failure it waits for the next one. */
static void hand_over(sup *s, uint32_t id) {
    conn *c = &s->c[id];
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
    c->state = sendmsg(s->ctl, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof m ? C_NEW : C_WAIT;
    if (c->state == C_WAIT) s->retry = true;
}

static void start_child(sup *s) {
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) {
        fprintf(stderr, "kiln serve: cannot start the engine process: %s\n", strerror(errno));
        s->restart_at_ms = now_ms() + BACKOFF_MAX;
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
        _exit(s->sv->child_main(3, s->port, s->starts, s->sv->arg));
    }
    close(sp[1]);
    if (pid < 0) {
        fprintf(stderr, "kiln serve: cannot start the engine process: %s\n", strerror(errno));
        close(sp[0]);
        s->restart_at_ms = now_ms() + BACKOFF_MAX;
        return;
    }
    s->child = pid;
    s->starts++;
    s->ctl = sp[0];
    s->ready = false;
    s->started_ms = now_ms();
    s->restart_at_ms = 0;
}

/* The words for how a child ended. */
static void describe(int st, char *out, size_t cap) {
    if (WIFSIGNALED(st)) snprintf(out, cap, "signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(out, cap, "exit status %d", WEXITSTATUS(st));
}

/* The child is gone (its control socket closed): reaps it and answers for it. Returns -1 to go on
 * (a restart is planned), else the supervisor's exit status. */
static int child_gone(sup *s) {
    int st = 0;
    while (waitpid(s->child, &st, 0) < 0 && errno == EINTR) {}
    close(s->ctl);
    s->ctl = -1;
    s->child = 0;
    const bool was_ready = s->ready;
    s->ready = false;
    if (!s->ever_ready && !s->stopping) /* the first child did not start (the model did not load) */
        return WIFEXITED(st) && WEXITSTATUS(st) ? WEXITSTATUS(st) : 1;
    char cause[96], msg[192];
    if (s->hung) snprintf(cause, sizeof cause, "no progress for %u s (--engine-timeout)", s->sv->engine_timeout_s);
    else describe(st, cause, sizeof cause);
    s->hung = false;
    const bool clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    snprintf(msg, sizeof msg, "the engine stopped: %s%s", cause, s->stopping ? "" : "; restarting");
    if (!s->stopping || !clean) fprintf(stderr, "kiln serve: %s\n", msg);
    size_t answered = 0;
    for (uint32_t id = 0; id < s->cap; id++) {
        conn *c = &s->c[id];
        bool health;
        switch (c->state) {
            case C_FREE:
            case C_WAIT: break;
            case C_NEW:
            case C_IDLE: /* a request the child never read is served by the next child */
                if (!s->stopping && unread_request(c->fd, &health)) c->state = C_WAIT;
                else conn_close(s, id, false);
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
        }
    }
    if (answered)
        fprintf(stderr, "kiln serve: %zu request%s in flight answered with the error\n", answered,
                answered == 1 ? "" : "s");
    if (s->stopping) return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    const double lived = now_ms() - s->started_ms;
    s->fast = was_ready && lived >= SRV_ISO_FAST_S * 1000.0 ? 1 : s->fast + 1;
    if (s->fast >= SRV_ISO_MAX_FAST) {
        fprintf(stderr,
                "kiln serve: the engine stopped %d times in a row within %d s of starting; giving up (the last: %s)\n",
                s->fast, SRV_ISO_FAST_S, cause);
        return 1;
    }
    double delay = BACKOFF_MS;
    for (int k = 1; k < s->fast && delay < BACKOFF_MAX; k++) delay *= 2;
    if (delay > BACKOFF_MAX) delay = BACKOFF_MAX;
    s->restart_at_ms = now_ms() + delay;
    return -1;
}

/* Applies one message of the child. */
static void on_msg(sup *s, const srv_iso_msg *m) {
    if (m->type == SRV_ISO_ALIVE) {
        s->alive_ms = now_ms();
        return;
    }
    if (m->type == SRV_ISO_READY) {
        s->ready = s->ever_ready = true;
        s->alive_ms = now_ms();
        for (uint32_t id = 0; id < s->cap; id++)
            if (s->c[id].state == C_WAIT) hand_over(s, id);
        return;
    }
    if (m->conn >= s->cap || s->c[m->conn].state == C_FREE) return;
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

/* Accepts what waits on the listening socket. */
static void accept_all(sup *s) {
    for (;;) {
        const int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
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
        s->c[id] = (conn){.fd = fd, .state = C_WAIT};
        s->n_open++;
        if (s->ready) hand_over(s, id);
    }
}

/* While no child serves: /health is answered here. */
static void check_waiting(sup *s) {
    for (uint32_t id = 0; id < s->cap; id++) {
        bool health;
        if (s->c[id].state != C_WAIT || !unread_request(s->c[id].fd, &health) || !health) continue;
        answer(s->c[id].fd, 503, "Service Unavailable", json_pack("{s:s}", "status", "restarting"));
        conn_close(s, id, true);
    }
}

/* The watchdog (isolate.h): kills a ready child silent for longer than the engine timeout; its
 * end is then handled as a crash (child_gone names the timeout). */
static void watchdog(sup *s) {
    if (!s->child || !s->ready || s->stopping || s->hung || !s->sv->engine_timeout_s) return;
    if (now_ms() - s->alive_ms <= s->sv->engine_timeout_s * 1000.0) return;
    fprintf(stderr, "kiln serve: the engine made no progress for %u s; stopping it\n", s->sv->engine_timeout_s);
    s->hung = true;
    kill(s->child, SIGKILL);
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
    sup s = {.sv = sv, .lfd = -1, .sfd = -1, .ctl = -1};
    int rc = 1;
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    s.cap = (size_t)sv->max_conns + 1;
    if (!(s.c = calloc(s.cap, sizeof *s.c))) {
        fprintf(stderr, "kiln serve: out of memory\n");
        return 1;
    }
    if ((s.lfd = listen_on(sv->host, sv->port, &s.port)) < 0) goto out;
    if ((s.sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
        fprintf(stderr, "kiln serve: signalfd: %s\n", strerror(errno));
        goto out;
    }
    start_child(&s);
    for (;;) {
        if (!s.child && !s.stopping && s.restart_at_ms && now_ms() >= s.restart_at_ms) start_child(&s);
        if (!s.child && s.stopping) {
            rc = 0;
            break;
        }
        struct pollfd p[3] = {{.fd = s.sfd, .events = POLLIN},
                              {.fd = s.ctl, .events = POLLIN},
                              {.fd = s.stopping || now_ms() < s.accept_at_ms ? -1 : s.lfd, .events = POLLIN}};
        const bool slow = s.ready && !s.retry && !s.accept_at_ms;
        if (poll(p, 3, slow ? 1000 : POLL_MS) < 0 && errno != EINTR) break;
        if (s.accept_at_ms && now_ms() >= s.accept_at_ms) s.accept_at_ms = 0;
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(s.sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (!s.stopping) {
                    if (!s.child) /* else the child says so */
                        fprintf(stderr, "kiln serve: %s received, shutting down\n",
                                si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
                    close(s.lfd);
                    s.lfd = -1;
                    for (uint32_t id = 0; id < s.cap; id++)
                        if (s.c[id].state == C_WAIT) conn_close(&s, id, false);
                }
                s.stopping = true;
                if (s.child) kill(s.child, SIGTERM);
            }
        }
        if (p[1].revents & POLLIN) {
            srv_iso_msg m;
            ssize_t n;
            while ((n = recv(s.ctl, &m, sizeof m, MSG_DONTWAIT)) == (ssize_t)sizeof m) on_msg(&s, &m);
            if (n == 0) p[1].revents |= POLLHUP;
        }
        if (s.child && (p[1].revents & (POLLHUP | POLLERR))) {
            const int r = child_gone(&s);
            if (r >= 0) {
                rc = r;
                break;
            }
        }
        watchdog(&s);
        if (p[2].revents & POLLIN) accept_all(&s);
        if (!s.ready) check_waiting(&s);
        if (s.ready && s.retry) {
            s.retry = false;
            for (uint32_t id = 0; id < s.cap; id++)
                if (s.c[id].state == C_WAIT) hand_over(&s, id);
        }
    }
out:
    if (s.child) {
        kill(s.child, SIGKILL);
        waitpid(s.child, NULL, 0);
    }
    for (uint32_t id = 0; s.c && id < s.cap; id++)
        if (s.c[id].state != C_FREE) close(s.c[id].fd);
    free(s.c);
    if (s.ctl >= 0) close(s.ctl);
    if (s.lfd >= 0) close(s.lfd);
    if (s.sfd >= 0) close(s.sfd);
    return rc;
}
