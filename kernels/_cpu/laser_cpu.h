/* Shared declarations of Laser's CPU kernels (laser_cpu.c, laser_attention.c, laser_quant.c,
 * laser_pool.c) and the float helpers more than one of them uses. */
#ifndef LASER_CPU_H
#define LASER_CPU_H

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

enum { F32 = 0, BF16 = 1, F16 = 2 }; /* F16: KV caches only */

static inline float bf16_to_f32(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* round to nearest even, NaN stays NaN (PyTorch's rule) */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* float16 (portable, round to nearest even) */
static inline float h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f)
        u = sign | 0x7f800000u | (man << 13);
    else if (exp) u = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man) u = sign;
    else { /* subnormal */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f2h(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504 */
    if (a < 0x38800000u) {                                    /* subnormal or zero */
        float v;
        memcpy(&v, &a, 4);
        return (uint16_t)(sign | (uint32_t)__builtin_nearbyintf(v * 16777216.0f));
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return (uint16_t)(sign | (r >> 13));
}

static inline size_t elem_size(int dtype) { return dtype == F32 ? 4 : 2; }

typedef void (*laser_task_fn)(void *arg, int64_t task);
void laser_pool_run(laser_task_fn fn, void *arg, int64_t ntasks, int threads);

/* split: activations in one part (0), two (1), two kept only in each row's outlier blocks
 * (3, selective: laser_quant.c), or two but for rows [0, rows): those in one part (2) or
 * selective (4), as a decode step's; `rows` is read by 2 and 4 only */
void laser_gemm_q(const void *x, int x_dtype, int64_t M, int64_t K, const uint8_t *w, int fmt,
                  int64_t N, void *out, int out_dtype, int threads, int split, int64_t rows);

static inline void load_row(const void *src, int dtype, int64_t n, float *dst) {
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

static inline void store_row(const float *src, int64_t n, void *dst, int dtype) {
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

/* the paged attention (laser_attention.c): its contract is above its definition */
void laser_paged_attention(const float *q, const void *k_cache, const void *v_cache,
                           int kv_dtype, const int32_t *block_tables, int64_t stride,
                           const int32_t *seq_lens, const int32_t *query_start_loc, int64_t S,
                           int64_t H, int64_t KVH, int64_t D, int64_t B, float scale,
                           void *out, int out_dtype, int threads);

#endif
