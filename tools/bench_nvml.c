/* bench_nvml.c -- what `attnkit bench` reads from NVML beside its timings (targets.md 6.2: record
   the power limit with every run): the enforced power limit, and while a case's samples run, the
   instant power draw and the clock event reasons (why the SM clock is below its maximum, e.g. the
   software power cap), read every 2 ms by a watcher thread. Read between the samples instead, the
   power is that of an idle GPU (the sensor follows the last millisecond or so) and the reads would
   lengthen the idle gaps, which changes the power the case draws; the energy counter advances in
   steps too coarse for a 20-200 ms case (both tried on an H200, session 70). NVML ships with the
   NVIDIA driver, not the toolkit's build, so it is loaded at run time: without it the bench
   reports these fields as unknown. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_internal.h"

/* The NVML entry points used, with their C signatures (nvml.h): a status 0 is NVML_SUCCESS. */
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_shutdown_fn)(void);
typedef int (*nvml_by_pci_fn)(const char *bus_id, void **device);
typedef int (*nvml_u32_fn)(void *device, unsigned int *value);
typedef int (*nvml_u64_fn)(void *device, unsigned long long *value);

/* nvmlFieldValue_t, for nvmlDeviceGetFieldValues */
typedef struct nvml_field {
    unsigned int field_id, scope_id;
    long long timestamp, latency_us;
    int value_type; /* nvmlValueType_t: 0 double, 1 unsigned int, 2 unsigned long, 3 u64, 4 s64 */
    int status;     /* nvmlReturn_t of this field */
    union {
        double d;
        unsigned int u32;
        unsigned long ul;
        unsigned long long u64;
        long long s64;
    } value;
} nvml_field;
typedef int (*nvml_fields_fn)(void *device, int count, nvml_field *values);
#define NVML_FI_DEV_POWER_INSTANT 186 /* mW */

#define AK_WATCH_MAX 4096 /* readings per case: 8 s at one per 2 ms */

struct ak_bench_power {
    void *lib;
    void *device;
    /* the watcher, started and joined by the bench thread (its results are read after the join) */
    pthread_t thread;
    int running;
    atomic_int stop;
    double w[AK_WATCH_MAX];
    int nw;
    uint64_t seen; /* OR of the clock event reasons read */
    int have_seen;
    nvml_shutdown_fn shutdown;
    nvml_u32_fn limit;     /* nvmlDeviceGetEnforcedPowerLimit: mW */
    nvml_fields_fn fields; /* nvmlDeviceGetFieldValues */
    nvml_u64_fn reasons;   /* nvmlDeviceGetCurrentClocksEventReasons (or its older name) */
};

static void *sym(void *lib, const char *name) {
    return lib != NULL ? dlsym(lib, name) : NULL;
}

ak_bench_power *ak_bench_power_open(const char *pci_bus_id) {
    if (pci_bus_id == NULL || pci_bus_id[0] == '\0') return NULL;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) return NULL;
    nvml_init_fn init = (nvml_init_fn)sym(lib, "nvmlInit_v2");
    nvml_by_pci_fn by_pci = (nvml_by_pci_fn)sym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    ak_bench_power *p = (ak_bench_power *)calloc(1, sizeof *p);
    if (p == NULL || init == NULL || by_pci == NULL || init() != 0) {
        free(p);
        dlclose(lib);
        return NULL;
    }
    p->lib = lib;
    atomic_init(&p->stop, 0);
    p->shutdown = (nvml_shutdown_fn)sym(lib, "nvmlShutdown");
    if (by_pci(pci_bus_id, &p->device) != 0) {
        ak_bench_power_close(p);
        return NULL;
    }
    p->limit = (nvml_u32_fn)sym(lib, "nvmlDeviceGetEnforcedPowerLimit");
    p->fields = (nvml_fields_fn)sym(lib, "nvmlDeviceGetFieldValues");
    p->reasons = (nvml_u64_fn)sym(lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (p->reasons == NULL)
        p->reasons = (nvml_u64_fn)sym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    return p;
}

void ak_bench_power_close(ak_bench_power *p) {
    if (p == NULL) return;
    if (p->running) {
        double w;
        uint64_t r;
        int h;
        ak_bench_power_watch_stop(p, &w, &r, &h);
    }
    if (p->shutdown != NULL) p->shutdown();
    dlclose(p->lib);
    free(p);
}

int ak_bench_power_limit(ak_bench_power *p, double *watts) {
    unsigned int mw = 0;
    if (p == NULL || p->limit == NULL || p->limit(p->device, &mw) != 0) return 0;
    *watts = 1e-3 * mw;
    return 1;
}

int ak_bench_power_now(ak_bench_power *p, double *watts) {
    nvml_field f;
    memset(&f, 0, sizeof f);
    f.field_id = NVML_FI_DEV_POWER_INSTANT;
    if (p == NULL || p->fields == NULL || p->fields(p->device, 1, &f) != 0 || f.status != 0)
        return 0;
    double mw;
    switch (f.value_type) {
    case 0: mw = f.value.d; break;
    case 1: mw = f.value.u32; break;
    case 2: mw = (double)f.value.ul; break;
    case 3: mw = (double)f.value.u64; break;
    case 4: mw = (double)f.value.s64; break;
    default: return 0;
    }
    *watts = 1e-3 * mw;
    return 1;
}

int ak_bench_power_reasons(ak_bench_power *p, uint64_t *reasons) {
    unsigned long long r = 0;
    if (p == NULL || p->reasons == NULL || p->reasons(p->device, &r) != 0) return 0;
    *reasons = r;
    return 1;
}

static void *watch(void *arg) {
    ak_bench_power *p = (ak_bench_power *)arg;
    const struct timespec gap = {0, 2000000L};
    while (!atomic_load(&p->stop)) {
        double w;
        uint64_t r;
        if (p->nw < AK_WATCH_MAX && ak_bench_power_now(p, &w)) p->w[p->nw++] = w;
        if (ak_bench_power_reasons(p, &r)) {
            p->seen |= r;
            p->have_seen = 1;
        }
        nanosleep(&gap, NULL);
    }
    return NULL;
}

int ak_bench_power_watch_start(ak_bench_power *p) {
    if (p == NULL || p->running) return 0;
    atomic_store(&p->stop, 0);
    p->nw = 0;
    p->seen = 0;
    p->have_seen = 0;
    p->running = pthread_create(&p->thread, NULL, watch, p) == 0;
    return p->running;
}

static int cmp_watts(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int ak_bench_power_watch_stop(ak_bench_power *p, double *watts, uint64_t *reasons,
                              int *have_reasons) {
    *watts = -1.0;
    *have_reasons = 0;
    if (p == NULL || !p->running) return 0;
    atomic_store(&p->stop, 1);
    pthread_join(p->thread, NULL);
    p->running = 0;
    if (p->nw > 0) {
        qsort(p->w, (size_t)p->nw, sizeof p->w[0], cmp_watts);
        *watts = p->w[p->nw / 2];
    }
    *reasons = p->seen;
    *have_reasons = p->have_seen;
    return 1;
}

/* NVML's clock event reason bits (nvmlClocksEventReason*): idle 0x1 and the application clock
   setting 0x2 say nothing about a limit and are left out. */
void ak_bench_power_reason_names(uint64_t reasons, char *buf, size_t size) {
    static const struct {
        uint64_t bit;
        const char *name;
    } names[] = {{0x4, "power"},       {0x8, "hw-slowdown"}, {0x10, "sync-boost"},
                 {0x20, "sw-thermal"}, {0x40, "hw-thermal"}, {0x80, "power-brake"}};
    size_t used = 0;
    if (size == 0) return;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(reasons & names[i].bit)) continue;
        size_t n = strlen(names[i].name) + (used ? 1 : 0);
        if (used + n + 1 > size) break;
        if (used) buf[used++] = '+';
        memcpy(buf + used, names[i].name, strlen(names[i].name) + 1);
        used += strlen(names[i].name);
    }
    if (used == 0 && size > 1) memcpy(buf, "-", 2);
}
