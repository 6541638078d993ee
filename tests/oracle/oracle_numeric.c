/* oracle_numeric.c -- number formats decoded from their definitions (layouts.md 0.1). */
#include "oracle.h"

#include <math.h>
#include <string.h>

double orc_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return (double)f;
}

double orc_f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -24);
    else v = ldexp(1.0 + m / 1024.0, e - 15);
    return s ? -v : v;
}

double orc_e4m3(uint8_t b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    double v = e == 0 ? ldexp((double)m, -9) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

double orc_ue8m0(uint8_t e) { return e == 0xff ? NAN : ldexp(1.0, (int)e - 127); }

double orc_e2m1(uint8_t nib) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    double v = mag[nib & 7];
    return (nib & 8) ? -v : v;
}

uint16_t orc_bf16_bits(double x) {
    float f = (float)x; /* round to fp32 first, then RNE to bf16 (inputs are finite, modest) */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
