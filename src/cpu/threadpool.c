/* threadpool.c -- a persistent pthread pool for the CPU backend. The caller runs as thread 0;
   items are claimed from an atomic counter, so the split never affects results (each item is
   computed by exactly one thread in a fixed order). */
#include "common/internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct ak_threadpool {
    int32_t n;                 /* threads including the caller */
    pthread_t *threads;        /* [n - 1] */
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    pthread_cond_t done_cv;
    uint64_t generation;       /* bumped per job */
    int32_t active;            /* workers still inside the current job */
    int stop;
    /* current job */
    ak_parallel_fn fn;
    void *arg;
    int64_t total;
    atomic_llong next;
};

typedef struct worker_arg {
    ak_threadpool *pool;
    int32_t id;
} worker_arg;

static void run_items(ak_threadpool *p, int32_t id) {
    for (;;) {
        long long i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->total) break;
        p->fn(p->arg, (int64_t)i, id);
    }
}

static void *worker_main(void *varg) {
    worker_arg *wa = (worker_arg *)varg;
    ak_threadpool *p = wa->pool;
    int32_t id = wa->id;
    free(wa);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_items(p, id);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

ak_status ak_threadpool_create(int32_t num_threads, ak_threadpool **out) {
    ak_threadpool *p = (ak_threadpool *)calloc(1, sizeof *p);
    if (p == NULL) return ak_fail(AK_ERR_OUT_OF_MEMORY, "ak_context_create: thread pool");
    p->n = num_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->next, 0);
    if (num_threads > 1) {
        p->threads = (pthread_t *)calloc((size_t)num_threads - 1, sizeof(pthread_t));
        if (p->threads == NULL) {
            ak_threadpool_destroy(p);
            return ak_fail(AK_ERR_OUT_OF_MEMORY, "ak_context_create: thread pool");
        }
        for (int32_t i = 1; i < num_threads; i++) {
            worker_arg *wa = (worker_arg *)malloc(sizeof *wa);
            if (wa == NULL || (wa->pool = p, wa->id = i,
                               pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0)) {
                free(wa);
                p->n = i; /* threads 1..i-1 exist */
                ak_threadpool_destroy(p);
                return ak_fail(AK_ERR_OUT_OF_MEMORY,
                               "ak_context_create: could not start worker thread %d", (int)i);
            }
        }
    }
    *out = p;
    return AK_OK;
}

void ak_threadpool_destroy(ak_threadpool *p) {
    if (p == NULL) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int32_t i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}

void ak_parallel_for(ak_context *ctx, int64_t n, ak_parallel_fn fn, void *arg) {
    ak_threadpool *p = ctx != NULL ? ctx->pool : NULL;
    if (n <= 0) return;
    if (p == NULL || p->n <= 1 || n == 1) {
        for (int64_t i = 0; i < n; i++) fn(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->total = n;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->active = p->n - 1;
    p->generation++;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    run_items(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
