/* bench_nvml.c -- the GPU's enforced power limit from NVML, which `attnkit bench` records with
   every run (targets.md 6.2). NVML ships with the NVIDIA driver, not the toolkit's build, so it is
   loaded at run time; without it the limit prints as unknown. Per-case power and clock event
   reasons were read too in session 70 and dropped: on an H200 both lag a case of ~100 ms (the
   same power value repeats over several cases, and after the 300 ms idle a case reads idle power),
   so the bench's own SM clock probe stays the per-case record. */
#include <dlfcn.h>
#include <stdlib.h>

#include "bench_internal.h"

/* The NVML entry points used, with their C signatures (nvml.h): a status 0 is NVML_SUCCESS. */
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_shutdown_fn)(void);
typedef int (*nvml_by_pci_fn)(const char *bus_id, void **device);
typedef int (*nvml_u32_fn)(void *device, unsigned int *value);

struct ak_bench_power {
    void *lib;
    void *device;
    nvml_shutdown_fn shutdown;
    nvml_u32_fn limit; /* nvmlDeviceGetEnforcedPowerLimit: mW */
};

ak_bench_power *ak_bench_power_open(const char *pci_bus_id) {
    if (pci_bus_id == NULL || pci_bus_id[0] == '\0') return NULL;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) return NULL;
    nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
    nvml_by_pci_fn by_pci = (nvml_by_pci_fn)dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    ak_bench_power *p = (ak_bench_power *)calloc(1, sizeof *p);
    if (p == NULL || init == NULL || by_pci == NULL || init() != 0) {
        free(p);
        dlclose(lib);
        return NULL;
    }
    p->lib = lib;
    p->shutdown = (nvml_shutdown_fn)dlsym(lib, "nvmlShutdown");
    p->limit = (nvml_u32_fn)dlsym(lib, "nvmlDeviceGetEnforcedPowerLimit");
    if (by_pci(pci_bus_id, &p->device) != 0) {
        ak_bench_power_close(p);
        return NULL;
    }
    return p;
}

void ak_bench_power_close(ak_bench_power *p) {
    if (p == NULL) return;
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
