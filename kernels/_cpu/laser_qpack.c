/* GGUF rows -> the quantized matmul's packed layout (laser_quant.h says which), once at load;
 * and back to float32 (tests), and float32 -> GGUF Q8_0 (weights without blocks).
 *
 * Each GGUF block of 32 inputs (a K block: its 8 sub-blocks of 32) is read into one form, its
 * codes u and scale fields (gguf_block), from which both the packer and the dequantisation
 * work: the GGUF layouts are llama.cpp's block_q* structs (ggml-common.h).
 */
#include "laser_cpu.h"
#include "laser_quant.h"

#include <math.h>
#include <stdlib.h>

/* bytes of one GGUF block (32 inputs; Q*_K: 256) */
static int gguf_block_bytes(int f) {
    switch (f) {
    case Q4_0: return 18;
    case Q4_1: return 20;
    case Q5_0: return 22;
    case Q5_1: return 24;
    case Q8_0: return 34;
    case Q4_K: return 144;
    case Q5_K: return 176;
    case Q6_K: return 210;
    default: return 0;
    }
}

/* block b (32 inputs) of a GGUF row: codes u; d, m (float16 bits: d, m or the super-block's
 * D, Dmin); sc, mc (K: the block's scale and min, Q6_K: sc[0..1] per half) */
typedef struct {
    uint8_t u[QK];
    uint16_t d, m;
    int sc[2], mc;
} gguf_block;

static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Q4_K / Q5_K: block j's 6-bit scale and min from the 12 packed bytes */
static void k_scale_min(const uint8_t *s, int j, int *sc, int *mc) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mc = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *mc = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

static void read_legacy(const uint8_t *row, int f, int64_t b, gguf_block *o) {
    const uint8_t *src = row + b * gguf_block_bytes(f);
    int with_m = f == Q4_1 || f == Q5_1, hb = q_hibits(f);
    o->d = u16(src);
    o->m = with_m ? u16(src + 2) : 0;
    if (f == Q8_0) {
        for (int i = 0; i < QK; i++) o->u[i] = (uint8_t)(src[2 + i] ^ 0x80u);
        return;
    }
    const uint8_t *qh = src + 2 + 2 * with_m, *qs = qh + 4 * hb;
    uint32_t h = hb ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
                          (uint32_t)qh[3] << 24 : 0;
    for (int i = 0; i < QK; i++)
        o->u[i] = (uint8_t)(((i < 16 ? qs[i] : qs[i - 16] >> 4) & 15) | ((h >> i) & 1) << 4);
}

static void read_kquant(const uint8_t *row, int f, int64_t b, gguf_block *o) {
    const uint8_t *sb = row + b / 8 * gguf_block_bytes(f);
    int j = (int)(b % 8);
    if (f == Q6_K) { /* ql[128], qh[64], scales[16] (int8), d */
        o->d = u16(sb + 208);
        o->m = 0;
        o->sc[0] = (int8_t)sb[192 + 2 * j];
        o->sc[1] = (int8_t)sb[193 + 2 * j];
        o->mc = 0;
        int h = j / 4, s = j % 4;
        for (int l = 0; l < QK; l++) {
            int lo = sb[64 * h + 32 * (s % 2) + l] >> 4 * (s / 2) & 15;
            o->u[l] = (uint8_t)(lo | (sb[128 + 32 * h + l] >> 2 * s & 3) << 4);
        }
        return;
    }
    /* Q4_K: d, dmin, scales[12], qs[128]; Q5_K: qh[32] before qs */
    o->d = u16(sb);
    o->m = u16(sb + 2);
    k_scale_min(sb + 4, j, &o->sc[0], &o->mc);
    o->sc[1] = 0;
    const uint8_t *qh = sb + 16, *qs = sb + 16 + (f == Q5_K ? 32 : 0);
    for (int i = 0; i < QK; i++) {
        int hi = f == Q5_K ? qh[i] >> j & 1 : 0;
        o->u[i] = (uint8_t)((qs[32 * (j / 2) + i] >> 4 * (j % 2) & 15) | hi << 4);
    }
}

static void read_block(const uint8_t *row, int f, int64_t b, gguf_block *o) {
    if (q_kquant(f)) read_kquant(row, f, b, o);
    else read_legacy(row, f, b, o);
}

/* output r's block into a packed block (and its super-block header sbh, K) */
static void put_block(const gguf_block *g, int f, int r, uint8_t *sbh, uint8_t *dst) {
    if (q_kquant(f)) {
        memcpy(sbh + 2 * r, &g->d, 2);
        if (f != Q6_K) memcpy(sbh + 32 + 2 * r, &g->m, 2);
        dst[r] = (uint8_t)g->sc[0];
        dst[16 + r] = (uint8_t)(f == Q6_K ? g->sc[1] : g->mc);
    } else {
        memcpy(dst + 2 * r, &g->d, 2);
        if (q_has_min(f)) memcpy(dst + 32 + 2 * r, &g->m, 2);
    }
    uint8_t *lines = dst + q_hdr(f), *planes = lines + 64 * q_lines(f);
    int hb = q_hibits(f);
    for (int k = 0; k < QK; k++) {
        int j = k / 4, p = 4 * r + k % 4;
        if (f == Q8_0) lines[64 * j + p] = g->u[k];
        else lines[64 * (j % 4) + p] |= (uint8_t)((g->u[k] & 15) << 4 * (j / 4));
        if (hb) planes[64 * (j * hb / 8) + p] |= (uint8_t)((g->u[k] >> 4) << (j * hb % 8));
    }
}

int64_t laser_q_packed_bytes(int f, int64_t N, int64_t K) {
    if (!q_known(f) || K % (QK * q_sb_blocks(f))) return -1;
    return (N + QG - 1) / QG * q_group_bytes(f, K);
}

/* raw: N GGUF rows of K inputs; out: laser_q_packed_bytes(fmt, N, K) */
int laser_pack_q(const uint8_t *raw, int fmt, int64_t N, int64_t K, uint8_t *out) {
    int64_t bytes = laser_q_packed_bytes(fmt, N, K);
    if (bytes < 0) return -1;
    int64_t nb = K / QK, row_bytes = nb / q_sb_blocks(fmt) * gguf_block_bytes(fmt);
    memset(out, 0, (size_t)bytes);
    gguf_block g;
    for (int64_t n = 0; n < N; n++) {
        uint8_t *wg = out + n / QG * q_group_bytes(fmt, K);
        for (int64_t b = 0; b < nb; b++) {
            read_block(raw + n * row_bytes, fmt, b, &g);
            put_block(&g, fmt, (int)(n % QG), (uint8_t *)q_super(wg, fmt, b),
                      (uint8_t *)q_block(wg, fmt, b));
        }
    }
    return 0;
}

/* GGUF rows -> float32 [N, K], each value as gguf-py's dequantisation computes it (for tests
 * and references; the engine never needs it) */
int laser_dequantize_q(const uint8_t *raw, int fmt, int64_t N, int64_t K, float *out) {
    if (laser_q_packed_bytes(fmt, N, K) < 0) return -1;
    int64_t nb = K / QK, row_bytes = nb / q_sb_blocks(fmt) * gguf_block_bytes(fmt);
    int off = q_offset(fmt);
    gguf_block g;
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < nb; b++) {
            read_block(raw + n * row_bytes, fmt, b, &g);
            float d = h2f(g.d), m = h2f(g.m), *o = out + n * K + b * QK;
            for (int i = 0; i < QK; i++) {
                float s = q_kquant(fmt) ? d * (float)g.sc[i / 16 * (fmt == Q6_K)] : d;
                float v = s * (float)(g.u[i] - off);
                o[i] = q_kquant(fmt) && fmt != Q6_K ? v - m * (float)g.mc
                       : q_has_min(fmt) ? v + m : v;
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
