/* Laser's CPU kernels: the work between the matmuls of a decoder layer, fused, in C.
 *
 * Why: on a CPU a decode step of a small model spends as long between its matmuls as in them
 * when every norm, rotation, cache write and activation is a few PyTorch ops (each one
 * dispatched, allocated and converted between bfloat16 and float32 separately) and the decode
 * attention gathers every sequence's K/V before attending. Here each is one call over the raw
 * buffers: activations come in as the matmul produced them (float32 or bfloat16), the
 * arithmetic is float32 as in the PyTorch references (kernels/<op>.py), and results go out in
 * the dtype the next matmul reads. The attention (laser_attention.c) reads the paged cache in
 * place.
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


/* out[t] = silu(gate) * up for x[t] = [gate | up] ([T, 2 I] in x_dtype; out [T, I]); with
 * gelu, tanh-GELU(gate) * up (GeGLU): 0.5 g (1 + tanh(z)) = g / (1 + exp(-2 z)),
 * z = sqrt(2 / pi) (g + 0.044715 g^3). */
typedef struct {
    const char *x;
    char *out;
    int x_dtype, out_dtype, gelu;
    int64_t T, I, rows; /* rows a task */
} silu_job;

static void silu_task(void *arg, int64_t task) {
    const silu_job *j = (const silu_job *)arg;
    int64_t I = j->I, t0 = task * j->rows, t1 = t0 + j->rows < j->T ? t0 + j->rows : j->T;
    float *row = (float *)malloc((size_t)(2 * I) * 4);
    for (int64_t t = t0; t < t1; t++) {
        load_row(j->x + (size_t)(t * 2 * I) * elem_size(j->x_dtype), j->x_dtype, 2 * I, row);
        if (j->gelu) {
            for (int64_t i = 0; i < I; i++) {
                float g = row[i], z = 0.7978845608028654f * (g + 0.044715f * g * g * g);
                row[i] = g / (1.0f + fast_exp(-2.0f * z)) * row[I + i];
            }
        } else {
            for (int64_t i = 0; i < I; i++) {
                float g = row[i];
                row[i] = g / (1.0f + fast_exp(-g)) * row[I + i];
            }
        }
        store_row(row, I, j->out + (size_t)(t * I) * elem_size(j->out_dtype), j->out_dtype);
    }
    free(row);
}

/* over the pool's threads, a few rows a task (64-row decode steps spent 5 % of their time
 * here on one thread while the other core waited) */
static void silu_and_mul(const void *x, int x_dtype, int64_t T, int64_t I, void *out,
                         int out_dtype, int gelu, int threads) {
    int64_t rows = T < 8 ? 1 : T / 8;
    silu_job j = {(const char *)x, (char *)out, x_dtype, out_dtype, gelu, T, I, rows};
    laser_pool_run(silu_task, &j, (T + rows - 1) / rows, threads);
}

void laser_silu_and_mul(const void *x, int x_dtype, int64_t T, int64_t I, void *out,
                        int out_dtype, int gelu) {
    silu_and_mul(x, x_dtype, T, I, out, out_dtype, gelu, 1);
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
 * GGML type, + 256 for two-part activations, + 768 for selective ones (laser_quant.c),
 * + 512 for two parts in the rows of prompt chunks but one in the `single` rows before them
 * (+ 1024: selective there) (the step's decode rows, which the runner puts first:
 * AttentionMetadata.single_rows): those then get a decode step's bits and
 * cost, whatever shares their step; in quant mode's gate-up projection two parts cost a step
 * of 48 decode rows and 2 prompt tokens 8 ms more than 48 rows alone, one part 2 ms). The
 * rest as laser_rope_write_kv and laser_paged_attention take it; `threads` for the matmuls
 * and the attention. */
static void layer_matmul(const void *w, int fmt, const void *x, int act, int64_t T, int64_t K,
                         int64_t N, void *out, int threads, int64_t single) {
    if (fmt) /* splits 2 and 4: a decode step's parts for the `single` rows */
        laser_gemm_q(x, act, T, K, (const uint8_t *)w, fmt & 255, N, out, act, threads,
                     fmt >> 8, single);
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
    silu_and_mul(wide, act, T, I, proj, act, 0, threads);
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

/* out[r] = the first index of row r's largest value, a NaN counting as larger than any
 * number (torch.argmax's answer), rows over the pool. The sampler's greedy pick over a
 * 64-row step's logits (64 x 49,152) took 3.3 ms in torch on the one thread the engine's
 * decode steps give it, 2.5 % of the step with the pool's workers idle. */
typedef struct {
    const float *x;
    int64_t n;
    int64_t *out;
} argmax_job;

static int64_t argmax_scalar(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] != x[i]) return i;
        if (x[i] > x[best]) best = i;
    }
    return best;
}

static void argmax_task(void *arg, int64_t r) {
    const argmax_job *j = (const argmax_job *)arg;
    const float *x = j->x + r * j->n;
    int64_t n = j->n;
#if defined(__AVX2__)
    if (n >= 8) {
        /* the largest value (any NaN: the plain loop finds the first), then its first index */
        __m256 m = _mm256_loadu_ps(x), nan = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
        int64_t i = 8;
        for (; i + 8 <= n; i += 8) {
            __m256 v = _mm256_loadu_ps(x + i);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            m = _mm256_max_ps(m, v);
        }
        float lanes[8], top;
        _mm256_storeu_ps(lanes, m);
        top = lanes[0];
        for (int l = 1; l < 8; l++) top = lanes[l] > top ? lanes[l] : top;
        int tail_nan = 0;
        for (int64_t t = i; t < n; t++) {
            tail_nan |= x[t] != x[t];
            top = x[t] > top ? x[t] : top;
        }
        if (!_mm256_movemask_ps(nan) && !tail_nan) {
            __m256 want = _mm256_set1_ps(top);
            for (i = 0; i + 8 <= n; i += 8) {
                int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), want,
                                                           _CMP_EQ_OQ));
                if (hit) {
                    j->out[r] = i + __builtin_ctz((unsigned)hit);
                    return;
                }
            }
            for (; i < n; i++)
                if (x[i] == top) break;
            j->out[r] = i;
            return;
        }
    }
#endif
    j->out[r] = argmax_scalar(x, n);
}

void laser_argmax_rows(const float *x, int64_t rows, int64_t n, int64_t *out, int threads) {
    argmax_job j = {x, n, out};
    laser_pool_run(argmax_task, &j, rows, threads < 1 ? 1 : threads);
}
