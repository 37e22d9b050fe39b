/*
 * log.c - the process-wide log sink. The library never writes to stdout: by default warnings and
 * errors go to stderr; an application can install its own sink with kiln_set_log.
 */
#include "base/base.h"

#include <stdio.h>

static void default_sink(kiln_log_level level, const char *msg, void *user) {
    static const char *const tags[] = {"error", "warning", "info", "debug"};
    (void)user;
    fprintf(stderr, "kiln: %s: %s\n", tags[level], msg);
}

static kiln_log_fn g_sink = default_sink;
static void *g_user;
static kiln_log_level g_max = KILN_LOG_WARN;

void kiln_set_log(kiln_log_fn fn, void *user, kiln_log_level max_level) {
    g_sink = fn ? fn : default_sink;
    g_user = user;
    g_max = max_level;
}

void kn_log(kiln_log_level level, const char *fmt, ...) {
    if (level > g_max) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_sink(level, buf, g_user);
}
