/* Matmuls on the GGUF's own quantized blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K),
 * as llama.cpp runs them: the activations' quantisation and the dispatch here, the tiles in
 * laser_qtiles.c, the formats and their packed layout in laser_quant.h (laser_qpack.c packs).
 *
 * Why: a decode step reads every weight once. In bfloat16 SmolLM2-135M's projections are
 * 270 MB a step; as the GGUF stores them (Q4_1, 5 bits a weight with its scales) under 100 MB,
 * and the single-stream decode is bound by those bytes.
 *
 * The math (per block of 32 inputs): a weight is s * (u - off) + mn (laser_quant.h: e.g.
 * Q4_1 d * u + m with u in 0..15, Q8_0 d * (u - 128), stored as u = q + 128 so that every
 * format's codes are unsigned bytes, Q4_K D * sc * u - Dmin * mc); the activations are
 * quantised per block of 32 to int8 (scale e = max|x| / 127, x ~ e * q) as llama.cpp's Q8
 * activations, so a block's dot product is
 *     e * (s * (sum u q - off * sum q) + mn * sum q)
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
 * Packed layout (laser_pack_q, from the GGUF's rows; laser_quant.h): groups of 16 outputs,
 * per block their scales, minima and codes in 64-byte lines, each what one VPDPBUSD multiplies
 * with four broadcast activations for 16 outputs; the weights stream in the order they are read.
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
 * That first tile prefetches 8 KB ahead as it goes (into the next group: prefetch_next in
 * laser_qtiles.c), so a step's weights (96 MB for SmolLM2-135M: never in cache from one step
 * to the next) arrive while this group computes: without it every group began with a stall on
 * memory that the hardware prefetcher, idle during the other tiles, did not hide (issue 22:
 * 1.2-1.4x a decode step of 1-16 rows); a one-row call, one tile a group, leaves the stream to
 * the hardware.
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

#include "laser_quant.h"
/* how the activations of a call are quantised (laser_gemm_q's split) */
enum { SPLIT_ONE = 0, SPLIT_TWO = 1, SPLIT_ONE_ROWS = 2, SPLIT_SEL = 3, SPLIT_SEL_ROWS = 4 };
#define SEL_OUTLIER 2.0f /* a selective row keeps the second part where e1 > this x its mean */

/* packed bytes per group and block of the formats without super-blocks (bench/cpu_quant.py
 * --vs reads it from older builds; laser_q_packed_bytes sizes a pack) */
int laser_q_block_bytes(int fmt) { return q_known(fmt) ? q_block_bytes(fmt) : 0; }

/* ---- activations ------------------------------------------------------------------------- */

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
        if (a->sum16)
            for (int64_t r = m * parts; r < (m + 1) * parts; r++)
                for (int64_t b = 0; b < nb; b++) {
                    const int8_t *qb = a->q + r * K + b * QK;
                    int32_t s = 0;
                    for (int i = 0; i < QK / 2; i++) s += qb[i];
                    a->sum16[r * nb + b] = s;
                }
        int two = parts == 2 && m >= q->one_rows;
        for (int64_t b = 0; b < nb; b++) {
            int64_t s0 = m * parts * nb + b, s1 = s0 + (parts - 1) * nb;
            a->ms[m * nb + b] = two ? a->e[s1] * (float)(256 * a->sum[s0] + a->sum[s1])
                                    : a->e[s0] * (float)a->sum[s0];
        }
    }
}

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

static void q_task(void *arg, int64_t task) {
    const qjob *j = (const qjob *)arg;
    qjob one = *j; /* the one-part rows of a split: part 0 of theirs */
    one.parts = 1;
    qtile_fn tile = laser_q_pick_tile(j->isa, j->fmt, j->parts),
             tile1 = laser_q_pick_tile(j->isa, j->fmt, 1);
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
    int halves = q_halves(fmt) == 2; /* Q6_K: the sums of each block's first 16 q too */
    size_t bytes = (size_t)(R * K + R * nb * (8 + 4 * halves) + M * nb * 4 +
                            (sel_rows ? M * nb : 0));
    char *buf = act_buffer(bytes);
    if (!buf) return;
    j.a.q = (int8_t *)buf;
    j.a.e = (float *)(buf + R * K);
    j.a.sum = (int32_t *)(buf + R * K + R * nb * 4);
    j.a.ms = (float *)(buf + R * K + R * nb * 8);
    char *rest = buf + R * K + R * nb * 8 + M * nb * 4;
    j.a.sum16 = halves ? (int32_t *)rest : NULL;
    j.a.keep = sel_rows ? (uint8_t *)(rest + R * nb * 4 * halves) : NULL;
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

