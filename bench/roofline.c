/* The machine's peak integer dot-product rate, for bench/roofline.py.
 *
 * Each path runs ACC independent accumulator chains of the instruction a quantized matmul's
 * inner loop is made of, on registers only (no loads), `iters` times, on `threads` POSIX
 * threads at once: the rate no int8 matmul on this core can pass. Counted as 2 operations
 * (multiply, add) per byte pair:
 *   - vnni512: VPDPBUSD on 512-bit registers (AVX-512 VNNI): 64 pairs an instruction;
 *   - vnni256: the same on 256-bit registers (AVX-512 VL, or AVX-VNNI): 32;
 *   - avx2: VPMADDUBSW + VPMADDWD + VPADDD (what AVX2 without VNNI runs): 32 pairs per three.
 * A path this CPU lacks returns 0 (built with -march=native, as kernels/_cpu). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { ACC = 12 };

typedef struct {
    int path;
    int64_t iters;
    int32_t sink;
} job;

static void *run_path(void *arg) {
    job *j = (job *)arg;
    int32_t out = 0;
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
    if (j->path == 0) {
        __m512i acc[ACC], a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
        for (int i = 0; i < ACC; i++) acc[i] = _mm512_set1_epi32(i);
        for (int64_t it = 0; it < j->iters; it++)
            for (int i = 0; i < ACC; i++) {
                acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
                __asm__ volatile("" : "+v"(acc[i])); /* keep each chain */
            }
        for (int i = 0; i < ACC; i++) out += _mm_cvtsi128_si32(_mm512_castsi512_si128(acc[i]));
    }
#endif
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
    if (j->path == 1) {
        __m256i acc[ACC], a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
        for (int i = 0; i < ACC; i++) acc[i] = _mm256_set1_epi32(i);
        for (int64_t it = 0; it < j->iters; it++)
            for (int i = 0; i < ACC; i++) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
                acc[i] = _mm256_dpbusd_epi32(acc[i], a, b);
#else
                acc[i] = _mm256_dpbusd_avx_epi32(acc[i], a, b);
#endif
                __asm__ volatile("" : "+v"(acc[i]));
            }
        for (int i = 0; i < ACC; i++) out += _mm_cvtsi128_si32(_mm256_castsi256_si128(acc[i]));
    }
#endif
#if defined(__AVX2__)
    if (j->path == 2) {
        __m256i acc[ACC], a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
        __m256i ones = _mm256_set1_epi16(1);
        for (int i = 0; i < ACC; i++) acc[i] = _mm256_set1_epi32(i);
        for (int64_t it = 0; it < j->iters; it++)
            for (int i = 0; i < ACC; i++) {
                __asm__ volatile("" : "+v"(a)); /* no hoisting the products out of the loop */
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones);
                acc[i] = _mm256_add_epi32(acc[i], p);
                __asm__ volatile("" : "+v"(acc[i]));
            }
        for (int i = 0; i < ACC; i++) out += _mm_cvtsi128_si32(_mm256_castsi256_si128(acc[i]));
    }
#endif
    j->sink = out;
    return NULL;
}

/* byte pairs one instruction group multiplies, per path; 0 where this build lacks it */
int64_t roofline_pairs(int path) {
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
    if (path == 0) return 64;
#endif
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
    if (path == 1) return 32;
#endif
#if defined(__AVX2__)
    if (path == 2) return 32;
#endif
    (void)path;
    return 0;
}

/* runs `path` for `iters` x ACC instruction groups on each of `threads` threads; returns the
 * groups run in all (the caller times the call) */
int64_t roofline_run(int path, int64_t iters, int threads) {
    if (!roofline_pairs(path) || threads < 1) return 0;
    pthread_t tid[256];
    job jobs[256];
    if (threads > 256) threads = 256;
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job){path, iters, 0};
        if (t) pthread_create(&tid[t], NULL, run_path, &jobs[t]);
    }
    run_path(&jobs[0]);
    for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
    return iters * ACC * threads;
}
