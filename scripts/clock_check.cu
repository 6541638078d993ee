/* clock_check.cu -- whether the bench's clock probe can be trusted (not part of the library; session
 * 40). `attnkit bench` reads the SM clock as clock64 cycles over 50 us of %globaltimer; that is
 * right only if the timer keeps time. This prints, on an idle card: the timer's step, the SM clock
 * over a 1 s window by the timer and by the host's monotonic clock, and twenty 50 us windows with
 * and without alignment to a timer tick (these need the card to itself: a kernel of another
 * process time-slices with them). With an argument N it then stamps the timer once every 250 ms
 * for N seconds and prints, per second, the timer's time over the host's: start a bench after the
 * line "stamping" (`./clock_check 40 &`, then `attnkit bench ...`) to see whether the timer keeps
 * time under load (session 40: 0.99983-1.00014 through a whole bench).
 * build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 scripts/clock_check.cu -o clock_check */
#include <ctime>
#include <unistd.h>

#include "probe.cuh"

/* Cycles and timer ns over a window of at least ns; edge: both ends on a timer tick. */
__global__ void window(unsigned long long ns, int edge, unsigned long long *out) {
    unsigned long long t = gt(), t0 = t, t1;
    if (edge) do { t0 = gt(); } while (t0 == t);
    const long long c0 = clock64();
    do { t1 = gt(); } while (t1 - t0 < ns);
    out[0] = (unsigned long long)(clock64() - c0);
    out[1] = t1 - t0;
}

/* The smallest and largest timer increment seen over 2000 increments. */
__global__ void steps(unsigned long long *out) {
    unsigned long long t = gt(), mn = ~0ull, mx = 0;
    for (int i = 0; i < 2000;) {
        const unsigned long long u = gt();
        if (u != t) {
            mn = u - t < mn ? u - t : mn;
            mx = u - t > mx ? u - t : mx;
            t = u;
            i++;
        }
    }
    out[0] = mn;
    out[1] = mx;
}

__global__ void stamp(unsigned long long *out) { out[0] = gt(); }

static double host_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    unsigned long long *d, h[2];
    CK(cudaMalloc(&d, 16));
    steps<<<1, 1>>>(d);
    CK(cudaMemcpy(h, d, 16, cudaMemcpyDeviceToHost));
    printf("timer increments: %llu to %llu ns\n", h[0], h[1]);
    for (int r = 0; r < 3; r++) {
        window<<<1, 1>>>(1000, 1, d); /* warm */
        CK(cudaDeviceSynchronize());
        const double a = host_s();
        window<<<1, 1>>>(1000000000ull, 1, d);
        CK(cudaDeviceSynchronize());
        const double b = host_s();
        CK(cudaMemcpy(h, d, 16, cudaMemcpyDeviceToHost));
        printf("1 s window: %.2f MHz by the timer, %.2f by the host clock (timer / host %.5f)\n",
               1e3 * h[0] / (double)h[1], 1e3 * h[0] / ((b - a) * 1e9), h[1] / ((b - a) * 1e9));
    }
    for (int edge = 0; edge < 2; edge++) {
        printf("50 us windows, %s:", edge ? "tick-aligned" : "unaligned");
        for (int i = 0; i < 20; i++) {
            window<<<1, 1>>>(50000, edge, d);
            CK(cudaMemcpy(h, d, 16, cudaMemcpyDeviceToHost));
            printf(" %.0f", 1e3 * h[0] / (double)h[1]);
        }
        printf("\n");
    }
    const int secs = argc > 1 ? atoi(argv[1]) : 0;
    if (secs > 0) printf("stamping for %d s\n", secs);
    fflush(stdout);
    double h0 = 0, hp = 0;
    unsigned long long g0 = 0, gp = 0;
    for (int i = 0; i <= 4 * secs; i++) {
        stamp<<<1, 1>>>(d);
        CK(cudaMemcpy(h, d, 8, cudaMemcpyDeviceToHost));
        const double t = host_s();
        if (i == 0) {
            h0 = hp = t;
            g0 = gp = h[0];
        } else if (i % 4 == 0) {
            printf("t %5.2f s: timer / host over the last second %.5f\n", t - h0, (h[0] - gp) * 1e-9 / (t - hp));
            fflush(stdout);
            hp = t;
            gp = h[0];
        }
        usleep(250000);
    }
    if (secs > 0) printf("whole run: timer / host %.5f\n", (gp - g0) * 1e-9 / (hp - h0));
    return 0;
}
