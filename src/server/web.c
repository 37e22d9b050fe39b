/*
 * web.c - the browser chat page of `kiln serve`: "/" and the files next to it.
 *
 * The page's files live in web/ and are compiled into the binary (scripts/embed writes them into
 * the generated web_assets.c as srv_web_assets[]), so the server needs no files at run time and
 * the page always matches the server it came with. Each file is served at "/" + its name, and
 * index.html also at "/". The page is public: it carries no data, and it asks the user for the API
 * key itself, so these paths skip the key check that guards every other route. Responses say
 * `Cache-Control: no-cache` and carry an ETag (the file's checksum), so a browser revalidates on
 * every load and gets 304 while the server's page is unchanged. The page itself only talks to the
 * server it came from (its Content-Security-Policy says so).
 */
#include "server.h"

#include <microhttpd.h>

#include <string.h>

/* The page makes no requests elsewhere and builds no code from strings. */
#define PAGE_CSP                                                                                                       \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "              \
    "base-uri 'none'; frame-ancestors 'none'"

static const srv_web_asset *find_asset(const char *url) {
    if (strcmp(url, "/") == 0) url = "/index.html";
    for (const srv_web_asset *a = srv_web_assets; a->path; a++)
        if (strcmp(a->path, url) == 0) return a;
    return NULL;
}

/* True when the request's If-None-Match names the asset's current ETag (or is "*"). */
static bool not_modified(struct MHD_Connection *conn, const srv_web_asset *a) {
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    return h && (strcmp(h, "*") == 0 || strstr(h, a->etag) != NULL);
}

bool srv_web_serve(srv_req *r) {
    const srv_web_asset *a = find_asset(r->url);
    if (!a) return false;
    if (strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0) {
        srv_send_error(r, 405, "invalid_request_error", NULL, "method_not_allowed", "%s is not allowed on %s",
                       r->method, r->url);
        return true;
    }
    const bool fresh = not_modified(r->conn, a);
    const unsigned status = fresh ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK;
    /* The bytes are static: libmicrohttpd sends them without a copy (and no body for HEAD). */
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(fresh ? 0 : a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return true;
    }
    if (!fresh) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, a->etag);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    if (strncmp(a->content_type, "text/html", 9) == 0) {
        MHD_add_response_header(resp, "Content-Security-Policy", PAGE_CSP);
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    }
    srv_send_response(r, status, resp);
    return true;
}
