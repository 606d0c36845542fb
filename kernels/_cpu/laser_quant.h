/* The quantized matmul's block formats and their packed layout (laser_qpack.c packs GGUF
 * rows into it, laser_quant.c multiplies it).
 *
 * Every format is read as codes u (unsigned, up to 8 bits) in blocks of 32 inputs, 16 outputs
 * (a group) side by side; a weight is  s * (u - off) + mn  with s and mn per output and block
 * (Q6_K: s per half block of 16 inputs):
 *   Q4_0 / Q5_0 / Q8_0   s = d (float16), off 8 / 16 / 128 (Q8_0's int8 stored as u = q + 128)
 *   Q4_1 / Q5_1          s = d, mn = m (float16)
 *   Q4_K / Q5_K          s = D * sc, mn = -(Dmin * mc): D, Dmin float16 per super-block of
 *                        256 inputs, sc, mc 6 bits per block
 *   Q6_K                 s = D * sc, off 32: sc int8 per 16 inputs
 * D * sc is exact in float32 (11 by 8 bits), as gguf-py's and llama.cpp's dequantisation.
 *
 * Packed: per group, super-blocks (Q*_K: 8 blocks, else 1) of [header][blocks]; the header
 * holds the 16 outputs' D (float16), then Q4_K/Q5_K's Dmin. A block is
 *   [scales][minima][lines][high planes]
 * scales: 16 float16 d (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0), 16 bytes sc (Q4_K/Q5_K), 2 x 16 int8 sc
 * (Q6_K, per half); minima: 16 float16 m (Q4_1/Q5_1), 16 bytes mc (Q4_K/Q5_K); lines: 64
 * bytes each, byte 4 r + i of line l holding output r's code of input 4 l + i (Q8_0: eight
 * lines), or its low nibble, with input 16 + 4 l + i's in the high nibble (four lines); high
 * planes (Q5_*: one, Q6_K: two, 64 bytes each): the codes' bits above the nibble, byte
 * 4 r + i holding those of inputs 4 j + i for j = 0..7 (Q5: bit j; Q6_K: plane j / 4, bits
 * 2 (j % 4) and up). So one line, high bits or'ed in, is what one VPDPBUSD multiplies with
 * four broadcast activations for 16 outputs, the weights stream in the order they are read,
 * and a block's bytes are the GGUF's (Q4_K: 4.625 bits a weight against 4.5).
 */
#ifndef LASER_QUANT_H
#define LASER_QUANT_H

#include <stdint.h>

/* the vector paths this build has (laser_qtiles.c's tiles, laser_quant.c's dispatch) */
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#define HAVE_AVX2 1
#if defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
#define HAVE_AVX2_VNNI 1
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define HAVE_AVX512_VNNI 1
#endif
#endif

enum { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14 };
enum { QK = 32, QG = 16, QKK = 256 }; /* inputs a block, outputs a group, inputs a K block */

static inline int q_known(int f) {
    return f == Q4_0 || f == Q4_1 || f == Q5_0 || f == Q5_1 || f == Q8_0 || f == Q4_K ||
           f == Q5_K || f == Q6_K;
}
static inline int q_kquant(int f) { return f == Q4_K || f == Q5_K || f == Q6_K; }
static inline int q_hibits(int f) {
    return f == Q5_0 || f == Q5_1 || f == Q5_K ? 1 : f == Q6_K ? 2 : 0;
}
static inline int q_has_min(int f) { return f == Q4_1 || f == Q5_1 || f == Q4_K || f == Q5_K; }
static inline int q_halves(int f) { return f == Q6_K ? 2 : 1; } /* scales a block */
static inline int q_offset(int f) {
    return f == Q4_0 ? 8 : f == Q5_0 ? 16 : f == Q8_0 ? 128 : f == Q6_K ? 32 : 0;
}
static inline int q_mins_at(int f) { return f == Q4_K || f == Q5_K ? 16 : 32; }
static inline int q_hdr(int f) { /* bytes of a block's scales and minima */
    return q_mins_at(f) + (f == Q4_1 || f == Q5_1 ? 32 : f == Q4_K || f == Q5_K ? 16 : 0);
}
static inline int q_lines(int f) { return f == Q8_0 ? 8 : 4; }
static inline int q_block_bytes(int f) { return q_hdr(f) + 64 * (q_lines(f) + q_hibits(f)); }
static inline int q_sb_blocks(int f) { return q_kquant(f) ? QKK / QK : 1; }
static inline int q_sb_hdr(int f) { return f == Q6_K ? 32 : q_kquant(f) ? 64 : 0; }
static inline int64_t q_sb_bytes(int f) {
    return q_sb_hdr(f) + (int64_t)q_sb_blocks(f) * q_block_bytes(f);
}
static inline int64_t q_group_bytes(int f, int64_t K) { return K / QK / q_sb_blocks(f) * q_sb_bytes(f); }
/* block b of a group's packed weights, and its super-block's header */
static inline const uint8_t *q_block(const uint8_t *wg, int f, int64_t b) {
    int64_t n = q_sb_blocks(f);
    return wg + b / n * q_sb_bytes(f) + q_sb_hdr(f) + b % n * q_block_bytes(f);
}
static inline const uint8_t *q_super(const uint8_t *wg, int f, int64_t b) {
    return wg + b / q_sb_blocks(f) * q_sb_bytes(f);
}

/* ---- a call's quantised activations and its job (laser_quant.c), read by the tiles ------- */
typedef struct {
    int8_t *q;     /* [R, K] */
    float *e;      /* [R, K / 32] scales */
    int32_t *sum;  /* [R, K / 32] sums of q */
    int32_t *sum16; /* [R, K / 32] sums of a block's first 16 q (Q6_K: scales per 16); NULL
                     * for the other formats */
    float *ms;     /* [M, K / 32] e * (256 sum1 + sum2) (one part: e * sum): Q4_1's minima's
                    * factor, once per row and block rather than in every tile */
    uint8_t *keep; /* [K / 32, M] whether the block's second part is kept (selective rows),
                    * by block, so that a tile's rows are side by side; NULL where every
                    * two-part row keeps all */
} qact;

typedef struct {
    qact a;
    const uint8_t *w;
    int fmt, parts, out_dtype, isa;
    int stride;        /* parts a row has in a: parts, or 2 for the one-part rows of a split */
    int64_t one_rows;  /* rows [0, one_rows) in one part (their part 0) though `parts` is 2 */
    int64_t M, K, N, groups_per_task, groups;
    char *out;
} qjob;

/* a tile: rows m0 .. m0 + mr - 1 (mr <= 8) of group g's 16 outputs */
typedef void (*qtile_fn)(const qjob *, int64_t g, int64_t m0, int mr);
qtile_fn laser_q_pick_tile(int isa, int fmt, int parts); /* laser_qtiles.c */
void laser_q_tile_scalar(const qjob *j, int64_t g, int64_t m0, int mr);

#endif
