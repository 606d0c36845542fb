/* Matmuls on the GGUF's own quantized blocks (Q4_0, Q4_1, Q8_0), as llama.cpp runs them.
 *
 * Why: a decode step reads every weight once. In bfloat16 SmolLM2-135M's projections are
 * 270 MB a step; as the GGUF stores them (Q4_1, 5 bits a weight with its scales) under 100 MB,
 * and the single-stream decode is bound by those bytes.
 *
 * The math (per block of 32 inputs): a weight is d * u + m (Q4_1: u in 0..15), d * (u - 8)
 * (Q4_0) or d * (u - 128) (Q8_0, stored here as u = q + 128 so that every format's values are
 * unsigned bytes); the activations are quantised per block of 32 to int8 (scale e = max|x| /
 * 127, x ~ e * q) as llama.cpp's Q8 activations, so a block's dot product is
 *     e * (d * (sum u q - off * sum q) + m * sum q)
 * with the integer sum u q on VPDPBUSD (unsigned byte times signed byte, four at a time). Steps
 * with prompt tokens (`split`, and every step in the `quant` mode) quantise the activations in
 * two parts, x ~ e (256 q1 + q2) with q2 the int8 rounding of what q1 left (scale e = e1 / 256):
 * about 15 bits kept, the same weights (as the bfloat16 matmul's split activations,
 * laser_cpu.c); the two integer sums meet as 256 s1 + s2 before the one float step. Part 1
 * (q1, e1) is exactly the one-part quantisation, so a split call may run its first rows in
 * one part on it (SPLIT_ONE_ROWS: a step's decode rows, beside its prompt chunks).
 * Selective rows (SEL) keep the second part only in a row's outlier blocks, those whose scale
 * exceeds SEL_OUTLIER times the row's mean scale; elsewhere q2 = 0, and 256 s1 + 0 at scale
 * e1 / 256 is exactly s1 at e1 (both scalings are powers of two), so such a block has the
 * one-part bits, and a tile skips the second part's products where none of its rows keeps it.
 * Which blocks a row keeps follows from that row alone, so its bits do not depend on what
 * shares its call. In SmolLM2-135M's gate-up projection (decode steps) 8 % of the blocks keep
 * it, 18 % of an 8-row tile's, and the decode logits' KL divergence from float32 falls by
 * 57 % (docs/engine.md).
 *
 * Packed layout (laser_pack_q, from the GGUF's rows): groups of 16 outputs; per group and block
 * the 16 scales d (float16), Q4_1's 16 minima m (float16), then the values: for Q4_x four
 * 64-byte lines, line j holding for each output r the GGUF byte qs[4j .. 4j + 3] (low nibbles:
 * inputs 4j .. 4j + 3, high nibbles: 16 + 4j ..); for Q8_0 eight lines, line j the bytes
 * u[4j .. 4j + 3]. One line is exactly what one VPDPBUSD multiplies with four broadcast
 * activations for 16 outputs; the weights stream in the order they are read.
 *
 * Paths: AVX-512 VNNI (16 outputs a register), AVX-VNNI or AVX2 (8 outputs; without VNNI,
 * VPMADDUBSW + VPMADDWD, with Q8_0 through the sign trick since u * q could overflow 16 bits)
 * and plain C. Each sums the integers exactly and the floats in the same order with the same
 * fused multiply-adds, so all give the same bits (tests/kernels/test_cpu_quant.py checks it).
 * Threads: the groups are split over laser_pool_run's workers.
 *
 * Memory: a group runs its rows in tiles of up to 8 on AVX-512 and on AVX2's Q8_0, 4 elsewhere
 * (each block's weights unpacked once per tile); the first tile reads the group's weights from
 * memory, the others find them in L1 (8-row tiles: decode 1.08-1.12x at 16 rows, 0.99-1.03x at 64).
 * That first tile prefetches the next group's blocks as it goes, so a step's weights (96 MB
 * for SmolLM2-135M: never in cache from one step to the next) arrive while this group
 * computes: without it every group began with a stall on memory that the hardware prefetcher,
 * idle during the other tiles, did not hide (issue 22: 1.2-1.4x a decode step of 1-16 rows).
 * The activations are quantised once per call (on AVX2 where the tiles are vector ones) into
 * a buffer each calling thread keeps, rows split over the pool from 16 rows on.
 */
#include "laser_cpu.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { Q4_0 = 2, Q4_1 = 3, Q8_0 = 8 }; /* GGML's type ids */
enum { QK = 32, QG = 16 };              /* inputs a block, outputs a group */
/* how the activations of a call are quantised (laser_gemm_q's split) */
enum { SPLIT_ONE = 0, SPLIT_TWO = 1, SPLIT_ONE_ROWS = 2, SPLIT_SEL = 3, SPLIT_SEL_ROWS = 4 };
#define SEL_OUTLIER 2.0f /* a selective row keeps the second part where e1 > this x its mean */

/* packed bytes per group and block (inlined in the tiles: the exported name is a call
 * through the PLT there) */
static inline int block_bytes(int fmt) {
    return fmt == Q4_1 ? 64 + 256 : fmt == Q4_0 ? 32 + 256 : fmt == Q8_0 ? 32 + 512 : 0;
}

int laser_q_block_bytes(int fmt) { return block_bytes(fmt); }

static int gguf_block_bytes(int fmt) { return fmt == Q4_1 ? 20 : fmt == Q4_0 ? 18 : 34; }

/* raw: N GGUF rows of K / 32 blocks; out: block_bytes(fmt) * ceil(N / 16) * K / 32 */
int laser_pack_q(const uint8_t *raw, int fmt, int64_t N, int64_t K, uint8_t *out) {
    int bb = block_bytes(fmt), rb = gguf_block_bytes(fmt), hdr = fmt == Q4_1 ? 64 : 32;
    if (!bb || K % QK) return -1;
    int64_t nb = K / QK, groups = (N + QG - 1) / QG;
    memset(out, 0, (size_t)(groups * nb * bb));
    for (int64_t g = 0; g < groups; g++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *dst = out + (g * nb + b) * bb;
            for (int r = 0; r < QG && g * QG + r < N; r++) {
                const uint8_t *src = raw + ((g * QG + r) * nb + b) * rb;
                memcpy(dst + 2 * r, src, 2);                         /* d */
                if (fmt == Q4_1) memcpy(dst + 32 + 2 * r, src + 2, 2); /* m */
                const uint8_t *qs = src + (fmt == Q4_1 ? 4 : 2);
                int lines = fmt == Q8_0 ? 8 : 4;
                for (int j = 0; j < lines; j++)
                    for (int i = 0; i < 4; i++) {
                        uint8_t v = qs[4 * j + i];
                        dst[hdr + 64 * j + 4 * r + i] = fmt == Q8_0 ? (uint8_t)(v ^ 0x80u) : v;
                    }
            }
        }
    return 0;
}

/* float32 rows [N, K] -> GGUF Q8_0 rows (d = max|w| / 127 in float16, q = round(w / d)) */
void laser_quantize_q8_0(const float *w, int64_t N, int64_t K, uint8_t *raw) {
    int64_t nb = K / QK;
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < nb; b++) {
            const float *x = w + n * K + b * QK;
            uint8_t *dst = raw + (n * nb + b) * 34;
            float amax = 0.0f;
            for (int i = 0; i < QK; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
            float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
            uint16_t h = f2h(d);
            memcpy(dst, &h, 2);
            for (int i = 0; i < QK; i++) dst[2 + i] = (uint8_t)(int8_t)nearbyintf(x[i] * id);
        }
}

/* GGUF rows -> float32 [N, K] (for tests and the reference; the engine never needs it) */
void laser_dequantize_q(const uint8_t *raw, int fmt, int64_t N, int64_t K, float *out) {
    int64_t nb = K / QK;
    int rb = gguf_block_bytes(fmt);
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *src = raw + (n * nb + b) * rb;
            float d = h2f((uint16_t)(src[0] | src[1] << 8)), *o = out + n * K + b * QK;
            if (fmt == Q8_0) {
                for (int i = 0; i < QK; i++) o[i] = d * (float)(int8_t)src[2 + i];
                continue;
            }
            float m = fmt == Q4_1 ? h2f((uint16_t)(src[2] | src[3] << 8)) : 0.0f;
            const uint8_t *qs = src + (fmt == Q4_1 ? 4 : 2);
            for (int i = 0; i < 16; i++) {
                int lo = qs[i] & 15, hi = qs[i] >> 4;
                o[i] = fmt == Q4_1 ? d * lo + m : d * (lo - 8);
                o[i + 16] = fmt == Q4_1 ? d * hi + m : d * (hi - 8);
            }
        }
}

/* ---- activations ------------------------------------------------------------------------- */
typedef struct {
    int8_t *q;     /* [R, K] */
    float *e;      /* [R, K / 32] scales */
    int32_t *sum;  /* [R, K / 32] sums of q */
    float *ms;     /* [M, K / 32] e * (256 sum1 + sum2) (one part: e * sum): Q4_1's minima's
                    * factor, once per row and block rather than in every tile */
    uint8_t *keep; /* [K / 32, M] whether the block's second part is kept (selective rows),
                    * by block, so that a tile's rows are side by side; NULL where every
                    * two-part row keeps all */
} qact;

static void quantize_block(const float *x, int8_t *q, float *e, int32_t *sum) {
    float amax = 0.0f;
    for (int i = 0; i < QK; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    int32_t s = 0;
    for (int i = 0; i < QK; i++) {
        q[i] = (int8_t)nearbyintf(x[i] * id);
        s += q[i];
    }
    *e = d;
    *sum = s;
}

/* what part 0 (q, scale e) left of x, in steps of e / 256 (|rest| <= e / 2) */
static void quantize_rest(const float *x, const int8_t *q, float e, int8_t *q2, float *e2o,
                          int32_t *sum) {
    float e2 = e * (1.0f / 256), inv = e ? 1.0f / e2 : 0.0f;
    int32_t s = 0;
    for (int i = 0; i < QK; i++) {
        float v = nearbyintf((x[i] - e * (float)q[i]) * inv);
        q2[i] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        s += q2[i];
    }
    *e2o = e2;
    *sum = s;
}

#if defined(__AVX2__) && defined(__FMA__)
/* quantize_block (and quantize_rest) on eight lanes, the same operations on each value, so
 * the same bits: the maximum is exact in any order; VROUNDPS to nearest is nearbyintf in the
 * default rounding mode; the integers are exact. */
static inline __m256i pack_q8(const __m256 f[4]) { /* 32 integral floats in -127..127 */
    __m256i a = _mm256_packs_epi32(_mm256_cvtps_epi32(f[0]), _mm256_cvtps_epi32(f[1]));
    __m256i b = _mm256_packs_epi32(_mm256_cvtps_epi32(f[2]), _mm256_cvtps_epi32(f[3]));
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b),
                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline int32_t sum_q8(const __m256 f[4]) {
    __m256 t = _mm256_add_ps(_mm256_add_ps(f[0], f[1]), _mm256_add_ps(f[2], f[3])); /* exact */
    __m256i v = _mm256_cvtps_epi32(t);
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

static void quantize_block_avx2(const float *x, int parts, int8_t *q, float *e, int32_t *sum,
                                int8_t *q2, float *e2, int32_t *sum2) {
    const int round = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v[4], f[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        m = _mm256_max_ps(_mm256_and_ps(v[i], absmask), m); /* NaN skipped, as the C loop */
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float d = _mm_cvtss_f32(h) / 127.0f, id = d ? 1.0f / d : 0.0f;
    for (int i = 0; i < 4; i++)
        f[i] = _mm256_round_ps(_mm256_mul_ps(v[i], _mm256_set1_ps(id)), round);
    _mm256_storeu_si256((__m256i *)q, pack_q8(f));
    *e = d;
    *sum = sum_q8(f);
    if (parts < 2) return;
    float ed = d * (1.0f / 256), inv = d ? 1.0f / ed : 0.0f;
    for (int i = 0; i < 4; i++) {
        __m256 r = _mm256_sub_ps(v[i], _mm256_mul_ps(_mm256_set1_ps(d), f[i]));
        r = _mm256_round_ps(_mm256_mul_ps(r, _mm256_set1_ps(inv)), round);
        f[i] = _mm256_max_ps(_mm256_min_ps(r, _mm256_set1_ps(127.0f)), _mm256_set1_ps(-127.0f));
    }
    _mm256_storeu_si256((__m256i *)q2, pack_q8(f));
    *e2 = ed;
    *sum2 = sum_q8(f);
}
#endif

/* block b of row m of x as float32: in place, or widened from bfloat16 into `wide` (a copy
 * of float32 to the stack first cost a failed store-to-load forward per vector load: a third
 * of quantize_rows' time in a 64-row step) */
static inline const float *block_of(const void *x, int x_dtype, int64_t m, int64_t b,
                                    int64_t K, float *wide) {
    if (x_dtype == F32) return (const float *)x + m * K + b * QK;
    for (int i = 0; i < QK; i++)
        wide[i] = bf16_to_f32(((const uint16_t *)x)[m * K + b * QK + i]);
    return wide;
}

/* a selective row's second part (its part 0 quantised): what part 0 left, in its outlier
 * blocks only; elsewhere q2 = 0 at the same scale e1 / 256 (module comment) */
static void select_blocks(const void *x, int x_dtype, const qact *a, int64_t m, int64_t M,
                          int64_t nb, int64_t K) {
    const float *e1 = a->e + 2 * m * nb;
    float mean = 0.0f, wide[QK];
    for (int64_t b = 0; b < nb; b++) mean += e1[b];
    mean *= SEL_OUTLIER / (float)nb;
    for (int64_t b = 0; b < nb; b++) {
        int64_t s1 = (2 * m + 1) * nb + b;
        int8_t *q2 = a->q + (2 * m + 1) * K + b * QK;
        a->keep[b * M + m] = e1[b] > mean;
        if (a->keep[b * M + m]) {
            quantize_rest(block_of(x, x_dtype, m, b, K, wide), a->q + 2 * m * K + b * QK, e1[b],
                          q2, a->e + s1, a->sum + s1);
        } else {
            memset(q2, 0, QK);
            a->e[s1] = e1[b] * (1.0f / 256);
            a->sum[s1] = 0;
        }
    }
}

/* a call's activations to quantise: rows [0, one_rows) in one part though `parts` is 2,
 * rows [0, sel_rows) selective; vec: on AVX2 (the scalar path, the reference, quantises in
 * plain C: the tests compare the two) */
typedef struct {
    const void *x;
    int x_dtype, parts, vec;
    int64_t M, K, one_rows, sel_rows;
    const qact *a;
} quant_job;

/* rows m0 .. m1 - 1 of x -> rows m * parts + p of a (p = 1: what part 0 left) */
static void quantize_rows(const quant_job *q, int64_t m0, int64_t m1) {
    const void *x = q->x;
    const qact *a = q->a;
    int x_dtype = q->x_dtype, parts = q->parts;
    int64_t K = q->K, nb = K / QK;
    float wide[QK];
    for (int64_t m = m0; m < m1; m++) {
        int sel = parts == 2 && m < q->sel_rows, now = sel ? 1 : parts; /* parts quantised here */
        for (int64_t b = 0; b < nb; b++) {
            const float *row = block_of(x, x_dtype, m, b, K, wide);
            int64_t r = m * parts, i0 = r * K + b * QK, i1 = (r + parts - 1) * K + b * QK;
            int64_t s0 = r * nb + b, s1 = (r + parts - 1) * nb + b;
#if defined(__AVX2__) && defined(__FMA__)
            if (q->vec)
                quantize_block_avx2(row, now, a->q + i0, a->e + s0, a->sum + s0, a->q + i1,
                                    a->e + s1, a->sum + s1);
            else
#endif
            {
                quantize_block(row, a->q + i0, a->e + s0, a->sum + s0);
                if (now == 2) quantize_rest(row, a->q + i0, a->e[s0], a->q + i1, a->e + s1,
                                            a->sum + s1);
            }
        }
        if (sel)
            select_blocks(x, x_dtype, a, m, q->M, nb, K);
        else if (a->keep)
            for (int64_t b = 0; b < nb; b++) a->keep[b * q->M + m] = 1;
        int two = parts == 2 && m >= q->one_rows;
        for (int64_t b = 0; b < nb; b++) {
            int64_t s0 = m * parts * nb + b, s1 = s0 + (parts - 1) * nb;
            a->ms[m * nb + b] = two ? a->e[s1] * (float)(256 * a->sum[s0] + a->sum[s1])
                                    : a->e[s0] * (float)a->sum[s0];
        }
    }
}

/* ---- the tiles --------------------------------------------------------------------------- */
typedef struct {
    qact a;
    const uint8_t *w;
    int fmt, parts, out_dtype, isa;
    int stride;        /* parts a row has in a: parts, or 2 for the one-part rows of a split */
    int64_t one_rows;  /* rows [0, one_rows) in one part (their part 0) though `parts` is 2 */
    int64_t M, K, N, groups_per_task, groups;
    char *out;
} qjob;

/* whether a row of the tile m0 .. m0 + mr - 1 keeps block b's second part (selective rows:
 * where none does, every q2 there is 0 and a tile skips its products; rows in two parts
 * keep all, a.keep NULL) */
static inline int keeps_second(const qjob *j, int64_t m0, int mr, int64_t b) {
    if (!j->a.keep) return 1;
    uint64_t rows = 0; /* mr <= 8 flags side by side: one load (a constant mr in each tile) */
    memcpy(&rows, j->a.keep + b * j->M + m0, (size_t)mr);
    return rows != 0;
}

static void store_out(const qjob *j, int64_t m, int64_t n0, const float *v, int count) {
    if (j->out_dtype == F32) {
        memcpy((float *)j->out + m * j->N + n0, v, (size_t)count * 4);
        return;
    }
    uint16_t *o = (uint16_t *)j->out + m * j->N + n0;
    for (int i = 0; i < count; i++) o[i] = f32_to_bf16(v[i]);
}

static inline int offset_of(int fmt) { return fmt == Q4_0 ? 8 : fmt == Q8_0 ? 128 : 0; }

/* the integer sum of a block's products with part p of an activation row */
static inline int32_t block_isum(const uint8_t *blk, int fmt, int hdr, int r, const int8_t *xq,
                                 int32_t xs) {
    int32_t isum = -offset_of(fmt) * xs;
    for (int k = 0; k < QK; k++) {
        int u;
        if (fmt == Q8_0) u = blk[hdr + 64 * (k / 4) + 4 * r + k % 4];
        else {
            int kk = k % 16;
            uint8_t v = blk[hdr + 64 * (kk / 4) + 4 * r + kk % 4];
            u = k < 16 ? v & 15 : v >> 4;
        }
        isum += u * xq[k];
    }
    return isum;
}

/* plain C: the reference every vector path equals. With two parts the sums meet as
 * 256 s1 + s2 at the second part's scale (quantize_rows). */
static void tile_scalar(const qjob *j, int64_t g, int64_t m0, int mr) {
    int fmt = j->fmt, bb = block_bytes(fmt), hdr = fmt == Q4_1 ? 64 : 32;
    int64_t nb = j->K / QK;
    const uint8_t *wg = j->w + g * nb * bb;
    int count = j->N - g * QG < QG ? (int)(j->N - g * QG) : QG;
    for (int m = 0; m < mr; m++) {
        float acc[QG] = {0};
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = wg + b * bb;
            int64_t row = (m0 + m) * j->stride, last = row + j->parts - 1;
            float e = j->a.e[last * nb + b], ms = j->a.ms[(m0 + m) * nb + b];
            for (int r = 0; r < QG; r++) {
                int32_t isum = 0;
                for (int p = 0; p < j->parts; p++)
                    isum = isum * 256 + block_isum(blk, fmt, hdr, r,
                                                   j->a.q + (row + p) * j->K + b * QK,
                                                   j->a.sum[(row + p) * nb + b]);
                float d = h2f((uint16_t)(blk[2 * r] | blk[2 * r + 1] << 8));
                acc[r] = fmaf((float)isum, d * e, acc[r]);
                if (fmt == Q4_1) {
                    float mn = h2f((uint16_t)(blk[32 + 2 * r] | blk[33 + 2 * r] << 8));
                    acc[r] = fmaf(mn, ms, acc[r]);
                }
            }
        }
        store_out(j, m0 + m, g * QG, acc, count);
    }
}

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#define HAVE_AVX2 1

/* the next group's block, while this group's rows compute (a group's first tile: module
 * comment) */
static inline __attribute__((always_inline)) void prefetch_next(const uint8_t *blk, int64_t nb,
                                                                int bb) {
    for (int o = 0; o < bb; o += 64) _mm_prefetch((const char *)(blk + nb * bb + o), _MM_HINT_T0);
}

/* half h's 8 weight scales d of a block, and Q4_1's 8 minima m (zero for the others) */
static inline __attribute__((always_inline)) __m256 scales_d(const uint8_t *blk, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * h)));
}

static inline __attribute__((always_inline)) __m256 scales_m(const uint8_t *blk, int h,
                                                             const int FMT) {
    return FMT == Q4_1 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 32 + 16 * h)))
                       : _mm256_setzero_ps();
}

/* one row's float step for a block (tile_scalar's, 8 outputs at a time): its integer sum at
 * d * e, then Q4_1's minima at the row's e * sum */
static inline __attribute__((always_inline)) __m256 block_fma(__m256 acc, __m256i isum,
                                                              __m256 dv, __m256 mv, float e,
                                                              float ms, const int FMT) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dv, _mm256_set1_ps(e)), acc);
    return FMT == Q4_1 ? _mm256_fmadd_ps(mv, _mm256_set1_ps(ms), acc) : acc;
}

/* a tile half's rows out: outputs g * 16 + 8 * h .. (fewer at the end of N) */
static inline __attribute__((always_inline)) void store_half(const qjob *j, int64_t g, int h,
                                                             int64_t m0, int mr,
                                                             const __m256 *acc) {
    int64_t n0 = g * QG + 8 * h;
    int count = j->N - n0 < 8 ? (int)(j->N - n0) : 8;
    float v[8];
    for (int m = 0; m < mr && count > 0; m++) {
        _mm256_storeu_ps(v, acc[m]);
        store_out(j, m0 + m, n0, v, count);
    }
}

#if defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
#define HAVE_AVX2_VNNI 1
static inline __m256i dp256_vnni(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#endif
}

/* AVX-VNNI, 8 outputs (half h of the group) x mr rows; FMT constant in each expansion: the
 * block's lines unpacked once for the tile's rows, one VPDPBUSD a line and row */
static inline __attribute__((always_inline)) void tile_avxvnni_half(const qjob *j, int64_t g,
                                                                    int64_t m0, const int mr,
                                                                    int h, const int FMT,
                                                                    const int PARTS) {
    const int bb = block_bytes(FMT), hdr = FMT == Q4_1 ? 64 : 32, off = offset_of(FMT);
    int64_t nb = j->K / QK;
    const uint8_t *wg = j->w + g * nb * bb;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const int ahead = h == 0 && m0 == 0; /* the group's first tile: module comment */
    __m256 acc[8];
    for (int m = 0; m < 8; m++) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = wg + b * bb;
        if (ahead) prefetch_next(blk, nb, bb);
        __m256 dv = scales_d(blk, h), mv = scales_m(blk, h, FMT);
        __m256i w[8];
        for (int l = 0; l < (FMT == Q8_0 ? 8 : 4); l++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + hdr + 64 * l + 32 * h));
            if (FMT == Q8_0)
                w[l] = raw;
            else {
                w[l] = _mm256_and_si256(raw, low4);
                w[l + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            }
        }
        int second = PARTS == 2 && keeps_second(j, m0, mr, b);
#pragma GCC unroll 8
        for (int m = 0; m < mr; m++) {
            int64_t row = (m0 + m) * j->stride, last = row + PARTS - 1;
            __m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int p = 0; p < PARTS; p++) {
                if (p && !second) { /* every row's q2 is 0 here: 256 s1 + 0 */
                    isum = _mm256_slli_epi32(isum, 8);
                    break;
                }
                const int32_t *xb = (const int32_t *)(j->a.q + (row + p) * j->K + b * QK);
                int32_t xs = j->a.sum[(row + p) * nb + b];
                __m256i a0 = _mm256_set1_epi32(-off * xs), a1 = _mm256_setzero_si256();
                for (int l = 0; l < 8; l += 2) {
                    a0 = dp256_vnni(a0, w[l], _mm256_set1_epi32(xb[l]));
                    a1 = dp256_vnni(a1, w[l + 1], _mm256_set1_epi32(xb[l + 1]));
                }
                isum = _mm256_add_epi32(_mm256_slli_epi32(isum, 8), _mm256_add_epi32(a0, a1));
            }
            acc[m] = block_fma(acc[m], isum, dv, mv, j->a.e[last * nb + b],
                               j->a.ms[(m0 + m) * nb + b], FMT);
        }
    }
    store_half(j, g, h, m0, mr, acc);
}
#endif

/* Without VNNI, 8 outputs x mr rows: a block's lines in the outer loop and the rows inside,
 * so that one weight line (Q4_x: its two nibble halves; Q8_0: its sign trick's two halves)
 * and each row's sums are live at a time. tile_avxvnni_half holds the block's eight unpacked
 * lines for all its rows instead: with the rows' accumulators that is more than AVX2's 16
 * registers, and the accumulators went to the stack and back every block (a decode step's
 * matmuls 1.10 / 1.26 / 1.27x at 1 / 16 / 64 rows on an AVX2-only Zen 3 with this order,
 * `bench/cpu_quant.py --step`). The same integers and the same float steps. Q4_x sums in
 * 16 bits: u <= 15, so the block's eight VPMADDUBSW pair sums add up to at most
 * 8 * 2 * 15 * 127 = 30480; Q8_0's pairs reach 32512 and widen every line. */
static inline __attribute__((always_inline)) void tile_avx2_lines(const qjob *j, int64_t g,
                                                                  int64_t m0, const int mr,
                                                                  int h, const int FMT,
                                                                  const int PARTS) {
    const int bb = block_bytes(FMT), hdr = FMT == Q4_1 ? 64 : 32;
    const int off = FMT == Q8_0 ? 0 : offset_of(FMT), lines = FMT == Q8_0 ? 8 : 4;
    const int64_t nb = j->K / QK, K = j->K, rs = j->stride * K;
    const uint8_t *wg = j->w + g * nb * bb;
    const int8_t *x0 = j->a.q + m0 * rs;
    const float *e0 = j->a.e + (m0 * j->stride + PARTS - 1) * nb, *ms0 = j->a.ms + m0 * nb;
    const int32_t *sum0 = j->a.sum + m0 * j->stride * nb;
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const int ahead = h == 0 && m0 == 0; /* the group's first tile: module comment */
    __m256 acc[8];
    for (int m = 0; m < 8; m++) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = wg + b * bb;
        if (ahead) prefetch_next(blk, nb, bb);
        __m256i isum[8];
        int second = PARTS == 2 && keeps_second(j, m0, mr, b);
#pragma GCC unroll 2
        for (int p = 0; p < PARTS; p++) {
            if (p && !second) { /* every row's q2 is 0 here: 256 s1 + 0 */
                for (int m = 0; m < mr; m++) isum[m] = _mm256_slli_epi32(isum[m], 8);
                break;
            }
            __m256i s[8];
            for (int m = 0; m < 8; m++) s[m] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int l = 0; l < lines; l++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)(blk + hdr + 64 * l + 32 * h));
                __m256i w0, w1; /* Q4_x: low and high nibbles; Q8_0: |q| and q */
                if (FMT == Q8_0) {
                    w1 = _mm256_xor_si256(raw, _mm256_set1_epi8((char)0x80));
                    w0 = _mm256_sign_epi8(w1, w1);
                } else {
                    w0 = _mm256_and_si256(raw, low4);
                    w1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
                }
#pragma GCC unroll 8
                for (int m = 0; m < mr; m++) {
                    const int32_t *xb = (const int32_t *)(x0 + m * rs + p * K + b * QK);
                    if (FMT == Q8_0) {
                        __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(xb[l]), w1);
                        s[m] = _mm256_add_epi32(
                            s[m], _mm256_madd_epi16(_mm256_maddubs_epi16(w0, xs), ones));
                    } else
                        s[m] = _mm256_add_epi16(
                            s[m],
                            _mm256_add_epi16(_mm256_maddubs_epi16(w0, _mm256_set1_epi32(xb[l])),
                                             _mm256_maddubs_epi16(w1, _mm256_set1_epi32(xb[l + 4]))));
                    /* line by line: else GCC regroups the block's sums into one tree and
                     * computes every product first, in more registers than there are */
                    __asm__("" : "+x"(s[m]));
                }
            }
#pragma GCC unroll 8
            for (int m = 0; m < mr; m++) {
                __m256i t = FMT == Q8_0 ? s[m] : _mm256_madd_epi16(s[m], ones);
                if (off)
                    t = _mm256_add_epi32(
                        t, _mm256_set1_epi32(-off * sum0[(m * j->stride + p) * nb + b]));
                isum[m] = p ? _mm256_add_epi32(_mm256_slli_epi32(isum[m], 8), t) : t;
            }
        }
        __m256 dv = scales_d(blk, h), mv = scales_m(blk, h, FMT);
#pragma GCC unroll 8
        for (int m = 0; m < mr; m++)
            acc[m] = block_fma(acc[m], isum[m], dv, mv, e0[m * j->stride * nb + b],
                               ms0[m * nb + b], FMT);
    }
    store_half(j, g, h, m0, mr, acc);
}

/* rows and parts as constants in each expansion: the accumulators then live in registers;
 * HALF: tile_avx2_lines or tile_avxvnni_half */
#define AVX2_ROWS(HALF, FMT, MR, PARTS)                                                       \
    do {                                                                                     \
        HALF(j, g, m0, MR, 0, FMT, PARTS);                                                   \
        HALF(j, g, m0, MR, 1, FMT, PARTS);                                                   \
    } while (0)
#define AVX2_PARTS(HALF, FMT, PARTS)                                                          \
    switch (mr) {                                                                            \
    case 1: AVX2_ROWS(HALF, FMT, 1, PARTS); break;                                           \
    case 2: AVX2_ROWS(HALF, FMT, 2, PARTS); break;                                           \
    case 3: AVX2_ROWS(HALF, FMT, 3, PARTS); break;                                           \
    default: AVX2_ROWS(HALF, FMT, 4, PARTS); break;                                          \
    }
/* up to 8 rows: Q8_0 without VNNI, whose sign trick's weight half is taken once a line for
 * all the tile's rows (the LM head's screen 1.11-1.13x at 16 and 64 rows against 4; the Q4
 * tiles gained nothing from 8) */
#define AVX2_PARTS_WIDE(HALF, FMT, PARTS)                                                     \
    if (mr <= 4) {                                                                           \
        AVX2_PARTS(HALF, FMT, PARTS)                                                         \
    } else switch (mr) {                                                                     \
    case 5: AVX2_ROWS(HALF, FMT, 5, PARTS); break;                                           \
    case 6: AVX2_ROWS(HALF, FMT, 6, PARTS); break;                                           \
    case 7: AVX2_ROWS(HALF, FMT, 7, PARTS); break;                                           \
    default: AVX2_ROWS(HALF, FMT, 8, PARTS); break;                                          \
    }
#define AVX2_TILE(NAME, HALF, FMT, ROWS)                                                      \
    static void NAME(const qjob *j, int64_t g, int64_t m0, int mr) {                        \
        if (j->parts == 2) {                                                                 \
            ROWS(HALF, FMT, 2)                                                               \
        } else {                                                                             \
            ROWS(HALF, FMT, 1)                                                               \
        }                                                                                    \
    }
AVX2_TILE(tile_avx2_q40, tile_avx2_lines, Q4_0, AVX2_PARTS)
AVX2_TILE(tile_avx2_q41, tile_avx2_lines, Q4_1, AVX2_PARTS)
AVX2_TILE(tile_avx2_q80, tile_avx2_lines, Q8_0, AVX2_PARTS_WIDE)
#ifdef HAVE_AVX2_VNNI
AVX2_TILE(tile_avxvnni_q40, tile_avxvnni_half, Q4_0, AVX2_PARTS)
AVX2_TILE(tile_avxvnni_q41, tile_avxvnni_half, Q4_1, AVX2_PARTS)
AVX2_TILE(tile_avxvnni_q80, tile_avxvnni_half, Q8_0, AVX2_PARTS)
#endif
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define HAVE_AVX512_VNNI 1
/* one block's integer sums of 16 outputs with part `row` of the activations (less the
 * format's offset times the part's sum) */
static inline __attribute__((always_inline)) __m512i part_512(const qjob *j, const __m512i *w,
                                                              int64_t row, int64_t b,
                                                              int64_t nb, int off) {
    const int32_t *xb = (const int32_t *)(j->a.q + row * j->K + b * QK);
    __m512i a0 = _mm512_set1_epi32(-off * j->a.sum[row * nb + b]), a1 = _mm512_setzero_si512();
    for (int l = 0; l < 8; l += 2) {
        a0 = _mm512_dpbusd_epi32(a0, w[l], _mm512_set1_epi32(xb[l]));
        a1 = _mm512_dpbusd_epi32(a1, w[l + 1], _mm512_set1_epi32(xb[l + 1]));
    }
    return _mm512_add_epi32(a0, a1);
}

/* 16 outputs x mr (<= 8) rows; mr, FMT and PARTS constant in each expansion (the accumulators
 * then live in registers) */
static inline __attribute__((always_inline)) void tile_512(const qjob *j, int64_t g, int64_t m0,
                                                           const int mr, const int FMT,
                                                           const int PARTS) {
    const int bb = block_bytes(FMT), hdr = FMT == Q4_1 ? 64 : 32;
    const int off = offset_of(FMT);
    int64_t nb = j->K / QK;
    const uint8_t *wg = j->w + g * nb * bb;
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const int ahead = m0 == 0; /* the group's first tile: module comment */
    __m512 acc[8];
    for (int m = 0; m < 8; m++) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = wg + b * bb;
        _mm_prefetch((const char *)(blk + 4 * bb), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 4 * bb + 256), _MM_HINT_T0);
        if (ahead) /* the next group's block, while this group's rows compute */
            for (int off = 0; off < bb; off += 64)
                _mm_prefetch((const char *)(blk + nb * bb + off), _MM_HINT_T0);
        __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
        __m512 mv = FMT == Q4_1 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32)))
                                : _mm512_setzero_ps();
        __m512i w[8];
        for (int l = 0; l < (FMT == Q8_0 ? 8 : 4); l++) {
            __m512i raw = _mm512_loadu_si512(blk + hdr + 64 * l);
            if (FMT == Q8_0)
                w[l] = raw;
            else {
                w[l] = _mm512_and_si512(raw, low4);
                w[l + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
            }
        }
        int second = PARTS == 2 && keeps_second(j, m0, mr, b);
#pragma GCC unroll 8
        for (int m = 0; m < mr; m++) {
            int64_t row = (m0 + m) * j->stride, last = row + PARTS - 1;
            __m512i isum = part_512(j, w, row, b, nb, off);
            if (PARTS == 2) /* where no row keeps q2 it is 0: 256 s1 + 0 */
                isum = second ? _mm512_add_epi32(_mm512_slli_epi32(isum, 8),
                                                 part_512(j, w, row + 1, b, nb, off))
                              : _mm512_slli_epi32(isum, 8);
            float e = j->a.e[last * nb + b];
            __m512 scale = _mm512_mul_ps(dv, _mm512_set1_ps(e));
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[m]);
            if (FMT == Q4_1)
                acc[m] = _mm512_fmadd_ps(mv, _mm512_set1_ps(j->a.ms[(m0 + m) * nb + b]), acc[m]);
        }
    }
    int64_t n0 = g * QG;
    int count = j->N - n0 < QG ? (int)(j->N - n0) : QG;
    for (int m = 0; m < mr; m++) {
        if (j->out_dtype == F32)
            _mm512_mask_storeu_ps((float *)j->out + (m0 + m) * j->N + n0,
                                  (__mmask16)((1u << count) - 1), acc[m]);
        else {
            float v[QG];
            _mm512_storeu_ps(v, acc[m]);
            store_out(j, m0 + m, n0, v, count);
        }
    }
}
#define TILE_512(FMT, PARTS)                                                                  \
    static void tile_512_##FMT##_##PARTS(const qjob *j, int64_t g, int64_t m0, int mr) {     \
        switch (mr) {                                                                        \
        case 1: tile_512(j, g, m0, 1, FMT, PARTS); break;                                    \
        case 2: tile_512(j, g, m0, 2, FMT, PARTS); break;                                    \
        case 3: tile_512(j, g, m0, 3, FMT, PARTS); break;                                    \
        case 4: tile_512(j, g, m0, 4, FMT, PARTS); break;                                    \
        case 5: tile_512(j, g, m0, 5, FMT, PARTS); break;                                    \
        case 6: tile_512(j, g, m0, 6, FMT, PARTS); break;                                    \
        case 7: tile_512(j, g, m0, 7, FMT, PARTS); break;                                    \
        default: tile_512(j, g, m0, 8, FMT, PARTS); break;                                   \
        }                                                                                    \
    }
TILE_512(Q4_0, 1)
TILE_512(Q4_1, 1)
TILE_512(Q8_0, 1)
TILE_512(Q4_0, 2)
TILE_512(Q4_1, 2)
TILE_512(Q8_0, 2)
#endif

/* ---- dispatch ---------------------------------------------------------------------------- */
enum { ISA_SCALAR = 0, ISA_AVX2 = 1, ISA_AVX_VNNI = 2, ISA_AVX512_VNNI = 3 };

static int best_isa(void) {
#if defined(HAVE_AVX512_VNNI)
    return ISA_AVX512_VNNI;
#elif defined(HAVE_AVX2_VNNI)
    return ISA_AVX_VNNI;
#elif defined(HAVE_AVX2)
    return ISA_AVX2;
#else
    return ISA_SCALAR;
#endif
}

static int isa_limit = 99;

/* the best path built here, at most `limit` (tests force each path); returns the one in use */
int laser_quant_isa(int limit) {
    if (limit >= 0) isa_limit = limit;
    int best = best_isa();
#if defined(HAVE_AVX512_VNNI) && !defined(HAVE_AVX2_VNNI)
    if (isa_limit == ISA_AVX_VNNI) return ISA_AVX2;
#endif
    return isa_limit < best ? isa_limit : best;
}

typedef void (*qtile_fn)(const qjob *, int64_t, int64_t, int);

static qtile_fn pick_tile(int isa, int fmt, int parts) {
    (void)parts;
    int f = fmt == Q4_0 ? 0 : fmt == Q4_1 ? 1 : 2;
    (void)f;
#ifdef HAVE_AVX512_VNNI
    static const qtile_fn t512[2][3] = {{tile_512_Q4_0_1, tile_512_Q4_1_1, tile_512_Q8_0_1},
                                        {tile_512_Q4_0_2, tile_512_Q4_1_2, tile_512_Q8_0_2}};
    if (isa >= ISA_AVX512_VNNI) return t512[parts - 1][f];
#endif
#ifdef HAVE_AVX2_VNNI
    static const qtile_fn tvnni[3] = {tile_avxvnni_q40, tile_avxvnni_q41, tile_avxvnni_q80};
    if (isa >= ISA_AVX_VNNI) return tvnni[f];
#endif
#ifdef HAVE_AVX2
    static const qtile_fn tavx2[3] = {tile_avx2_q40, tile_avx2_q41, tile_avx2_q80};
    if (isa >= ISA_AVX2) return tavx2[f];
#endif
    (void)isa;
    return tile_scalar;
}

static void q_task(void *arg, int64_t task) {
    const qjob *j = (const qjob *)arg;
    qjob one = *j; /* the one-part rows of a split: part 0 of theirs */
    one.parts = 1;
    qtile_fn tile = pick_tile(j->isa, j->fmt, j->parts), tile1 = pick_tile(j->isa, j->fmt, 1);
    int64_t g0 = task * j->groups_per_task, g1 = g0 + j->groups_per_task;
    if (g1 > j->groups) g1 = j->groups;
    /* the AVX2 tiles take up to 4 rows, but AVX2 (no VNNI) Q8_0's 8 */
    int mr_max = j->isa >= ISA_AVX512_VNNI ? 8 : j->isa == ISA_AVX2 && j->fmt == Q8_0 ? 8 : 4;
    for (int64_t g = g0; g < g1; g++) {
        for (int64_t m0 = 0; m0 < j->one_rows; m0 += mr_max)
            tile1(&one, g, m0, j->one_rows - m0 < mr_max ? (int)(j->one_rows - m0) : mr_max);
        for (int64_t m0 = j->one_rows; m0 < j->M; m0 += mr_max)
            tile(j, g, m0, j->M - m0 < mr_max ? (int)(j->M - m0) : mr_max);
    }
}

/* quantising the activations: rows over the pool too once a call has two tasks of
 * QUANT_ROWS_TASK rows (on the caller alone it took 5.7 % of its time in a 64-row decode step
 * while the workers waited: perf, the AVX2 VM) */
enum { QUANT_ROWS_TASK = 8 };

static void quant_task(void *arg, int64_t task) {
    const quant_job *q = (const quant_job *)arg;
    int64_t m0 = task * QUANT_ROWS_TASK, m1 = m0 + QUANT_ROWS_TASK;
    quantize_rows(q, m0, m1 < q->M ? m1 : q->M);
}

static void quantize_all(const quant_job *q, int threads) {
    int64_t tasks = (q->M + QUANT_ROWS_TASK - 1) / QUANT_ROWS_TASK;
    laser_pool_run(quant_task, (void *)q, tasks, q->M >= 2 * QUANT_ROWS_TASK ? threads : 1);
}

/* the activations' buffer: one of KEEP_BYTES per calling thread, kept between calls (a decode
 * step's calls reuse it: malloc's fresh pages for each call cost more than the quantisation)
 * and freed when the thread ends; a larger one (a long prompt's) is not kept */
enum { KEEP_BYTES = 1 << 20 };
static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;

static void kept_key_create(void) { pthread_key_create(&kept_key, free); }

static char *act_buffer(size_t bytes) {
    if (bytes > KEEP_BYTES) return (char *)malloc(bytes);
    pthread_once(&kept_once, kept_key_create);
    char *buf = (char *)pthread_getspecific(kept_key);
    if (!buf && (buf = (char *)malloc(KEEP_BYTES)) && pthread_setspecific(kept_key, buf)) {
        free(buf);
        return (char *)malloc(bytes);
    }
    return buf;
}

static void act_buffer_done(char *buf, size_t bytes) {
    if (bytes > KEEP_BYTES || buf != pthread_getspecific(kept_key)) free(buf);
}

/* out [M, N] (out_dtype) = x [M, K] (x_dtype) times the packed weight [N, K] transposed, over
 * up to `threads` threads of the pool; split (SPLIT_*, PackedQuant.split's values): one-part
 * or two-part activations (module comment), selective in every row, or two-part but for rows
 * [0, rows): those in one part (SPLIT_ONE_ROWS) or selective (SPLIT_SEL_ROWS), as a decode
 * step's (laser_decoder_layer); `rows` is read by those two only */
void laser_gemm_q(const void *x, int x_dtype, int64_t M, int64_t K, const uint8_t *w, int fmt,
                  int64_t N, void *out, int out_dtype, int threads, int split, int64_t rows) {
    int parts = split == SPLIT_ONE ? 1 : 2;
    int64_t R = M * parts, nb = K / QK, first = rows < M ? rows : M;
    int64_t sel_rows = split == SPLIT_SEL ? M : split == SPLIT_SEL_ROWS ? first : 0;
    qjob j = {.w = w, .fmt = fmt, .parts = parts, .stride = parts, .out_dtype = out_dtype,
              .isa = laser_quant_isa(-1), .M = M, .K = K, .N = N, .out = (char *)out,
              .one_rows = split == SPLIT_ONE_ROWS ? first : 0};
    size_t bytes = (size_t)(R * K + R * nb * 8 + M * nb * 4 + (sel_rows ? M * nb : 0));
    char *buf = act_buffer(bytes);
    if (!buf) return;
    j.a.q = (int8_t *)buf;
    j.a.e = (float *)(buf + R * K);
    j.a.sum = (int32_t *)(buf + R * K + R * nb * 4);
    j.a.ms = (float *)(buf + R * K + R * nb * 8);
    j.a.keep = sel_rows ? (uint8_t *)(buf + R * K + R * nb * 8 + M * nb * 4) : NULL;
    if (threads < 1) threads = 1;
    quant_job q = {.x = x, .x_dtype = x_dtype, .parts = parts, .vec = j.isa != ISA_SCALAR,
                   .M = M, .K = K, .one_rows = j.one_rows, .sel_rows = sel_rows, .a = &j.a};
    quantize_all(&q, threads);
    j.groups = (N + QG - 1) / QG;
    int64_t tasks = threads > 1 ? threads * 8 : 1;
    if (tasks > j.groups) tasks = j.groups;
    j.groups_per_task = (j.groups + tasks - 1) / tasks;
    tasks = (j.groups + j.groups_per_task - 1) / j.groups_per_task;
    laser_pool_run(q_task, &j, tasks, threads);
    act_buffer_done(buf, bytes);
}

