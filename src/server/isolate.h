/*
 * isolate.h - crash isolation of `kiln serve`: the engine runs in a child process, a small
 * supervisor in the parent (supervise.c; the child's side is in http.c).
 *
 * Design. The parent owns the listening socket and nothing else of the server: it loads no model
 * (it reads model files' headers only, to resolve the names requests give: pool.c), starts no
 * thread, and holds no state a crash could corrupt. It accepts each connection itself and
 * hands the socket to the child over a Unix SOCK_SEQPACKET socketpair (SCM_RIGHTS), keeping its own
 * descriptor of it; the child serves the connection with libmicrohttpd (MHD_add_connection) exactly
 * as a single process would, so no byte is relayed or copied. The child reports, on the same
 * socketpair, what each connection is doing (srv_iso_msg): a request's headers are in (BUSY, with
 * the API whose error shape it speaks), its response was queued (RESP) or is a stream (STREAM), the
 * request finished (IDLE again), the connection closed (the parent then closes its descriptor).
 *
 * When the child dies (a signal, an abort, an exit), the parent still holds every connection open
 * and knows its state: a request none of whose response was sent gets a 500 in its API's error shape naming
 * the cause ("the engine stopped: signal 6 (Aborted); restarting"); a stream gets an error event in
 * its format (SSE or NDJSON, in its chunked framing) and ends; a connection whose request the child
 * never read is kept and handed to the next child; an idle one is closed. The parent then starts a
 * new child, after a backoff that doubles with each fast crash (one within SRV_ISO_FAST_S of the
 * start), and gives up (exit 1, with a log line) after SRV_ISO_MAX_FAST fast crashes in a row. While
 * no child serves, new connections wait in the parent (handed over when the child is ready), and
 * GET /health is answered by the parent itself: 503 {"status":"restarting"}.
 *
 * Watchdog. A hung engine (a deadlock, a step that never ends) does not die, so the child also
 * reports that it is alive (SRV_ISO_ALIVE, every SRV_ISO_ALIVE_MS) while its engine is idle or has
 * run a step since the last report; a child with work and no step is silent. A ready child silent
 * for longer than srv_supervisor.engine_timeout_s is killed (SIGKILL) and treated as a crash whose
 * cause is the timeout ("the engine stopped: no progress for 60 s (--engine-timeout); restarting").
 *
 * With a pool of models (pool.c), each loaded model has its own child, control socket and
 * restart backoff, and all of the above holds per model: one model's crash answers and restarts
 * only its own requests and engine. The supervisor peeks at each request (never consuming a byte)
 * to learn its model before handing the connection to that model's child, starting the child
 * first when the model is not loaded (and stopping the least recently used idle child when memory
 * or --max-models asks); the children answer with "Connection: close" so that each request is
 * routed anew.
 *
 * Signals: the child runs in its own process group (a terminal's Ctrl-C reaches the parent only) and
 * dies with the parent (PR_SET_PDEATHSIG, SIGKILL: a kill -9 of the server stops both, as it stopped
 * the single process). SIGINT or SIGTERM to the parent is passed to the child as SIGTERM (a second
 * one again: the child then cancels running generations at once), the listening socket is closed,
 * and the parent exits with the child's status once it is gone.
 *
 * Whether any byte of a response reached the client is read from the socket itself, which parent
 * and child share: the bytes it has written (acknowledged + queued, srv_iso_sent) now and when the
 * request's headers were in (the child measures that one). None: the whole 500 goes out, whatever
 * the child had queued. Some, of a stream: the error event follows. Some, of another response: the
 * parent only closes (the client sees a cut response). A crash while a stream's chunk is being
 * written leaves that chunk cut before the error event: the client then sees a broken stream.
 */
#ifndef KILN_SERVER_ISOLATE_H
#define KILN_SERVER_ISOLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_ISO_FAST_S   10 /* a crash within this many seconds of the child's start is a fast one */
#define SRV_ISO_MAX_FAST 5  /* fast crashes in a row after which the supervisor gives up */

/* Messages on the socketpair. Child to parent: every type; parent to child: SRV_ISO_CONN, carrying
 * the connection's socket (SCM_RIGHTS). conn is the parent's id of the connection. */
typedef enum srv_iso_type {
    SRV_ISO_READY = 1, /* the child serves: pending connections may come */
    SRV_ISO_CONN,      /* parent -> child: a connection to serve */
    SRV_ISO_BUSY,      /* a request's headers are in; api = srv_api, flags below, sent = srv_iso_sent now */
    SRV_ISO_RESP,      /* a response is queued */
    SRV_ISO_STREAM,    /* a stream is queued (NDJSON on SRV_API_OLLAMA, else SSE) */
    SRV_ISO_IDLE,      /* the request finished: the connection waits for the next one */
    SRV_ISO_CLOSED,    /* the child closed the connection */
    SRV_ISO_ALIVE,     /* the engine is idle or made progress (the watchdog's heartbeat) */
} srv_iso_type;

#define SRV_ISO_ALIVE_MS 250 /* how often the child says it is alive */

#define SRV_ISO_HTTP11    1u /* the request is HTTP/1.1 (a stream is chunked) */
#define SRV_ISO_RESPONSES 2u /* an OpenAI Responses route (its own stream error event) */

typedef struct srv_iso_msg {
    uint32_t type, conn, api, flags;
    uint64_t sent;
} srv_iso_msg;

/* Bytes written to a TCP socket so far by anyone holding it (acknowledged + still queued). The
 * supervisor compares it with the count at a request's start (SRV_ISO_BUSY) to learn whether any byte
 * of the response reached the socket. 0 when the socket does not say. */
uint64_t srv_iso_sent(int fd);

/* What the supervisor needs: where to listen (already probed by the caller; port 0: any) and the
 * child's body. child_main runs in the forked child with ctl (the child's end of the socketpair),
 * port (the bound one), restarts (children of this model started before this one: 0 for the
 * first) and model (the entry of the model pool it serves, pool.h; 0 is the default model, whose
 * first child is the only one that opens a browser); it returns the child's exit status. */
typedef struct srv_supervisor {
    const char *host;
    int port;
    unsigned max_conns;        /* connections held at most (more are closed at once) */
    unsigned timeout_s;        /* a connection whose request head and body have not come in this long is
                                  closed (0: never) */
    unsigned max_conns_per_ip; /* connections from one client address at most (more are closed at once) */
    size_t max_body;           /* the request body limit (a larger declared body is handed over at once) */
    unsigned engine_timeout_s; /* a ready child silent this long is killed (the watchdog); 0: never */
    int (*child_main)(int ctl, int port, unsigned restarts, size_t model, void *arg);
    void *arg;
} srv_supervisor;

/* Binds host:port, then runs children until SIGINT/SIGTERM (which the caller has blocked) as the
 * file comment says, one per loaded model of the pool (pool.c: the supervisor reads each request's
 * model before handing it over). Returns the exit status for `kiln serve`: the default model's first
 * child's when it exits before it is ready (a model that cannot load), 1 when the address cannot be
 * bound or the supervisor gives up (the last loaded model crashed too often), else 0 or the status
 * of a child that did not stop cleanly. */
int srv_supervise(const srv_supervisor *sv);

/* The child's side (http.c): the control socket of an isolated server (-1: a single process), set
 * before srv_http_start, which then starts libmicrohttpd without a listening socket, serves the
 * connections the parent hands over and reports READY. */
void srv_iso_set_ctl(int ctl, unsigned restarts);
/* Whether this process is an isolated server's engine, and the restarts before it (for /stats and
 * /metrics). */
bool srv_iso_child(unsigned *restarts);

/* Debug crash (--debug-crash): a request with the header "X-Kiln-Debug-Crash: N" makes the process
 * abort at its N-th token event (on the engine's thread); 0 aborts in the handler before anything is
 * generated. The header is ignored unless srv_iso_debug_crash(true) was called. */
void srv_iso_debug_crash(bool on);
/* The same switch enables "X-Kiln-Debug-Hang: N": the engine's thread stops for good at the
 * request's N-th token event (N >= 1), for the watchdog's tests. */
/* The N of the request the calling thread serves (0: none) and whether it hangs rather than
 * aborts, which srv_job_submit copies. */
extern _Thread_local unsigned srv_iso_abort_at;
extern _Thread_local bool srv_iso_hang;

#endif
