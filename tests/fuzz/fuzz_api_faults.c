/*
 * fuzz_api_faults.c - libFuzzer harness of the server's requests with an allocation failing: the
 * `api` harness's requests (fuzz_api.c: a JSON body POSTed to one of its routes of a server inside
 * the harness), each sent three times: clean, with one allocation failing, clean again.
 *
 * Feeds: the first byte picks the route (as fuzz_api.c), the next two (little-endian) which of the
 * allocations of the first exchange fails in the second (modulo their count), the rest is the body.
 * The allocator is wrapped at link time (tests/unit/faults_alloc.h: the server's code, the library
 * and jansson, which the server points at malloc); while the second exchange runs, the chosen call
 * fails. Fails on what test_faults_alloc_server checks of a few fixed requests, here for any
 * request: a reply to the failing exchange that is silence where the clean one answered, a client
 * error (4xx) the clean one did not give, a 5xx without an error message, or a third exchange that
 * does not answer as the first did (the server stopped serving, or a cache went wrong); and, as in
 * every harness, a crash, a sanitizer report, a leak or a hang. A 500 of the clean exchange fails as
 * in fuzz_api.c. Whether the text of a reply is right is left to the unit test (a request here may
 * sample at random). Seeds: the api seeds with the two bytes after the first
 * (tests/fuzz/corpus/api_faults/).
 */
#include "faults_alloc.h"
#include "fuzz_server.h"

static char reply[FZ_SRV_REPLY_MAX];

/* One exchange of msg[n] with the fail-th allocation failing (0: none, counting only); its status
 * (0: no reply), the body into reply. */
static int exchange(const char *msg, size_t n, long fail) {
    size_t got = 0;
    fa_arm(fail);
    const bool ok = fz_srv_exchange(msg, n, false, reply, &got);
    fa_disarm();
    if (!ok) { /* the server's listening socket gone, or this process out of descriptors */
        fprintf(stderr, "fuzz: no connection to the server: %s\n", strerror(errno));
        abort();
    }
    return fz_srv_status(reply);
}

/* Whether the reply's body is a JSON object with an error message (any of the three APIs' shapes). */
static bool error_reply(void) {
    const char *body = strstr(reply, "\r\n\r\n");
    return body && strstr(body, "\"error\"") && (strstr(body, "\"message\"") || strstr(body, "\"error\":\""));
}

/* Aborts with why, the statuses, the request msg[n] (its start) and the reply. */
static void fail(const char *why, int clean, int status, long at, const char *msg, size_t n) {
    fprintf(stderr, "fuzz: %s (the clean request: %d; this one: %d; the allocation that failed: %ld)\n", why, clean,
            status, at);
    fprintf(stderr, "%.*s\n--- reply:\n%.2000s\n", (int)(n < 600 ? n : 600), msg, reply);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3 || size > (256u << 10)) return 0;
    const unsigned pick = (unsigned)data[1] | (unsigned)data[2] << 8;
    size_t n = 0;
    char *msg = fz_api_request(data[0], data + 3, size - 3, &n);
    const int clean = exchange(msg, n, 0);
    fz_srv_check(msg, n, reply);
    const long count = __atomic_load_n(&fa_calls, __ATOMIC_RELAXED);
    if (count > 0) {
        const long at = 1 + (long)(pick % (unsigned long)count);
        const int now = exchange(msg, n, at);
        if (!now && clean) fail("no reply", clean, now, at, msg, n);
        if (now >= 400 && now < 500 && now != clean)
            fail("a client error the clean request did not get", clean, now, at, msg, n);
        if (now >= 500 && now != clean && !error_reply())
            fail("a server error without a message", clean, now, at, msg, n);
        const int again = exchange(msg, n, 0);
        if (again != clean) fail("the next clean request was answered otherwise", clean, again, at, msg, n);
    }
    free(msg);
    return 0;
}
