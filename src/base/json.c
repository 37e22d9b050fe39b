/*
 * json.c - the library's allocator for jansson and parsing that checks it (see json.h).
 */
#include "base/json.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Address space (and, under strict overcommit, commit charge) held back for jansson: mapped, never
 * touched, unmapped when an allocation fails, mapped again when the next parse begins. A mapping,
 * not a malloc: the heap's accounting does not see it. */
#define RESERVE_BYTES (1u << 20)

static json_malloc_t prev_malloc; /* the allocator the library's stands on */
static void *reserve;
static _Thread_local unsigned failures; /* allocations jansson saw fail on this thread */

static void reserve_refill(void) {
    if (__atomic_load_n(&reserve, __ATOMIC_ACQUIRE)) return;
    void *r = mmap(NULL, RESERVE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *none = NULL;
    if (r == MAP_FAILED) return;
    if (!__atomic_compare_exchange_n(&reserve, &none, r, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        munmap(r, RESERVE_BYTES);
}

/* prev_malloc's memory; when it fails, the reserve goes back and it is asked once more. */
static void *json_malloc(size_t n) {
    const json_malloc_t below = __atomic_load_n(&prev_malloc, __ATOMIC_ACQUIRE);
    void *p = below(n);
    if (!p) {
        void *r = __atomic_exchange_n(&reserve, NULL, __ATOMIC_ACQ_REL);
        if (r) munmap(r, RESERVE_BYTES);
        p = below(n);
        if (!p) failures++;
    }
    return p;
}

static void install(void) {
    json_malloc_t m;
    json_free_t f;
    json_get_alloc_funcs(&m, &f);
    __atomic_store_n(&prev_malloc, m, __ATOMIC_RELEASE); /* before jansson can call json_malloc */
    json_set_alloc_funcs(json_malloc, f);
}

/* The library's allocator in place (once), its reserve made. */
static void setup(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install);
    reserve_refill();
}

/* v, or NULL with *err saying "out of memory" when an allocation failed since `before`. */
static json_t *checked(json_t *v, unsigned before, json_error_t *err) {
    if (failures == before) return v;
    json_decref(v);
    memset(err, 0, sizeof *err);
    err->line = err->column = -1;
    snprintf(err->text, sizeof err->text, "out of memory");
    err->text[JSON_ERROR_TEXT_LENGTH - 1] = (char)json_error_out_of_memory;
    return NULL;
}

json_t *kn_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *err) {
    setup();
    const unsigned before = failures;
    return checked(json_loadb(buf, len, flags, err), before, err);
}

json_t *kn_json_loads(const char *text, size_t flags, json_error_t *err) {
    return kn_json_loadb(text, strlen(text), flags, err);
}

json_t *kn_json_load_file(const char *path, size_t flags, json_error_t *err) {
    setup();
    const unsigned before = failures;
    return checked(json_load_file(path, flags, err), before, err);
}

unsigned kn_json_mark(void) {
    setup();
    return failures;
}

bool kn_json_failed_since(unsigned mark) { return failures != mark; }

kiln_status kn_json_status(const json_error_t *err, kiln_status other) {
    return json_error_code(err) == json_error_out_of_memory ? KILN_ERR_NOMEM : other;
}
