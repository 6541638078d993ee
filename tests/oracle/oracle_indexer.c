/* oracle_indexer.c -- indexer logits in double and a sort-based top-k (see oracle_indexer.h). */
#include "oracle_indexer.h"

#include <math.h>
#include <stdlib.h>

#include "oracle.h"

double orc_indexer_logit(const uint8_t *q, const float *w, int32_t h, const uint8_t *k,
                         double k_scale) {
    double acc = 0.0;
    for (int32_t i = 0; i < h; i++) {
        double s = 0.0;
        for (int d = 0; d < 128; d++)
            s += orc_e4m3(q[i * 128 + d]) * orc_e4m3(k[d]);
        acc += (double)w[i] * (s < 0.0 ? 0.0 : s);
    }
    return k_scale * acc;
}

typedef struct orc_pair {
    float v;
    int64_t pos;
} orc_pair;

/* Sorts best first: larger value, NaN last, equal values by smaller position. */
static int by_rank(const void *a, const void *b) {
    const orc_pair *x = (const orc_pair *)a, *y = (const orc_pair *)b;
    int xn = isnan(x->v), yn = isnan(y->v);
    if (xn != yn) return xn - yn;
    if (!xn && x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int by_pos(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void orc_topk(const float *x, int64_t len, int32_t k, int32_t *out) {
    if (len <= k) {
        for (int32_t j = 0; j < k; j++)
            out[j] = j < len ? j : -1;
        return;
    }
    orc_pair *p = (orc_pair *)malloc((size_t)len * sizeof *p);
    for (int64_t i = 0; i < len; i++) {
        p[i].v = x[i];
        p[i].pos = i;
    }
    qsort(p, (size_t)len, sizeof *p, by_rank);
    for (int32_t j = 0; j < k; j++)
        out[j] = (int32_t)p[j].pos;
    qsort(out, (size_t)k, sizeof *out, by_pos);
    free(p);
}
