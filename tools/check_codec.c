/*
 * check_codec.c -- `attnkit check --op cache_write,cache_gather,cache_convert`: the codecs on the
 * backend under test against the CPU reference with the same seeded random inputs. Codec results
 * must be byte-identical on every backend (quantization is integer arithmetic on float bits and
 * IEEE divisions), so every comparison is bytewise: whole pools (padding included) for write and
 * convert, whole output buffers for gather.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/internal.h"
#include "devmem.h"

typedef struct twin {
    ak_cache r, t;       /* the same pool on the reference and on the test context */
    int64_t kb, vb;
} twin;

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static int is_mha(ak_layout l) { return l == AK_LAYOUT_MHA_NHD || l == AK_LAYOUT_MHA_HND; }

static void twin_free(ak_context *ref, ak_context *test, twin *w) {
    ak_dev_free(ref, w->r.data);
    ak_dev_free(ref, w->r.v_data);
    ak_dev_free(test, w->t.data);
    ak_dev_free(test, w->t.v_data);
    memset(w, 0, sizeof *w);
}

/* Allocates the pool on both contexts, zero-filled. `c` carries the geometry (data unset). */
static ak_status twin_make(ak_context *ref, ak_context *test, const ak_cache *c, twin *w) {
    memset(w, 0, sizeof *w);
    w->r = *c;
    w->t = *c;
    w->kb = c->page_stride * c->num_pages;
    w->vb = is_mha(c->layout) ? c->v_page_stride * c->num_pages : 0;
    w->r.device = ak_context_device(ref);
    w->t.device = ak_context_device(test);
    w->r.data = ak_dev_alloc(ref, (size_t)w->kb + 1);
    w->t.data = ak_dev_alloc(test, (size_t)w->kb + 1);
    w->r.v_data = w->vb ? ak_dev_alloc(ref, (size_t)w->vb) : NULL;
    w->t.v_data = w->vb ? ak_dev_alloc(test, (size_t)w->vb) : NULL;
    if (!w->r.data || !w->t.data || (w->vb && (!w->r.v_data || !w->t.v_data))) {
        twin_free(ref, test, w);
        return AK_ERR_OUT_OF_MEMORY;
    }
    ak_status s = ak_dev_memset(ref, w->r.data, 0, (size_t)w->kb);
    if (s == AK_OK) s = ak_dev_memset(test, w->t.data, 0, (size_t)w->kb);
    if (s == AK_OK && w->vb) s = ak_dev_memset(ref, w->r.v_data, 0, (size_t)w->vb);
    if (s == AK_OK && w->vb) s = ak_dev_memset(test, w->t.v_data, 0, (size_t)w->vb);
    return s;
}

/* Copies the reference pool's bytes into the test pool. */
static ak_status twin_sync(ak_context *ref, ak_context *test, twin *w) {
    uint8_t *h = (uint8_t *)malloc((size_t)(w->kb > w->vb ? w->kb : w->vb) + 1);
    if (h == NULL) return AK_ERR_OUT_OF_MEMORY;
    ak_status s = ak_dev_download(ref, h, w->r.data, (size_t)w->kb);
    if (s == AK_OK) s = ak_dev_upload(test, w->t.data, h, (size_t)w->kb);
    if (s == AK_OK && w->vb) s = ak_dev_download(ref, h, w->r.v_data, (size_t)w->vb);
    if (s == AK_OK && w->vb) s = ak_dev_upload(test, w->t.v_data, h, (size_t)w->vb);
    free(h);
    return s;
}

/* Byte comparison of two device buffers of n bytes. */
static ak_status compare_dev(ak_context *ref, ak_context *test, const void *rp, const void *tp,
                             size_t n, ak_check_result *res) {
    uint8_t *a = (uint8_t *)malloc(n + 1), *b = (uint8_t *)malloc(n + 1);
    ak_status s = (a && b) ? AK_OK : AK_ERR_OUT_OF_MEMORY;
    if (s == AK_OK) s = ak_dev_download(ref, a, rp, n);
    if (s == AK_OK) s = ak_dev_download(test, b, tp, n);
    if (s == AK_OK) ak_check_compare_bytes(b, a, n, res);
    free(a);
    free(b);
    return s;
}

static ak_status compare_pools(ak_context *ref, ak_context *test, const twin *w,
                               ak_check_result *res) {
    ak_status s = compare_dev(ref, test, w->r.data, w->t.data, (size_t)w->kb, res);
    if (s == AK_OK && res->passed && w->vb)
        s = compare_dev(ref, test, w->r.v_data, w->t.v_data, (size_t)w->vb, res);
    return s;
}

/* A host buffer copied to both contexts. */
typedef struct dual {
    void *r, *t;
} dual;

static ak_status dual_make(ak_context *ref, ak_context *test, const void *h, size_t n, dual *d) {
    d->r = ak_dev_clone(ref, h, n ? n : 1);
    d->t = ak_dev_clone(test, h, n ? n : 1);
    return d->r && d->t ? AK_OK : AK_ERR_OUT_OF_MEMORY;
}

static void dual_free(ak_context *ref, ak_context *test, dual *d) {
    ak_dev_free(ref, d->r);
    ak_dev_free(test, d->t);
}

/* Random bf16 bits or f32 values with tile magnitudes spread over 2^-10..2^10 and zero tiles. */
static void random_values(uint64_t *x, void *dst, int f32, int64_t n, int64_t tile) {
    float mag = 1.0f;
    int zero = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i % tile == 0) {
            int e = (int)(rng_next(x) % 21) - 10;
            mag = 1.0f;
            for (; e > 0; e--) mag *= 2.0f;
            for (; e < 0; e++) mag *= 0.5f;
            zero = rng_next(x) % 16 == 0;
        }
        /* sum of uniforms: roughly normal, finite */
        float u = 0.0f;
        for (int k = 0; k < 4; k++) u += (float)(rng_next(x) >> 40) / 16777216.0f;
        float v = zero ? 0.0f : (u - 2.0f) * mag;
        if (f32) {
            ((float *)dst)[i] = v;
        } else {
            uint32_t b;
            memcpy(&b, &v, 4);
            ((uint16_t *)dst)[i] = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
        }
    }
}

/* Slot list of n entries: a random permutation prefix of [0, cap), every 9th -1, and with
   `invalid` set a few out-of-range values (gather only: rule I1 makes them zero rows). */
static void random_slots(uint64_t *x, int32_t *s, int64_t n, int64_t cap, int invalid) {
    int32_t *perm = (int32_t *)malloc((size_t)(cap > 0 ? cap : 1) * 4);
    for (int64_t i = 0; i < cap; i++) perm[i] = (int32_t)i;
    for (int64_t i = cap - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_next(x) % (uint64_t)(i + 1));
        int32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
    for (int64_t i = 0; i < n; i++) {
        s[i] = i < cap ? perm[i] : -1;
        if (i % 9 == 4) s[i] = -1;
        if (invalid && i % 13 == 6) s[i] = (int32_t)(cap + (int64_t)(rng_next(x) % 7));
        if (invalid && i % 17 == 8) s[i] = -3;
    }
    free(perm);
}

typedef struct lcase {
    ak_layout l;
    int32_t P, pages, extra;
    ak_dtype elem;      /* MHA element type */
    int32_t f32;        /* input rows in f32 */
    ak_quant_rule rule;
} lcase;

static const lcase k_cases[] = {
    {AK_LAYOUT_MLA_BF16, 64, 3, 0, AK_DTYPE_BF16, 1, AK_QUANT_DEFAULT},
    {AK_LAYOUT_MLA_FP8_PERTENSOR, 16, 5, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT},
    {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 64, 3, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT},
    {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 1, 70, 656, AK_DTYPE_BF16, 1, AK_QUANT_FP32},
    {AK_LAYOUT_DSV4_FP8_UE8M0, 64, 3, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT},
    {AK_LAYOUT_DSV4_FP8_UE8M0, 2, 40, 576, AK_DTYPE_BF16, 1, AK_QUANT_POW2_AMAX_FLOOR},
    {AK_LAYOUT_INDEXER_FP8, 64, 3, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT},
    {AK_LAYOUT_INDEXER_FP8, 64, 2, 64, AK_DTYPE_BF16, 1, AK_QUANT_POW2},
    {AK_LAYOUT_INDEXER_FP4, 64, 3, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT},
    {AK_LAYOUT_MHA_NHD, 16, 6, 0, AK_DTYPE_BF16, 1, AK_QUANT_DEFAULT},
    {AK_LAYOUT_MHA_HND, 7, 9, 0, AK_DTYPE_E4M3, 0, AK_QUANT_DEFAULT},
    {AK_LAYOUT_MHA_HND, 16, 4, 0, AK_DTYPE_F16, 0, AK_QUANT_DEFAULT},
};

static ak_cache desc_of(const lcase *c) {
    ak_cache d;
    if (is_mha(c->l)) {
        ak_cache_init_mha(&d, c->l, c->elem, NULL, NULL, 0, c->P, 4, 64, 32);
        if (c->elem == AK_DTYPE_E4M3) { d.k_scale = 0.5f; d.v_scale = 0.125f; }
    } else {
        ak_cache_init(&d, c->l, NULL, 0, c->P);
        if (c->l == AK_LAYOUT_MLA_FP8_PERTENSOR) d.k_scale = 0.25f;
    }
    d.num_pages = c->pages;
    d.page_stride += c->extra;
    return d;
}

static void widths(const ak_cache *c, int64_t *wn, int64_t *wr, int64_t *tile) {
    if (is_mha(c->layout)) {
        *wn = (int64_t)c->h_kv * c->head_dim;
        *wr = (int64_t)c->h_kv * c->head_dim_v;
        *tile = 32;
        return;
    }
    ak_layout_traits t;
    ak_layout_traits_get(c->layout, &t);
    *wn = t.d_nope;
    *wr = t.d_rope;
    *tile = t.scale_block > 0 ? t.scale_block : 64;
}

/* Writes n random rows at random slots of the twin pools on both contexts. */
static ak_status write_both(ak_context *ref, ak_context *test, twin *w, const lcase *c, int64_t n,
                            uint64_t *x, ak_status *rs, ak_status *ts) {
    int64_t wn, wr, tile;
    widths(&w->r, &wn, &wr, &tile);
    int64_t cap = (int64_t)w->r.num_pages * w->r.page_size, wt = wn + wr;
    int esz = c->f32 ? 4 : 2;
    ak_dtype dt = c->f32 ? AK_DTYPE_F32 : AK_DTYPE_BF16;
    void *rows = malloc((size_t)(n * wt * esz) + 1);
    int32_t *slots = (int32_t *)malloc((size_t)n * 4 + 1);
    if (rows == NULL || slots == NULL) { free(rows); free(slots); return AK_ERR_OUT_OF_MEMORY; }
    random_values(x, rows, c->f32, n * wt, tile);
    random_slots(x, slots, n, cap, 0);
    dual dr = {NULL, NULL}, ds = {NULL, NULL};
    ak_status s = dual_make(ref, test, rows, (size_t)(n * wt * esz), &dr);
    if (s == AK_OK) s = dual_make(ref, test, slots, (size_t)n * 4, &ds);
    free(rows);
    free(slots);
    for (int k = 0; k < 2 && s == AK_OK; k++) {
        ak_context *ctx = k ? test : ref;
        void *d = k ? dr.t : dr.r;
        int64_t ss[1] = {n};
        ak_tensor tsl = ak_dev_tensor(ctx, k ? ds.t : ds.r, AK_DTYPE_I32, 1, ss);
        ak_status st;
        if (is_mha(c->l)) {
            int64_t sk[3] = {n, w->r.h_kv, w->r.head_dim}, sv[3] = {n, w->r.h_kv, w->r.head_dim_v};
            ak_tensor tk = ak_dev_tensor(ctx, d, dt, 3, sk);
            ak_tensor tv = ak_dev_tensor(ctx, (uint8_t *)d + wn * esz, dt, 3, sv);
            tk.strides[0] = wt;
            tv.strides[0] = wt;
            st = ak_mha_cache_write(ctx, k ? &w->t : &w->r, &tk, &tv, &tsl);
        } else {
            int64_t sn[2] = {n, wn}, sr[2] = {n, wr};
            ak_tensor tn = ak_dev_tensor(ctx, d, dt, 2, sn);
            ak_tensor tr = ak_dev_tensor(ctx, (uint8_t *)d + wn * esz, dt, 2, sr);
            tn.strides[0] = wt;
            tr.strides[0] = wt;
            st = ak_cache_write(ctx, k ? &w->t : &w->r, &tn, wr ? &tr : NULL, &tsl, c->rule);
        }
        if (k) *ts = st;
        else *rs = st;
    }
    if (s == AK_OK) s = ak_context_synchronize(test);
    dual_free(ref, test, &dr);
    dual_free(ref, test, &ds);
    return s;
}

static void case_name(char *buf, size_t n, const lcase *c, const char *extra) {
    ak_layout_traits t;
    ak_layout_traits_get(c->l, &t);
    snprintf(buf, n, "%s%s%s P%d x%d%s %s write rule %d%s", t.name, is_mha(c->l) ? " " : "",
             is_mha(c->l) ? ak_dtype_name(c->elem) : "", (int)c->P, (int)c->pages,
             c->extra ? " padded" : "", c->f32 ? "f32" : "bf16", (int)c->rule, extra);
}

static void add_status_row(ak_check_report *rep, ak_check_result *res, ak_status rs, ak_status ts) {
    if (rs != AK_OK || ts != AK_OK) {
        res->passed = 0;
        snprintf(res->note, sizeof res->note, "status ref %s, test %s: %s", ak_status_name(rs),
                 ak_status_name(ts), ak_last_error());
    }
    ak_check_report_add(rep, res);
}

static ak_status check_write(ak_context *ref, ak_context *test, const ak_check_opts *o,
                             ak_check_report *rep, uint64_t *x) {
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const lcase *c = &k_cases[i];
        ak_cache d = desc_of(c);
        int64_t cap = (int64_t)d.num_pages * d.page_size;
        twin w;
        AK_TRY(twin_make(ref, test, &d, &w));
        ak_status rs = AK_OK, ts = AK_OK;
        ak_status s = write_both(ref, test, &w, c, cap * 3 / 4 + 1, x, &rs, &ts);
        ak_check_result res;
        memset(&res, 0, sizeof res);
        snprintf(res.op, sizeof res.op, "cache_write");
        case_name(res.shape, sizeof res.shape, c, "");
        if (s == AK_OK && rs == AK_OK && ts == AK_OK) s = compare_pools(ref, test, &w, &res);
        twin_free(ref, test, &w);
        AK_TRY(s);
        add_status_row(rep, &res, rs, ts);
        (void)o;
    }
    return AK_OK;
}

static ak_status check_gather(ak_context *ref, ak_context *test, const ak_check_opts *o,
                              ak_check_report *rep, uint64_t *x) {
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const lcase *c = &k_cases[i];
        ak_cache d = desc_of(c);
        int64_t cap = (int64_t)d.num_pages * d.page_size;
        twin w;
        AK_TRY(twin_make(ref, test, &d, &w));
        ak_status rs = AK_OK, ts = AK_OK;
        ak_status s = write_both(ref, test, &w, c, cap, x, &rs, &ts);
        if (s == AK_OK) s = twin_sync(ref, test, &w); /* identical pools whatever the writers did */
        int64_t n = cap + 11, wn, wr, tile;
        widths(&d, &wn, &wr, &tile);
        int32_t *slots = (int32_t *)malloc((size_t)n * 4);
        random_slots(x, slots, n, cap, 1);
        dual ds = {NULL, NULL};
        if (s == AK_OK) s = dual_make(ref, test, slots, (size_t)n * 4, &ds);
        free(slots);
        ak_dtype outs[3] = {AK_DTYPE_F32, AK_DTYPE_BF16, AK_DTYPE_E4M3};
        int nout = c->l == AK_LAYOUT_INDEXER_FP8 ? 3 : 2;
        for (int k = 0; k < nout && s == AK_OK; k++) {
            int64_t wo = is_mha(c->l) ? d.head_dim : c->l >= AK_LAYOUT_INDEXER_FP8 ? 128
                         : c->l == AK_LAYOUT_DSV4_FP8_UE8M0 ? 512 : 576;
            int64_t esz = ak_dtype_size(outs[k]);
            size_t ob = (size_t)(n * (is_mha(c->l) ? d.h_kv : 1) * wo * esz) + (size_t)n * 4;
            dual od = {ak_dev_alloc(ref, ob), ak_dev_alloc(test, ob)};
            if (!od.r || !od.t) s = AK_ERR_OUT_OF_MEMORY;
            /* poison with 0xFF: NaN in every output dtype, so unwritten elements show up */
            if (s == AK_OK) s = ak_dev_memset(ref, od.r, 0xff, ob);
            if (s == AK_OK) s = ak_dev_memset(test, od.t, 0xff, ob);
            for (int side = 0; side < 2 && s == AK_OK; side++) {
                ak_context *ctx = side ? test : ref;
                int64_t ss[1] = {n};
                ak_tensor tsl = ak_dev_tensor(ctx, side ? ds.t : ds.r, AK_DTYPE_I32, 1, ss);
                ak_status st;
                if (is_mha(c->l)) {
                    int64_t so[3] = {n, d.h_kv, wo};
                    ak_tensor to = ak_dev_tensor(ctx, side ? od.t : od.r, outs[k], 3, so);
                    st = ak_cache_gather(ctx, side ? &w.t : &w.r, &tsl, &to, NULL);
                } else {
                    int64_t so[2] = {n, wo}, sc[1] = {n};
                    uint8_t *base = (uint8_t *)(side ? od.t : od.r);
                    ak_tensor to = ak_dev_tensor(ctx, base, outs[k], 2, so);
                    ak_tensor tsc = ak_dev_tensor(ctx, base + n * wo * esz, AK_DTYPE_F32, 1, sc);
                    st = ak_cache_gather(ctx, side ? &w.t : &w.r, &tsl, &to,
                                         outs[k] == AK_DTYPE_E4M3 ? &tsc : NULL);
                }
                if (side) ts = st;
                else rs = st;
            }
            if (s == AK_OK) s = ak_context_synchronize(test);
            ak_check_result res;
            memset(&res, 0, sizeof res);
            snprintf(res.op, sizeof res.op, "cache_gather");
            char extra[40];
            snprintf(extra, sizeof extra, " n %lld -> %s", (long long)n, ak_dtype_name(outs[k]));
            case_name(res.shape, sizeof res.shape, c, extra);
            if (s == AK_OK && rs == AK_OK && ts == AK_OK) s = compare_dev(ref, test, od.r, od.t, ob, &res);
            dual_free(ref, test, &od);
            if (s == AK_OK) add_status_row(rep, &res, rs, ts);
        }
        dual_free(ref, test, &ds);
        twin_free(ref, test, &w);
        AK_TRY(s);
        (void)o;
    }
    return AK_OK;
}

static ak_status check_convert(ak_context *ref, ak_context *test, const ak_check_opts *o,
                               ak_check_report *rep, uint64_t *x) {
    const ak_layout B = AK_LAYOUT_MLA_BF16, F = AK_LAYOUT_MLA_FP8_PERTENSOR,
                    D = AK_LAYOUT_DSA_FP8_BLOCKSCALE, V = AK_LAYOUT_DSV4_FP8_UE8M0;
    const struct {
        lcase s;
        ak_layout dl;
        int32_t dP, dextra;
        ak_dtype delem;
        ak_quant_rule rule;
        int32_t pages_list;
    } pairs[] = {
        {{F, 16, 4, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT}, D, 64, 0, AK_DTYPE_BF16, AK_QUANT_DEFAULT, 0},
        {{B, 16, 4, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT}, D, 16, 656, AK_DTYPE_BF16, AK_QUANT_DEFAULT, 0},
        {{B, 16, 4, 0, AK_DTYPE_BF16, 1, AK_QUANT_DEFAULT}, D, 8, 0, AK_DTYPE_BF16, AK_QUANT_FP32, 1},
        {{D, 64, 2, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT}, B, 16, 0, AK_DTYPE_BF16, AK_QUANT_DEFAULT, 0},
        {{B, 16, 4, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT}, F, 32, 0, AK_DTYPE_BF16, AK_QUANT_DEFAULT, 0},
        {{F, 16, 4, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT}, B, 16, 0, AK_DTYPE_BF16, AK_QUANT_DEFAULT, 1},
        {{D, 64, 2, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT}, F, 64, 0, AK_DTYPE_BF16, AK_QUANT_DEFAULT, 0},
        {{V, 256, 2, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT}, V, 64, 0, AK_DTYPE_BF16, AK_QUANT_DEFAULT, 0},
        {{V, 64, 8, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT}, V, 256, 0, AK_DTYPE_BF16, AK_QUANT_DEFAULT, 1},
        {{AK_LAYOUT_INDEXER_FP8, 64, 3, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT}, AK_LAYOUT_INDEXER_FP8, 64, 64, AK_DTYPE_BF16, AK_QUANT_DEFAULT, 1},
        {{AK_LAYOUT_MHA_NHD, 16, 4, 0, AK_DTYPE_BF16, 0, AK_QUANT_DEFAULT}, AK_LAYOUT_MHA_HND, 8, 0, AK_DTYPE_BF16, AK_QUANT_DEFAULT, 0},
        {{AK_LAYOUT_MHA_NHD, 16, 4, 0, AK_DTYPE_BF16, 1, AK_QUANT_DEFAULT}, AK_LAYOUT_MHA_HND, 16, 0, AK_DTYPE_E4M3, AK_QUANT_DEFAULT, 0},
        {{AK_LAYOUT_MHA_HND, 7, 9, 0, AK_DTYPE_E4M3, 0, AK_QUANT_DEFAULT}, AK_LAYOUT_MHA_NHD, 7, 0, AK_DTYPE_BF16, AK_QUANT_DEFAULT, 1},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const lcase *c = &pairs[i].s;
        ak_cache sd = desc_of(c);
        int64_t cap = (int64_t)sd.num_pages * sd.page_size;
        lcase dc = {pairs[i].dl, pairs[i].dP, (int32_t)((cap + pairs[i].dP - 1) / pairs[i].dP),
                    pairs[i].dextra, pairs[i].delem, 0, AK_QUANT_DEFAULT};
        ak_cache dd = desc_of(&dc);
        twin ws, wd;
        AK_TRY(twin_make(ref, test, &sd, &ws));
        ak_status s = twin_make(ref, test, &dd, &wd), rs = AK_OK, ts = AK_OK;
        if (s == AK_OK) s = write_both(ref, test, &ws, c, cap, x, &rs, &ts);
        if (s == AK_OK) s = twin_sync(ref, test, &ws);
        /* touched-pages form: a random half of the source pages, in random order, one -1 */
        int32_t pl[128];
        int64_t npl = 0;
        if (pairs[i].pages_list) {
            random_slots(x, pl, sd.num_pages, sd.num_pages, 0);
            npl = (sd.num_pages + 1) / 2;
        }
        dual dp = {NULL, NULL};
        if (s == AK_OK && npl) s = dual_make(ref, test, pl, (size_t)npl * 4, &dp);
        for (int side = 0; side < 2 && s == AK_OK; side++) {
            ak_context *ctx = side ? test : ref;
            int64_t sp[1] = {npl};
            ak_tensor tp = ak_dev_tensor(ctx, side ? dp.t : dp.r, AK_DTYPE_I32, 1, sp);
            ak_status st = ak_cache_convert(ctx, side ? &ws.t : &ws.r, side ? &wd.t : &wd.r,
                                            npl ? &tp : NULL, pairs[i].rule);
            if (side) ts = st;
            else rs = st;
        }
        if (s == AK_OK) s = ak_context_synchronize(test);
        ak_check_result res;
        memset(&res, 0, sizeof res);
        snprintf(res.op, sizeof res.op, "cache_convert");
        char extra[80];
        snprintf(extra, sizeof extra, " -> %s%s%s P%d%s%s convert rule %d",
                 ak_layout_name(pairs[i].dl), is_mha(pairs[i].dl) ? " " : "",
                 is_mha(pairs[i].dl) ? ak_dtype_name(pairs[i].delem) : "", (int)pairs[i].dP,
                 pairs[i].dextra ? " padded" : "", npl ? " pages-list" : "", (int)pairs[i].rule);
        case_name(res.shape, sizeof res.shape, c, extra);
        if (s == AK_OK && rs == AK_OK && ts == AK_OK) s = compare_pools(ref, test, &wd, &res);
        dual_free(ref, test, &dp);
        twin_free(ref, test, &ws);
        twin_free(ref, test, &wd);
        AK_TRY(s);
        add_status_row(rep, &res, rs, ts);
        (void)o;
    }
    return AK_OK;
}

ak_status ak_check_codec(ak_context *ref, ak_context *test, const ak_check_opts *o,
                         ak_check_report *rep) {
    uint64_t x = (o->seed ^ 0x5eed0c0decull) | 1;
    if (ak_check_wants(rep, "cache_write")) AK_TRY(check_write(ref, test, o, rep, &x));
    if (ak_check_wants(rep, "cache_gather")) AK_TRY(check_gather(ref, test, o, rep, &x));
    if (ak_check_wants(rep, "cache_convert")) AK_TRY(check_convert(ref, test, o, rep, &x));
    return AK_OK;
}

AK_CHECK_REGISTER(ak_check_codec)
