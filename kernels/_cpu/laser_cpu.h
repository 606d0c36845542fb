/* Shared declarations of Laser's CPU kernels (laser_cpu.c, laser_quant.c, laser_pool.c). */
#ifndef LASER_CPU_H
#define LASER_CPU_H

#include <stdint.h>
#include <string.h>

enum { F32 = 0, BF16 = 1 };

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

static inline size_t elem_size(int dtype) { return dtype == F32 ? 4 : 2; }

typedef void (*laser_task_fn)(void *arg, int64_t task);
void laser_pool_run(laser_task_fn fn, void *arg, int64_t ntasks, int threads);

void laser_gemm_q(const void *x, int x_dtype, int64_t M, int64_t K, const uint8_t *w, int fmt,
                  int64_t N, void *out, int out_dtype, int threads, int split);

#endif
