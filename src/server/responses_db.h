/*
 * responses_db.h - stored responses of /v1/responses kept on disk, in the SSD tier's directory
 * (kiln serve --ssd-cache DIR: DIR/responses.sqlite), so that GET /v1/responses/{id} and
 * previous_response_id outlive a restart of the server. responses.c keeps its bounded memory store
 * and writes through to this one; it reads from it when memory misses. A database that cannot be
 * opened or is damaged is reported once on stderr and the server keeps its responses in memory only.
 * Thread-safe (one connection behind a lock).
 */
#ifndef KILN_SERVER_RESPONSES_DB_H
#define KILN_SERVER_RESPONSES_DB_H

#include <stdbool.h>
#include <stddef.h>

/* Opens DIR/responses.sqlite once per process (later calls do nothing); dir NULL: nothing is kept
 * on disk. At most max_rows responses and max_bytes of JSON are kept, the oldest dropped first. */
void srv_rdb_open(const char *dir, size_t max_rows, size_t max_bytes);
/* Keeps (or replaces) the response id with its JSON and its conversation's; false when not kept. */
bool srv_rdb_put(const char *id, long created_at, const char *response, const char *messages);
/* A malloc'd copy of what is kept under id (which: 0 the response, 1 the messages); NULL: none. */
char *srv_rdb_get(const char *id, int which);
/* Drops id; true when it was kept. */
bool srv_rdb_delete(const char *id);

#endif
