/*
 * tool_grammar.c - what compiling the grammar of a request's tools costs (kiln_tool_grammar): the
 * first request with a new set of tools pays it before its prefill (the server keeps compiled
 * grammars, so the next requests with the same tools do not).
 *
 * Tool sets: the first N object schemas with properties of the JSON Schema test material (default
 * ../shared/data/json-schemas, or $KILN_TEST_DATA/json-schemas; files in name order, schemas of at
 * most 3,000 bytes of JSON that compile on their own), each one function's "parameters". For each N
 * and format, the best of -r compiles of the whole set, in milliseconds of the thread's CPU time.
 *
 * Usage: build/bench/tool_grammar [-d DIR] [-r REPS] [-n N,N,...] [FORMAT...]
 *   defaults: -r 5, -n 5,20,60, formats hermes qwen3-coder.
 */
#include "kiln.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_TOOLS = 128, MAX_SCHEMA_JSON = 3000 };

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

/* Up to max tools (a JSON array, new reference) from the schema files of dir; *n their count. */
static json_t *load_tools(const char *dir, int max, int *n) {
    json_t *tools = json_array();
    struct dirent **names;
    const int count = scandir(dir, &names, NULL, by_name);
    *n = 0;
    for (int i = 0; i < count; i++) {
        char path[4096];
        if (names[i]->d_name[0] != '.' && *n < max &&
            snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name) < (int)sizeof path) {
            json_t *file = json_load_file(path, 0, NULL);
            json_t *schema = json_object_get(file, "schema");
            char *text =
                json_is_object(json_object_get(schema, "properties")) ? json_dumps(schema, JSON_COMPACT) : NULL;
            kiln_grammar_params gp = kiln_grammar_default_params();
            gp.kind = KILN_GRAMMAR_JSON_SCHEMA;
            kiln_grammar *g = NULL;
            if (text && strlen(text) <= MAX_SCHEMA_JSON &&
                kiln_grammar_compile(text, strlen(text), &gp, &g) == KILN_OK) {
                char name[32];
                snprintf(name, sizeof name, "tool_%d", *n);
                json_array_append_new(tools, json_pack("{s:s, s:{s:s, s:O}}", "type", "function", "function", "name",
                                                       name, "parameters", schema));
                (*n)++;
            }
            kiln_grammar_free(g);
            free(text);
            json_decref(file);
        }
        free(names[i]);
    }
    free(names);
    return tools;
}

int main(int argc, char **argv) {
    const char *root = getenv("KILN_TEST_DATA");
    char dir_buf[1024];
    snprintf(dir_buf, sizeof dir_buf, "%s/json-schemas", root && *root ? root : "../shared/data");
    const char *dir = dir_buf;
    int reps = 5, sizes[16] = {5, 20, 60}, n_sizes = 3;
    const char *formats[16] = {"hermes", "qwen3-coder"};
    int n_formats = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-d") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            n_sizes = 0;
            for (char *s = argv[++i]; *s && n_sizes < 16; s += strspn(s, ","))
                sizes[n_sizes++] = (int)strtol(s, &s, 10);
        } else if (argv[i][0] != '-' && n_formats < 16) formats[n_formats++] = argv[i];
        else {
            fprintf(stderr, "usage: %s [-d DIR] [-r REPS] [-n N,N,...] [FORMAT...]\n", argv[0]);
            return 2;
        }
    }
    if (!n_formats) n_formats = 2;
    if (reps < 1) reps = 1;
    int have = 0;
    json_t *all = load_tools(dir, MAX_TOOLS, &have);
    if (!have) {
        fprintf(stderr, "no schemas found in %s\n", dir);
        json_decref(all);
        return 1;
    }
    printf("| tools | JSON bytes | format | compile ms (best of %d) |\n| ---: | ---: | --- | ---: |\n", reps);
    for (int s = 0; s < n_sizes; s++) {
        const int n = sizes[s] < have ? sizes[s] : have;
        json_t *set = json_array();
        for (int i = 0; i < n; i++) json_array_append(set, json_array_get(all, (size_t)i));
        char *text = json_dumps(set, JSON_COMPACT);
        for (int f = 0; f < n_formats; f++) {
            kiln_tool_grammar_params tp = kiln_tool_grammar_default_params();
            tp.format = formats[f];
            tp.tools = text;
            double best = 1e30;
            for (int r = 0; r < reps; r++) {
                kiln_grammar *g = NULL;
                const double t0 = cpu_ms();
                const kiln_status st = kiln_tool_grammar(&tp, &g);
                const double dt = cpu_ms() - t0;
                kiln_grammar_free(g);
                if (st) {
                    printf("| %d | %zu | %s | failed: %s |\n", n, strlen(text), formats[f], kiln_last_error());
                    best = -1;
                    break;
                }
                if (dt < best) best = dt;
            }
            if (best >= 0) printf("| %d | %zu | %s | %.2f |\n", n, strlen(text), formats[f], best);
        }
        free(text);
        json_decref(set);
    }
    json_decref(all);
    return 0;
}
