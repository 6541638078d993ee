/* status.c -- status names and texts, the thread-local detail line, versions. */
#include "common/internal.h"

#include <stdio.h>
#include <string.h>

#define AK_DETAIL_MAX 512

static _Thread_local char ak_detail_[AK_DETAIL_MAX];

int32_t ak_version_number(void) { return AK_VERSION_NUMBER; }
const char *ak_version_string(void) { return AK_VERSION_STRING; }

const char *ak_status_name(ak_status s) {
    switch (s) {
#define AK_STATUS_NAME_(name, value, text)                                                        \
    case AK_##name: return "AK_" #name;
        AK_STATUS_MAP(AK_STATUS_NAME_)
#undef AK_STATUS_NAME_
    }
    return "AK_STATUS_UNKNOWN";
}

const char *ak_status_string(ak_status s) {
    switch (s) {
#define AK_STATUS_TEXT_(name, value, text)                                                        \
    case AK_##name: return text;
        AK_STATUS_MAP(AK_STATUS_TEXT_)
#undef AK_STATUS_TEXT_
    }
    return "unknown status";
}

const char *ak_last_error(void) { return ak_detail_; }

void ak_last_error_r(char *buf, size_t size) {
    if (buf == NULL || size == 0) return;
    snprintf(buf, size, "%s", ak_detail_);
}

void ak_clear_error(void) { ak_detail_[0] = '\0'; }

ak_status ak_fail(ak_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ak_detail_, sizeof ak_detail_, fmt, ap);
    va_end(ap);
    return s;
}
