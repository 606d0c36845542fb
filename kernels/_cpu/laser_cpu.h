/* Shared declarations of Laser's CPU kernels (laser_cpu.c, laser_quant.c, laser_pool.c). */
#ifndef LASER_CPU_H
#define LASER_CPU_H

#include <stdint.h>
#include <string.h>

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

void laser_gemm_q(const void *x, int x_dtype, int64_t M, int64_t K, const uint8_t *w, int fmt,
                  int64_t N, void *out, int out_dtype, int threads, int split);
/* laser_gemm_q with two-part activations but for rows [0, one_rows), in one part */
void laser_gemm_q_rows(const void *x, int x_dtype, int64_t M, int64_t K, const uint8_t *w,
                       int fmt, int64_t N, void *out, int out_dtype, int threads,
                       int64_t one_rows);

#endif
