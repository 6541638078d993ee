/* cli.h -- the subcommands of the attnkit tool, one file each. Each returns the process exit
   status: 0 success, 1 a failed check or operation, 2 a usage error. */
#ifndef AK_TOOLS_CLI_H
#define AK_TOOLS_CLI_H

int ak_cmd_layouts(int argc, char **argv); /* cmd_layouts.c */
int ak_cmd_bench(int argc, char **argv);   /* cmd_bench.c */
int ak_cmd_check(int argc, char **argv);   /* cmd_check.c */

/* Shared option helpers (attnkit.c). */
int ak_cli_has_flag(int argc, char **argv, const char *flag);
/* Value of "--name VALUE" or "--name=VALUE"; NULL when absent. */
const char *ak_cli_option(int argc, char **argv, const char *name);

#endif
