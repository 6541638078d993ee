/* cli.h -- the subcommands of the attnkit tool, one file each. Each returns the process exit
   status: 0 success, 1 a failed check or operation, 2 a usage error. */
#ifndef AK_TOOLS_CLI_H
#define AK_TOOLS_CLI_H

#include <stdint.h>

int ak_cmd_layouts(int argc, char **argv); /* cmd_layouts.c */
int ak_cmd_bench(int argc, char **argv);   /* cmd_bench.c */
int ak_cmd_check(int argc, char **argv);   /* cmd_check.c */
int ak_cmd_plan(int argc, char **argv);    /* cmd_plan.c */
int ak_cmd_run(int argc, char **argv);     /* cmd_run.c */

/* Shared option helpers (attnkit.c). */
int ak_cli_has_flag(int argc, char **argv, const char *flag);
/* Value of "--name VALUE" or "--name=VALUE"; NULL when absent. */
const char *ak_cli_option(int argc, char **argv, const char *name);

/* Planner helpers (cmd_plan.c), shared with `attnkit run`. */
struct ak_model;
struct ak_plan_desc;
void ak_cli_plan_desc(const struct ak_model *m, struct ak_plan_desc *d); /* model preset -> desc */
int ak_cli_int_list(const char *s, int32_t *out, int cap); /* "1,2,3" -> count, or -1 */

#endif
