/* oracle_codec.c -- reference cache quantizers (layouts.md 2-4), see oracle_codec.h. */
#include "oracle_codec.h"

#include <math.h>
#include <string.h>

#include "oracle.h"

/* Nearest of the sorted magnitudes mag[0..n-1] (codes 0..n-1), ties to the even code, above the
   top saturating to it. */
static int nearest_code(double a, const double *mag, int n) {
    if (a >= mag[n - 1]) return n - 1;
    int lo = 0, hi = n - 1; /* mag[lo] <= a < mag[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (mag[mid] <= a) lo = mid;
        else hi = mid;
    }
    double dl = a - mag[lo], dh = mag[hi] - a;
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
}

uint8_t orc_e4m3_code(double x) {
    static double mag[127];
    if (mag[126] == 0.0)
        for (int c = 0; c < 127; c++) mag[c] = orc_e4m3((uint8_t)c); /* 0 .. 448, increasing */
    int c = nearest_code(fabs(x), mag, 127);
    return (uint8_t)((signbit(x) ? 0x80 : 0) | c);
}

uint8_t orc_e2m1_code(double x) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    int c = nearest_code(fabs(x), mag, 8);
    return (uint8_t)((signbit(x) ? 8 : 0) | c);
}

uint8_t orc_e4m3_div(double x, double s) { return orc_e4m3_code((double)(float)(x / s)); }

int orc_ceil_log2(double t) {
    int e;
    double m = frexp(t, &e); /* t = m 2^e, m in [0.5, 1) */
    return m == 0.5 ? e - 1 : e;
}

static void put_f32(uint8_t *p, double v) {
    float f = (float)v;
    memcpy(p, &f, 4);
}
static double get_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
static void put_bf16(uint8_t *p, double v) {
    uint16_t h = orc_bf16_bits(v);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}
static double get_bf16(const uint8_t *p) { return orc_bf16((uint16_t)(p[0] | (p[1] << 8))); }

static double amax(const double *x, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static const double k_floor = (double)1e-4f; /* the sources' torch.float32 1e-4 */

void orc_enc_656(const double *x, int fp32_rule, uint8_t rec[656]) {
    for (int i = 0; i < 4; i++) {
        double t = (double)(float)(amax(x + 128 * i, 128) / 448.0);
        double s = fp32_rule ? fmax(t, k_floor) : ldexp(1.0, orc_ceil_log2(fmax(t, k_floor)));
        put_f32(rec + 512 + 4 * i, s);
        for (int d = 0; d < 128; d++) rec[128 * i + d] = orc_e4m3_div(x[128 * i + d], s);
    }
    for (int d = 0; d < 64; d++) put_bf16(rec + 528 + 2 * d, x[512 + d]);
}

void orc_dec_656(const uint8_t rec[656], double *x) {
    for (int d = 0; d < 512; d++)
        x[d] = orc_bf16(orc_bf16_bits((double)(float)(orc_e4m3(rec[d]) * get_f32(rec + 512 + 4 * (d / 128)))));
    for (int d = 0; d < 64; d++) x[512 + d] = get_bf16(rec + 528 + 2 * d);
}

static int clamp_e(int e) { return e < 1 ? 1 : e > 254 ? 254 : e; }

void orc_enc_584(const double *x, int amax_floor, uint8_t data[576], uint8_t scale[8]) {
    for (int j = 0; j < 7; j++) {
        double a = amax(x + 64 * j, 64);
        int k = amax_floor ? orc_ceil_log2((double)(float)(fmax(a, k_floor) / 448.0))
                           : orc_ceil_log2(fmax((double)(float)(a / 448.0), k_floor));
        int e = clamp_e(k + 127);
        scale[j] = (uint8_t)e;
        for (int d = 0; d < 64; d++) data[64 * j + d] = orc_e4m3_div(x[64 * j + d], ldexp(1.0, e - 127));
    }
    scale[7] = 0;
    for (int d = 0; d < 64; d++) put_bf16(data + 448 + 2 * d, x[448 + d]);
}

void orc_dec_584(const uint8_t data[576], const uint8_t scale[8], double *x) {
    for (int d = 0; d < 448; d++) x[d] = orc_e4m3(data[d]) * orc_ue8m0(scale[d / 64]);
    for (int d = 0; d < 64; d++) x[448 + d] = get_bf16(data + 448 + 2 * d);
}

void orc_enc_fp8pt(const double *x, double k_scale, uint8_t rec[576]) {
    for (int d = 0; d < 576; d++) rec[d] = orc_e4m3_div(x[d], k_scale);
}

void orc_dec_fp8pt(const uint8_t rec[576], double k_scale, double *x) {
    for (int d = 0; d < 576; d++) x[d] = (double)(float)(orc_e4m3(rec[d]) * k_scale);
}

void orc_enc_bf16(const double *x, uint8_t rec[1152]) {
    for (int d = 0; d < 576; d++) put_bf16(rec + 2 * d, x[d]);
}

void orc_enc_idx8(const double *x, int pow2, uint8_t key[128], float *scale) {
    double s = (double)(float)(fmax(amax(x, 128), k_floor) / 448.0);
    if (pow2) s = ldexp(1.0, orc_ceil_log2(s));
    *scale = (float)s;
    for (int d = 0; d < 128; d++) key[d] = orc_e4m3_div(x[d], s);
}

void orc_enc_idx4(const double *x, uint8_t key[64], uint8_t scale[4]) {
    for (int g = 0; g < 4; g++) {
        double t = fmax((double)(float)(amax(x + 32 * g, 32) / 6.0), k_floor);
        int e = clamp_e(orc_ceil_log2(t) + 127);
        double s = ldexp(1.0, e - 127);
        scale[g] = (uint8_t)e;
        for (int i = 0; i < 16; i++) {
            uint8_t lo = orc_e2m1_code((double)(float)(x[32 * g + 2 * i] / s));
            uint8_t hi = orc_e2m1_code((double)(float)(x[32 * g + 2 * i + 1] / s));
            key[16 * g + i] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void orc_dec_idx4(const uint8_t key[64], const uint8_t scale[4], double *x) {
    for (int d = 0; d < 128; d++) {
        uint8_t b = key[d / 2];
        x[d] = orc_e2m1((d & 1) ? (uint8_t)(b >> 4) : (uint8_t)(b & 15)) * orc_ue8m0(scale[d / 32]);
    }
}
