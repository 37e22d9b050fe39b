/*
 * main.c - the kiln command: dispatches to one verb per file in src/cli/. With no command (or
 * only flags) it runs `kiln serve` with automatic choices: the most suitable local model, settings
 * from the machine, and the browser opened on the server's page.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
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
    if (strcmp(verb, "run") == 0) return cli_run(argc - 1, argv + 1);
    if (strcmp(verb, "chat") == 0) return cli_chat(argc - 1, argv + 1);
    if (strcmp(verb, "perplexity") == 0) return cli_perplexity(argc - 1, argv + 1);
    if (strcmp(verb, "tokenize") == 0) return cli_tokenize(argc - 1, argv + 1);
    if (strcmp(verb, "bench") == 0) return cli_bench(argc - 1, argv + 1);
    if (strcmp(verb, "template") == 0) return cli_template(argc - 1, argv + 1);
    if (strcmp(verb, "serve") == 0) return cli_serve(argc - 1, argv + 1);
    if (strcmp(verb, "ls") == 0) return cli_ls(argc - 1, argv + 1);
    if (verb[0] == '-') return cli_serve(argc, argv);    /* `kiln --port 9000`: serve's flags */
    fprintf(stderr, "kiln: unknown command '%s'\n", verb);
    cli_usage(NULL, true);
    return CLI_EXIT_USAGE;
}
