/* Laser's CPU kernels: the work between the matmuls of a decoder layer, fused, in C.
 *
 * Why: on a CPU a decode step of a small model spends as long between its matmuls as in them
 * when every norm, rotation, cache write and activation is a few PyTorch ops (each one
 * dispatched, allocated and converted between bfloat16 and float32 separately) and the decode
 * attention gathers every sequence's K/V before attending. Here each is one call over the raw
 * buffers: activations come in as the matmul produced them (float32 or bfloat16), the
 * arithmetic is float32 as in the PyTorch references (kernels/<op>.py), and results go out in
 * the dtype the next matmul reads. The attention reads the paged cache in place.
 *
 * Built by kernels/_cpu/__init__.py with the machine's compiler (-O3 -march=native, no FMA
 * contraction so that products round as PyTorch's separate multiplies do); loaded with ctypes.
 * The matmuls and the attention split their work over laser_pool.c's sleeping workers.
 */
#include "laser_cpu.h"

#include <math.h>
#include <stdlib.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(__AVX512F__)
#define HAVE_ATTEND_AVX2 1
#endif
#if defined(__AVX512F__) || defined(HAVE_ATTEND_AVX2)
#define HAVE_ATTEND_64 1 /* attend_64: 16 lanes with AVX-512, 8 with AVX2 */

/* The vector attentions' prefetches, rows [t0, t1) of one KV head (rb bytes a row): a block's
 * V rows while its scores compute (needed after the softmax: to L2), the next block's K rows
 * while this one's dot products run (to L1). */
static inline void fetch_rows(const char *cache, const int64_t *rows, int64_t t0, int64_t t1,
                              int64_t KVH, int64_t kh, int64_t rb, int to_l1) {
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

static void load_row(const void *src, int dtype, int64_t n, float *dst) {
    if (dtype == F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    const uint16_t *s = (const uint16_t *)src;
    if (dtype == F16)
        for (int64_t i = 0; i < n; i++) dst[i] = h2f(s[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(s[i]);
}

static void store_row(const float *src, int64_t n, void *dst, int dtype) {
    if (dtype == F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    uint16_t *d = (uint16_t *)dst;
    if (dtype == F16)
        for (int64_t i = 0; i < n; i++) d[i] = f2h(src[i]);
    else
        for (int64_t i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
}

/* sum of a[i] * b[i]: with AVX-512 one fused multiply-add per 16 elements and one tree
 * reduction; otherwise 16 independent lanes (vectorises without reassociation flags) */
static inline float dot(const float *a, const float *b, int64_t n) {
#ifdef __AVX512F__
    if (n % 16 == 0) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < n; i += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
        return _mm512_reduce_add_ps(acc);
    }
#endif
    float lane[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) lane[j] += a[i + j] * b[i + j];
    float s = 0.0f;
    for (; i < n; i++) s += a[i] * b[i];
    for (int j = 0; j < 16; j++) s += lane[j];
    return s;
}

/* exp(x) to about 1 ulp (Cephes' polynomial after a base-2 range reduction), written so that
 * loops over it vectorise: no calls (floorf, fminf and fmaxf each stop GCC vectorising here),
 * the rounding by the 1.5 * 2^23 trick; arguments are clamped to [-87, 88] (the clamps are
 * branches GCC turns into selects only under -fno-trapping-math: without it no loop over
 * fast_exp vectorised) */
static inline float fast_exp(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int32_t i; float f; } scale = {.i = ((int32_t)n + 127) * (1 << 23)};
    return p * scale.f;
}

/* sc[t] = exp(sc[t] - max sc) for t < len (the loops vectorise); returns their sum: a
 * softmax's numerators and denominator */
static inline float exp_sum(float *sc, int64_t len) {
    float top = sc[0], s = 0.0f;
    for (int64_t t = 1; t < len; t++) top = sc[t] > top ? sc[t] : top;
    for (int64_t t = 0; t < len; t++) sc[t] = fast_exp(sc[t] - top);
    for (int64_t t = 0; t < len; t++) s += sc[t];
    return s;
}

/* out[t] = h / sqrt(mean(h^2) + eps) * weight, h = x[t] (+ residual[t], then residual[t] = h).
 * x: [T, H] in x_dtype; residual: [T, H] float32 or NULL; out: [T, H] in out_dtype. */
void laser_add_rms_norm(const void *x, int x_dtype, float *residual, const float *weight,
                        float eps, int64_t T, int64_t H, void *out, int out_dtype) {
    float *h = (float *)malloc((size_t)H * 4);
    const char *xb = (const char *)x;
    char *ob = (char *)out;
    for (int64_t t = 0; t < T; t++) {
        load_row(xb + (size_t)(t * H) * elem_size(x_dtype), x_dtype, H, h);
        if (residual) {
            float *r = residual + t * H;
            for (int64_t i = 0; i < H; i++) h[i] += r[i];
            memcpy(r, h, (size_t)H * 4);
        }
        float inv = 1.0f / sqrtf(dot(h, h, H) / (float)H + eps);
        for (int64_t i = 0; i < H; i++) h[i] = h[i] * inv * weight[i];
        store_row(h, H, ob + (size_t)(t * H) * elem_size(out_dtype), out_dtype);
    }
    free(h);
}

static inline void rotate(const float *x, const float *cos, const float *sin, int64_t half,
                          float *out) {
    for (int64_t i = 0; i < half; i++) {
        float x1 = x[i], x2 = x[i + half];
        out[i] = x1 * cos[i] - x2 * sin[i];
        out[i + half] = x2 * cos[i] + x1 * sin[i];
    }
}

/* Rotary embedding of q and k (rotate-half convention, cos_sin[p] = [cos | sin], [P, D]) and
 * the K/V cache write. qkv: [T, (H + 2 KVH) D] in dtype; q_out: [T, H, D] float32; caches
 * [slots, KVH, D] in kv_dtype (F32 or F16); slots[t] < 0 skips the write. */
void laser_rope_write_kv(const void *qkv, int dtype, int64_t T, int64_t H, int64_t KVH,
                         int64_t D, const int64_t *positions, const float *cos_sin,
                         float *q_out, void *k_cache, void *v_cache, int kv_dtype,
                         const int64_t *slots) {
    int64_t width = (H + 2 * KVH) * D, half = D / 2;
    size_t kv = elem_size(kv_dtype);
    float *row = (float *)malloc((size_t)(width + D) * 4), *k = row + width;
    const char *src = (const char *)qkv;
    for (int64_t t = 0; t < T; t++) {
        load_row(src + (size_t)(t * width) * elem_size(dtype), dtype, width, row);
        const float *cos = cos_sin + positions[t] * D, *sin = cos + half;
        for (int64_t h = 0; h < H; h++) rotate(row + h * D, cos, sin, half, q_out + (t * H + h) * D);
        int64_t slot = slots[t];
        if (slot < 0) continue;
        for (int64_t h = 0; h < KVH; h++) {
            rotate(row + (H + h) * D, cos, sin, half, k);
            store_row(k, D, (char *)k_cache + (size_t)((slot * KVH + h) * D) * kv, kv_dtype);
        }
        store_row(row + (H + KVH) * D, KVH * D, (char *)v_cache + (size_t)(slot * KVH * D) * kv,
                  kv_dtype);
    }
    free(row);
}

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
        q_len = 0;
    }
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

/* out[t] = silu(gate) * up for x[t] = [gate | up] ([T, 2 I] in x_dtype; out [T, I]). */
typedef struct {
    const char *x;
    char *out;
    int x_dtype, out_dtype;
    int64_t T, I, rows; /* rows a task */
} silu_job;

static void silu_task(void *arg, int64_t task) {
    const silu_job *j = (const silu_job *)arg;
    int64_t I = j->I, t0 = task * j->rows, t1 = t0 + j->rows < j->T ? t0 + j->rows : j->T;
    float *row = (float *)malloc((size_t)(2 * I) * 4);
    for (int64_t t = t0; t < t1; t++) {
        load_row(j->x + (size_t)(t * 2 * I) * elem_size(j->x_dtype), j->x_dtype, 2 * I, row);
        for (int64_t i = 0; i < I; i++) {
            float g = row[i];
            row[i] = g / (1.0f + fast_exp(-g)) * row[I + i];
        }
        store_row(row, I, j->out + (size_t)(t * I) * elem_size(j->out_dtype), j->out_dtype);
    }
    free(row);
}

/* over the pool's threads, a few rows a task (64-row decode steps spent 5 % of their time
 * here on one thread while the other core waited) */
static void silu_and_mul(const void *x, int x_dtype, int64_t T, int64_t I, void *out,
                         int out_dtype, int threads) {
    int64_t rows = T < 8 ? 1 : T / 8;
    silu_job j = {(const char *)x, (char *)out, x_dtype, out_dtype, T, I, rows};
    laser_pool_run(silu_task, &j, (T + rows - 1) / rows, threads);
}

void laser_silu_and_mul(const void *x, int x_dtype, int64_t T, int64_t I, void *out,
                        int out_dtype) {
    silu_and_mul(x, x_dtype, T, I, out, out_dtype, 1);
}

/* ---- bfloat16 matmul -----------------------------------------------------------------------
 *
 * out [M, N] = x [M, K] @ w [N, K]^T with bfloat16 w and float32 sums (AVX512-BF16's pair dot
 * product, as oneDNN uses), out in float32 or bfloat16 (rounded to nearest even).
 *
 * x comes in two ways. bfloat16 (decode steps): as is. float32 (steps with prompt tokens, which
 * write the prompt's KV cache): split into hi = bf16(x) and lo = bf16(x - hi), both multiplied
 * by the same weights into the same sums, so the activations keep about 16 bits of mantissa and
 * only the weights are rounded. Rounding the activations is what flipped SmolLM2's near-ties in
 * a bfloat16 prefill; with the split, bench/cpu_precision.py's answers stay float32's.
 *
 * Why not oneDNN: a decode step multiplies a few rows by every weight of the model, and the
 * weights (270 MB in bfloat16 for SmolLM2-135M) stream from memory once a step. This kernel
 * reads each weight once per step in the order it is stored, prefetching 16 KB ahead, and
 * keeps up to 8 rows x 32 outputs of sums in registers: a whole model's matmuls at 16 rows took
 * 1.5x less time than oneDNN's on the development CPU (bench/cpu_linear.py --model).
 *
 * Packed layout (laser_pack_bf16): blocks of 32 outputs; in a block, for each pair of inputs
 * (2p, 2p + 1), the 32 outputs' two weights side by side: one 64-byte line per 16 outputs,
 * exactly what one VDPBF16PS multiplies with a broadcast input pair. N is padded to 32 with
 * zeros; K must be even. `threads` > 1 splits the blocks over that many threads of the pool
 * (laser_pool.c).
 */
enum { GEMM_NB = 32, GEMM_MR = 8, GEMM_PREFETCH = 8192 /* bfloat16 elements ahead */ };

int laser_gemm_bf16_supported(void) {
#ifdef __AVX512BF16__
    return 1;
#else
    return 0;
#endif
}

void laser_pack_bf16(const float *w, int64_t N, int64_t K, uint16_t *out) {
    int64_t KP = K / 2, blocks = (N + GEMM_NB - 1) / GEMM_NB;
    for (int64_t b = 0; b < blocks; b++)
        for (int64_t p = 0; p < KP; p++)
            for (int64_t j = 0; j < GEMM_NB; j++) {
                int64_t n = b * GEMM_NB + j;
                uint16_t *dst = out + ((b * KP + p) * GEMM_NB + j) * 2;
                dst[0] = n < N ? f32_to_bf16(w[n * K + 2 * p]) : 0;
                dst[1] = n < N ? f32_to_bf16(w[n * K + 2 * p + 1]) : 0;
            }
}

#ifdef __AVX512BF16__

static inline void gemm_store(__m512 acc, void *out, int out_dtype, int64_t at, __mmask16 keep) {
    if (out_dtype == F32)
        _mm512_mask_storeu_ps((float *)out + at, keep, acc);
    else
        _mm256_mask_storeu_epi16((uint16_t *)out + at, keep,
                                 (__m256i)_mm512_cvtneps_pbh(acc));
}

/* Rows [0, MR) of x (hi, and lo when SPLIT; input pairs as int32, a row every ks pairs) times
 * one block of 32 outputs; MR and SPLIT are constants in each expansion. */
#define GEMM_TILE(MR, SPLIT)                                                                 \
    static void gemm_tile_##MR##_##SPLIT(const int32_t *hi, const int32_t *lo, int64_t ks,   \
                                          const uint16_t *wb, int64_t KP, void *out,        \
                                          int out_dtype, int64_t N, int64_t n0) {           \
        __m512 acc[MR][2];                                                                   \
        for (int m = 0; m < MR; m++) acc[m][0] = acc[m][1] = _mm512_setzero_ps();            \
        for (int64_t p = 0; p < KP; p++) {                                                   \
            const uint16_t *wp = wb + p * 2 * GEMM_NB;                                       \
            _mm_prefetch((const char *)(wp + GEMM_PREFETCH), _MM_HINT_T0);                   \
            _mm_prefetch((const char *)(wp + GEMM_PREFETCH + GEMM_NB), _MM_HINT_T0);         \
            __m512bh w0 = (__m512bh)_mm512_loadu_si512(wp);                                  \
            __m512bh w1 = (__m512bh)_mm512_loadu_si512(wp + GEMM_NB);                        \
            for (int m = 0; m < MR; m++) {                                                   \
                __m512bh xm = (__m512bh)_mm512_set1_epi32(hi[m * ks + p]);                   \
                acc[m][0] = _mm512_dpbf16_ps(acc[m][0], xm, w0);                             \
                acc[m][1] = _mm512_dpbf16_ps(acc[m][1], xm, w1);                             \
                if (SPLIT) {                                                                 \
                    __m512bh xl = (__m512bh)_mm512_set1_epi32(lo[m * ks + p]);               \
                    acc[m][0] = _mm512_dpbf16_ps(acc[m][0], xl, w0);                         \
                    acc[m][1] = _mm512_dpbf16_ps(acc[m][1], xl, w1);                         \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
        int64_t left = N - n0;                                                               \
        __mmask16 k0 = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);                  \
        __mmask16 k1 = left >= 32   ? 0xffff                                                 \
                       : left <= 16 ? 0                                                      \
                                    : (__mmask16)((1u << (left - 16)) - 1);                  \
        for (int m = 0; m < MR; m++) {                                                       \
            gemm_store(acc[m][0], out, out_dtype, m * N + n0, k0);                           \
            gemm_store(acc[m][1], out, out_dtype, m * N + n0 + 16, k1);                      \
        }                                                                                    \
    }
#define GEMM_TILES_OF(SPLIT)                                                                 \
    GEMM_TILE(1, SPLIT) GEMM_TILE(2, SPLIT) GEMM_TILE(3, SPLIT) GEMM_TILE(4, SPLIT)          \
    GEMM_TILE(5, SPLIT) GEMM_TILE(6, SPLIT) GEMM_TILE(7, SPLIT) GEMM_TILE(8, SPLIT)
GEMM_TILES_OF(0)
GEMM_TILES_OF(1)

typedef void (*gemm_tile_fn)(const int32_t *, const int32_t *, int64_t, const uint16_t *,
                             int64_t, void *, int, int64_t, int64_t);
static const gemm_tile_fn GEMM_TILES[2][GEMM_MR] = {
    {gemm_tile_1_0, gemm_tile_2_0, gemm_tile_3_0, gemm_tile_4_0, gemm_tile_5_0, gemm_tile_6_0,
     gemm_tile_7_0, gemm_tile_8_0},
    {gemm_tile_1_1, gemm_tile_2_1, gemm_tile_3_1, gemm_tile_4_1, gemm_tile_5_1, gemm_tile_6_1,
     gemm_tile_7_1, gemm_tile_8_1}};

typedef struct {
    const uint16_t *hi, *lo, *w;
    int64_t M, K, N, blocks_per_task, blocks;
    char *out;
    int out_dtype;
} gemm_job;

static void gemm_task(void *arg, int64_t task) {
    const gemm_job *j = (const gemm_job *)arg;
    int64_t KP = j->K / 2, b1 = (task + 1) * j->blocks_per_task;
    const gemm_tile_fn *tiles = GEMM_TILES[j->lo != NULL];
    for (int64_t b = task * j->blocks_per_task; b < b1 && b < j->blocks; b++) {
        const uint16_t *wb = j->w + b * KP * GEMM_NB * 2;
        for (int64_t m0 = 0; m0 < j->M; m0 += GEMM_MR) {
            int64_t mr = j->M - m0 < GEMM_MR ? j->M - m0 : GEMM_MR;
            tiles[mr - 1]((const int32_t *)(j->hi + m0 * j->K),
                          j->lo ? (const int32_t *)(j->lo + m0 * j->K) : NULL, KP, wb, KP,
                          j->out + (size_t)(m0 * j->N) * elem_size(j->out_dtype), j->out_dtype,
                          j->N, b * GEMM_NB);
        }
    }
}
#endif

void laser_gemm_bf16(const void *x, int x_dtype, int64_t M, int64_t K, const uint16_t *w,
                     int64_t N, void *out, int out_dtype, int threads) {
#ifdef __AVX512BF16__
    uint16_t *split = NULL;
    const uint16_t *hi = (const uint16_t *)x, *lo = NULL;
    if (x_dtype == F32) {
        split = (uint16_t *)malloc((size_t)(2 * M * K) * 2);
        const float *xf = (const float *)x;
        for (int64_t i = 0; i < M * K; i++) {
            uint16_t h = f32_to_bf16(xf[i]);
            split[i] = h;
            split[M * K + i] = f32_to_bf16(xf[i] - bf16_to_f32(h));
        }
        hi = split;
        lo = split + M * K;
    }
    int64_t blocks = (N + GEMM_NB - 1) / GEMM_NB;
    int64_t tasks = threads > 1 ? (int64_t)threads * 4 : 1;
    if (tasks > blocks) tasks = blocks;
    int64_t per = (blocks + tasks - 1) / tasks;
    gemm_job j = {hi, lo, w, M, K, N, per, blocks, (char *)out, out_dtype};
    laser_pool_run(gemm_task, &j, (blocks + per - 1) / per, threads);
    free(split);
#else
    (void)x; (void)x_dtype; (void)M; (void)K; (void)w; (void)N; (void)out; (void)out_dtype;
    (void)threads;
    abort(); /* callers check laser_gemm_bf16_supported() */
#endif
}

/* ---- a whole decoder layer ------------------------------------------------------------------
 *
 * The calls above in the order a Llama layer makes them, on Laser's matmuls, so that a layer
 * costs Python one call instead of about ten (a decode step of SmolLM2 spent 2-3 ms of its
 * 11-27 ms in those calls' Python: checks, allocations, ctypes argument conversion).
 * Activations travel in `act` (bfloat16 in bfloat16 decode steps; float32 with split matmuls
 * in steps with prompt tokens, and always on quantized weights). x: [T, hidden] in x_dtype;
 * residual: float32 [T, hidden], updated in place (the first layer passes x itself, float32,
 * and first = 1: no add before its first norm); out: [T, hidden] in act, the down
 * projection's product (the next layer's x).
 * Weights w[4]: qkv [(H + 2 KVH) D, hidden], o [hidden, H D], gate_up [2 I, hidden] and down
 * [hidden, I], each in laser_pack_bf16's layout (fmts[i] = 0) or laser_pack_q's (fmts[i] the
 * GGML type, + 256 for two-part activations, + 512 for two parts in the rows of prompt
 * chunks but one in the `single` rows before them (the step's decode rows, which the runner
 * puts first: AttentionMetadata.single_rows): those then get a decode step's bits and
 * cost, whatever shares their step; in quant mode's gate-up projection two parts cost a step
 * of 48 decode rows and 2 prompt tokens 8 ms more than 48 rows alone, one part 2 ms). The
 * rest as laser_rope_write_kv and laser_paged_attention take it; `threads` for the matmuls
 * and the attention. */
static void layer_matmul(const void *w, int fmt, const void *x, int act, int64_t T, int64_t K,
                         int64_t N, void *out, int threads, int64_t single) {
    if (fmt >> 8 == 2) /* two parts for prompt rows, one for the decode rows before them */
        laser_gemm_q_rows(x, act, T, K, (const uint8_t *)w, fmt & 255, N, out, act, threads,
                          single);
    else if (fmt)
        laser_gemm_q(x, act, T, K, (const uint8_t *)w, fmt & 255, N, out, act, threads,
                     fmt >> 8);
    else
        laser_gemm_bf16(x, act, T, K, (const uint16_t *)w, N, out, act, threads);
}

void laser_decoder_layer(const void *x, int x_dtype, float *residual, int first,
                         const float *input_norm, const float *post_norm, float eps,
                         const void *const *w, const int32_t *fmts, int act,
                         int64_t T, int64_t hidden, int64_t H, int64_t KVH, int64_t D, int64_t I,
                         const int64_t *positions, const float *cos_sin, void *k_cache,
                         void *v_cache, int kv_dtype, const int64_t *slots, int64_t B,
                         const int32_t *block_tables, int64_t stride, const int32_t *seq_lens,
                         const int32_t *query_start_loc, int64_t S, int64_t single,
                         float scale, void *out, int threads) {
    size_t a = elem_size(act);
    int64_t n_qkv = (H + 2 * KVH) * D, widest = n_qkv > 2 * I ? n_qkv : 2 * I;
    char *normed = (char *)malloc((size_t)(T * hidden) * a);
    char *wide = (char *)malloc((size_t)(T * widest) * a); /* qkv, then gate_up */
    float *q = (float *)malloc((size_t)(T * H * D) * 4);
    char *attn = (char *)malloc((size_t)(T * H * D) * a);
    char *proj = (char *)malloc((size_t)(T * (hidden > I ? hidden : I)) * a); /* o, then silu */
    laser_add_rms_norm(x, x_dtype, first ? NULL : residual, input_norm, eps, T, hidden, normed,
                       act);
    layer_matmul(w[0], fmts[0], normed, act, T, hidden, n_qkv, wide, threads, single);
    laser_rope_write_kv(wide, act, T, H, KVH, D, positions, cos_sin, q, k_cache, v_cache,
                        kv_dtype, slots);
    laser_paged_attention(q, k_cache, v_cache, kv_dtype, block_tables, stride, seq_lens,
                          query_start_loc, S, H, KVH, D, B, scale, attn, act, threads);
    layer_matmul(w[1], fmts[1], attn, act, T, H * D, hidden, proj, threads, single);
    laser_add_rms_norm(proj, act, residual, post_norm, eps, T, hidden, normed, act);
    layer_matmul(w[2], fmts[2], normed, act, T, hidden, 2 * I, wide, threads, single);
    silu_and_mul(wide, act, T, I, proj, act, threads);
    layer_matmul(w[3], fmts[3], proj, act, T, I, hidden, out, threads, single);
    free(proj);
    free(attn);
    free(q);
    free(wide);
    free(normed);
}

/* ---- the decoder stack ------------------------------------------------------------------
 *
 * Layers [0, n) of a model in one call: laser_decoder_layer on each, the first reading x
 * (x_dtype; the residual itself when `first`), every later one reading and writing `out` in
 * place (a layer reads its x only before its first matmul). A step's Python then costs one
 * call, not one per layer (per layer about 40-100 us of checks, module calls, an allocation
 * and ctypes' conversion of 30 arguments: 1-3 ms of a 10-20 ms decode step of SmolLM2).
 * layers[8 i ..]: layer i's four packed weights, its input and post-attention norms, its key
 * and value caches; fmts[4 i ..] as laser_decoder_layer's. `stop` (may be NULL), asked before
 * each layer from the `min_layers`-th on, ends the call early when it returns non-zero (a
 * pausable step: hot work arrived). Returns the layers run; out holds the last one's
 * product (x untouched when none ran). */
int laser_decoder_stack(int n, int min_layers, int (*stop)(void), const void *x, int x_dtype,
                        float *residual, int first, const void *const *layers,
                        const int32_t *fmts, float eps, int act, int64_t T, int64_t hidden,
                        int64_t H, int64_t KVH, int64_t D, int64_t I, const int64_t *positions,
                        const float *cos_sin, int kv_dtype, const int64_t *slots, int64_t B,
                        const int32_t *block_tables, int64_t stride, const int32_t *seq_lens,
                        const int32_t *query_start_loc, int64_t S, int64_t single,
                        float scale, void *out, int threads) {
    int i = 0;
    for (; i < n; i++) {
        if (i >= min_layers && stop && stop()) break;
        const void *const *l = layers + 8 * i;
        laser_decoder_layer(i ? out : x, i ? act : x_dtype, residual, first && !i,
                            (const float *)l[4], (const float *)l[5], eps, l, fmts + 4 * i, act,
                            T, hidden, H, KVH, D, I, positions, cos_sin, (void *)l[6],
                            (void *)l[7], kv_dtype, slots, B, block_tables, stride, seq_lens,
                            query_start_loc, S, single, scale, out, threads);
    }
    return i;
}

/* ---- the LM head's exact rescoring --------------------------------------------------------
 *
 * After a screening head (bfloat16 or quantized) scored the vocabulary: per row, the k largest
 * screened logits are scored again in float32 against the model's own head and written over
 * their screened values (LlamaModel.compute_logits). One pass over the row keeps the k best
 * (a sorted list: most logits fail its first comparison), then k dot products of `hidden`
 * with head rows. logits: [N, V] float32, in place; hidden [N, D]; weight [V, D]. */
typedef struct {
    float *logits;
    const float *hidden, *weight;
    int64_t V, D;
    int k;
} rescore_job;

static void rescore_row(void *arg, int64_t n) {
    const rescore_job *j = (const rescore_job *)arg;
    float *row = j->logits + n * j->V, best[256];
    int64_t idx[256];
    int k = j->k, have = 0;
    for (int64_t v = 0; v < j->V; v++) {
        float x = row[v];
        if (have == k && !(x > best[k - 1])) continue;
        int i = have < k ? have++ : k - 1; /* drop the smallest */
        while (i > 0 && x > best[i - 1]) {
            best[i] = best[i - 1];
            idx[i] = idx[i - 1];
            i--;
        }
        best[i] = x;
        idx[i] = v;
    }
    const float *h = j->hidden + n * j->D;
    for (int i = 0; i < have; i++) {
        const float *w = j->weight + idx[i] * j->D;
        float acc[8] = {0};
        for (int64_t d = 0; d + 8 <= j->D; d += 8)
            for (int t = 0; t < 8; t++) acc[t] += h[d + t] * w[d + t];
        float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        for (int64_t d = j->D / 8 * 8; d < j->D; d++) s += h[d] * w[d];
        row[idx[i]] = s;
    }
}

void laser_rescore_top(float *logits, int64_t N, int64_t V, int k, const float *hidden,
                       int64_t D, const float *weight, int threads) {
    if (k > 256) k = 256;
    if (k > V) k = (int)V;
    rescore_job j = {logits, hidden, weight, V, D, k};
    laser_pool_run(rescore_row, &j, N, threads < 1 ? 1 : threads);
}
