/* oracle_mla.c -- naive double-precision MLA attention references (see oracle_mla.h). */
#include "oracle_mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

int32_t orc_mla_d_qk(int32_t layout) {
    return layout == 4 ? 512 : 576;
}

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

static double rdf32(const uint8_t *p) {
    uint32_t u =
        (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    float f;
    memcpy(&f, &u, 4);
    return (double)f;
}

int orc_mla_token(const orc_pool *p, int64_t slot, double *out) {
    if (slot < 0 || slot >= (int64_t)p->num_pages * p->page_size) return 0;
    int64_t page = slot / p->page_size, t = slot % p->page_size;
    const uint8_t *base = p->data + page * p->page_stride;
    switch (p->layout) {
    case 1: { /* 512 bf16 latent | 64 bf16 rope, 1152 B per token */
        const uint8_t *r = base + t * 1152;
        for (int d = 0; d < 576; d++)
            out[d] = orc_bf16(rd16(r + 2 * d));
        break;
    }
    case 2: { /* 576 e4m3, times the per-tensor scale in fp32 */
        const uint8_t *r = base + t * 576;
        for (int d = 0; d < 576; d++)
            out[d] = (double)(float)(orc_e4m3(r[d]) * p->k_scale);
        break;
    }
    case 3: { /* 512 e4m3 | 4 fp32 scales | 64 bf16 rope; NoPE = bf16(fp32(q * s)) */
        const uint8_t *r = base + t * 656;
        for (int d = 0; d < 512; d++) {
            float prod = (float)(orc_e4m3(r[d]) * rdf32(r + 512 + 4 * (d / 128)));
            out[d] = orc_bf16(orc_bf16_bits(prod));
        }
        for (int d = 0; d < 64; d++)
            out[512 + d] = orc_bf16(rd16(r + 528 + 2 * d));
        break;
    }
    case 4: { /* page SoA: data rows of 576 B (448 e4m3 | 64 bf16), then 8-byte scale rows */
        const uint8_t *r = base + t * 576;
        const uint8_t *sc = base + (int64_t)p->page_size * 576 + t * 8;
        for (int d = 0; d < 448; d++)
            out[d] = orc_e4m3(r[d]) * orc_ue8m0(sc[d / 64]);
        for (int d = 0; d < 64; d++)
            out[448 + d] = orc_bf16(rd16(r + 448 + 2 * d));
        break;
    }
    default: return 0;
    }
    return 1;
}

void orc_attend_row(const double *q, int32_t d_qk, const double *keys, int64_t n, double scale,
                    const double *sink, double *out, double *lse, double *max_logit) {
    for (int d = 0; d < 512; d++)
        out[d] = 0.0;
    if (n == 0) {
        *lse = INFINITY;
        *max_logit = -INFINITY;
        return;
    }
    double *s = malloc((size_t)n * sizeof(double));
    double m = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        double dot = 0.0;
        for (int d = 0; d < d_qk; d++)
            dot += q[d] * keys[j * d_qk + d];
        s[j] = scale * dot;
        if (s[j] > m) m = s[j];
    }
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++)
        sum += exp(s[j] - m);
    double l = m + log(sum);
    for (int64_t j = 0; j < n; j++) {
        double p = exp(s[j] - l);
        for (int d = 0; d < 512; d++)
            out[d] += p * keys[j * d_qk + d];
    }
    if (sink != NULL) {
        double f = 1.0 / (1.0 + exp(*sink - l)); /* sink +inf: 0; -inf: 1 */
        for (int d = 0; d < 512; d++)
            out[d] *= f;
    }
    *lse = l;
    *max_logit = m;
    free(s);
}

static int64_t clamp_len(const int32_t *len, int per_row, int64_t r, int64_t i, int64_t s_q,
                         int64_t width) {
    if (len == NULL) return width;
    int64_t v = per_row ? len[r * s_q + i] : len[r];
    return v < 0 ? 0 : v > width ? width : v;
}

/* Appends the valid entries of one index row; returns the new key count. */
static int64_t gather_list(const orc_pool *p, const int32_t *row, int64_t n, double *keys,
                           int64_t at) {
    int32_t d_qk = orc_mla_d_qk(p->layout);
    for (int64_t j = 0; j < n; j++)
        if (orc_mla_token(p, row[j], keys + at * d_qk)) at++;
    return at;
}

static void attend_heads(const uint16_t *q, int64_t h_q, int32_t d_qk, const double *keys,
                         int64_t n, double scale, const float *sink, double *out, double *lse,
                         double *max_logits) {
    double *qd = malloc((size_t)d_qk * sizeof(double));
    for (int64_t h = 0; h < h_q; h++) {
        for (int d = 0; d < d_qk; d++)
            qd[d] = orc_bf16(q[h * d_qk + d]);
        double sk = sink ? (double)sink[h] : 0.0, l, m;
        orc_attend_row(qd, d_qk, keys, n, scale, sink ? &sk : NULL, out + h * 512, &l, &m);
        if (lse) lse[h] = l;
        if (max_logits) max_logits[h] = m;
    }
    free(qd);
}

void orc_mla_decode(const orc_mla_decode_in *in, double *out, double *lse) {
    int32_t d_qk = orc_mla_d_qk(in->cache->layout);
    const orc_pool *c = in->cache;
    int64_t cap = 0;
    if (in->block_table != NULL) {
        for (int64_t r = 0; r < in->b; r++)
            if (in->seq_lens[r] > cap) cap = in->seq_lens[r];
    } else {
        cap = in->topk + (in->extra ? in->extra_topk : 0);
    }
    double *keys = malloc((size_t)(cap > 0 ? cap : 1) * d_qk * sizeof(double));
    for (int64_t r = 0; r < in->b; r++) {
        for (int64_t i = 0; i < in->s_q; i++) {
            int64_t n = 0;
            if (in->block_table != NULL) {
                int64_t len = in->seq_lens[r];
                int64_t lim = in->causal ? len - (in->s_q - 1 - i) : len;
                for (int64_t p = 0; p < lim; p++) {
                    int32_t page = in->block_table[r * in->max_pages + p / c->page_size];
                    if (page < 0 || page >= c->num_pages) continue; /* masked page (rule I2) */
                    if (orc_mla_token(c, (int64_t)page * c->page_size + p % c->page_size,
                                      keys + n * d_qk))
                        n++;
                }
            } else {
                const int32_t *row = in->indices + (r * in->s_q + i) * in->topk;
                n = gather_list(
                    c, row, clamp_len(in->topk_length, in->len_per_row, r, i, in->s_q, in->topk),
                    keys, 0);
                if (in->extra != NULL) {
                    const int32_t *er = in->extra_indices + (r * in->s_q + i) * in->extra_topk;
                    n = gather_list(in->extra, er,
                                    clamp_len(in->extra_length, in->extra_len_per_row, r, i,
                                              in->s_q, in->extra_topk),
                                    keys, n);
                }
            }
            int64_t row = (r * in->s_q + i) * in->h_q;
            attend_heads(in->q + row * d_qk, in->h_q, d_qk, keys, n, in->scale, in->sink,
                         out + row * 512, lse + row, NULL);
        }
    }
    free(keys);
}

void orc_sparse_prefill(const orc_sparse_prefill_in *in, double *out, double *max_logits,
                        double *lse) {
    int32_t d_qk = in->d_qk;
    double *keys = malloc((size_t)in->topk * d_qk * sizeof(double));
    for (int64_t t = 0; t < in->s_q; t++) {
        const int32_t *row = in->indices + t * in->topk;
        int64_t len = in->topk;
        if (in->topk_length != NULL) {
            len = in->topk_length[t];
            len = len < 0 ? 0 : len > in->topk ? in->topk : len;
        }
        int64_t n = 0;
        if (in->kv != NULL) {
            for (int64_t j = 0; j < len; j++) {
                int64_t id = row[j];
                if (id < 0 || id >= in->s_kv) continue;
                for (int d = 0; d < d_qk; d++)
                    keys[n * d_qk + d] = orc_bf16(in->kv[id * d_qk + d]);
                n++;
            }
        } else {
            n = gather_list(in->cache, row, len, keys, 0);
        }
        attend_heads(in->q + t * in->h_q * d_qk, in->h_q, d_qk, keys, n, in->scale, in->sink,
                     out + t * in->h_q * 512, lse + t * in->h_q, max_logits + t * in->h_q);
    }
    free(keys);
}

static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t rand_bf16(uint64_t *s) {
    return orc_bf16_bits((double)(mix(s) >> 11) * 0x1.0p-52 - 1.0);
}

static uint8_t rand_e4m3(uint64_t *s) {
    uint64_t r = mix(s);
    if ((r & 31) == 0) return 0; /* some exact zeros */
    uint8_t e = (uint8_t)(4 + (r >> 8) % 5), m = (uint8_t)((r >> 16) & 7);
    return (uint8_t)(((r >> 24) & 1) << 7 | e << 3 | m);
}

void orc_mla_fill_token(uint8_t *data, int32_t layout, int64_t page_stride, int32_t page_size,
                        int64_t slot, uint64_t seed) {
    uint64_t s = seed ^ ((uint64_t)slot * 0xd1b54a32d192ed03ull);
    int64_t page = slot / page_size, t = slot % page_size;
    uint8_t *base = data + page * page_stride;
    switch (layout) {
    case 1: {
        uint8_t *r = base + t * 1152;
        for (int d = 0; d < 576; d++)
            wr16(r + 2 * d, rand_bf16(&s));
        break;
    }
    case 2: {
        uint8_t *r = base + t * 576;
        for (int d = 0; d < 576; d++)
            r[d] = rand_e4m3(&s);
        break;
    }
    case 3: {
        uint8_t *r = base + t * 656;
        for (int d = 0; d < 512; d++)
            r[d] = rand_e4m3(&s);
        for (int i = 0; i < 4; i++) {
            float f = (float)ldexp(1.0, -1 - (int)(mix(&s) % 3));
            memcpy(r + 512 + 4 * i, &f, 4);
        }
        for (int d = 0; d < 64; d++)
            wr16(r + 528 + 2 * d, rand_bf16(&s));
        break;
    }
    case 4: {
        uint8_t *r = base + t * 576;
        uint8_t *sc = base + (int64_t)page_size * 576 + t * 8;
        for (int d = 0; d < 448; d++)
            r[d] = rand_e4m3(&s);
        for (int d = 0; d < 64; d++)
            wr16(r + 448 + 2 * d, rand_bf16(&s));
        for (int j = 0; j < 7; j++)
            sc[j] = (uint8_t)(126 - mix(&s) % 3);
        sc[7] = 0;
        break;
    }
    default: break;
    }
}
