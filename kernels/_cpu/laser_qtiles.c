/* The quantized matmul's tiles (laser_quant.c calls them): 16 outputs (a packed group) by up
 * to 8 rows, on every format of laser_quant.h, in plain C, AVX2, AVX-VNNI and AVX-512 VNNI.
 *
 * A block's integer sums: the codes u times the int8 activations q, less the format's offset
 * times the sum of q (Q6_K: per half block, with its half's sum); two-part rows meet as
 * 256 s1 + s2. The float step, in this order on every path: acc += (float)isum * (s * e) (Q6_K:
 * first half, then second), then acc += mn * (e * sum q) for the formats with minima; s and mn
 * as laser_quant.h (exact products). So every path gives the plain C path's bits.
 */
#include "laser_cpu.h"
#include "laser_quant.h"

#include <math.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

/* the sum of q a half (Q6_K) or whole block's offset applies to, for part row `rp` */
static inline int32_t offset_sum(const qjob *j, int64_t rp, int64_t b, int64_t nb, int half,
                                 const int FMT) {
    int32_t s = j->a.sum[rp * nb + b];
    if (q_halves(FMT) == 1) return s;
    int32_t s16 = j->a.sum16[rp * nb + b];
    return half ? s - s16 : s16;
}

/* ---- plain C ----------------------------------------------------------------------------- */
static inline uint16_t u16at(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* output r's code of input k in a packed block */
static inline int code_of(const uint8_t *blk, int fmt, int r, int k) {
    const uint8_t *lines = blk + q_hdr(fmt);
    int j = k / 4, p = 4 * r + k % 4, hb = q_hibits(fmt);
    if (fmt == Q8_0) return lines[64 * j + p];
    int u = lines[64 * (j % 4) + p] >> 4 * (j / 4) & 15;
    if (hb) u |= (lines[64 * (4 + j * hb / 8) + p] >> (j * hb % 8) & ((1 << hb) - 1)) << 4;
    return u;
}

/* output r's scale s (of half h) and minimum mn (laser_quant.h) */
static inline float scale_of(const uint8_t *sb, const uint8_t *blk, int fmt, int r, int h) {
    if (!q_kquant(fmt)) return h2f(u16at(blk + 2 * r));
    int sc = fmt == Q6_K ? (int8_t)blk[16 * h + r] : blk[r];
    return h2f(u16at(sb + 2 * r)) * (float)sc;
}

static inline float min_of(const uint8_t *sb, const uint8_t *blk, int fmt, int r) {
    if (!q_kquant(fmt)) return h2f(u16at(blk + 32 + 2 * r));
    return -(h2f(u16at(sb + 32 + 2 * r)) * (float)blk[16 + r]);
}

/* the integer sum of output r's codes for inputs k0 .. k1 - 1 with part row rp */
static inline int32_t block_isum(const qjob *j, const uint8_t *blk, int r, int64_t rp,
                                 int64_t b, int h) {
    int fmt = j->fmt, k0 = q_halves(fmt) == 2 ? 16 * h : 0, k1 = k0 + QK / q_halves(fmt);
    int64_t nb = j->K / QK;
    const int8_t *xq = j->a.q + rp * j->K + b * QK;
    int32_t isum = -q_offset(fmt) * offset_sum(j, rp, b, nb, h, fmt);
    for (int k = k0; k < k1; k++) isum += code_of(blk, fmt, r, k) * xq[k];
    return isum;
}

/* plain C: the reference every vector path equals */
void laser_q_tile_scalar(const qjob *j, int64_t g, int64_t m0, int mr) {
    int fmt = j->fmt;
    int64_t nb = j->K / QK;
    const uint8_t *wg = j->w + g * q_group_bytes(fmt, j->K);
    int count = j->N - g * QG < QG ? (int)(j->N - g * QG) : QG;
    for (int m = 0; m < mr; m++) {
        float acc[QG] = {0};
        int64_t row = (m0 + m) * j->stride, last = row + j->parts - 1;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = q_block(wg, fmt, b), *sb = q_super(wg, fmt, b);
            float e = j->a.e[last * nb + b], ms = j->a.ms[(m0 + m) * nb + b];
            for (int r = 0; r < QG; r++) {
                for (int h = 0; h < q_halves(fmt); h++) {
                    int32_t isum = 0;
                    for (int p = 0; p < j->parts; p++)
                        isum = isum * 256 + block_isum(j, blk, r, row + p, b, h);
                    acc[r] = fmaf((float)isum, scale_of(sb, blk, fmt, r, h) * e, acc[r]);
                }
                if (q_has_min(fmt)) acc[r] = fmaf(min_of(sb, blk, fmt, r), ms, acc[r]);
            }
        }
        store_out(j, m0 + m, g * QG, acc, count);
    }
}

#define AI inline __attribute__((always_inline))

#ifdef HAVE_AVX2

/* The first tile of a group (of a call with more than one row) prefetches the block
 * Q_AHEAD bytes on (the next group's, in a group that large) as it goes. The whole group
 * ahead, as first built, put a Q8_0 group's 35 KB (a 2048-wide row) in flight beside the one
 * being read, more than L1 holds: 8 KB ahead is 1.09x / 1.08x a SmolLM2 decode step of 1 / 16
 * rows (bench/cpu_quant.py --step --vs). A one-row call leaves the stream to the hardware's
 * prefetcher (software prefetches there: 0.92x its step, 0.85x a Q8_0 matmul). */
#ifndef Q_AHEAD
#define Q_AHEAD 8192
#endif
static inline __attribute__((always_inline)) void prefetch_next(const uint8_t *wg, int64_t b,
                                                                int64_t gbytes, const int FMT) {
    int64_t dist = Q_AHEAD < gbytes ? Q_AHEAD : gbytes;
    const uint8_t *blk = q_block(wg, FMT, b) + dist;
    for (int o = 0; o < q_block_bytes(FMT); o += 64) _mm_prefetch((const char *)(blk + o), 3);
    if (q_kquant(FMT) && b % q_sb_blocks(FMT) == 0)
        _mm_prefetch((const char *)(q_super(wg, FMT, b) + dist), 3);
}

/* outputs 8 h .. 8 h + 7's scales s of a block (Q6_K: of its half `sub`) and minima mn */
static AI __m256 scales8(const uint8_t *sb, const uint8_t *blk, int h, int sub, const int FMT) {
    if (!q_kquant(FMT)) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * h)));
    __m128i sc = _mm_loadl_epi64((const __m128i *)(blk + 16 * sub + 8 * h));
    __m256i v = FMT == Q6_K ? _mm256_cvtepi8_epi32(sc) : _mm256_cvtepu8_epi32(sc);
    __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + 16 * h)));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(v));
}

static AI __m256 mins8(const uint8_t *sb, const uint8_t *blk, int h, const int FMT) {
    if (!q_has_min(FMT)) return _mm256_setzero_ps();
    if (!q_kquant(FMT))
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 32 + 16 * h)));
    __m128i mc = _mm_loadl_epi64((const __m128i *)(blk + 16 + 8 * h));
    __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + 32 + 16 * h)));
    return _mm256_xor_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mc))),
                         _mm256_set1_ps(-0.0f));
}

/* the bits above the nibble of codes 4 i .. 4 i + 3 (lines: a block's, at its half) */
static AI __m256i high8(const uint8_t *lines, int i, const int FMT) {
    const int hb = q_hibits(FMT), s = 4 - i * hb % 8;
    __m256i p = _mm256_loadu_si256((const __m256i *)(lines + 64 * (4 + i * hb / 8)));
    p = s >= 0 ? _mm256_slli_epi16(p, s) : _mm256_srli_epi16(p, -s);
    return _mm256_and_si256(p, _mm256_set1_epi8(hb == 1 ? 0x10 : 0x30));
}

/* one row's float step for a block, 8 outputs (tile_scalar's order) */
static AI __m256 block_step8(__m256 acc, __m256i i0, __m256i i1, __m256 s0, __m256 s1,
                             __m256 mv, float e, float ms, const int FMT) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), _mm256_mul_ps(s0, _mm256_set1_ps(e)), acc);
    if (q_halves(FMT) == 2)
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), _mm256_mul_ps(s1, _mm256_set1_ps(e)), acc);
    return q_has_min(FMT) ? _mm256_fmadd_ps(mv, _mm256_set1_ps(ms), acc) : acc;
}

/* a tile half's rows out: outputs g * 16 + 8 * h .. (fewer at the end of N) */
static AI void store_half(const qjob *j, int64_t g, int h, int64_t m0, int mr,
                          const __m256 *acc) {
    int64_t n0 = g * QG + 8 * h;
    int count = j->N - n0 < 8 ? (int)(j->N - n0) : 8;
    float v[8];
    for (int m = 0; m < mr && count > 0; m++) {
        _mm256_storeu_ps(v, acc[m]);
        store_out(j, m0 + m, n0, v, count);
    }
}

#ifdef HAVE_AVX2_VNNI
static inline __m256i dp256_vnni(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#endif
}

/* a block's codes of outputs 8 h .. 8 h + 7: w[l] those of inputs 4 l .. 4 l + 3 */
static AI void codes8(const uint8_t *blk, int h, const int FMT, __m256i w[8]) {
    const uint8_t *lines = blk + q_hdr(FMT) + 32 * h;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int l = 0; l < q_lines(FMT); l++) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)(lines + 64 * l));
        if (FMT == Q8_0)
            w[l] = raw;
        else {
            w[l] = _mm256_and_si256(raw, low4);
            w[l + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        }
    }
    if (q_hibits(FMT))
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) w[i] = _mm256_or_si256(w[i], high8(lines, i, FMT));
}

/* part row rp's integer sums with the codes w: *i0 the block's (Q6_K: its first half's),
 * *i1 Q6_K's second half's */
static AI void isums_vnni8(const qjob *j, const __m256i *w, int64_t rp, int64_t b, int64_t nb,
                           const int FMT, __m256i *i0, __m256i *i1) {
    const int32_t *xb = (const int32_t *)(j->a.q + rp * j->K + b * QK);
    const int off = q_offset(FMT), two = q_halves(FMT) == 2;
    __m256i a0 = _mm256_set1_epi32(-off * offset_sum(j, rp, b, nb, 0, FMT));
    __m256i a1 = two ? _mm256_set1_epi32(-off * offset_sum(j, rp, b, nb, 1, FMT))
                     : _mm256_setzero_si256();
    for (int l = 0; l < 4; l++) {
        a0 = dp256_vnni(a0, w[l], _mm256_set1_epi32(xb[l]));
        a1 = dp256_vnni(a1, w[l + 4], _mm256_set1_epi32(xb[l + 4]));
    }
    *i0 = two ? a0 : _mm256_add_epi32(a0, a1);
    *i1 = a1;
}

/* AVX-VNNI, 8 outputs (half h of the group) x mr rows; FMT constant in each expansion: the
 * block's lines unpacked once for the tile's rows, one VPDPBUSD a line and row */
static AI void tile_avxvnni_half(const qjob *j, int64_t g, int64_t m0, const int mr, int h,
                                 const int FMT, const int PARTS) {
    const int64_t nb = j->K / QK, gbytes = q_group_bytes(FMT, j->K);
    const uint8_t *wg = j->w + g * gbytes;
    const int ahead = h == 0 && m0 == 0 && j->M > 1; /* prefetch_next */
    __m256 acc[8];
    for (int m = 0; m < 8; m++) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = q_block(wg, FMT, b), *sb = q_super(wg, FMT, b);
        if (ahead) prefetch_next(wg, b, gbytes, FMT);
        __m256 s0 = scales8(sb, blk, h, 0, FMT), mv = mins8(sb, blk, h, FMT);
        __m256 s1 = q_halves(FMT) == 2 ? scales8(sb, blk, h, 1, FMT) : s0;
        __m256i w[8];
        codes8(blk, h, FMT, w);
        int second = PARTS == 2 && keeps_second(j, m0, mr, b);
#pragma GCC unroll 8
        for (int m = 0; m < mr; m++) {
            int64_t row = (m0 + m) * j->stride, last = row + PARTS - 1;
            __m256i i0, i1, k0, k1;
            isums_vnni8(j, w, row, b, nb, FMT, &i0, &i1);
            if (PARTS == 2) { /* where no row keeps q2 it is 0: 256 s1 + 0 */
                i0 = _mm256_slli_epi32(i0, 8);
                i1 = _mm256_slli_epi32(i1, 8);
                if (second) {
                    isums_vnni8(j, w, row + 1, b, nb, FMT, &k0, &k1);
                    i0 = _mm256_add_epi32(i0, k0);
                    i1 = _mm256_add_epi32(i1, k1);
                }
            }
            acc[m] = block_step8(acc[m], i0, i1, s0, s1, mv, j->a.e[last * nb + b],
                                 j->a.ms[(m0 + m) * nb + b], FMT);
        }
    }
    store_half(j, g, h, m0, mr, acc);
}
#endif

/* Without VNNI, 8 outputs x mr rows: a block's lines in the outer loop and the rows inside,
 * so that one weight line (Q8_0: its sign trick's two halves; else its two nibble halves,
 * high bits or'ed in) and each row's sums are live at a time. tile_avxvnni_half holds the
 * block's eight unpacked lines for all its rows instead: with the rows' accumulators that is
 * more than AVX2's 16 registers, and the accumulators went to the stack and back every block
 * (a decode step's matmuls 1.10 / 1.26 / 1.27x at 1 / 16 / 64 rows on an AVX2-only Zen 3 with
 * this order, `bench/cpu_quant.py --step`). The same integers and the same float steps.
 * 4-bit codes sum in 16 bits: u <= 15, so the block's eight VPMADDUBSW pair sums add up to at
 * most 8 * 2 * 15 * 127 = 30480; Q8_0's pairs reach 32512 and 5- and 6-bit codes' lines
 * 2 * 2 * 63 * 127 = 32004: they widen every line (Q6_K: each half on its own). */
static AI void tile_avx2_lines(const qjob *j, int64_t g, int64_t m0, const int mr, int h,
                               const int FMT, const int PARTS) {
    const int off = FMT == Q8_0 ? 0 : q_offset(FMT), wide = FMT == Q8_0 || q_hibits(FMT);
    const int two = q_halves(FMT) == 2;
    const int64_t nb = j->K / QK, K = j->K, rs = j->stride * K, gbytes = q_group_bytes(FMT, K);
    const uint8_t *wg = j->w + g * gbytes;
    const int8_t *x0 = j->a.q + m0 * rs;
    const float *e0 = j->a.e + (m0 * j->stride + PARTS - 1) * nb, *ms0 = j->a.ms + m0 * nb;
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const int ahead = h == 0 && m0 == 0 && j->M > 1; /* prefetch_next */
    __m256 acc[8];
    for (int m = 0; m < 8; m++) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = q_block(wg, FMT, b), *sb = q_super(wg, FMT, b);
        const uint8_t *lines = blk + q_hdr(FMT) + 32 * h;
        if (ahead) prefetch_next(wg, b, gbytes, FMT);
        __m256i isum[8], isum1[8];
        int second = PARTS == 2 && keeps_second(j, m0, mr, b);
#pragma GCC unroll 2
        for (int p = 0; p < PARTS; p++) {
            if (p && !second) { /* every row's q2 is 0 here: 256 s1 + 0 */
                for (int m = 0; m < mr; m++) {
                    isum[m] = _mm256_slli_epi32(isum[m], 8);
                    isum1[m] = _mm256_slli_epi32(isum1[m], 8);
                }
                break;
            }
            __m256i s[8], t[8];
            for (int m = 0; m < 8; m++) s[m] = t[m] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int l = 0; l < q_lines(FMT); l++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)(lines + 64 * l));
                __m256i w0, w1; /* Q8_0: |q| and q; else codes of inputs 4 l.., 16 + 4 l.. */
                if (FMT == Q8_0) {
                    w1 = _mm256_xor_si256(raw, _mm256_set1_epi8((char)0x80));
                    w0 = _mm256_sign_epi8(w1, w1);
                } else {
                    w0 = _mm256_and_si256(raw, low4);
                    w1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
                    if (q_hibits(FMT)) {
                        w0 = _mm256_or_si256(w0, high8(lines, l, FMT));
                        w1 = _mm256_or_si256(w1, high8(lines, l + 4, FMT));
                    }
                }
#pragma GCC unroll 8
                for (int m = 0; m < mr; m++) {
                    const int32_t *xb = (const int32_t *)(x0 + m * rs + p * K + b * QK);
                    __m256i xl = _mm256_set1_epi32(xb[l]);
                    if (FMT == Q8_0) {
                        __m256i xs = _mm256_sign_epi8(xl, w1);
                        s[m] = _mm256_add_epi32(
                            s[m], _mm256_madd_epi16(_mm256_maddubs_epi16(w0, xs), ones));
                    } else {
                        __m256i p0 = _mm256_maddubs_epi16(w0, xl);
                        __m256i p1 = _mm256_maddubs_epi16(w1, _mm256_set1_epi32(xb[l + 4]));
                        if (two) {
                            s[m] = _mm256_add_epi32(s[m], _mm256_madd_epi16(p0, ones));
                            t[m] = _mm256_add_epi32(t[m], _mm256_madd_epi16(p1, ones));
                            __asm__("" : "+x"(t[m]));
                        } else if (wide)
                            s[m] = _mm256_add_epi32(
                                s[m], _mm256_madd_epi16(_mm256_add_epi16(p0, p1), ones));
                        else
                            s[m] = _mm256_add_epi16(s[m], _mm256_add_epi16(p0, p1));
                    }
                    /* line by line: else GCC regroups the block's sums into one tree and
                     * computes every product first, in more registers than there are */
                    __asm__("" : "+x"(s[m]));
                }
            }
#pragma GCC unroll 8
            for (int m = 0; m < mr; m++) {
                int64_t rp = (m0 + m) * j->stride + p;
                __m256i u = wide ? s[m] : _mm256_madd_epi16(s[m], ones);
                if (off)
                    u = _mm256_add_epi32(
                        u, _mm256_set1_epi32(-off * offset_sum(j, rp, b, nb, 0, FMT)));
                isum[m] = p ? _mm256_add_epi32(_mm256_slli_epi32(isum[m], 8), u) : u;
                if (two) {
                    u = _mm256_add_epi32(
                        t[m], _mm256_set1_epi32(-off * offset_sum(j, rp, b, nb, 1, FMT)));
                    isum1[m] = p ? _mm256_add_epi32(_mm256_slli_epi32(isum1[m], 8), u) : u;
                } else
                    isum1[m] = isum[m];
            }
        }
        __m256 s0 = scales8(sb, blk, h, 0, FMT), mv = mins8(sb, blk, h, FMT);
        __m256 s1 = two ? scales8(sb, blk, h, 1, FMT) : s0;
#pragma GCC unroll 8
        for (int m = 0; m < mr; m++)
            acc[m] = block_step8(acc[m], isum[m], isum1[m], s0, s1, mv,
                                 e0[m * j->stride * nb + b], ms0[m * nb + b], FMT);
    }
    store_half(j, g, h, m0, mr, acc);
}

/* rows and parts as constants in each expansion: the accumulators then live in registers;
 * HALF: tile_avx2_lines or tile_avxvnni_half */
#define AVX2_ROWS(HALF, FMT, MR, PARTS)                                                       \
    for (int h = 0; h < 2; h++) /* h not a constant: half the code, built in half the time */ \
        HALF(j, g, m0, MR, h, FMT, PARTS)
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
#define FORMATS_BUT_Q8(X) X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(Q4_K) X(Q5_K) X(Q6_K)
#define AVX2_ONE(F) AVX2_TILE(tile_avx2_##F, tile_avx2_lines, F, AVX2_PARTS)
FORMATS_BUT_Q8(AVX2_ONE)
AVX2_TILE(tile_avx2_Q8_0, tile_avx2_lines, Q8_0, AVX2_PARTS_WIDE)
#ifdef HAVE_AVX2_VNNI
#define VNNI_ONE(F) AVX2_TILE(tile_avxvnni_##F, tile_avxvnni_half, F, AVX2_PARTS)
FORMATS_BUT_Q8(VNNI_ONE)
VNNI_ONE(Q8_0)
#endif
#endif

#ifdef HAVE_AVX512_VNNI
/* scales8 .. isums_vnni8 on all 16 outputs of a group */
static AI __m512 scales16(const uint8_t *sb, const uint8_t *blk, int sub, const int FMT) {
    if (!q_kquant(FMT)) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
    __m128i sc = _mm_loadu_si128((const __m128i *)(blk + 16 * sub));
    __m512i v = FMT == Q6_K ? _mm512_cvtepi8_epi32(sc) : _mm512_cvtepu8_epi32(sc);
    __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)sb));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(v));
}

static AI __m512 mins16(const uint8_t *sb, const uint8_t *blk, const int FMT) {
    if (!q_has_min(FMT)) return _mm512_setzero_ps();
    if (!q_kquant(FMT)) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32)));
    __m128i mc = _mm_loadu_si128((const __m128i *)(blk + 16));
    __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sb + 32)));
    __m512 m = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mc)));
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(m),
                                                _mm512_set1_epi32((int)0x80000000u)));
}

static AI void codes16(const uint8_t *blk, const int FMT, __m512i w[8]) {
    const uint8_t *lines = blk + q_hdr(FMT);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int l = 0; l < q_lines(FMT); l++) {
        __m512i raw = _mm512_loadu_si512(lines + 64 * l);
        if (FMT == Q8_0)
            w[l] = raw;
        else {
            w[l] = _mm512_and_si512(raw, low4);
            w[l + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
        }
    }
    const int hb = q_hibits(FMT);
    if (hb)
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const int s = 4 - i * hb % 8;
        __m512i p = _mm512_loadu_si512(lines + 64 * (4 + i * hb / 8));
        p = s >= 0 ? _mm512_slli_epi16(p, s) : _mm512_srli_epi16(p, -s);
        w[i] = _mm512_or_si512(w[i], _mm512_and_si512(p, _mm512_set1_epi8(hb == 1 ? 0x10 : 0x30)));
    }
}

static AI void isums16(const qjob *j, const __m512i *w, int64_t rp, int64_t b, int64_t nb,
                       const int FMT, __m512i *i0, __m512i *i1) {
    const int32_t *xb = (const int32_t *)(j->a.q + rp * j->K + b * QK);
    const int off = q_offset(FMT), two = q_halves(FMT) == 2;
    __m512i a0 = _mm512_set1_epi32(-off * offset_sum(j, rp, b, nb, 0, FMT));
    __m512i a1 = two ? _mm512_set1_epi32(-off * offset_sum(j, rp, b, nb, 1, FMT))
                     : _mm512_setzero_si512();
    for (int l = 0; l < 4; l++) {
        a0 = _mm512_dpbusd_epi32(a0, w[l], _mm512_set1_epi32(xb[l]));
        a1 = _mm512_dpbusd_epi32(a1, w[l + 4], _mm512_set1_epi32(xb[l + 4]));
    }
    *i0 = two ? a0 : _mm512_add_epi32(a0, a1);
    *i1 = a1;
}

/* 16 outputs x mr (<= 8) rows; mr, FMT and PARTS constant in each expansion (the accumulators
 * then live in registers) */
static AI void tile_512(const qjob *j, int64_t g, int64_t m0, const int mr, const int FMT,
                        const int PARTS) {
    const int64_t nb = j->K / QK, gbytes = q_group_bytes(FMT, j->K);
    const uint8_t *wg = j->w + g * gbytes;
    const int ahead = m0 == 0 && j->M > 1, bb = q_block_bytes(FMT); /* prefetch_next */
    __m512 acc[8];
    for (int m = 0; m < 8; m++) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = q_block(wg, FMT, b), *sb = q_super(wg, FMT, b);
        _mm_prefetch((const char *)(blk + 4 * bb), _MM_HINT_T0);
        _mm_prefetch((const char *)(blk + 4 * bb + 256), _MM_HINT_T0);
        if (ahead) prefetch_next(wg, b, gbytes, FMT);
        __m512 s0 = scales16(sb, blk, 0, FMT), mv = mins16(sb, blk, FMT);
        __m512 s1 = q_halves(FMT) == 2 ? scales16(sb, blk, 1, FMT) : s0;
        __m512i w[8];
        codes16(blk, FMT, w);
        int second = PARTS == 2 && keeps_second(j, m0, mr, b);
#pragma GCC unroll 8
        for (int m = 0; m < mr; m++) {
            int64_t row = (m0 + m) * j->stride, last = row + PARTS - 1;
            __m512i i0, i1, k0, k1;
            isums16(j, w, row, b, nb, FMT, &i0, &i1);
            if (PARTS == 2) { /* where no row keeps q2 it is 0: 256 s1 + 0 */
                i0 = _mm512_slli_epi32(i0, 8);
                i1 = _mm512_slli_epi32(i1, 8);
                if (second) {
                    isums16(j, w, row + 1, b, nb, FMT, &k0, &k1);
                    i0 = _mm512_add_epi32(i0, k0);
                    i1 = _mm512_add_epi32(i1, k1);
                }
            }
            __m512 e = _mm512_set1_ps(j->a.e[last * nb + b]);
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), _mm512_mul_ps(s0, e), acc[m]);
            if (q_halves(FMT) == 2)
                acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1), _mm512_mul_ps(s1, e), acc[m]);
            if (q_has_min(FMT))
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
#define TILE_512_BOTH(F) TILE_512(F, 1) TILE_512(F, 2)
FORMATS_BUT_Q8(TILE_512_BOTH)
TILE_512_BOTH(Q8_0)
#endif

/* the tile of a format, parts and path (laser_quant.c's ISA_*), the best built at most `isa` */
qtile_fn laser_q_pick_tile(int isa, int fmt, int parts) {
    (void)parts;
#define PICK(F, FN) if (fmt == F) return FN;
#ifdef HAVE_AVX512_VNNI
#define PICK_512(F) PICK(F, parts == 2 ? tile_512_##F##_2 : tile_512_##F##_1)
    if (isa >= 3) {
        FORMATS_BUT_Q8(PICK_512) PICK_512(Q8_0)
    }
#endif
#ifdef HAVE_AVX2_VNNI
#define PICK_VNNI(F) PICK(F, tile_avxvnni_##F)
    if (isa >= 2) {
        FORMATS_BUT_Q8(PICK_VNNI) PICK_VNNI(Q8_0)
    }
#endif
#ifdef HAVE_AVX2
#define PICK_AVX2(F) PICK(F, tile_avx2_##F)
    if (isa >= 1) {
        FORMATS_BUT_Q8(PICK_AVX2) PICK_AVX2(Q8_0)
    }
#endif
    (void)isa;
    return laser_q_tile_scalar;
}
