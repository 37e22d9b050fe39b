/*
 * main.c - the kiln command: dispatches to one verb per file in src/cli/. With no command (or
 * only flags) it runs `kiln serve` with automatic choices: the most suitable local model, settings
 * from the machine, and the browser opened on the server's page. Before any verb runs, standard
 * input, output and error are made sure to be open (see open_std_fds).
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Opens each of file descriptors 0, 1 and 2 that is closed on /dev/null (0 for reading, 1 and 2
 * for writing). A closed one would otherwise be taken by the next file or pipe the command opens:
 * `kiln chat <&-` read its own internal pipe as its input and hung, and with stdout closed the
 * output would go into whatever file took descriptor 1. False when /dev/null cannot be opened. */
static bool open_std_fds(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        const int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (got < 0) return false;
        if (got != fd) { /* not expected (the lowest free number is fd), but be sure */
            const bool ok = dup2(got, fd) == fd;
            close(got);
            if (!ok) return false;
        }
    }
    return true;
}

/* `kiln run ORG/NAME:QUANT -p ...` (also chat and serve): a model named right after the verb, as
 * `ollama run` takes it, is -m's value. Returns a new argv (argc updated) with "-m" inserted before
 * it (freed at exit), or NULL when the verb is another or its next argument is a flag. */
static char **g_with_m; /* model_first's argv, freed at exit */
static void free_with_m(void) { free(g_with_m); }

static char **model_first(int *argc, char **argv) {
    static const char *const verbs[] = {"run", "chat", "serve"};
    bool takes = false;
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) takes |= strcmp(argv[1], verbs[i]) == 0;
    if (!takes || *argc < 3 || argv[2][0] == '-') return NULL;
    char **v = malloc(((size_t)*argc + 2) * sizeof *v);
    if (!v) return NULL;
    v[0] = argv[0];
    v[1] = argv[1];
    v[2] = "-m";
    for (int i = 2; i <= *argc; i++) v[i + 1] = argv[i]; /* with the terminating NULL */
    (*argc)++;
    g_with_m = v;
    atexit(free_with_m);
    return v;
}

int main(int argc, char **argv) {
    if (!open_std_fds()) {
        fprintf(stderr, "kiln: standard input, output or error is closed and /dev/null cannot be opened: %s\n",
                strerror(errno));
        return CLI_EXIT_FAIL;
    }
    if (argc < 2) return cli_serve(argc, argv);
    const char *verb = argv[1];
    if (strcmp(verb, "--version") == 0 || strcmp(verb, "version") == 0) {
        printf("kiln %s\n", kiln_version());
        return 0;
    }
    if (strcmp(verb, "help") == 0 || strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0) {
        cli_usage(argc > 2 ? argv[2] : NULL, false);
        return 0;
    }
    char **with_m = model_first(&argc, argv);
    if (with_m) argv = with_m;
    if (strcmp(verb, "run") == 0) return cli_run(argc - 1, argv + 1);
    if (strcmp(verb, "chat") == 0) return cli_chat(argc - 1, argv + 1);
    if (strcmp(verb, "perplexity") == 0) return cli_perplexity(argc - 1, argv + 1);
    if (strcmp(verb, "tokenize") == 0) return cli_tokenize(argc - 1, argv + 1);
    if (strcmp(verb, "inspect") == 0) return cli_inspect(argc - 1, argv + 1);
    if (strcmp(verb, "bench") == 0) return cli_bench(argc - 1, argv + 1);
    if (strcmp(verb, "template") == 0) return cli_template(argc - 1, argv + 1);
    if (strcmp(verb, "parse") == 0) return cli_parse(argc - 1, argv + 1);
    if (strcmp(verb, "serve") == 0) return cli_serve(argc - 1, argv + 1);
    if (strcmp(verb, "ls") == 0) return cli_ls(argc - 1, argv + 1);
    if (strcmp(verb, "grammar") == 0) return cli_grammar(argc - 1, argv + 1);
    if (strcmp(verb, "pull") == 0) return cli_pull(argc - 1, argv + 1);
    if (strcmp(verb, "rm") == 0) return cli_rm(argc - 1, argv + 1);
    if (strcmp(verb, "embed") == 0) return cli_embed(argc - 1, argv + 1);
    if (verb[0] == '-') return cli_serve(argc, argv); /* `kiln --port 9000`: serve's flags */
    fprintf(stderr, "kiln: unknown command '%s'\n", verb);
    cli_usage(NULL, true);
    return CLI_EXIT_USAGE;
}
