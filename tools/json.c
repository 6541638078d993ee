/* json.c -- see json.h. */
#include "json.h"

#include <math.h>
#include <string.h>

void ak_json_init(ak_json *j, FILE *f) {
    memset(j, 0, sizeof *j);
    j->f = f;
}

static void put_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

static void prefix(ak_json *j, const char *key) {
    if (j->need_comma[j->depth]) fputc(',', j->f);
    j->need_comma[j->depth] = 1;
    if (key != NULL) {
        put_string(j->f, key);
        fputc(':', j->f);
    }
}

void ak_json_object_begin(ak_json *j, const char *key) {
    prefix(j, key);
    fputc('{', j->f);
    if (j->depth < 63) j->need_comma[++j->depth] = 0;
}

void ak_json_object_end(ak_json *j) {
    fputc('}', j->f);
    if (j->depth > 0) j->depth--;
}

void ak_json_array_begin(ak_json *j, const char *key) {
    prefix(j, key);
    fputc('[', j->f);
    if (j->depth < 63) j->need_comma[++j->depth] = 0;
}

void ak_json_array_end(ak_json *j) {
    fputc(']', j->f);
    if (j->depth > 0) j->depth--;
}

void ak_json_str(ak_json *j, const char *key, const char *val) {
    prefix(j, key);
    if (val == NULL) fputs("null", j->f);
    else put_string(j->f, val);
}

void ak_json_num(ak_json *j, const char *key, double val) {
    prefix(j, key);
    if (!isfinite(val)) fputs("null", j->f);
    else fprintf(j->f, "%.17g", val);
}

void ak_json_int(ak_json *j, const char *key, int64_t val) {
    prefix(j, key);
    fprintf(j->f, "%lld", (long long)val);
}

void ak_json_bool(ak_json *j, const char *key, int val) {
    prefix(j, key);
    fputs(val ? "true" : "false", j->f);
}

void ak_json_null(ak_json *j, const char *key) {
    prefix(j, key);
    fputs("null", j->f);
}

void ak_json_finish(ak_json *j) {
    fputc('\n', j->f);
    fflush(j->f);
}
