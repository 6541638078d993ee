/* attnkit.c -- the command-line tool: dispatches to one subcommand per file. */
#include <stdio.h>
#include <string.h>

#include "attnkit.h"
#include "cli.h"

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command k_commands[] = {
    {"layouts", ak_cmd_layouts, "print the KV-cache layout registry [--json]"},
    {"bench", ak_cmd_bench, "time ops on a backend against ceilings measured in the same run"},
    {"check", ak_cmd_check, "compare a backend with the CPU backend op by op"},
    {"plan", ak_cmd_plan, "plan and explain one batch: --model M --phase P --q-lens .. [--json]"},
    {"run", ak_cmd_run, "the main job: serve one attention layer for N steps, plan, run, check"},
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: attnkit [--help] [--version] <command> [options]\n\n"
            "attnkit %s: attention backends for LLM serving (MLA, DSA, DeepSeek V4, paged MHA)\n\n"
            "commands:\n",
            ak_version_string());
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(f, "  %-9s %s\n", k_commands[i].name, k_commands[i].help);
    fprintf(f, "\n`attnkit <command> --help` describes a command's options.\n");
}

int ak_cli_has_flag(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0) return 1;
    return 0;
}

const char *ak_cli_option(int argc, char **argv, const char *name) {
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], name, n) != 0) continue;
        if (argv[i][n] == '=') return argv[i] + n + 1;
        if (argv[i][n] == '\0' && i + 1 < argc) return argv[i + 1];
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("attnkit %s (layout format %d)\n", ak_version_string(), AK_LAYOUT_FORMAT_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (strcmp(argv[1], k_commands[i].name) == 0) return k_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "attnkit: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
