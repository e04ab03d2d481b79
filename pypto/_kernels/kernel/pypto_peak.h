/* The peak arithmetic rate of the ISA level this module is built for, measured: a loop of
 * independent multiply-adds held in registers (12 chains: more than latency x ports on current
 * cores), at the level's widest vector, with the instruction the level's kernel can use:
 *   avx512*  vfmadd on zmm (16 lanes)       avx2  vfmadd on ymm (8 lanes)
 *   x86 baseline: mulps + addps on xmm (no FMA below x86-64-v3)
 *   AArch64 baseline: fmla on 128-bit NEON (FMA is part of ARMv8)
 * and, on avx512_bf16, the bf16 dot product vdpbf16ps (2 products and 2 adds per fp32 lane).
 * Each returns the flops it did; the caller times it. The benchmark's "% of peak" is against
 * this, on the machine it runs on. The level comes from pypto_isa.h (PYPTO_ISA_*). */
#ifndef PYPTO_PEAK_H
#define PYPTO_PEAK_H

#include <stdint.h>

#include "pypto_isa.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#define PYPTO_PEAK_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512)
#define PYPTO_PEAK_LANES 16
typedef __m512 pypto_peak_v;
#define PYPTO_PEAK_SET(x) _mm512_set1_ps(x)
#define PYPTO_PEAK_MADD(a, m, c) _mm512_fmadd_ps(a, m, c)
#define PYPTO_PEAK_FIRST(v) _mm512_cvtss_f32(v)
#elif defined(PYPTO_ISA_AVX2)
#define PYPTO_PEAK_LANES 8
typedef __m256 pypto_peak_v;
#define PYPTO_PEAK_SET(x) _mm256_set1_ps(x)
#define PYPTO_PEAK_MADD(a, m, c) _mm256_fmadd_ps(a, m, c)
#define PYPTO_PEAK_FIRST(v) _mm256_cvtss_f32(v)
#elif defined(__aarch64__)
#define PYPTO_PEAK_LANES 4
typedef float32x4_t pypto_peak_v;
#define PYPTO_PEAK_SET(x) vdupq_n_f32(x)
#define PYPTO_PEAK_MADD(a, m, c) vfmaq_f32(c, a, m)
#define PYPTO_PEAK_FIRST(v) vgetq_lane_f32(v, 0)
#else
#define PYPTO_PEAK_LANES 4
typedef float pypto_peak_v __attribute__((vector_size(16)));
static inline pypto_peak_v pypto_peak_set(float x) { pypto_peak_v v = {x, x, x, x}; return v; }
#define PYPTO_PEAK_SET(x) pypto_peak_set(x)
#define PYPTO_PEAK_MADD(a, m, c) ((a) * (m) + (c)) /* two instructions: -ffp-contract=off */
#define PYPTO_PEAK_FIRST(v) ((v)[0])
#endif

/* a -> a*m + c converges to c/(1-m) = 1: no overflow, no subnormals, whatever the count */
static double pypto_peak_madd(int64_t iterations)
{
    const pypto_peak_v m = PYPTO_PEAK_SET(0.99999994f), c = PYPTO_PEAK_SET(5.9604645e-8f);
#define PYPTO_PEAK_DECLARE(i) pypto_peak_v a##i = PYPTO_PEAK_SET(1.0f + 0.001f * (i));
#define PYPTO_PEAK_STEP(i) a##i = PYPTO_PEAK_MADD(a##i, m, c);
    PYPTO_PEAK_CHAINS(PYPTO_PEAK_DECLARE)
    for (int64_t n = 0; n < iterations; n++) {
        PYPTO_PEAK_CHAINS(PYPTO_PEAK_STEP)
    }
    volatile float sink = 0.0f; /* every chain's result is used: nothing is left out */
#define PYPTO_PEAK_SINK(i) sink += PYPTO_PEAK_FIRST(a##i);
    PYPTO_PEAK_CHAINS(PYPTO_PEAK_SINK)
    (void)sink;
    return (double)iterations * 12 * PYPTO_PEAK_LANES * 2;
}

#ifdef PYPTO_ISA_AVX512BF16
static double pypto_peak_bf16_dot(int64_t iterations)
{
    /* bf16 pairs of (0.5, 0.5) times (2^-24, 2^-24): each step adds 2^-24 to every lane */
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f00), y = (__m512bh)_mm512_set1_epi16(0x3380);
#define PYPTO_PEAK_DECLARE_DOT(i) __m512 d##i = _mm512_set1_ps(1.0f + 0.001f * (i));
#define PYPTO_PEAK_STEP_DOT(i) d##i = _mm512_dpbf16_ps(d##i, x, y);
    PYPTO_PEAK_CHAINS(PYPTO_PEAK_DECLARE_DOT)
    for (int64_t n = 0; n < iterations; n++) {
        PYPTO_PEAK_CHAINS(PYPTO_PEAK_STEP_DOT)
    }
    volatile float sink = 0.0f;
#define PYPTO_PEAK_SINK_DOT(i) sink += _mm512_cvtss_f32(d##i);
    PYPTO_PEAK_CHAINS(PYPTO_PEAK_SINK_DOT)
    (void)sink;
    return (double)iterations * 12 * 16 * 4;
}
#else
static double pypto_peak_bf16_dot(int64_t iterations) { (void)iterations; return 0.0; }
#endif

#endif /* PYPTO_PEAK_H */
