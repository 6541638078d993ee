/*
 * test_codec.c -- KV-cache codecs on the CPU backend: write, gather, convert, audit.
 *
 * What is tested
 *   - golden bytes computed by hand for every layout (656 scales and codes, 584 UE8M0 bytes and
 *     the pad byte, 576 per-tensor, 1152 bf16 rounding ties, indexer fp32 scale, FP4 nibbles);
 *   - random writes of every layout, bf16 and f32 inputs, every rule, against the double oracle
 *     (tests/oracle/oracle_codec.c), byte for byte; unused slots (0xFF-filled) stay untouched;
 *   - gathers into poisoned outputs: every element written, bit-exact to the oracle's decode,
 *     invalid slots give zeros; round-trip error within one e4m3 half step;
 *   - every conversion of the matrix (bytes exact where lossless, oracle bytes where lossy), the
 *     V4 256 -> 64 page split byte by byte (layouts.md 6.3) and back, touched-pages form,
 *     unsupported pairs; bitwise identical results with 1 and 2 threads; the cache audit;
 *   - every finite bf16 value through the e4m3 writer (multiply and division paths) vs the oracle.
 *
 * Bad inputs (each CHECK_REJECT'd below; status, and the word the detail line must contain):
 *   ak_cache_write   ctx NULL                                  INVALID_ARGUMENT  "ctx"
 *   ak_cache_write   cache NULL                                INVALID_ARGUMENT  "cache"
 *   ak_cache_write   nope NULL                                 INVALID_ARGUMENT  "nope"
 *   ak_cache_write   rope NULL (MLA layout)                    INVALID_ARGUMENT  "rope"
 *   ak_cache_write   slots NULL                                INVALID_ARGUMENT  "slots"
 *   ak_cache_write   nope dtype i32                            INVALID_ARGUMENT  "nope"
 *   ak_cache_write   slots dtype i64                           INVALID_ARGUMENT  "slots"
 *   ak_cache_write   nope width 511                            INVALID_ARGUMENT  "nope"
 *   ak_cache_write   nope non-contiguous last dim              INVALID_ARGUMENT  "innermost"
 *   ak_cache_write   slot -2                                   INVALID_ARGUMENT  "slots[1]"
 *   ak_cache_write   slot == capacity                          INVALID_ARGUMENT  "capacity"
 *   ak_cache_write   NaN in nope                               NONFINITE         "nope"
 *   ak_cache_write   inf in rope                               NONFINITE         "rope"
 *   ak_cache_write   rule 9                                    INVALID_ARGUMENT  "rule"
 *   ak_cache_write   rule FP32 on DSV4                         INVALID_ARGUMENT  "rule"
 *   ak_cache_write   rope given for an indexer                 INVALID_ARGUMENT  "rope"
 *   ak_cache_write   MHA cache                                 INVALID_ARGUMENT  "ak_mha_cache_write"
 *   ak_cache_write   page_size 0                               INVALID_ARGUMENT  "page_size"
 *   ak_cache_write   page_size 2048 (too large)                INVALID_ARGUMENT  "page_size"
 *   ak_cache_write   indexer page_size 32                      INVALID_ARGUMENT  "page_size"
 *   ak_cache_write   capacity past 2^31-1 (size overflow)      INVALID_ARGUMENT  "capacity"
 *   ak_cache_write   page_stride below the page                INVALID_ARGUMENT  "page_stride"
 *   ak_cache_write   DSV4 page_stride not a multiple of 576    INVALID_ARGUMENT  "576"
 *   ak_cache_write   nope shape overflowing int64              INVALID_ARGUMENT  "overflow"
 *   ak_cache_write   cache on a CUDA device, CPU context       INVALID_ARGUMENT  "device"
 *   ak_cache_gather  out NULL                                  INVALID_ARGUMENT  "out"
 *   ak_cache_gather  out width 512 for a 576 layout            INVALID_ARGUMENT  "out"
 *   ak_cache_gather  out e4m3 for a 656 cache                  INVALID_ARGUMENT  "out"
 *   ak_cache_gather  e4m3 out without out_scale (INDEXER_FP8)  INVALID_ARGUMENT  "out_scale"
 *   ak_cache_gather  out_scale with f32 out                    INVALID_ARGUMENT  "out_scale"
 *   ak_cache_gather  out rows overlapping (stride[0] 0)        INVALID_ARGUMENT  "overlap"
 *   ak_mha_cache_write  k shape mismatch                       INVALID_ARGUMENT  "k"
 *   ak_mha_cache_write  slot 99 past capacity                  INVALID_ARGUMENT  "slots[0]"
 *   ak_mha_cache_gather k_out and v_out NULL                   INVALID_ARGUMENT  "k_out"
 *   ak_cache_convert V4 -> 656                                 UNSUPPORTED       both layout names
 *   ak_cache_convert INDEXER_FP8 -> MLA_BF16                   UNSUPPORTED       both layout names
 *   ak_cache_convert dst capacity too small                    INVALID_ARGUMENT  "capacity"
 *   ak_cache_convert pages[1] = 7 past num_pages               INVALID_ARGUMENT  "pages[1]"
 *   ak_cache_convert page listed twice                         INVALID_ARGUMENT  "twice"
 *   ak_cache_convert pages dtype f32                           INVALID_ARGUMENT  "pages"
 *   ak_cache_convert src and dst overlap                       INVALID_ARGUMENT  "overlap"
 *   ak_cache_convert rule FP32 on a copy                       INVALID_ARGUMENT  "rule"
 *   ak_cache_convert MHA geometry differs                      INVALID_ARGUMENT  "geometry"
 *   ak_cache_convert NaN in a BF16 source quantized to 656     NONFINITE         "slot"
 *   ak_cache_audit   page range past num_pages                 INVALID_ARGUMENT  "page_count"
 */
#include <stdlib.h>
#include <string.h>

#include "ak_test.h"
#include "attnkit.h"
#include "oracle.h"
#include "oracle_codec.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static ak_context *cpu_ctx(int threads) {
    ak_context_options o = {AK_BACKEND_CPU, threads, 0, NULL};
    ak_context *c = NULL;
    CHECK_STATUS(ak_context_create(&o, &c), AK_OK);
    return c;
}

typedef struct pool {
    ak_cache c;
    uint8_t *mem;
    int64_t bytes;
} pool;

/* A pool of `pages` pages filled with 0xFF (NaN in every element type); extra > 0 pads the page
   stride (multiple of 576 for V4). */
static pool pool_make(ak_layout l, int32_t pages, int32_t P, int64_t extra) {
    pool p;
    memset(&p, 0, sizeof p);
    int64_t pb = 0;
    CHECK_STATUS(ak_layout_page_bytes(l, P, &pb), AK_OK);
    p.bytes = (pb + extra) * pages;
    p.mem = (uint8_t *)malloc((size_t)(p.bytes ? p.bytes : 1));
    memset(p.mem, 0xff, (size_t)p.bytes);
    CHECK_STATUS(ak_cache_init(&p.c, l, p.mem, pages, P), AK_OK);
    p.c.page_stride = pb + extra;
    return p;
}

static void pool_free(pool *p) { free(p->mem); }

static int d_nope(ak_layout l) {
    return l == AK_LAYOUT_DSV4_FP8_UE8M0 ? 448 : l >= AK_LAYOUT_INDEXER_FP8 ? 128 : 512;
}
static int d_rope(ak_layout l) { return l >= AK_LAYOUT_INDEXER_FP8 ? 0 : 64; }

/* Byte pieces of token `slot`, derived from layouts.md section 2 tables. */
static int pieces(const pool *p, int32_t slot, int64_t off[2], int32_t len[2]) {
    int64_t P = p->c.page_size, pg = slot / P, t = slot % P, B = pg * p->c.page_stride;
    switch (p->c.layout) {
    case AK_LAYOUT_MLA_BF16: off[0] = B + t * 1152; len[0] = 1152; return 1;
    case AK_LAYOUT_MLA_FP8_PERTENSOR: off[0] = B + t * 576; len[0] = 576; return 1;
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: off[0] = B + t * 656; len[0] = 656; return 1;
    case AK_LAYOUT_DSV4_FP8_UE8M0:
        off[0] = B + t * 576; len[0] = 576; off[1] = B + P * 576 + t * 8; len[1] = 8; return 2;
    case AK_LAYOUT_INDEXER_FP8:
        off[0] = B + t * 128; len[0] = 128; off[1] = B + 8192 + t * 4; len[1] = 4; return 2;
    case AK_LAYOUT_INDEXER_FP4:
        off[0] = B + t * 64; len[0] = 64; off[1] = B + 4096 + t * 4; len[1] = 4; return 2;
    default: return 0;
    }
}

/* Oracle bytes of one token (pieces concatenated into out, up to 1152 bytes). */
static void oracle_encode(ak_layout l, const double *x, ak_quant_rule rule, double k_scale,
                          uint8_t *out) {
    switch (l) {
    case AK_LAYOUT_MLA_BF16: orc_enc_bf16(x, out); break;
    case AK_LAYOUT_MLA_FP8_PERTENSOR: orc_enc_fp8pt(x, k_scale, out); break;
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: orc_enc_656(x, rule == AK_QUANT_FP32, out); break;
    case AK_LAYOUT_DSV4_FP8_UE8M0: orc_enc_584(x, rule == AK_QUANT_POW2_AMAX_FLOOR, out, out + 576); break;
    case AK_LAYOUT_INDEXER_FP8: {
        float s;
        orc_enc_idx8(x, rule == AK_QUANT_POW2, out, &s);
        memcpy(out + 128, &s, 4);
        break;
    }
    case AK_LAYOUT_INDEXER_FP4: orc_enc_idx4(x, out, out + 64); break;
    default: break;
    }
}

/* Oracle dequantization of one token's bytes (as oracle_encode lays them out). */
static void oracle_decode(ak_layout l, const uint8_t *b, double k_scale, double *x) {
    switch (l) {
    case AK_LAYOUT_MLA_BF16:
        for (int d = 0; d < 576; d++) x[d] = orc_bf16((uint16_t)(b[2 * d] | (b[2 * d + 1] << 8)));
        break;
    case AK_LAYOUT_MLA_FP8_PERTENSOR: orc_dec_fp8pt(b, k_scale, x); break;
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: orc_dec_656(b, x); break;
    case AK_LAYOUT_DSV4_FP8_UE8M0: orc_dec_584(b, b + 576, x); break;
    case AK_LAYOUT_INDEXER_FP8: {
        float s;
        memcpy(&s, b + 128, 4);
        for (int d = 0; d < 128; d++) x[d] = (double)(float)(orc_e4m3(b[d]) * s);
        break;
    }
    case AK_LAYOUT_INDEXER_FP4: orc_dec_idx4(b, b + 64, x); break;
    default: break;
    }
}

/* Copies a token's bytes out of a pool into one buffer. */
static int token_bytes(const pool *p, int32_t slot, uint8_t *out) {
    int64_t off[2];
    int32_t len[2];
    int n = pieces(p, slot, off, len), used = 0;
    for (int i = 0; i < n; i++) {
        memcpy(out + used, p->mem + off[i], (size_t)len[i]);
        used += len[i];
    }
    return used;
}

static int all_bytes(const uint8_t *b, int64_t n, uint8_t v) {
    for (int64_t i = 0; i < n; i++)
        if (b[i] != v) return 0;
    return 1;
}

/* Random token values as exact bf16 (or f32) numbers, tile magnitudes spread over 2^-12..2^12,
   some tiles all zero; stored in x (double) and in the input buffers. */
static void random_row(ak_rng *r, int w, int tile, int f32, double *x, void *buf) {
    for (int t0 = 0; t0 < w; t0 += tile) {
        double mag = ldexp(1.0, (int)ak_rng_range(r, -12, 13));
        int zero = ak_rng_uniform(r) < 0.05;
        for (int d = t0; d < t0 + tile && d < w; d++) {
            double v = zero ? 0.0 : ak_rng_normal(r) * mag;
            if (f32) {
                float f = (float)v;
                x[d] = f;
                ((float *)buf)[d] = f;
            } else {
                uint16_t h = orc_bf16_bits(v);
                x[d] = orc_bf16(h);
                ((uint16_t *)buf)[d] = h;
            }
        }
    }
}

/* ---- golden bytes -------------------------------------------------------------------------- */

static void put_bf16(uint16_t *dst, int n, double v) {
    for (int i = 0; i < n; i++) dst[i] = orc_bf16_bits(v);
}

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

AK_TEST(golden_656) {
    ak_context *ctx = cpu_ctx(1);
    pool p = pool_make(AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1, 2, 0);
    uint16_t nope[512], rope[64];
    /* tile 0: 1.0 everywhere, 3.5 at d 0: amax/448 = 2^-7 -> s = 2^-7 (0x3C000000);
       3.5 / 2^-7 = 448 -> 0x7E; 1.0 / 2^-7 = 2^7 -> exponent 14, mantissa 0 -> 0x70.
       tile 1: zeros -> s = 2^-13 (floor 1e-4, 0x39000000), codes 0.
       tile 2: 1.0 at d 256, -0.5 at 257, 3*2^-10 elsewhere: amax/448 = 2^-8.8 -> s = 2^-8
       (0x3B800000); 1.0 -> 2^8 = 0x78; -0.5 -> -2^7 = 0xF0; 3*2^-10 -> 0.75 = 1.5*2^-1 = 0x34.
       tile 3: 2^-9 * 2^-13 = 2^-22 everywhere: tiny, s = 2^-13, code 2^-9 = subnormal 0x01.
       rope: 1.5 -> bf16 0x3FC0. */
    put_bf16(nope, 128, 1.0);
    nope[0] = orc_bf16_bits(3.5);
    put_bf16(nope + 128, 128, 0.0);
    put_bf16(nope + 256, 128, 3.0 / 1024);
    nope[256] = orc_bf16_bits(1.0);
    nope[257] = orc_bf16_bits(-0.5);
    put_bf16(nope + 384, 128, ldexp(1.0, -22));
    put_bf16(rope, 64, 1.5);
    int32_t slot = 1;
    int64_t sn[2] = {1, 512}, sr[2] = {1, 64}, ss[1] = {1};
    ak_tensor tn = ak_tensor_make(nope, AK_DTYPE_BF16, 2, sn), tr = ak_tensor_make(rope, AK_DTYPE_BF16, 2, sr);
    ak_tensor ts = ak_tensor_make(&slot, AK_DTYPE_I32, 1, ss);
    CHECK_STATUS(ak_cache_write(ctx, &p.c, &tn, &tr, &ts, AK_QUANT_DEFAULT), AK_OK);
    const uint8_t *r = p.mem + 656;
    CHECK(all_bytes(p.mem, 656, 0xff)); /* slot 0 untouched */
    CHECK(r[0] == 0x7e && r[1] == 0x70 && r[127] == 0x70);
    CHECK(all_bytes(r + 128, 128, 0x00));
    CHECK(r[256] == 0x78 && r[257] == 0xf0 && r[258] == 0x34 && r[383] == 0x34);
    CHECK(all_bytes(r + 384, 128, 0x01));
    CHECK(rd32(r + 512) == 0x3c000000u && rd32(r + 516) == 0x39000000u);
    CHECK(rd32(r + 520) == 0x3b800000u && rd32(r + 524) == 0x39000000u);
    CHECK(r[528] == 0xc0 && r[529] == 0x3f && r[654] == 0xc0 && r[655] == 0x3f);

    /* FP32 rule, tile 0 = 1.0, 0.5, 0.25 repeated: s = fp32(1/448) = 0x3B124925;
       1/s = 447.99997 -> 448 = 0x7E; 0.5/s = 223.99998 -> 224 = 1.75*2^7 = 0x76;
       0.25/s = 111.99999 -> 112 = 1.75*2^6 = 0x6E. Zero tile: s = fp32(1e-4) = 0x38D1B717. */
    for (int d = 0; d < 128; d++) nope[d] = orc_bf16_bits(d % 3 == 0 ? 1.0 : d % 3 == 1 ? 0.5 : 0.25);
    CHECK_STATUS(ak_cache_write(ctx, &p.c, &tn, &tr, &ts, AK_QUANT_FP32), AK_OK);
    CHECK(rd32(r + 512) == 0x3b124925u && r[0] == 0x7e && r[1] == 0x76 && r[2] == 0x6e);
    CHECK(rd32(r + 516) == 0x38d1b717u && all_bytes(r + 128, 128, 0));
    pool_free(&p);
    ak_context_destroy(ctx);
}

AK_TEST(golden_584) {
    ak_context *ctx = cpu_ctx(1);
    pool p = pool_make(AK_LAYOUT_DSV4_FP8_UE8M0, 2, 2, 0); /* stride 1728 */
    uint16_t nope[448], rope[64];
    /* tile 0: 448 at d 0, 1 elsewhere: amax/448 = 1 -> k 0 -> byte 127 (0x7F); codes 0x7E, 0x38.
       tile 1: zeros -> 1e-4 -> 2^-13 -> byte 114 (0x72), codes 0.
       tile 2: 0.02: FlashMLA rule: 0.02/448 < 1e-4 -> 2^-13 (0x72); SGLang amax floor:
       0.02/448 = 4.46e-5 -> 2^-14 -> byte 113 (0x71); its zero tile: 1e-4/448 = 2.2e-7 ->
       2^-22 -> byte 105 (0x69).
       tiles 3..6: 2^20 -> 2^20/448 -> 2^12 (byte 139 = 0x8B); 2^20/2^12 = 256 -> 0x78.
       pad byte 0; rope -2.0 -> bf16 0xC000. */
    put_bf16(nope, 64, 1.0);
    nope[0] = orc_bf16_bits(448.0);
    put_bf16(nope + 64, 64, 0.0);
    put_bf16(nope + 128, 64, 0.02);
    put_bf16(nope + 192, 256, ldexp(1.0, 20));
    put_bf16(rope, 64, -2.0);
    int32_t slot = 3; /* page 1, offset 1 */
    int64_t sn[2] = {1, 448}, sr[2] = {1, 64}, ss[1] = {1};
    ak_tensor tn = ak_tensor_make(nope, AK_DTYPE_BF16, 2, sn), tr = ak_tensor_make(rope, AK_DTYPE_BF16, 2, sr);
    ak_tensor ts = ak_tensor_make(&slot, AK_DTYPE_I32, 1, ss);
    CHECK_STATUS(ak_cache_write(ctx, &p.c, &tn, &tr, &ts, AK_QUANT_DEFAULT), AK_OK);
    const uint8_t *d = p.mem + 1728 + 576, *s = p.mem + 1728 + 2 * 576 + 8;
    CHECK(d[0] == 0x7e && d[1] == 0x38 && all_bytes(d + 64, 64, 0) && d[192] == 0x78 && d[447] == 0x78);
    CHECK(d[448] == 0x00 && d[449] == 0xc0 && d[574] == 0x00 && d[575] == 0xc0);
    CHECK(s[0] == 0x7f && s[1] == 0x72 && s[2] == 0x72 && s[3] == 0x8b && s[6] == 0x8b && s[7] == 0);
    /* neighbours untouched: token 0 of page 1 and the page padding */
    CHECK(all_bytes(p.mem + 1728, 576, 0xff) && all_bytes(p.mem + 1728 + 1152, 8, 0xff));
    CHECK(all_bytes(p.mem + 1728 + 1168, 1728 - 1168, 0xff));
    CHECK_STATUS(ak_cache_write(ctx, &p.c, &tn, &tr, &ts, AK_QUANT_POW2_AMAX_FLOOR), AK_OK);
    CHECK(s[0] == 0x7f && s[1] == 0x69 && s[2] == 0x71 && s[3] == 0x8b);
    pool_free(&p);
    ak_context_destroy(ctx);
}

AK_TEST(golden_576_1152_indexers) {
    ak_context *ctx = cpu_ctx(1);
    int32_t slot = 0;
    int64_t ss[1] = {1};
    ak_tensor ts = ak_tensor_make(&slot, AK_DTYPE_I32, 1, ss);
    {   /* per tensor, k_scale 2: 3 -> 1.5 = 0x3C; 1000 -> 500 saturates to 448 = 0x7E;
           -2^-9 (rope) -> -2^-10: a tie between 0 and 2^-9, to even: -0 = 0x80 */
        pool p = pool_make(AK_LAYOUT_MLA_FP8_PERTENSOR, 1, 1, 0);
        p.c.k_scale = 2.0f;
        float nope[512], rope[64];
        for (int i = 0; i < 512; i++) nope[i] = i == 1 ? 1000.0f : 3.0f;
        for (int i = 0; i < 64; i++) rope[i] = -1.0f / 512;
        int64_t sn[2] = {1, 512}, sr[2] = {1, 64};
        ak_tensor tn = ak_tensor_make(nope, AK_DTYPE_F32, 2, sn), tr = ak_tensor_make(rope, AK_DTYPE_F32, 2, sr);
        CHECK_STATUS(ak_cache_write(ctx, &p.c, &tn, &tr, &ts, AK_QUANT_DEFAULT), AK_OK);
        CHECK(p.mem[0] == 0x3c && p.mem[1] == 0x7e && p.mem[511] == 0x3c && all_bytes(p.mem + 512, 64, 0x80));
        pool_free(&p);
    }
    {   /* bf16 from f32, RNE: 1 + 2^-8 is a tie -> 1.0 (0x3F80); 1 + 3*2^-8 -> 1 + 2^-6 (0x3F82) */
        pool p = pool_make(AK_LAYOUT_MLA_BF16, 1, 1, 0);
        float nope[512], rope[64];
        for (int i = 0; i < 512; i++) nope[i] = 1.0f + 1.0f / 256;
        for (int i = 0; i < 64; i++) rope[i] = 1.0f + 3.0f / 256;
        int64_t sn[2] = {1, 512}, sr[2] = {1, 64};
        ak_tensor tn = ak_tensor_make(nope, AK_DTYPE_F32, 2, sn), tr = ak_tensor_make(rope, AK_DTYPE_F32, 2, sr);
        CHECK_STATUS(ak_cache_write(ctx, &p.c, &tn, &tr, &ts, AK_QUANT_DEFAULT), AK_OK);
        CHECK(p.mem[0] == 0x80 && p.mem[1] == 0x3f && p.mem[1024] == 0x82 && p.mem[1025] == 0x3f);
        pool_free(&p);
    }
    {   /* indexer fp8, amax 3: s = fp32(3/448) = 0x3BDB6DB7; 3/s -> 448 (0x7E); 2/s = 298.67 ->
           288 = 1.125*2^8 (0x79); 1/s = 149.33 -> 144 (0x71). POW2: s = 2^-7 (0x3C000000),
           3 -> 384 = 1.5*2^8 (0x7C), 2 -> 256 (0x78), 1 -> 128 (0x70). */
        pool p = pool_make(AK_LAYOUT_INDEXER_FP8, 1, 64, 0);
        uint16_t k[128];
        for (int i = 0; i < 128; i++) k[i] = orc_bf16_bits(i % 3 == 0 ? 3.0 : i % 3 == 1 ? 2.0 : 1.0);
        int64_t sk[2] = {1, 128};
        ak_tensor tk = ak_tensor_make(k, AK_DTYPE_BF16, 2, sk);
        slot = 5;
        CHECK_STATUS(ak_cache_write(ctx, &p.c, &tk, NULL, &ts, AK_QUANT_DEFAULT), AK_OK);
        CHECK(p.mem[640] == 0x7e && p.mem[641] == 0x79 && p.mem[642] == 0x71);
        CHECK(rd32(p.mem + 8192 + 20) == 0x3bdb6db7u && all_bytes(p.mem + 8192, 20, 0xff));
        CHECK_STATUS(ak_cache_write(ctx, &p.c, &tk, NULL, &ts, AK_QUANT_POW2), AK_OK);
        CHECK(p.mem[640] == 0x7c && p.mem[641] == 0x78 && p.mem[642] == 0x70);
        CHECK(rd32(p.mem + 8192 + 20) == 0x3c000000u);
        pool_free(&p);
    }
    {   /* indexer fp4, group 0 amax 6: s = 1 (UE8M0 127); 6 -> 7, -0.5 -> 0x9, 1.25 tie -> 1.0
           (code 2, even), 0 -> 0: byte 0 = 0x97, byte 1 = 0x02. Zero groups: 1e-4 -> 2^-13
           (byte 114). */
        pool p = pool_make(AK_LAYOUT_INDEXER_FP4, 1, 64, 0);
        float k[128];
        memset(k, 0, sizeof k);
        k[0] = 6.0f; k[1] = -0.5f; k[2] = 1.25f; k[3] = 0.0f;
        int64_t sk[2] = {1, 128};
        ak_tensor tk = ak_tensor_make(k, AK_DTYPE_F32, 2, sk);
        slot = 63;
        CHECK_STATUS(ak_cache_write(ctx, &p.c, &tk, NULL, &ts, AK_QUANT_DEFAULT), AK_OK);
        const uint8_t *key = p.mem + 63 * 64, *sc = p.mem + 4096 + 63 * 4;
        CHECK(key[0] == 0x97 && key[1] == 0x02 && all_bytes(key + 2, 62, 0));
        CHECK(sc[0] == 127 && sc[1] == 114 && sc[2] == 114 && sc[3] == 114);
        pool_free(&p);
    }
    ak_context_destroy(ctx);
}

/* ---- random write / gather against the oracle ------------------------------------------------- */

typedef struct wcase {
    ak_layout l;
    int32_t P, pages;
    int64_t extra;
    int f32;
    ak_quant_rule rule;
} wcase;

/* Writes n random rows at a random subset of slots (some -1), checks bytes, untouched slots,
   gathers (f32 and bf16, poisoned) and the round-trip bound. */
static void run_write_case(ak_context *ctx, ak_rng *r, wcase wc) {
    pool p = pool_make(wc.l, wc.pages, wc.P, wc.extra);
    if (wc.l == AK_LAYOUT_MLA_FP8_PERTENSOR) p.c.k_scale = 0.5f;
    int64_t cap = (int64_t)wc.pages * wc.P;
    int64_t n = cap / 2 + 1;
    int wn = d_nope(wc.l), wr = d_rope(wc.l), w = wn + wr, esz = wc.f32 ? 4 : 2;
    int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)cap);
    for (int64_t i = 0; i < cap; i++) perm[i] = (int32_t)i;
    for (int64_t i = cap - 1; i > 0; i--) {
        int64_t j = ak_rng_range(r, 0, i + 1);
        int32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
    int32_t *slots = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    double *x = (double *)malloc(sizeof(double) * (size_t)(n * w));
    uint8_t *in = (uint8_t *)malloc((size_t)(n * w * esz)); /* [n, w] rows: nope | rope views */
    uint8_t *written = (uint8_t *)calloc((size_t)cap, 1);
    int64_t *row_of = (int64_t *)malloc(sizeof(int64_t) * (size_t)cap);
    for (int64_t i = 0; i < n; i++) {
        slots[i] = (i % 7 == 3) ? -1 : perm[i];
        random_row(r, w, wc.l == AK_LAYOUT_DSV4_FP8_UE8M0 ? 64 : wc.l == AK_LAYOUT_INDEXER_FP4 ? 32 : 128,
                   wc.f32, x + i * w, in + i * w * esz);
        if (slots[i] >= 0) { written[slots[i]] = 1; row_of[slots[i]] = i; }
    }
    ak_tensor tn = ak_tensor_make(in, wc.f32 ? AK_DTYPE_F32 : AK_DTYPE_BF16, 2, (int64_t[]){n, wn});
    tn.strides[0] = w; /* views of one [n, w] row buffer */
    ak_tensor tr = ak_tensor_make(in + wn * esz, tn.dtype, 2, (int64_t[]){n, wr});
    tr.strides[0] = w;
    ak_tensor ts = ak_tensor_make(slots, AK_DTYPE_I32, 1, (int64_t[]){n});
    CHECK_STATUS(ak_cache_write(ctx, &p.c, &tn, wr ? &tr : NULL, &ts, wc.rule), AK_OK);

    uint8_t got[1160], want[1160];
    int bad = 0;
    for (int64_t s = 0; s < cap && bad < 3; s++) {
        int len = token_bytes(&p, (int32_t)s, got);
        if (!written[s]) {
            if (!all_bytes(got, len, 0xff)) { CHECK_MSG(0, "layout %d: unused slot %lld was touched", (int)wc.l, (long long)s); bad++; }
            continue;
        }
        oracle_encode(wc.l, x + row_of[s] * w, wc.rule, p.c.k_scale, want);
        if (memcmp(got, want, (size_t)len) != 0) {
            int k = 0;
            while (got[k] == want[k]) k++;
            CHECK_MSG(0, "layout %d P %d f32 %d rule %d: slot %lld byte %d is 0x%02x, oracle 0x%02x",
                      (int)wc.l, (int)wc.P, wc.f32, (int)wc.rule, (long long)s, k, got[k], want[k]);
            bad++;
        }
    }
    /* gather the written slots plus invalid ones (-1, cap, -5) into poisoned outputs */
    int64_t gn = 0;
    int32_t *gs = (int32_t *)malloc(sizeof(int32_t) * (size_t)(cap + 3));
    for (int64_t s = 0; s < cap; s++) if (written[s]) gs[gn++] = (int32_t)s;
    gs[gn++] = -1; gs[gn++] = (int32_t)cap; gs[gn++] = -5;
    ak_tensor tg = ak_tensor_make(gs, AK_DTYPE_I32, 1, (int64_t[]){gn});
    float *of = (float *)malloc(sizeof(float) * (size_t)(gn * w));
    uint16_t *ob = (uint16_t *)malloc(2 * (size_t)(gn * w));
    double *ref = (double *)malloc(sizeof(double) * (size_t)(gn * w));
    float *obf = (float *)malloc(sizeof(float) * (size_t)(gn * w));
    double *refb = (double *)malloc(sizeof(double) * (size_t)(gn * w));
    ak_poison(of, sizeof(float) * (size_t)(gn * w), AK_DTYPE_F32);
    ak_poison(ob, 2 * (size_t)(gn * w), AK_DTYPE_BF16);
    ak_tensor tof = ak_tensor_make(of, AK_DTYPE_F32, 2, (int64_t[]){gn, w});
    ak_tensor tob = ak_tensor_make(ob, AK_DTYPE_BF16, 2, (int64_t[]){gn, w});
    CHECK_STATUS(ak_cache_gather(ctx, &p.c, &tg, &tof, NULL), AK_OK);
    CHECK_STATUS(ak_cache_gather(ctx, &p.c, &tg, &tob, NULL), AK_OK);
    double max_ratio = 0.0;
    for (int64_t i = 0; i < gn; i++) {
        if (i >= gn - 3) {
            for (int d = 0; d < w; d++) ref[i * w + d] = 0.0;
        } else {
            token_bytes(&p, gs[i], got);
            oracle_decode(wc.l, got, p.c.k_scale, ref + i * w);
            /* round trip: |deq - x| <= 2^-4 |x| (half an e4m3 step; 2^-9 for bf16, 1/4 for e2m1)
               + one subnormal step of the tile scale (2^-9 s; e2m1: 0.5 s) + bf16 rounding of
               the 656 product under the FP32 rule (2^-8 |x|) */
            const double *xi = x + row_of[gs[i]] * w;
            for (int d = 0; d < w; d++) {
                double s, rel;
                uint8_t *tb = got;
                switch (wc.l) {
                case AK_LAYOUT_MLA_BF16: s = 0; rel = ldexp(1, -8); break;
                case AK_LAYOUT_MLA_FP8_PERTENSOR: s = ldexp(p.c.k_scale, -9); rel = ldexp(1, -4); break;
                case AK_LAYOUT_DSA_FP8_BLOCKSCALE: {
                    float sc; memcpy(&sc, tb + 512 + 4 * (d < 512 ? d / 128 : 0), 4);
                    s = d < 512 ? ldexp(sc, -9) : 0; rel = d < 512 ? ldexp(1, -4) + ldexp(1, -8) : ldexp(1, -8);
                    break;
                }
                case AK_LAYOUT_DSV4_FP8_UE8M0:
                    s = d < 448 ? ldexp(orc_ue8m0(tb[576 + d / 64]), -9) : 0; rel = d < 448 ? ldexp(1, -4) : ldexp(1, -8);
                    break;
                case AK_LAYOUT_INDEXER_FP8: { float sc; memcpy(&sc, tb + 128, 4); s = ldexp(sc, -9); rel = ldexp(1, -4) + ldexp(1, -20); break; }
                default: s = 0.5 * orc_ue8m0(tb[64 + d / 32]); rel = 0.25; break;
                }
                /* per tensor: values past 448 k_scale saturate by design */
                double xv = xi[d], top = 448.0 * p.c.k_scale;
                if (wc.l == AK_LAYOUT_MLA_FP8_PERTENSOR) xv = xv > top ? top : xv < -top ? -top : xv;
                double err = fabs(ref[i * w + d] - xv), lim = rel * fabs(xv) + s;
                if (lim > 0 && err / lim > max_ratio) max_ratio = err / lim;
            }
        }
        for (int d = 0; d < w; d++) {
            refb[i * w + d] = orc_bf16(orc_bf16_bits(ref[i * w + d]));
            obf[i * w + d] = (float)orc_bf16(ob[i * w + d]);
        }
    }
    CHECK_MSG(max_ratio <= 1.0, "layout %d: round-trip error %.3f x the bound", (int)wc.l, max_ratio);
    ak_tol exact = {0, 0, -1, -1}; /* gathers are exact decodes: bitwise */
    ak_compare("gather f32", of, ref, gn * w, exact);
    ak_compare("gather bf16", obf, refb, gn * w, exact);
    free(perm); free(slots); free(x); free(in); free(written); free(row_of); free(gs);
    free(of); free(ob); free(ref); free(obf); free(refb);
    pool_free(&p);
}

AK_TEST(write_gather_every_layout_vs_oracle) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    ak_context *ctx = cpu_ctx(2);
    const wcase cases[] = {
        {AK_LAYOUT_MLA_BF16, 16, 3, 0, 0, AK_QUANT_DEFAULT},
        {AK_LAYOUT_MLA_BF16, 5, 4, 1152, 1, AK_QUANT_DEFAULT},
        {AK_LAYOUT_MLA_BF16, 4, 3, 16, 0, AK_QUANT_DEFAULT}, /* padded stride, smallest legal step */
        {AK_LAYOUT_MLA_FP8_PERTENSOR, 16, 3, 0, 0, AK_QUANT_DEFAULT},
        {AK_LAYOUT_MLA_FP8_PERTENSOR, 7, 3, 0, 1, AK_QUANT_DEFAULT},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 64, 2, 0, 0, AK_QUANT_DEFAULT},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 3, 9, 656, 1, AK_QUANT_POW2},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 16, 3, 0, 0, AK_QUANT_FP32},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 16, 3, 0, 1, AK_QUANT_FP32},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 3, 5, 48, 0, AK_QUANT_DEFAULT}, /* padded stride */
        {AK_LAYOUT_DSV4_FP8_UE8M0, 64, 2, 0, 0, AK_QUANT_DEFAULT},
        {AK_LAYOUT_DSV4_FP8_UE8M0, 2, 9, 576, 1, AK_QUANT_POW2},
        {AK_LAYOUT_DSV4_FP8_UE8M0, 16, 3, 0, 0, AK_QUANT_POW2_AMAX_FLOOR},
        {AK_LAYOUT_INDEXER_FP8, 64, 2, 0, 0, AK_QUANT_DEFAULT},
        {AK_LAYOUT_INDEXER_FP8, 64, 2, 64, 1, AK_QUANT_POW2},
        {AK_LAYOUT_INDEXER_FP8, 64, 2, 0, 1, AK_QUANT_FP32},
        {AK_LAYOUT_INDEXER_FP4, 64, 2, 0, 0, AK_QUANT_DEFAULT},
        {AK_LAYOUT_INDEXER_FP4, 64, 2, 32, 1, AK_QUANT_POW2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_write_case(ctx, &r, cases[i]);
    ak_context_destroy(ctx);
}

AK_TEST(indexer_fp8_raw_gather) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 1);
    ak_context *ctx = cpu_ctx(2);
    pool p = pool_make(AK_LAYOUT_INDEXER_FP8, 2, 64, 0);
    uint16_t k[4 * 128];
    double x[4 * 128];
    int32_t slots[4] = {0, 77, 127, 13};
    for (int i = 0; i < 4; i++) random_row(&r, 128, 128, 0, x + 128 * i, k + 128 * i);
    ak_tensor tk = ak_tensor_make(k, AK_DTYPE_BF16, 2, (int64_t[]){4, 128});
    ak_tensor ts = ak_tensor_make(slots, AK_DTYPE_I32, 1, (int64_t[]){4});
    CHECK_STATUS(ak_cache_write(ctx, &p.c, &tk, NULL, &ts, AK_QUANT_DEFAULT), AK_OK);
    int32_t gs[3] = {77, -1, 13};
    uint8_t out[3 * 128];
    float sc[3];
    ak_poison(out, sizeof out, AK_DTYPE_E4M3);
    ak_poison(sc, sizeof sc, AK_DTYPE_F32);
    ak_tensor tg = ak_tensor_make(gs, AK_DTYPE_I32, 1, (int64_t[]){3});
    ak_tensor to = ak_tensor_make(out, AK_DTYPE_E4M3, 2, (int64_t[]){3, 128});
    ak_tensor tsc = ak_tensor_make(sc, AK_DTYPE_F32, 1, (int64_t[]){3});
    CHECK_STATUS(ak_cache_gather(ctx, &p.c, &tg, &to, &tsc), AK_OK);
    uint8_t want[132];
    orc_enc_idx8(x + 128, 0, want, (float *)(want + 128));
    CHECK(memcmp(out, want, 128) == 0 && memcmp(&sc[0], want + 128, 4) == 0);
    CHECK(all_bytes(out + 128, 128, 0) && sc[1] == 0.0f);
    orc_enc_idx8(x + 384, 0, want, (float *)(want + 128));
    CHECK(memcmp(out + 256, want, 128) == 0 && memcmp(&sc[2], want + 128, 4) == 0);
    pool_free(&p);
    ak_context_destroy(ctx);
}

/* ---- conversions --------------------------------------------------------------------------- */

/* Fills every slot of a pool with random rows through ak_cache_write. */
static void fill_pool(ak_context *ctx, ak_rng *r, pool *p) {
    int64_t cap = (int64_t)p->c.num_pages * p->c.page_size;
    int wn = d_nope(p->c.layout), wr = d_rope(p->c.layout), w = wn + wr;
    uint16_t *in = (uint16_t *)malloc(2 * (size_t)(cap * w));
    double *x = (double *)malloc(sizeof(double) * (size_t)w);
    int32_t *slots = (int32_t *)malloc(sizeof(int32_t) * (size_t)cap);
    for (int64_t i = 0; i < cap; i++) {
        slots[i] = (int32_t)i;
        random_row(r, w, 64, 0, x, in + i * w);
    }
    ak_tensor tn = ak_tensor_make(in, AK_DTYPE_BF16, 2, (int64_t[]){cap, wn});
    tn.strides[0] = w;
    ak_tensor tr = ak_tensor_make(in + wn, AK_DTYPE_BF16, 2, (int64_t[]){cap, wr});
    tr.strides[0] = w;
    ak_tensor ts = ak_tensor_make(slots, AK_DTYPE_I32, 1, (int64_t[]){cap});
    CHECK_STATUS(ak_cache_write(ctx, &p->c, &tn, wr ? &tr : NULL, &ts, AK_QUANT_DEFAULT), AK_OK);
    free(in); free(x); free(slots);
}

/* Gathers every slot of a pool as f32 rows [cap, w]. */
static float *gather_all(ak_context *ctx, const pool *p, int w) {
    int64_t cap = (int64_t)p->c.num_pages * p->c.page_size;
    int32_t *slots = (int32_t *)malloc(sizeof(int32_t) * (size_t)cap);
    for (int64_t i = 0; i < cap; i++) slots[i] = (int32_t)i;
    float *out = (float *)malloc(sizeof(float) * (size_t)(cap * w));
    ak_tensor ts = ak_tensor_make(slots, AK_DTYPE_I32, 1, (int64_t[]){cap});
    ak_tensor to = ak_tensor_make(out, AK_DTYPE_F32, 2, (int64_t[]){cap, w});
    CHECK_STATUS(ak_cache_gather(ctx, &p->c, &ts, &to, NULL), AK_OK);
    free(slots);
    return out;
}

/* Every MLA conversion of the matrix: src filled with random tokens, dst 0xFF-filled with another
   page size and a padded stride; every dst token must equal the oracle's bytes for the source
   token's dequantized values (lossy) or the source bytes (lossless), and padding must be zero. */
AK_TEST(convert_mla_matrix_vs_oracle) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 2);
    ak_context *ctx = cpu_ctx(2);
    const ak_layout B = AK_LAYOUT_MLA_BF16, F = AK_LAYOUT_MLA_FP8_PERTENSOR, D = AK_LAYOUT_DSA_FP8_BLOCKSCALE;
    const struct { ak_layout s, d; ak_quant_rule rule; } pairs[] = {
        {F, D, AK_QUANT_DEFAULT}, {B, D, AK_QUANT_DEFAULT}, {B, D, AK_QUANT_FP32}, {D, B, AK_QUANT_DEFAULT},
        {B, F, AK_QUANT_DEFAULT}, {F, B, AK_QUANT_DEFAULT}, {D, F, AK_QUANT_DEFAULT},
        {B, B, AK_QUANT_DEFAULT}, {F, F, AK_QUANT_DEFAULT}, {D, D, AK_QUANT_DEFAULT},
    };
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        pool s = pool_make(pairs[k].s, 4, 8, 0);
        if (pairs[k].s == F) s.c.k_scale = 0.25f; /* a power of two: C1 is lossless */
        fill_pool(ctx, &r, &s);
        pool d = pool_make(pairs[k].d, 3, 16, 112); /* re-page 8 -> 16, padded stride */
        if (pairs[k].d == F) d.c.k_scale = 2.0f;
        if (pairs[k].s == F && pairs[k].d == F) d.c.k_scale = s.c.k_scale;
        CHECK_STATUS(ak_cache_convert(ctx, &s.c, &d.c, NULL, pairs[k].rule), AK_OK);
        float *src_rows = gather_all(ctx, &s, 576);
        uint8_t got[1160], want[1160], sb[1160];
        int bad = 0;
        for (int32_t slot = 0; slot < 32 && bad < 2; slot++) {
            int len = token_bytes(&d, slot, got);
            int slen = token_bytes(&s, slot, sb);
            double x[576];
            for (int i = 0; i < 576; i++) x[i] = src_rows[slot * 576 + i];
            if (pairs[k].s == pairs[k].d) {
                memcpy(want, sb, (size_t)slen);
            } else if (pairs[k].s == F && pairs[k].d == D) { /* C1 */
                memcpy(want, sb, 512);
                for (int i = 0; i < 4; i++) memcpy(want + 512 + 4 * i, &s.c.k_scale, 4);
                for (int i = 0; i < 64; i++) {
                    uint16_t h = orc_bf16_bits(orc_e4m3(sb[512 + i]) * s.c.k_scale);
                    want[528 + 2 * i] = (uint8_t)h; want[529 + 2 * i] = (uint8_t)(h >> 8);
                }
            } else {
                oracle_encode(pairs[k].d, x, pairs[k].rule, d.c.k_scale, want);
            }
            if (memcmp(got, want, (size_t)len) != 0) {
                CHECK_MSG(0, "convert %d -> %d rule %d: slot %d differs from the oracle", (int)pairs[k].s, (int)pairs[k].d, (int)pairs[k].rule, slot);
                bad++;
            }
        }
        /* lossless pairs keep the dequantized values exactly */
        if ((pairs[k].s == F && pairs[k].d == D) || pairs[k].d == B || pairs[k].s == pairs[k].d) {
            d.c.num_pages = 2; /* the 32 converted slots */
            float *dst_rows = gather_all(ctx, &d, 576);
            CHECK_MSG(memcmp(src_rows, dst_rows, 32 * 576 * 4) == 0, "convert %d -> %d not lossless", (int)pairs[k].s, (int)pairs[k].d);
            free(dst_rows);
            d.c.num_pages = 3;
        }
        int64_t pay = pairs[k].d == B ? 16 * 1152 : pairs[k].d == F ? 16 * 576 : 16 * 656;
        CHECK(all_bytes(d.mem + pay, 112, 0) && all_bytes(d.mem + (pay + 112) + pay, 112, 0));
        CHECK(all_bytes(d.mem + 2 * (pay + 112), pay + 112, 0xff)); /* page 2: no source slots */
        free(src_rows);
        pool_free(&s);
        pool_free(&d);
    }
    ak_context_destroy(ctx);
}

/* layouts.md 6.3: V4 256 -> 64 split by byte offsets, merge back, and the touched-pages form. */
AK_TEST(convert_dsv4_repage_256_to_64) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 3);
    ak_context *ctx = cpu_ctx(2);
    pool s = pool_make(AK_LAYOUT_DSV4_FP8_UE8M0, 2, 256, 0);
    memset(s.mem, 0, (size_t)s.bytes); /* page padding zero, as a converter leaves it */
    fill_pool(ctx, &r, &s);
    CHECK(s.c.page_stride == 149760);
    pool d = pool_make(AK_LAYOUT_DSV4_FP8_UE8M0, 8, 64, 0);
    CHECK(d.c.page_stride == 37440);
    CHECK_STATUS(ak_cache_convert(ctx, &s.c, &d.c, NULL, AK_QUANT_DEFAULT), AK_OK);
    for (int p = 0; p < 2; p++)
        for (int sub = 0; sub < 4; sub++) {
            const uint8_t *sp = s.mem + (int64_t)p * 149760, *dp = d.mem + (int64_t)(4 * p + sub) * 37440;
            CHECK(memcmp(dp, sp + sub * 36864, 36864) == 0);
            CHECK(memcmp(dp + 36864, sp + 147456 + sub * 512, 512) == 0);
            CHECK(all_bytes(dp + 37376, 37440 - 37376, 0));
        }
    /* values by slot id unchanged */
    float *a = gather_all(ctx, &s, 512), *b = gather_all(ctx, &d, 512);
    CHECK(memcmp(a, b, 512 * 512 * 4) == 0);
    /* merge back: byte-identical to the source pool */
    pool m = pool_make(AK_LAYOUT_DSV4_FP8_UE8M0, 2, 256, 0);
    CHECK_STATUS(ak_cache_convert(ctx, &d.c, &m.c, NULL, AK_QUANT_DEFAULT), AK_OK);
    CHECK(memcmp(m.mem, s.mem, (size_t)s.bytes) == 0);
    /* touched pages: only source page 1; page 0's four destination pages stay 0xFF */
    pool t = pool_make(AK_LAYOUT_DSV4_FP8_UE8M0, 8, 64, 0);
    int32_t pg[2] = {-1, 1};
    ak_tensor tp = ak_tensor_make(pg, AK_DTYPE_I32, 1, (int64_t[]){2});
    CHECK_STATUS(ak_cache_convert(ctx, &s.c, &t.c, &tp, AK_QUANT_DEFAULT), AK_OK);
    CHECK(all_bytes(t.mem, 4 * 37440, 0xff));
    CHECK(memcmp(t.mem + 4 * 37440, d.mem + 4 * 37440, 4 * 37440) == 0);
    /* V4 rows to bf16 and back (gather + write): values unchanged */
    uint16_t *rows = (uint16_t *)malloc(512 * 512 * 2);
    int32_t *slots = (int32_t *)malloc(512 * 4);
    for (int i = 0; i < 512; i++) slots[i] = i;
    ak_tensor ts = ak_tensor_make(slots, AK_DTYPE_I32, 1, (int64_t[]){512});
    ak_tensor tr = ak_tensor_make(rows, AK_DTYPE_BF16, 2, (int64_t[]){512, 512});
    CHECK_STATUS(ak_cache_gather(ctx, &s.c, &ts, &tr, NULL), AK_OK);
    pool w = pool_make(AK_LAYOUT_DSV4_FP8_UE8M0, 8, 64, 0);
    ak_tensor tn = ak_tensor_make(rows, AK_DTYPE_BF16, 2, (int64_t[]){512, 448});
    tn.strides[0] = 512;
    ak_tensor tro = ak_tensor_make(rows + 448, AK_DTYPE_BF16, 2, (int64_t[]){512, 64});
    tro.strides[0] = 512;
    CHECK_STATUS(ak_cache_write(ctx, &w.c, &tn, &tro, &ts, AK_QUANT_DEFAULT), AK_OK);
    float *c = gather_all(ctx, &w, 512);
    CHECK(memcmp(a, c, 512 * 512 * 4) == 0);
    free(a); free(b); free(c); free(rows); free(slots);
    pool_free(&s); pool_free(&d); pool_free(&m); pool_free(&t); pool_free(&w);
    ak_context_destroy(ctx);
}

AK_TEST(convert_indexer_copy_restride) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 4);
    ak_context *ctx = cpu_ctx(2);
    for (ak_layout l = AK_LAYOUT_INDEXER_FP8; l <= AK_LAYOUT_INDEXER_FP4; l = (ak_layout)(l + 1)) {
        pool s = pool_make(l, 3, 64, 0);
        fill_pool(ctx, &r, &s);
        pool d = pool_make(l, 3, 64, 64);
        CHECK_STATUS(ak_cache_convert(ctx, &s.c, &d.c, NULL, AK_QUANT_DEFAULT), AK_OK);
        uint8_t a[200], b[200];
        for (int32_t slot = 0; slot < 192; slot++) {
            int n = token_bytes(&s, slot, a);
            token_bytes(&d, slot, b);
            CHECK(memcmp(a, b, (size_t)n) == 0);
        }
        int64_t pb = l == AK_LAYOUT_INDEXER_FP8 ? 8448 : 4352;
        CHECK(all_bytes(d.mem + pb, 64, 0));
        pool_free(&s); pool_free(&d);
    }
    ak_context_destroy(ctx);
}

AK_TEST(mha_write_gather_convert) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 5);
    ak_context *ctx = cpu_ctx(2);
    const int H = 3, DK = 24, DV = 16, P = 4, NP = 5, cap = P * NP;
    size_t kb = (size_t)cap * H * DK * 2, vb = (size_t)cap * H * DV * 2;
    uint8_t *k0 = malloc(kb), *v0 = malloc(vb), *k1 = malloc(kb), *v1 = malloc(vb);
    uint8_t *k2 = malloc(kb / 2), *v2 = malloc(vb / 2), *k3 = malloc(kb), *v3 = malloc(vb);
    ak_cache nhd, hnd, f8, back;
    CHECK_STATUS(ak_cache_init_mha(&nhd, AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, k0, v0, NP, P, H, DK, DV), AK_OK);
    CHECK_STATUS(ak_cache_init_mha(&hnd, AK_LAYOUT_MHA_HND, AK_DTYPE_BF16, k1, v1, NP, P, H, DK, DV), AK_OK);
    CHECK_STATUS(ak_cache_init_mha(&f8, AK_LAYOUT_MHA_HND, AK_DTYPE_E4M3, k2, v2, NP, P, H, DK, DV), AK_OK);
    CHECK_STATUS(ak_cache_init_mha(&back, AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, k3, v3, NP, P, H, DK, DV), AK_OK);
    f8.k_scale = 0.5f;
    f8.v_scale = 0.25f;
    memset(k0, 0xff, kb); memset(v0, 0xff, vb);
    float *kin = malloc(sizeof(float) * cap * H * DK), *vin = malloc(sizeof(float) * cap * H * DV);
    int32_t *slots = malloc(sizeof(int32_t) * cap);
    for (int i = 0; i < cap * H * DK; i++) kin[i] = (float)ak_rng_normal(&r);
    for (int i = 0; i < cap * H * DV; i++) vin[i] = (float)ak_rng_normal(&r);
    for (int i = 0; i < cap; i++) slots[i] = (i * 7) % cap;
    ak_tensor tk = ak_tensor_make(kin, AK_DTYPE_F32, 3, (int64_t[]){cap, H, DK});
    ak_tensor tv = ak_tensor_make(vin, AK_DTYPE_F32, 3, (int64_t[]){cap, H, DV});
    ak_tensor ts = ak_tensor_make(slots, AK_DTYPE_I32, 1, (int64_t[]){cap});
    CHECK_STATUS(ak_mha_cache_write(ctx, &nhd, &tk, &tv, &ts), AK_OK);
    /* NHD element (slot, h, d) at ((slot) * H + h) * DK + d, bf16 RNE of the input */
    int bad = 0;
    for (int i = 0; i < cap && !bad; i++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < DK; d++) {
                uint16_t got;
                memcpy(&got, k0 + 2 * (((int64_t)slots[i] * H + h) * DK + d), 2);
                if (got != orc_bf16_bits(kin[(i * H + h) * DK + d])) bad = 1;
            }
    CHECK(!bad);
    CHECK_STATUS(ak_cache_convert(ctx, &nhd, &hnd, NULL, AK_QUANT_DEFAULT), AK_OK);
    /* HND element (page, h, t, d) */
    for (int s = 0; s < cap; s++)
        for (int h = 0; h < H; h++)
            CHECK(memcmp(k1 + 2 * ((((int64_t)(s / P) * H + h) * P + s % P) * DK),
                         k0 + 2 * (((int64_t)s * H + h) * DK), 2 * DK) == 0);
    CHECK_STATUS(ak_cache_convert(ctx, &hnd, &f8, NULL, AK_QUANT_DEFAULT), AK_OK);
    for (int s = 0; s < cap; s++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < DV; d++) {
                uint16_t hv;
                memcpy(&hv, v0 + 2 * (((int64_t)s * H + h) * DV + d), 2);
                uint8_t q = v2[(((int64_t)(s / P) * H + h) * P + s % P) * DV + d];
                CHECK(q == orc_e4m3_div(orc_bf16(hv), 0.25));
            }
    CHECK_STATUS(ak_cache_convert(ctx, &f8, &back, NULL, AK_QUANT_DEFAULT), AK_OK);
    /* gather K and V of both, poisoned: fp8 -> bf16 values are exact (q * 2^-k) */
    float *ka = malloc(sizeof(float) * cap * H * DK), *kf = malloc(sizeof(float) * cap * H * DK);
    float *va = malloc(sizeof(float) * cap * H * DV);
    ak_poison(ka, sizeof(float) * cap * H * DK, AK_DTYPE_F32);
    ak_poison(va, sizeof(float) * cap * H * DV, AK_DTYPE_F32);
    int32_t all[20];
    for (int i = 0; i < cap; i++) all[i] = i;
    ak_tensor ta = ak_tensor_make(all, AK_DTYPE_I32, 1, (int64_t[]){cap});
    ak_tensor tka = ak_tensor_make(ka, AK_DTYPE_F32, 3, (int64_t[]){cap, H, DK});
    ak_tensor tva = ak_tensor_make(va, AK_DTYPE_F32, 3, (int64_t[]){cap, H, DV});
    ak_tensor tkf = ak_tensor_make(kf, AK_DTYPE_F32, 3, (int64_t[]){cap, H, DK});
    CHECK_STATUS(ak_mha_cache_gather(ctx, &back, &ta, &tka, &tva), AK_OK);
    CHECK_STATUS(ak_cache_gather(ctx, &f8, &ta, &tkf, NULL), AK_OK);
    CHECK(memcmp(ka, kf, sizeof(float) * cap * H * DK) == 0);
    double *ref = malloc(sizeof(double) * cap * H * DK);
    for (int s = 0; s < cap; s++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < DK; d++)
                ref[(s * H + h) * DK + d] = orc_e4m3(k2[(((int64_t)(s / P) * H + h) * P + s % P) * DK + d]) * 0.5;
    ak_tol exact = {0, 0, -1, -1};
    ak_compare("mha e4m3 gather", ka, ref, cap * H * DK, exact);
    free(k0); free(v0); free(k1); free(v1); free(k2); free(v2); free(k3); free(v3);
    free(kin); free(vin); free(slots); free(ka); free(kf); free(va); free(ref);
    ak_context_destroy(ctx);
}

AK_TEST(thread_count_invariance) {
    ak_rng r1, r2;
    uint64_t seed = ak_test_seed() + 6;
    ak_rng_init(&r1, seed);
    ak_rng_init(&r2, seed);
    ak_context *c1 = cpu_ctx(1), *c2 = cpu_ctx(2);
    pool a = pool_make(AK_LAYOUT_DSA_FP8_BLOCKSCALE, 6, 64, 0), b = pool_make(AK_LAYOUT_DSA_FP8_BLOCKSCALE, 6, 64, 0);
    fill_pool(c1, &r1, &a);
    fill_pool(c2, &r2, &b);
    CHECK(memcmp(a.mem, b.mem, (size_t)a.bytes) == 0);
    pool x = pool_make(AK_LAYOUT_MLA_BF16, 3, 128, 0), y = pool_make(AK_LAYOUT_MLA_BF16, 3, 128, 0);
    CHECK_STATUS(ak_cache_convert(c1, &a.c, &x.c, NULL, AK_QUANT_DEFAULT), AK_OK);
    CHECK_STATUS(ak_cache_convert(c2, &b.c, &y.c, NULL, AK_QUANT_DEFAULT), AK_OK);
    CHECK(memcmp(x.mem, y.mem, (size_t)x.bytes) == 0);
    pool_free(&a); pool_free(&b); pool_free(&x); pool_free(&y);
    ak_context_destroy(c1);
    ak_context_destroy(c2);
}

AK_TEST(audit_finds_corruption) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 7);
    ak_context *ctx = cpu_ctx(2);
    pool p = pool_make(AK_LAYOUT_DSV4_FP8_UE8M0, 2, 64, 0);
    fill_pool(ctx, &r, &p);
    int64_t bad = -1;
    CHECK_STATUS(ak_cache_audit(ctx, &p.c, 0, 2, &bad), AK_OK);
    CHECK(bad == 0);
    p.mem[37440 + 64 * 576 + 5 * 8 + 2] = 0xff; /* slot 69's third UE8M0 byte */
    p.mem[3 * 576 + 10] = 0x7f;                  /* slot 3: e4m3 NaN */
    CHECK_REJECT(ak_cache_audit(ctx, &p.c, 0, 2, &bad), AK_ERR_CORRUPT_CACHE, "slot 3");
    CHECK(bad == 2);
    CHECK_STATUS(ak_cache_audit(ctx, &p.c, 1, 0, &bad), AK_OK);
    CHECK_REJECT(ak_cache_audit(ctx, &p.c, 1, 1, &bad), AK_ERR_CORRUPT_CACHE, "slot 69");
    pool q = pool_make(AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1, 4, 0);
    fill_pool(ctx, &r, &q);
    float neg = -1.0f;
    memcpy(q.mem + 656 * 2 + 520, &neg, 4);
    CHECK_REJECT(ak_cache_audit(ctx, &q.c, 0, 1, &bad), AK_ERR_CORRUPT_CACHE, "slot 2");
    CHECK_REJECT(ak_cache_audit(ctx, &q.c, 0, 2, &bad), AK_ERR_INVALID_ARGUMENT, "page_count");
    pool_free(&p); pool_free(&q);
    ak_context_destroy(ctx);
}

/* ---- bad inputs (the list at the top of the file) -------------------------------------------- */

AK_TEST(bad_inputs) {
    ak_context *ctx = cpu_ctx(1);
    pool p = pool_make(AK_LAYOUT_DSA_FP8_BLOCKSCALE, 2, 4, 0);
    uint8_t *before = malloc((size_t)p.bytes);
    memcpy(before, p.mem, (size_t)p.bytes);
    float nope[2 * 512], rope[2 * 64];
    for (int i = 0; i < 1024; i++) nope[i] = 0.5f;
    for (int i = 0; i < 128; i++) rope[i] = 0.25f;
    int32_t slots[2] = {1, 2};
    ak_tensor tn = ak_tensor_make(nope, AK_DTYPE_F32, 2, (int64_t[]){2, 512});
    ak_tensor tr = ak_tensor_make(rope, AK_DTYPE_F32, 2, (int64_t[]){2, 64});
    ak_tensor ts = ak_tensor_make(slots, AK_DTYPE_I32, 1, (int64_t[]){2});
    ak_quant_rule R = AK_QUANT_DEFAULT;

    CHECK_REJECT(ak_cache_write(NULL, &p.c, &tn, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "ctx");
    CHECK_REJECT(ak_cache_write(ctx, NULL, &tn, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "cache");
    CHECK_REJECT(ak_cache_write(ctx, &p.c, NULL, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "nope");
    CHECK_REJECT(ak_cache_write(ctx, &p.c, &tn, NULL, &ts, R), AK_ERR_INVALID_ARGUMENT, "rope");
    CHECK_REJECT(ak_cache_write(ctx, &p.c, &tn, &tr, NULL, R), AK_ERR_INVALID_ARGUMENT, "slots");
    ak_tensor t = tn; t.dtype = AK_DTYPE_I32;
    CHECK_REJECT(ak_cache_write(ctx, &p.c, &t, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "nope");
    t = ts; t.dtype = AK_DTYPE_I64;
    CHECK_REJECT(ak_cache_write(ctx, &p.c, &tn, &tr, &t, R), AK_ERR_INVALID_ARGUMENT, "slots");
    t = tn; t.shape[1] = 511;
    CHECK_REJECT(ak_cache_write(ctx, &p.c, &t, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "nope");
    t = tn; t.strides[1] = 2; t.strides[0] = 1024;
    CHECK_REJECT(ak_cache_write(ctx, &p.c, &t, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "innermost");
    slots[1] = -2;
    CHECK_REJECT(ak_cache_write(ctx, &p.c, &tn, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "slots[1]");
    slots[1] = 8;
    CHECK_REJECT(ak_cache_write(ctx, &p.c, &tn, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "capacity");
    slots[1] = 2;
    nope[600] = NAN;
    CHECK_REJECT(ak_cache_write(ctx, &p.c, &tn, &tr, &ts, R), AK_ERR_NONFINITE, "nope");
    nope[600] = 0.5f;
    rope[3] = INFINITY;
    CHECK_REJECT(ak_cache_write(ctx, &p.c, &tn, &tr, &ts, R), AK_ERR_NONFINITE, "rope");
    rope[3] = 0.25f;
    CHECK_REJECT(ak_cache_write(ctx, &p.c, &tn, &tr, &ts, (ak_quant_rule)9), AK_ERR_INVALID_ARGUMENT, "rule");
    CHECK(memcmp(before, p.mem, (size_t)p.bytes) == 0); /* nothing written by a failed call */

    pool v4 = pool_make(AK_LAYOUT_DSV4_FP8_UE8M0, 1, 2, 0);
    ak_tensor t448 = ak_tensor_make(nope, AK_DTYPE_F32, 2, (int64_t[]){2, 448});
    CHECK_REJECT(ak_cache_write(ctx, &v4.c, &t448, &tr, &ts, AK_QUANT_FP32), AK_ERR_INVALID_ARGUMENT, "rule");
    pool ix = pool_make(AK_LAYOUT_INDEXER_FP8, 1, 64, 0);
    ak_tensor t128 = ak_tensor_make(nope, AK_DTYPE_F32, 2, (int64_t[]){2, 128});
    CHECK_REJECT(ak_cache_write(ctx, &ix.c, &t128, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "rope");
    ak_cache mha;
    uint16_t kv[64];
    CHECK_STATUS(ak_cache_init_mha(&mha, AK_LAYOUT_MHA_NHD, AK_DTYPE_BF16, kv, kv + 32, 2, 2, 1, 8, 8), AK_OK);
    CHECK_REJECT(ak_cache_write(ctx, &mha, &tn, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "ak_mha_cache_write");
    ak_cache c = p.c;
    c.page_size = 0;
    CHECK_REJECT(ak_cache_write(ctx, &c, &tn, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "page_size");
    c.page_size = 2048;
    CHECK_REJECT(ak_cache_write(ctx, &c, &tn, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "page_size");
    c = ix.c; c.page_size = 32;
    CHECK_REJECT(ak_cache_write(ctx, &c, &t128, NULL, &ts, R), AK_ERR_INVALID_ARGUMENT, "page_size");
    c = p.c; c.num_pages = INT32_MAX; c.page_size = 4;
    CHECK_REJECT(ak_cache_write(ctx, &c, &tn, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "capacity");
    c = p.c; c.page_stride = 100;
    CHECK_REJECT(ak_cache_write(ctx, &c, &tn, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "page_stride");
    c = v4.c; c.page_stride = 1729;
    CHECK_REJECT(ak_cache_write(ctx, &c, &t448, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "576");
    t = tn; t.shape[0] = INT64_MAX / 4; t.shape[1] = 512;
    CHECK_REJECT(ak_cache_write(ctx, &p.c, &t, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "overflow");
    c = p.c; c.device.type = AK_DEVICE_CUDA;
    CHECK_REJECT(ak_cache_write(ctx, &c, &tn, &tr, &ts, R), AK_ERR_INVALID_ARGUMENT, "device");

    /* gather */
    float out[2 * 576];
    ak_tensor to = ak_tensor_make(out, AK_DTYPE_F32, 2, (int64_t[]){2, 576});
    CHECK_REJECT(ak_cache_gather(ctx, &p.c, &ts, NULL, NULL), AK_ERR_INVALID_ARGUMENT, "out");
    t = to; t.shape[1] = 512;
    CHECK_REJECT(ak_cache_gather(ctx, &p.c, &ts, &t, NULL), AK_ERR_INVALID_ARGUMENT, "out");
    t = to; t.dtype = AK_DTYPE_E4M3;
    CHECK_REJECT(ak_cache_gather(ctx, &p.c, &ts, &t, NULL), AK_ERR_INVALID_ARGUMENT, "out");
    ak_tensor te = ak_tensor_make(out, AK_DTYPE_E4M3, 2, (int64_t[]){2, 128});
    CHECK_REJECT(ak_cache_gather(ctx, &ix.c, &ts, &te, NULL), AK_ERR_INVALID_ARGUMENT, "out_scale");
    ak_tensor tsc = ak_tensor_make(out, AK_DTYPE_F32, 1, (int64_t[]){2});
    CHECK_REJECT(ak_cache_gather(ctx, &p.c, &ts, &to, &tsc), AK_ERR_INVALID_ARGUMENT, "out_scale");
    t = to; t.strides[0] = 0;
    CHECK_REJECT(ak_cache_gather(ctx, &p.c, &ts, &t, NULL), AK_ERR_INVALID_ARGUMENT, "overlap");

    /* MHA */
    ak_tensor tk = ak_tensor_make(nope, AK_DTYPE_F32, 3, (int64_t[]){2, 1, 7});
    ak_tensor tk8 = ak_tensor_make(nope, AK_DTYPE_F32, 3, (int64_t[]){2, 1, 8});
    CHECK_REJECT(ak_mha_cache_write(ctx, &mha, &tk, &tk8, &ts), AK_ERR_INVALID_ARGUMENT, "k");
    slots[0] = 99;
    CHECK_REJECT(ak_mha_cache_write(ctx, &mha, &tk8, &tk8, &ts), AK_ERR_INVALID_ARGUMENT, "slots[0]");
    slots[0] = 1;
    CHECK_REJECT(ak_mha_cache_gather(ctx, &mha, &ts, NULL, NULL), AK_ERR_INVALID_ARGUMENT, "k_out");

    /* convert */
    pool b = pool_make(AK_LAYOUT_MLA_BF16, 2, 4, 0);
    CHECK_REJECT(ak_cache_convert(ctx, &v4.c, &p.c, NULL, R), AK_ERR_UNSUPPORTED, "DSV4_FP8_UE8M0 to DSA_FP8_BLOCKSCALE");
    CHECK_REJECT(ak_cache_convert(ctx, &ix.c, &b.c, NULL, R), AK_ERR_UNSUPPORTED, "INDEXER_FP8 to MLA_BF16");
    pool small = pool_make(AK_LAYOUT_MLA_BF16, 1, 4, 0);
    CHECK_REJECT(ak_cache_convert(ctx, &p.c, &small.c, NULL, R), AK_ERR_INVALID_ARGUMENT, "capacity");
    int32_t pg[2] = {0, 7};
    ak_tensor tp = ak_tensor_make(pg, AK_DTYPE_I32, 1, (int64_t[]){2});
    CHECK_REJECT(ak_cache_convert(ctx, &p.c, &b.c, &tp, R), AK_ERR_INVALID_ARGUMENT, "pages[1]");
    pg[1] = 0;
    CHECK_REJECT(ak_cache_convert(ctx, &p.c, &b.c, &tp, R), AK_ERR_INVALID_ARGUMENT, "twice");
    t = tp; t.dtype = AK_DTYPE_F32;
    CHECK_REJECT(ak_cache_convert(ctx, &p.c, &b.c, &t, R), AK_ERR_INVALID_ARGUMENT, "pages");
    c = b.c; c.data = b.mem + 1152;
    CHECK_REJECT(ak_cache_convert(ctx, &b.c, &c, NULL, R), AK_ERR_INVALID_ARGUMENT, "overlap");
    CHECK_REJECT(ak_cache_convert(ctx, &p.c, &p.c, NULL, AK_QUANT_FP32), AK_ERR_INVALID_ARGUMENT, "rule");
    ak_cache mha2;
    CHECK_STATUS(ak_cache_init_mha(&mha2, AK_LAYOUT_MHA_HND, AK_DTYPE_BF16, kv, kv + 32, 2, 2, 1, 8, 4), AK_OK);
    CHECK_REJECT(ak_cache_convert(ctx, &mha, &mha2, NULL, R), AK_ERR_INVALID_ARGUMENT, "geometry");
    memset(b.mem, 0, (size_t)b.bytes);
    b.mem[1152 * 5 + 1] = 0x7f; b.mem[1152 * 5] = 0xc0; /* slot 5: bf16 NaN */
    uint8_t *pb = malloc((size_t)p.bytes);
    memcpy(pb, p.mem, (size_t)p.bytes);
    CHECK_REJECT(ak_cache_convert(ctx, &b.c, &p.c, NULL, R), AK_ERR_NONFINITE, "slot 5");
    CHECK(memcmp(pb, p.mem, (size_t)p.bytes) == 0);
    CHECK_REJECT(ak_cache_audit(ctx, &p.c, 1, 2, NULL), AK_ERR_INVALID_ARGUMENT, "page_count");

    free(before); free(pb);
    pool_free(&p); pool_free(&v4); pool_free(&ix); pool_free(&b); pool_free(&small);
    ak_context_destroy(ctx);
}

/* Every finite bf16 value through the per-tensor writer (k_scale 1: the multiply path; k_scale
   0.75: the division path) against the oracle's grid search: the e4m3 rounding, ties, the
   subnormal grid and saturation, value by value. */
AK_TEST(e4m3_writer_every_bf16_value) {
    ak_context *ctx = cpu_ctx(2);
    const int64_t rows = 65536 / 576 + 1;
    uint16_t *in = (uint16_t *)malloc(2 * (size_t)(rows * 576));
    int32_t *slots = (int32_t *)malloc(4 * (size_t)rows);
    for (int64_t i = 0; i < rows * 576; i++) {
        uint16_t h = (uint16_t)(i & 0xffff);
        in[i] = (h & 0x7f80) == 0x7f80 ? 0 : h; /* non-finite patterns replaced by 0 */
    }
    for (int64_t r = 0; r < rows; r++) slots[r] = (int32_t)r;
    const float scales[2] = {1.0f, 0.75f};
    for (int k = 0; k < 2; k++) {
        pool p = pool_make(AK_LAYOUT_MLA_FP8_PERTENSOR, (int32_t)rows, 1, 0);
        p.c.k_scale = scales[k];
        ak_tensor tn = ak_tensor_make(in, AK_DTYPE_BF16, 2, (int64_t[]){rows, 512});
        tn.strides[0] = 576;
        ak_tensor tr = ak_tensor_make(in + 512, AK_DTYPE_BF16, 2, (int64_t[]){rows, 64});
        tr.strides[0] = 576;
        ak_tensor ts = ak_tensor_make(slots, AK_DTYPE_I32, 1, (int64_t[]){rows});
        CHECK_STATUS(ak_cache_write(ctx, &p.c, &tn, &tr, &ts, AK_QUANT_DEFAULT), AK_OK);
        int64_t bad = 0;
        for (int64_t i = 0; i < rows * 576; i++) {
            uint8_t want = orc_e4m3_div(orc_bf16(in[i]), scales[k]);
            if (p.mem[i] != want && bad++ < 3)
                CHECK_MSG(0, "k_scale %g: bf16 0x%04x -> 0x%02x, oracle 0x%02x", (double)scales[k],
                          in[i], p.mem[i], want);
        }
        pool_free(&p);
    }
    free(in);
    free(slots);
    ak_context_destroy(ctx);
}
