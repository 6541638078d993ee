/* test_numeric.c -- the bit-exact conversions of src/common/numeric.h against brute force:
   every code decodes as its format definition says (oracle.h), and encoding any float picks the
   nearest code with ties to the even code and saturation at the largest finite value (rule F1). */
#include <math.h>
#include <string.h>

#include "ak_test.h"
#include "common/numeric.h"
#include "oracle.h"

/* Nearest code by exhaustive search over the finite codes; ties to even mantissa (even code). */
static int nearest_code(double x, int ncodes, double (*dec)(uint8_t), double maxv) {
    if (x > maxv) x = maxv;
    if (x < -maxv) x = -maxv;
    int best = -1;
    double bd = INFINITY;
    for (int c = 0; c < ncodes; c++) {
        double v = dec((uint8_t)c);
        if (isnan(v)) continue;
        double d = fabs(v - x);
        if (d < bd || (d == bd && (c & 1) == 0 && (best & 1) == 1)) {
            bd = d;
            best = c;
        }
    }
    return best;
}

static double e2m1_dec(uint8_t c) { return orc_e2m1(c); }

AK_TEST(e4m3_decode_every_code) {
    for (int c = 0; c < 256; c++) {
        double want = orc_e4m3((uint8_t)c);
        float got = ak_e4m3_to_f32((uint8_t)c);
        if (isnan(want)) CHECK_MSG(isnan(got), "code 0x%02x: expected NaN", c);
        else CHECK_MSG((double)got == want, "code 0x%02x: %g, expected %g", c, got, want);
    }
}

AK_TEST(e4m3_encode_matches_brute_force) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    /* every code round-trips, every midpoint between neighbours rounds to the even one */
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) continue;
        float v = ak_e4m3_to_f32((uint8_t)c);
        uint8_t back = ak_f32_to_e4m3(v);
        CHECK_MSG(back == c || (v == 0.0f && (back & 0x7f) == 0), "code 0x%02x -> %g -> 0x%02x", c, v, back);
    }
    for (int i = 0; i < 200000; i++) {
        double mag = ldexp(ak_rng_uniform(&r), (int)ak_rng_range(&r, -14, 10));
        double x = ak_rng_uniform(&r) < 0.5 ? -mag : mag;
        if (i % 7 == 0) { /* exact midpoints between adjacent codes */
            int c = (int)ak_rng_range(&r, 0, 0x7e);
            x = 0.5 * (orc_e4m3((uint8_t)c) + orc_e4m3((uint8_t)(c + 1)));
        }
        float xf = (float)x;
        int want = nearest_code((double)xf, 128, orc_e4m3, 448.0);
        uint8_t got = ak_f32_to_e4m3(xf) & 0x7f;
        if (xf < 0) want = nearest_code(-(double)xf, 128, orc_e4m3, 448.0);
        CHECK_MSG(got == want, "x %.9g: got 0x%02x, expected 0x%02x", (double)xf, got, want);
        if (ak_test_failures() > 5) break;
    }
    CHECK(ak_f32_to_e4m3(1e30f) == 0x7e);
    CHECK(ak_f32_to_e4m3(-INFINITY) == 0xfe);
    CHECK(ak_f32_to_e4m3(464.0f) == 0x7e); /* saturates, never NaN (F1) */
    CHECK((ak_f32_to_e4m3(NAN) & 0x7f) == 0x7f);
}

AK_TEST(bf16_round_to_nearest_even) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 1);
    for (int i = 0; i < 100000; i++) {
        uint32_t u = (uint32_t)ak_rng_u64(&r);
        float x;
        memcpy(&x, &u, 4);
        if (!isfinite(x)) continue;
        uint16_t h = ak_f32_to_bf16(x);
        double v = orc_bf16(h);
        if (isinf(v)) { /* IEEE: beyond the midpoint above the largest finite bf16 rounds to inf */
            CHECK_MSG(fabs((double)x) >= 0x1.ffp127, "x %a rounded to inf", (double)x);
            continue;
        }
        /* neighbours of the chosen code must not be closer */
        double up = orc_bf16((uint16_t)(h + 1)), dn = orc_bf16((uint16_t)(h - 1));
        double d = fabs(v - (double)x);
        if (isfinite(up)) CHECK_MSG(fabs(up - x) >= d, "x %a -> 0x%04x not nearest", (double)x, h);
        if (isfinite(dn) && (h & 0x7fff) != 0) CHECK_MSG(fabs(dn - x) >= d, "x %a -> 0x%04x not nearest", (double)x, h);
        if (ak_test_failures() > 5) break;
    }
    CHECK(ak_f32_to_bf16(1.00390625f) == 0x3f80); /* tie 1 + 2^-8 -> even (1.0) */
    CHECK(ak_f32_to_bf16(1.01171875f) == 0x3f82); /* tie 1 + 3*2^-8 -> even (1 + 2^-6) */
    CHECK(isnan(ak_bf16_to_f32(ak_f32_to_bf16(NAN))));
}

AK_TEST(f16_every_code_and_rounding) {
    for (int c = 0; c < 65536; c++) {
        double want = orc_f16((uint16_t)c);
        float got = ak_f16_to_f32((uint16_t)c);
        if (isnan(want)) { CHECK(isnan(got)); continue; }
        CHECK_MSG((double)got == want, "f16 0x%04x: %g vs %g", c, got, want);
        if (!isinf(want)) CHECK_MSG(ak_f32_to_f16(got) == c || (want == 0 && (ak_f32_to_f16(got) & 0x7fff) == 0),
                                    "f16 0x%04x does not round-trip", c);
    }
    CHECK(ak_f32_to_f16(65520.0f) == 0x7c00);  /* ties to even above the max: inf (IEEE) */
    CHECK(ak_f32_to_f16(65519.0f) == 0x7bff);
    CHECK(ak_f32_to_f16(0x1p-25f) == 0x0000);  /* half of the smallest subnormal: tie to 0 */
    CHECK(ak_f32_to_f16(0x1.8p-24f) == 0x0002); /* 1.5 steps: tie to even (2) */
}

AK_TEST(e2m1_encode_matches_brute_force) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 2);
    for (int i = 0; i < 20000; i++) {
        float x = (float)((ak_rng_uniform(&r) * 2 - 1) * 8);
        int want = nearest_code(fabs((double)x), 8, e2m1_dec, 6.0);
        CHECK_MSG((ak_f32_to_e2m1(x) & 7) == want, "x %g -> %d, expected %d", x, ak_f32_to_e2m1(x) & 7, want);
        if (ak_test_failures() > 5) break;
    }
    float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    int even[] = {0, 2, 2, 4, 4, 6, 6};
    for (int i = 0; i < 7; i++) CHECK(ak_f32_to_e2m1(ties[i]) == even[i]);
}

AK_TEST(scale_rules) {
    /* 656/584 power-of-two rule: 2^ceil(log2(max(amax/448, 1e-4))) */
    CHECK(ak_scale_pow2_exp(448.0f) == 0);           /* amax/448 = 1 -> 2^0 */
    CHECK(ak_scale_pow2_exp(449.0f) == 1);
    CHECK(ak_scale_pow2_exp(0.0f) == -13);           /* floor 1e-4 -> 2^-13 (layouts.md 2.3) */
    CHECK(ak_scale_pow2_exp(1.0f) == -8);            /* 1/448 = 2^-8.8 -> 2^-8 */
    CHECK(ak_scale_pow2_amax_floor_exp(0.0f) == -22); /* SGLang floor on amax: at least 2^-22 */
    CHECK(ak_pow2_f32(-13) == 0x1p-13f);
    CHECK(ak_ue8m0_to_f32(127) == 1.0f && ak_ue8m0_to_f32(1) == 0x1p-126f);
    /* every byte: 2^(e-127), byte 0 the subnormal 2^-127, byte 0xff a NaN (layouts.md, UE8M0) */
    for (int e = 0; e < 255; e++) CHECK(ak_ue8m0_to_f32((uint8_t)e) == ldexpf(1.0f, e - 127));
    CHECK(ak_f32_bits(ak_ue8m0_to_f32(0)) == 0x00400000u);
    CHECK(isnan(ak_ue8m0_to_f32(255)));
}

/* Bytes of e4m3(x * RN(1 / s)) that differ from e4m3(x / s) over every finite bf16 x. */
static int recip_mismatches(float s) {
    const float rs = 1.0f / s;
    int bad = 0;
    for (uint32_t u = 0; u < 65536u; u++) {
        const float x = ak_f32_from_bits(u << 16);
        if (!ak_isfinite_f32(x)) continue;
        bad += ak_f32_to_e4m3(copysignf(x * rs, x)) != ak_f32_to_e4m3(x / s);
    }
    return bad;
}

static int recip_verdict(float s) {
    const float rs = 1.0f / s;
    for (uint32_t m = 0; m < 128; m++)
        if (!ak_e4m3_recip_exact(s, rs, m)) return 0;
    return 1;
}

/* ak_e4m3_recip_exact is sound: wherever it accepts a scale, the product encodes every finite
   bf16 value exactly as the quotient does (all 65536 patterns, random scales of every magnitude
   the quantizers see). It rejects about one scale in 40000; 2^-8.47 (0x1.73b13ap-9) is one, with
   two bf16 values whose bytes really differ, and the CUDA tests use it for the fallback path. */
AK_TEST(e4m3_recip_exact_is_sound) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 11);
    CHECK(recip_verdict(0.0179f) && recip_mismatches(0.0179f) == 0);
    CHECK(!recip_verdict(0x1.73b13ap-9f) && recip_mismatches(0x1.73b13ap-9f) > 0);
    int rejected = 0;
    for (int i = 0; i < 300; i++) {
        const uint32_t mant = (uint32_t)ak_rng_range(&r, 0, 1 << 23);
        const int32_t e = (int32_t)ak_rng_range(&r, -89, 126);
        const float s = ak_f32_from_bits((uint32_t)(e + 127) << 23 | mant);
        if (!recip_verdict(s)) {
            rejected++;
            continue;
        }
        const int bad = recip_mismatches(s);
        CHECK_MSG(bad == 0, "scale %a accepted, %d bf16 values encode differently", (double)s, bad);
    }
    CHECK(rejected < 5);
}

/* ak_divu_q against the division it replaces: every divisor up to 4096 and the powers of two and
   their neighbours up to 2^31, each with the numerators at the ends of its range, the multiples of
   d and their neighbours (where a quotient steps), and random ones below 2^31. */
static int divu_check(uint32_t d, uint32_t n) {
    return ak_divu_q(n, ak_divu_make(d)) == n / d;
}

AK_TEST(divu_matches_division) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 12);
    uint32_t ds[4096 + 3 * 32];
    int nd = 0;
    for (uint32_t d = 1; d <= 4096; d++) ds[nd++] = d;
    for (int l = 12; l <= 31; l++) {
        ds[nd++] = (uint32_t)1 << l;
        ds[nd++] = ((uint32_t)1 << l) - 1;
        if (l < 31) ds[nd++] = ((uint32_t)1 << l) + 1;
    }
    int bad = 0;
    for (int k = 0; k < nd; k++) {
        const uint32_t d = ds[k], top = 0x7fffffffu, last = top - top % d; /* last multiple <= top */
        const uint32_t ends[] = {0, 1, d - 1, d, top, top - 1, last, last > 0 ? last - 1 : 0};
        for (int e = 0; e < 8; e++) bad += ends[e] <= top && !divu_check(d, ends[e]);
        for (int j = 1; j <= 64; j++) {
            if (top / d >= 1) {
                const uint32_t mult = d * (uint32_t)ak_rng_range(&r, 1, (int64_t)(top / d) + 1);
                bad += !divu_check(d, mult) + !divu_check(d, mult - 1);
            }
            bad += !divu_check(d, (uint32_t)ak_rng_range(&r, 0, (int64_t)top + 1));
        }
        if (bad) {
            CHECK_MSG(0, "divisor %u: %d quotients differ", d, bad);
            return;
        }
    }
    CHECK(bad == 0);
}
