/*
 * guard.c - what a request to `kiln serve` must be before it is served, so that web pages the user
 * visits cannot use the server.
 *
 * A browser lets any page send requests to 127.0.0.1, and a page whose own host name an attacker
 * points at 127.0.0.1 (DNS rebinding) can even read the answers. Three rules close both:
 *   - Host: a name must be one of this server's (localhost or a name under .localhost, the --host
 *     name, an --allow-host name); an IP address is always fine (rebinding needs a name), with or
 *     without a port, IPv6 in brackets. Otherwise 403.
 *   - Origin: a request a browser marks as coming from another origin (Origin differs from Host,
 *     and its host is not an --allow-host name) is refused with 403 unless --cors lists that
 *     origin. Allowed origins get Access-Control-Allow-Origin on every response and an answer to
 *     their preflight (OPTIONS); without --cors no response carries CORS headers (the chat page is
 *     same-origin).
 *   - Body type: a JSON route's body must say Content-Type: application/json (or another +json
 *     type; parameters such as charset are fine), else 415. A page can send text/plain without
 *     asking (no preflight); it cannot send JSON that way.
 */
#include "server.h"

#include <microhttpd.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <string.h>
#include <strings.h>

/* Whether the comma-separated list holds item[0..n) (ASCII case-insensitive; blanks around
 * entries and one trailing '/' of an entry are ignored), or has an entry "*" when star says that
 * one counts. */
static bool list_has(const char *list, const char *item, size_t n, bool star) {
    if (!list) return false;
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        size_t len = (size_t)(e - p);
        while (len && p[len - 1] == ' ') len--;
        if (len > 1 && p[len - 1] == '/') len--;
        if ((star && len == 1 && *p == '*') || (len == n && len && strncasecmp(p, item, n) == 0)) return true;
        p = e;
    }
    return false;
}

static const char *header(srv_req *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

/* The host of a Host header value without its port: *ip says whether it is an IP address
 * literal (IPv4 dotted, or IPv6 in brackets, returned without them). False when malformed. */
static bool host_name(const char *h, char *out, size_t cap, bool *ip) {
    const bool bracket = h[0] == '[';
    const char *start = bracket ? h + 1 : h, *end = bracket ? strchr(h, ']') : start + strcspn(start, ":");
    if (!end) return false;
    const char *rest = end + (bracket ? 1 : 0);
    if (*rest == ':') {
        if (!rest[1]) return false;
        for (rest++; *rest; rest++)
            if (!isdigit((unsigned char)*rest)) return false;
    } else if (*rest) {
        return false;
    }
    const size_t n = (size_t)(end - start);
    if (n == 0 || n >= cap) return false;
    memcpy(out, start, n);
    out[n] = 0;
    unsigned char addr[16];
    *ip = inet_pton(bracket ? AF_INET6 : AF_INET, out, addr) == 1;
    if (bracket && !*ip) return false;
    if (n > 1 && out[n - 1] == '.') out[n - 1] = 0; /* "localhost." is "localhost" */
    return true;
}

/* Whether a name (no port, no trailing dot) is one of this server's. */
static bool name_allowed(const srv *s, const char *name) {
    static const char lh[] = ".localhost";
    const size_t n = strlen(name);
    if (strcasecmp(name, "localhost") == 0) return true;
    if (n > sizeof lh - 1 && strcasecmp(name + n - (sizeof lh - 1), lh) == 0) return true;
    size_t hn = strlen(s->cfg.host);
    if (hn > 1 && s->cfg.host[hn - 1] == '.') hn--;
    if (hn == n && strncasecmp(s->cfg.host, name, n) == 0) return true;
    return list_has(s->cfg.allow_hosts, name, n, true);
}

/* The origin a request comes from when a browser marks it cross-origin, else NULL. An origin is
 * this server's own when it is "scheme://" + the request's Host, or when its host is an
 * --allow-host name (a page served through a reverse proxy under that name, whose Host the proxy
 * may rewrite). */
static const char *foreign_origin(srv_req *r) {
    const char *o = header(r, MHD_HTTP_HEADER_ORIGIN), *h = header(r, MHD_HTTP_HEADER_HOST);
    if (!o) return NULL;
    const char *sep = strstr(o, "://");
    if (!sep) return o;
    const char *a = sep + 3;
    if (h && strcasecmp(a, h) == 0) return NULL;
    const size_t n = a[0] == '[' ? strcspn(a, "]") + 1 : strcspn(a, ":/");
    return list_has(r->server->cfg.allow_hosts, a, n, false) ? NULL : o;
}

/* Whether --cors lets origin o call. */
static bool cors_allowed(const srv *s, const char *o) { return list_has(s->cfg.cors, o, strlen(o), true); }

void srv_cors_headers(srv_req *r, struct MHD_Response *resp) {
    const srv *s = r->server;
    const char *o = s->cfg.cors ? foreign_origin(r) : NULL;
    if (!o || !cors_allowed(s, o)) return;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, o);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, MHD_HTTP_HEADER_ORIGIN);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_EXPOSE_HEADERS, SRV_APPROX_HEADER);
}

/* The headers a preflight may ask for: what it asks for when that is a plain list of header
 * names, else the two the API uses. */
static const char *preflight_headers(srv_req *r) {
    const char *h = header(r, "Access-Control-Request-Headers");
    if (!h || !*h || strlen(h) > 1024) return "Authorization, Content-Type";
    for (const char *p = h; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("-_, ", *p)) return "Authorization, Content-Type";
    return h;
}

/* OPTIONS: a preflight from an allowed origin is answered with what it may send; one from
 * another origin gets 403; a plain OPTIONS (no Origin) learns the methods. */
static void options(srv_req *r) {
    const char *o = foreign_origin(r);
    if (o && !cors_allowed(r->server, o)) {
        srv_send_error(r, 403, "invalid_request_error", NULL, "origin_not_allowed",
                       "cross-origin requests from '%s' are not allowed: start kiln serve with --cors %s to allow "
                       "them",
                       o, o);
        return;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD, POST, DELETE, OPTIONS");
    if (o) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", preflight_headers(r));
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    srv_send_response(r, 204, resp);
}

bool srv_guard(srv_req *r) {
    const srv *s = r->server;
    const char *h = header(r, MHD_HTTP_HEADER_HOST);
    char name[256];
    bool ip = false;
    if (h && *h && !list_has(s->cfg.allow_hosts, "*", 1, true)) { /* no Host: not a browser */
        if (!host_name(h, name, sizeof name, &ip)) {
            srv_send_error(r, 400, "invalid_request_error", NULL, "invalid_host", "the Host header '%s' is malformed",
                           h);
            return false;
        }
        if (!ip && !name_allowed(s, name)) {
            srv_send_error(r, 403, "invalid_request_error", NULL, "host_not_allowed",
                           "the Host '%s' is not a name of this server (a guard against DNS rebinding): use its IP "
                           "address or localhost, or start kiln serve with --allow-host %s",
                           h, name);
            return false;
        }
    }
    if (strcmp(r->method, "OPTIONS") == 0) {
        options(r);
        return false;
    }
    const char *o = foreign_origin(r);
    if (o && !cors_allowed(s, o)) {
        srv_send_error(r, 403, "invalid_request_error", NULL, "origin_not_allowed",
                       "cross-origin requests from '%s' are not allowed: start kiln serve with --cors %s to allow "
                       "them",
                       o, o);
        return false;
    }
    return true;
}

bool srv_json_body(srv_req *r) {
    const char *ct = header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    size_t n = ct ? strcspn(ct, ";") : 0;
    while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t')) n--;
    static const char json[] = "application/json", suffix[] = "+json";
    if (ct && ((n == sizeof json - 1 && strncasecmp(ct, json, n) == 0) ||
               (n > sizeof suffix - 1 && strncasecmp(ct, "application/", 12) == 0 &&
                strncasecmp(ct + n - (sizeof suffix - 1), suffix, sizeof suffix - 1) == 0)))
        return true;
    srv_send_error(r, 415, "invalid_request_error", NULL, "unsupported_media_type",
                   "the request body must be JSON sent with 'Content-Type: application/json' (got %s%s%s)",
                   ct ? "'" : "", ct ? ct : "no Content-Type", ct ? "'" : "");
    return false;
}
