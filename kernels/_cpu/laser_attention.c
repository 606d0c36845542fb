/* Laser's paged attention on the CPU: each query row against its sequence's cached keys and
 * values, read in place from the paged KV cache (float32 or float16), split over
 * laser_pool.c's workers. laser_cpu.c's decoder layer calls laser_paged_attention between its
 * qkv and o projections.
 */
#include "laser_cpu.h"

#include <stdlib.h>
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(__AVX512F__)
#define HAVE_ATTEND_AVX2 1
#endif
#if defined(__AVX512F__) || defined(HAVE_ATTEND_AVX2)
#define HAVE_ATTEND_64 1 /* attend_64: 16 lanes with AVX-512, 8 with AVX2 */

/* The vector attentions' prefetches, rows [t0, t1) of one KV head (rb bytes a row): a block's
 * V rows while its scores compute (needed after the softmax: to L2), the next block's K rows
 * while this one's dot products run (to L1). always_inline: a plain static inline of only
 * prefetches was found pure by GCC (12, -O1 and up), which then deleted every call as having
 * no effect, so none of these prefetches was ever issued; issued, the decode attention of 64
 * sequences x 120 tokens took 18.6 ms a step against 27.8 (AVX2 Zen 3, docs/engine.md). */
static inline __attribute__((always_inline)) void fetch_rows(
    const char *cache, const int64_t *rows, int64_t t0, int64_t t1, int64_t KVH, int64_t kh,
    int64_t rb, int to_l1) {
    for (int64_t t = t0; t < t1; t++) {
        const char *r = cache + (rows[t] * KVH + kh) * rb;
        for (int64_t l = 0; l < rb; l += 64) {
            if (to_l1)
                _mm_prefetch(r + l, _MM_HINT_T0);
            else
                _mm_prefetch(r + l, _MM_HINT_T1);
        }
    }
}
#endif


#ifdef __AVX512F__
/* the sums of 16 vectors, in their order: a transposed reduction (45 shuffles and adds for
 * 16 sums where one horizontal sum each takes about 9) */
static inline __m512 sum16(const __m512 d[16]) {
    __m512 s[8], u[4], w[2];
    for (int i = 0; i < 8; i++) /* per 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3] */
        s[i] = _mm512_add_ps(_mm512_unpacklo_ps(d[2 * i], d[2 * i + 1]),
                             _mm512_unpackhi_ps(d[2 * i], d[2 * i + 1]));
    for (int i = 0; i < 4; i++) { /* per lane: [a, b, c, d] */
        __m512d x = _mm512_castps_pd(s[2 * i]), y = _mm512_castps_pd(s[2 * i + 1]);
        u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    for (int i = 0; i < 2; i++) /* lanes 0 + 1 and 2 + 3 of two such */
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x88),
                         _mm512_shuffle_f32x4(w[0], w[1], 0xdd));
}

/* 16 cached values as float32 (KV: F32 or F16, a constant in each expansion) */
static inline __attribute__((always_inline)) __m512 load_kv16(const char *p, const int KV) {
    if (KV == F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_loadu_ps((const float *)p);
}

/* The scores of one KV head's G query rows (G <= 4, head_dim 64) against cached rows
 * [t0, t0 + 16) (len in all, the last tile shorter): each K row is loaded for all G queries,
 * the 16 dot products summed together by sum16; written to scores[g * len + t]. */
static inline __attribute__((always_inline)) void scores_16(
    const float *q, int G, const char *k_cache, const int64_t *rows, int64_t t0, int64_t len,
    int64_t KVH, int64_t kh, __m512 sv, float *scores, const int KV) {
    const int64_t rb = 64 * (KV == F16 ? 2 : 4), e = rb / 4; /* a head's row; 16 values */
    int n = len - t0 < 16 ? (int)(len - t0) : 16;
    __mmask16 live = (__mmask16)((1u << n) - 1);
    const char *kr[16];
    for (int i = 0; i < 16; i++) kr[i] = k_cache + (rows[t0 + (i < n ? i : 0)] * KVH + kh) * rb;
    for (int g = 0; g < G; g++) {
        const float *qg = q + g * 64;
        __m512 q0 = _mm512_loadu_ps(qg), q1 = _mm512_loadu_ps(qg + 16);
        __m512 q2 = _mm512_loadu_ps(qg + 32), q3 = _mm512_loadu_ps(qg + 48);
        __m512 d[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            const char *k = kr[i];
            __m512 x = _mm512_mul_ps(q0, load_kv16(k, KV));
            x = _mm512_fmadd_ps(q1, load_kv16(k + e, KV), x);
            x = _mm512_fmadd_ps(q2, load_kv16(k + 2 * e, KV), x);
            d[i] = _mm512_fmadd_ps(q3, load_kv16(k + 3 * e, KV), x);
        }
        _mm512_mask_storeu_ps(scores + g * len + t0, live, _mm512_mul_ps(sum16(d), sv));
    }
}

/* softmax of one KV head's G score rows, then their weighted sums of the V rows (the
 * accumulators stay in registers) into out[g * 64 ..] */
static inline __attribute__((always_inline)) void values_64(
    int G, const char *v_cache, const int64_t *rows, int64_t len, int64_t KVH, int64_t kh,
    float *scores, float *out, const int KV) {
    const int64_t rb = 64 * (KV == F16 ? 2 : 4), e = rb / 4;
    float sum[4];
    for (int g = 0; g < G; g++) sum[g] = exp_sum(scores + g * len, len);
    __m512 acc[4][4];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < 4; j++) acc[g][j] = _mm512_setzero_ps();
    for (int64_t t = 0; t < len; t++) {
        const char *v = v_cache + (rows[t] * KVH + kh) * rb;
        __m512 v0 = load_kv16(v, KV), v1 = load_kv16(v + e, KV);
        __m512 v2 = load_kv16(v + 2 * e, KV), v3 = load_kv16(v + 3 * e, KV);
        for (int g = 0; g < G; g++) {
            __m512 p = _mm512_set1_ps(scores[g * len + t]);
            acc[g][0] = _mm512_fmadd_ps(p, v0, acc[g][0]);
            acc[g][1] = _mm512_fmadd_ps(p, v1, acc[g][1]);
            acc[g][2] = _mm512_fmadd_ps(p, v2, acc[g][2]);
            acc[g][3] = _mm512_fmadd_ps(p, v3, acc[g][3]);
        }
    }
    for (int g = 0; g < G; g++) {
        __m512 inv = _mm512_set1_ps(1.0f / sum[g]);
        for (int j = 0; j < 4; j++) _mm512_storeu_ps(out + g * 64 + j * 16, _mm512_mul_ps(acc[g][j], inv));
    }
}

/* attention of one KV head's G query rows (G <= 4) over len cached rows of head_dim 64
 * (scores_16, then values_64). The caches hold KV (float32 or float16: a decode step at 64
 * streams reads more cache than weights, and float16 halves it). The V rows are fetched
 * while the scores compute, the next tile's K rows while this one's do. */
static inline __attribute__((always_inline)) void attend_64(
    const float *q, int G, const char *k_cache, const char *v_cache, const int64_t *rows,
    int64_t len, int64_t KVH, int64_t kh, float scale, float *scores, float *out,
    const int KV) {
    const int64_t rb = 64 * (KV == F16 ? 2 : 4);
    const __m512 sv = _mm512_set1_ps(scale);
    for (int64_t t0 = 0; t0 < len; t0 += 16) {
        fetch_rows(v_cache, rows, t0, t0 + 16 < len ? t0 + 16 : len, KVH, kh, rb, 0);
        fetch_rows(k_cache, rows, t0 + 16, t0 + 32 < len ? t0 + 32 : len, KVH, kh, rb, 1);
        scores_16(q, G, k_cache, rows, t0, len, KVH, kh, sv, scores, KV);
    }
    values_64(G, v_cache, rows, len, KVH, kh, scores, out, KV);
}

/* the same for every KV head of one decode row (q: its KVH * G query heads; scores: KVH * G
 * rows of len), each head's arithmetic as attend_64's, so the results are the same bits. A
 * token's rows of all heads lie side by side in the cache, so the tiles walk each block from
 * end to end (one head's rows are a third of every token's bytes: read head by head, the
 * scattered blocks of a long-running server's cache took twice the time of adjacent ones);
 * K is fetched two tiles ahead, all heads' V rows while the scores compute. */
static inline __attribute__((always_inline)) void attend_64_heads(
    const float *q, int G, const char *k_cache, const char *v_cache, const int64_t *rows,
    int64_t len, int64_t KVH, float scale, float *scores, float *out, const int KV) {
    const int64_t rb = 64 * (KV == F16 ? 2 : 4), tb = KVH * rb; /* a head's, a token's */
    const __m512 sv = _mm512_set1_ps(scale);
    fetch_rows(k_cache, rows, 0, 32 < len ? 32 : len, 1, 0, tb, 1);
    for (int64_t t0 = 0; t0 < len; t0 += 16) {
        fetch_rows(v_cache, rows, t0, t0 + 16 < len ? t0 + 16 : len, 1, 0, tb, 0);
        fetch_rows(k_cache, rows, t0 + 32, t0 + 48 < len ? t0 + 48 : len, 1, 0, tb, 1);
        for (int64_t kh = 0; kh < KVH; kh++)
            scores_16(q + kh * G * 64, G, k_cache, rows, t0, len, KVH, kh, sv,
                      scores + kh * G * len, KV);
    }
    for (int64_t kh = 0; kh < KVH; kh++)
        values_64(G, v_cache, rows, len, KVH, kh, scores + kh * G * len, out + kh * G * 64, KV);
}
#endif

#ifdef HAVE_ATTEND_AVX2
/* the sums of 8 vectors, in their order (AVX2's sum16: three rounds of pairwise sums) */
static inline __m256 sum8(const __m256 d[8]) {
    __m256 s0 = _mm256_hadd_ps(d[0], d[1]), s1 = _mm256_hadd_ps(d[2], d[3]);
    __m256 s2 = _mm256_hadd_ps(d[4], d[5]), s3 = _mm256_hadd_ps(d[6], d[7]);
    __m256 t0 = _mm256_hadd_ps(s0, s1), t1 = _mm256_hadd_ps(s2, s3); /* per 128-bit half */
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20),
                         _mm256_permute2f128_ps(t0, t1, 0x31));
}

/* 8 cached values as float32 (KV: F32 or F16, a constant in each expansion) */
static inline __attribute__((always_inline)) __m256 load_kv8(const char *p, const int KV) {
    if (KV == F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    return _mm256_loadu_ps((const float *)p);
}

/* attend_64 on AVX2 (16 registers of 8 lanes): K rows 8 at a time, widened once into `kbuf`
 * for all G queries (a float16 cache; a float32 one is read in place), their dot products
 * summed together by sum8; the V rows in two halves of 32 values, so that G <= 3 queries'
 * accumulators stay in registers. Without it a float16 cache went through the plain-C
 * attend, which widened every value with the portable h2f: on an AVX2-only AMD EPYC the
 * attention took 29 % of a 16-stream decode step. */
static inline __attribute__((always_inline)) void attend_64(
    const float *q, int G, const char *k_cache, const char *v_cache, const int64_t *rows,
    int64_t len, int64_t KVH, int64_t kh, float scale, float *scores, float *out,
    const int KV) {
    const int64_t rb = 64 * (KV == F16 ? 2 : 4), e = rb / 8; /* bytes of a row, of 8 values */
    float kbuf[8 * 64] __attribute__((aligned(32)));
    const __m256 sv = _mm256_set1_ps(scale);
    for (int64_t t0 = 0; t0 < len; t0 += 8) {
        int n = len - t0 < 8 ? (int)(len - t0) : 8;
        const float *kr[8];
        for (int i = 0; i < 8; i++) {
            const char *k = k_cache + (rows[t0 + (i < n ? i : 0)] * KVH + kh) * rb;
            if (KV == F16) {
                for (int j = 0; j < 8; j++)
                    _mm256_store_ps(kbuf + 64 * i + 8 * j, load_kv8(k + j * e, KV));
                kr[i] = kbuf + 64 * i;
            } else
                kr[i] = (const float *)k;
        }
        fetch_rows(v_cache, rows, t0, t0 + n, KVH, kh, rb, 0);
        fetch_rows(k_cache, rows, t0 + 8, t0 + 16 < len ? t0 + 16 : len, KVH, kh, rb, 1);
        for (int g = 0; g < G; g++) {
            const float *qg = q + g * 64;
            __m256 d[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                __m256 x = _mm256_mul_ps(_mm256_loadu_ps(qg), _mm256_loadu_ps(kr[i]));
                for (int j = 1; j < 8; j++)
                    x = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * j),
                                        _mm256_loadu_ps(kr[i] + 8 * j), x);
                d[i] = x;
            }
            float sc[8];
            _mm256_storeu_ps(sc, _mm256_mul_ps(sum8(d), sv));
            memcpy(scores + g * len + t0, sc, (size_t)n * 4);
        }
    }
    float sum[4];
    for (int g = 0; g < G; g++) sum[g] = exp_sum(scores + g * len, len);
    for (int h = 0; h < 2; h++) {
        __m256 acc[4][4];
        for (int g = 0; g < G; g++)
            for (int j = 0; j < 4; j++) acc[g][j] = _mm256_setzero_ps();
        for (int64_t t = 0; t < len; t++) {
            const char *v = v_cache + (rows[t] * KVH + kh) * rb + h * 4 * e;
            __m256 v0 = load_kv8(v, KV), v1 = load_kv8(v + e, KV);
            __m256 v2 = load_kv8(v + 2 * e, KV), v3 = load_kv8(v + 3 * e, KV);
            for (int g = 0; g < G; g++) {
                __m256 p = _mm256_set1_ps(scores[g * len + t]);
                acc[g][0] = _mm256_fmadd_ps(p, v0, acc[g][0]);
                acc[g][1] = _mm256_fmadd_ps(p, v1, acc[g][1]);
                acc[g][2] = _mm256_fmadd_ps(p, v2, acc[g][2]);
                acc[g][3] = _mm256_fmadd_ps(p, v3, acc[g][3]);
            }
        }
        for (int g = 0; g < G; g++) {
            __m256 inv = _mm256_set1_ps(1.0f / sum[g]);
            for (int j = 0; j < 4; j++)
                _mm256_storeu_ps(out + g * 64 + h * 32 + j * 8, _mm256_mul_ps(acc[g][j], inv));
        }
    }
}
#endif

/* cached row `at` as float32: in place in a float32 cache, else widened into `scratch` */
static inline const float *kv_row(const char *cache, int64_t at, int kv_dtype, int64_t D,
                                  float *scratch) {
    const char *src = cache + (size_t)(at * D) * elem_size(kv_dtype);
    if (kv_dtype == F32) return (const float *)src;
    load_row(src, kv_dtype, D, scratch);
    return scratch;
}

/* the same for any G and head_dim, in plain C; scratch: D floats */
static void attend(const float *q, int64_t G, int64_t D, const char *k_cache,
                   const char *v_cache, int kv_dtype, const int64_t *rows, int64_t len,
                   int64_t KVH, int64_t kh, float scale, float *scores, float *out,
                   float *scratch) {
    for (int64_t t = 0; t < len; t++) {
        const float *k = kv_row(k_cache, rows[t] * KVH + kh, kv_dtype, D, scratch);
        for (int64_t g = 0; g < G; g++) scores[g * len + t] = dot(q + g * D, k, D) * scale;
    }
    memset(out, 0, (size_t)(G * D) * 4);
    for (int64_t g = 0; g < G; g++) {
        float *sc = scores + g * len, inv = 1.0f / exp_sum(sc, len);
        for (int64_t t = 0; t < len; t++) sc[t] *= inv;
    }
    for (int64_t t = 0; t < len; t++) {
        const float *v = kv_row(v_cache, rows[t] * KVH + kh, kv_dtype, D, scratch);
        for (int64_t g = 0; g < G; g++) {
            float p = scores[g * len + t], *a = out + g * D;
            for (int64_t d = 0; d < D; d++) a[d] += p * v[d];
        }
    }
}

/* Causal attention of each sequence's query rows against its paged cache, read in place.
 * q: [T, H, D] float32; caches [num_blocks * B, KVH, D] in kv_dtype (F32 or F16);
 * block_tables: [S, stride] int32; seq_lens: [S] int32 (>= 1, this step's tokens included);
 * query_start_loc: [S + 1] int32, sequence s owning rows [qsl[s], qsl[s + 1]), its last
 * positions (NULL: one row each, a decode step); out: [T, H, D] in out_dtype. Query head h
 * reads KV head h / (H / KVH). One task per sequence and KV head, over up to `threads`
 * threads of the pool; with AVX-512, head_dim 64 and enough sequences for every thread, a
 * sequence's one decode row is attended by its first head's task for every head
 * (attend_64_heads: whole tokens' rows in order) and its other heads' tasks do nothing. */
typedef struct {
    const float *q;
    const char *k_cache, *v_cache;
    int kv_dtype;
    const int32_t *block_tables, *seq_lens, *query_start_loc;
    int64_t stride, H, KVH, D, B;
    float scale;
    char *out;
    int out_dtype;
    int heads; /* a decode row's first-head task attends every head (attend_64_heads) */
} attn_job;

static void attn_task(void *arg, int64_t task) {
    const attn_job *j = (const attn_job *)arg;
    int64_t s = task / j->KVH, kh = task % j->KVH, H = j->H, D = j->D, B = j->B;
    int64_t G = H / j->KVH, seq_len = j->seq_lens[s];
    int64_t first = j->query_start_loc ? j->query_start_loc[s] : s;
    int64_t q_len = j->query_start_loc ? j->query_start_loc[s + 1] - first : 1;
    int heads = j->heads && q_len == 1;
    if (heads && kh) return;
    int64_t nh = heads ? j->KVH : 1; /* KV heads this task attends */
    float *scores = (float *)malloc((size_t)(nh * G * seq_len) * 4);
    int64_t *rows = (int64_t *)malloc((size_t)seq_len * 8);
    float *acc = (float *)malloc((size_t)(nh * G * D + D) * 4), *scratch = acc + nh * G * D;
    const int32_t *table = j->block_tables + s * j->stride;
    for (int64_t t = 0; t < seq_len; t++) rows[t] = (int64_t)table[t / B] * B + t % B;
#ifdef __AVX512F__
    if (heads) {
        const float *qh = j->q + first * H * D;
        if (j->kv_dtype == F16)
            attend_64_heads(qh, (int)G, j->k_cache, j->v_cache, rows, seq_len, j->KVH,
                            j->scale, scores, acc, F16);
        else
            attend_64_heads(qh, (int)G, j->k_cache, j->v_cache, rows, seq_len, j->KVH,
                            j->scale, scores, acc, F32);
        store_row(acc, H * D, j->out + (size_t)(first * H * D) * elem_size(j->out_dtype),
                  j->out_dtype);
    } else
#endif
    for (int64_t i = 0; i < q_len; i++) {
        int64_t row = first + i, len = seq_len - q_len + 1 + i; /* causal: up to itself */
        const float *qh = j->q + (row * H + kh * G) * D;
#ifdef HAVE_ATTEND_64
        if (D == 64 && G <= 4 && j->kv_dtype == F16)
            attend_64(qh, (int)G, j->k_cache, j->v_cache, rows, len, j->KVH, kh, j->scale,
                      scores, acc, F16);
        else if (D == 64 && G <= 4)
            attend_64(qh, (int)G, j->k_cache, j->v_cache, rows, len, j->KVH, kh, j->scale,
                      scores, acc, F32);
        else
#endif
            attend(qh, G, D, j->k_cache, j->v_cache, j->kv_dtype, rows, len, j->KVH, kh,
                   j->scale, scores, acc, scratch);
        size_t at = (size_t)((row * H + kh * G) * D) * elem_size(j->out_dtype);
        store_row(acc, G * D, j->out + at, j->out_dtype);
    }
    free(acc);
    free(rows);
    free(scores);
}

void laser_paged_attention(const float *q, const void *k_cache, const void *v_cache,
                           int kv_dtype, const int32_t *block_tables, int64_t stride,
                           const int32_t *seq_lens, const int32_t *query_start_loc, int64_t S,
                           int64_t H, int64_t KVH, int64_t D, int64_t B, float scale,
                           void *out, int out_dtype, int threads) {
    int heads = 0;
#ifdef __AVX512F__
    heads = D == 64 && H / KVH <= 4 && KVH > 1 && S >= 4 * (int64_t)threads;
#endif
    attn_job j = {q, (const char *)k_cache, (const char *)v_cache, kv_dtype, block_tables,
                  seq_lens, query_start_loc, stride, H, KVH, D, B, scale, (char *)out,
                  out_dtype, heads};
    laser_pool_run(attn_task, &j, S * KVH, threads);
}
