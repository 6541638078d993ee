/* oracle_mha.c -- naive double-precision paged MHA/GQA and merge (see oracle_mha.h). */
#include "oracle_mha.h"

#include <math.h>
#include <stdlib.h>

#include "oracle.h"

/* One stored element, dequantized: layouts.md 2.8, element (page, t, head, d). */
static double kv_elem(const orc_mha_problem *p, int is_v, int32_t slot, int32_t head, int32_t d) {
    int32_t P = p->page_size, page = slot / P, t = slot % P;
    int32_t D = is_v ? p->d_v : p->d_qk;
    int64_t in_page =
        p->hnd ? ((int64_t)head * P + t) * D + d : ((int64_t)t * p->h_kv + head) * D + d;
    const uint8_t *base = (const uint8_t *)(is_v ? p->v_pool : p->k_pool) +
                          (int64_t)page * (is_v ? p->v_page_bytes : p->k_page_bytes);
    if (p->elem == ORC_KV_E4M3) return orc_e4m3(base[in_page]) * (is_v ? p->v_scale : p->k_scale);
    uint16_t bits = (uint16_t)(base[2 * in_page] | (base[2 * in_page + 1] << 8));
    return p->elem == ORC_KV_F16 ? orc_f16(bits) : orc_bf16(bits);
}

static int64_t kv_length(const orc_mha_problem *p, int32_t b) {
    if (p->form == ORC_PT_CSR) {
        int64_t n = (int64_t)p->indptr[b + 1] - p->indptr[b];
        return n <= 0 ? 0 : (n - 1) * p->page_size + p->last_page_len[b];
    }
    return p->seq_lens[b] < 0 ? 0 : p->seq_lens[b];
}

/* Slot of key position j of request b, or -1 when the table entry is not a real page / slot. */
static int64_t kv_slot(const orc_mha_problem *p, int32_t b, int64_t j) {
    int64_t P = p->page_size, page;
    if (p->form == ORC_PT_TOKEN) {
        int64_t s = p->table[(int64_t)b * p->width + j];
        return s >= 0 && s < (int64_t)p->num_pages * P ? s : -1;
    }
    if (p->form == ORC_PT_BLOCK) page = p->table[(int64_t)b * p->width + j / P];
    else page = p->indices[p->indptr[b] + j / P];
    return page >= 0 && page < p->num_pages ? page * P + j % P : -1;
}

void orc_mha(const orc_mha_problem *p, double *out, double *lse) {
    for (int64_t t = 0; t < p->total_q * p->h_q; t++) {
        lse[t] = INFINITY;
        for (int32_t d = 0; d < p->d_v; d++) out[t * p->d_v + d] = 0.0;
    }
    int32_t group = p->h_q / p->h_kv;
    for (int32_t b = 0; b < p->B; b++) {
        int64_t kv = kv_length(p, b), ql = p->q_len[b];
        double *s = (double *)malloc((size_t)(kv > 0 ? kv : 1) * sizeof(double));
        int64_t *slot = (int64_t *)malloc((size_t)(kv > 0 ? kv : 1) * sizeof(int64_t));
        for (int64_t j = 0; j < kv; j++) slot[j] = kv_slot(p, b, j);
        for (int64_t i = 0; i < ql; i++) {
            int64_t row = p->q_start[b] + i, pos = kv - ql + i;
            for (int32_t h = 0; h < p->h_q; h++) {
                int32_t hk = h / group;
                const uint16_t *q = p->q + (row * p->h_q + h) * p->d_qk;
                double m = -INFINITY;
                for (int64_t j = 0; j < kv; j++) {
                    int ok = slot[j] >= 0 && (!p->causal || j <= pos) &&
                             (p->window_left < 0 || j >= pos - p->window_left);
                    s[j] = -INFINITY;
                    if (!ok) continue;
                    double acc = 0.0;
                    for (int32_t d = 0; d < p->d_qk; d++)
                        acc += orc_bf16(q[d]) * kv_elem(p, 0, (int32_t)slot[j], hk, d);
                    s[j] = acc * p->softmax_scale;
                    if (s[j] > m) m = s[j];
                }
                if (m == -INFINITY) continue; /* empty row */
                double sum = 0.0;
                for (int64_t j = 0; j < kv; j++)
                    if (s[j] > -INFINITY) sum += exp(s[j] - m);
                double l = m + log(sum);
                double *o = out + (row * p->h_q + h) * p->d_v;
                for (int64_t j = 0; j < kv; j++) {
                    if (s[j] == -INFINITY) continue;
                    double w = exp(s[j] - l);
                    for (int32_t d = 0; d < p->d_v; d++)
                        o[d] += w * kv_elem(p, 1, (int32_t)slot[j], hk, d);
                }
                if (p->sink != NULL) {
                    double f = 1.0 / (1.0 + exp((double)p->sink[h] - l));
                    for (int32_t d = 0; d < p->d_v; d++) o[d] *= f;
                }
                lse[row * p->h_q + h] = l;
            }
        }
        free(s);
        free(slot);
    }
}

void orc_merge(int32_t n, int64_t rows, int32_t h, int32_t d, const double *outs,
               const double *lses, int in_base2, const float *sink, double *out, double *lse,
               int out_base2) {
    for (int64_t r = 0; r < rows; r++) {
        for (int32_t k = 0; k < h; k++) {
            int64_t rk = r * h + k;
            double total = 0.0, mx = -INFINITY;
            for (int32_t i = 0; i < n; i++) {
                double v = lses[(int64_t)i * rows * h + rk];
                if (isfinite(v)) {
                    v = in_base2 ? v * log(2.0) : v;
                    if (v > mx) mx = v;
                }
            }
            double *o = out + rk * d;
            for (int32_t e = 0; e < d; e++) o[e] = 0.0;
            if (mx == -INFINITY) {
                lse[rk] = INFINITY;
                continue;
            }
            for (int32_t i = 0; i < n; i++) {
                double v = lses[(int64_t)i * rows * h + rk];
                if (isfinite(v)) total += exp((in_base2 ? v * log(2.0) : v) - mx);
            }
            double l = mx + log(total);
            for (int32_t i = 0; i < n; i++) {
                double v = lses[(int64_t)i * rows * h + rk];
                if (!isfinite(v)) continue;
                double w = exp((in_base2 ? v * log(2.0) : v) - l);
                for (int32_t e = 0; e < d; e++)
                    o[e] += w * outs[((int64_t)i * rows * h + rk) * d + e];
            }
            if (sink != NULL)
                for (int32_t e = 0; e < d; e++) o[e] /= 1.0 + exp((double)sink[k] - l);
            lse[rk] = out_base2 ? l / log(2.0) : l;
        }
    }
}
