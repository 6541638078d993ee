/* json.h -- a tiny streaming JSON writer for the CLI (correct escaping, round-trip floats). */
#ifndef AK_TOOLS_JSON_H
#define AK_TOOLS_JSON_H

#include <stdint.h>
#include <stdio.h>

typedef struct ak_json {
    FILE *f;
    int depth;
    int need_comma[64];
} ak_json;

void ak_json_init(ak_json *j, FILE *f);
/* key is NULL inside arrays and at the top level. */
void ak_json_object_begin(ak_json *j, const char *key);
void ak_json_object_end(ak_json *j);
void ak_json_array_begin(ak_json *j, const char *key);
void ak_json_array_end(ak_json *j);
void ak_json_str(ak_json *j, const char *key, const char *val); /* val NULL writes null */
void ak_json_num(ak_json *j, const char *key, double val);      /* non-finite writes null */
void ak_json_int(ak_json *j, const char *key, int64_t val);
void ak_json_bool(ak_json *j, const char *key, int val);
void ak_json_null(ak_json *j, const char *key);
/* Ends the document with a newline. */
void ak_json_finish(ak_json *j);

#endif
