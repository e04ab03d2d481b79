/* Exact conversions between fp32 and the 16-bit storage types (fp16, bf16): scalar, widening
 * runs (pypto_widen) and narrowing runs (pypto_narrow, with the AVX-512 and AVX2 vector forms
 * pypto_narrow16 / pypto_narrow8). */
#ifndef PYPTO_CONVERT_H
#define PYPTO_CONVERT_H

/* Widening is exact. Narrowing rounds to nearest, ties to even, once: that is the op's only
 * rounding. Everything is branch-light integer/float arithmetic that gcc vectorizes at every
 * ISA level (gcc 12 never emits vcvtph2ps on its own, and a (float)(_Float16) cast is scalar);
 * narrowing also has explicit AVX-512 and AVX2 forms (pypto_narrow16/8; AVX-512 masks the tail),
 * checked bit for bit against the scalar functions on every fp32 pattern, and widening explicit
 * AVX-512 (16 at a time, the tail masked), F16C and NEON forms for fp16.
 * Bit-exactness against NumPy (fp16) and ml_dtypes (bf16) is tested on every 16-bit pattern.
 * Needs IEEE fp32 without flush-to-zero: never build with -ffast-math.
 */

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__F16C__))
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

enum { PYPTO_FP16 = 0, PYPTO_BF16 = 1 };

static inline uint32_t pypto_f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float pypto_u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float pypto_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t magnitude = h & 0x7fffu;
    /* Put the 5-bit exponent and 10-bit mantissa in the fp32 fields and rescale by 2^112:
     * exact for normals and subnormals alike. Inf/NaN get the all-ones exponent instead. */
    float value = pypto_u2f(magnitude << 13) * 0x1p112f;
    uint32_t bits = magnitude >= 0x7c00u ? (magnitude << 13) | 0x7f800000u : pypto_f2u(value);
    return pypto_u2f(bits | sign);
}

static inline float pypto_bf16_to_float(uint16_t h) { return pypto_u2f((uint32_t)h << 16); }

static inline uint16_t pypto_float_to_half(float f)
{
    uint32_t x = pypto_f2u(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)                      /* NaN: keep it a (quiet) NaN */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u)                     /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {                    /* below 2^-14: fp16 subnormal or zero */
        /* Adding 0.5 leaves an ulp of 2^-24, the fp16 subnormal step: the FPU's own
         * round-to-nearest-even does the rounding. */
        float shifted = pypto_u2f(ax) + 0.5f;
        return (uint16_t)(sign | (pypto_f2u(shifted) - 0x3f000000u));
    }
    uint32_t odd = (ax >> 13) & 1u;
    ax += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
    return (uint16_t)(sign | (ax >> 13));
}

static inline uint16_t pypto_float_to_bf16(float f)
{
    uint32_t x = pypto_f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)       /* NaN: quiet it, keep sign and top payload */
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float pypto_to_float(uint16_t h, int dtype)
{
    return dtype == PYPTO_BF16 ? pypto_bf16_to_float(h) : pypto_half_to_float(h);
}

#if defined(__AVX512F__)
static inline __mmask16 pypto_lanes_below(int64_t k)   /* lanes i < k of 16 */
{
    return k <= 0 ? (__mmask16)0 : k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << k) - 1u);
}
#endif

/* Contiguous runs; the dtype branch sits outside the loop so the loop vectorizes. */
static inline void pypto_widen(const uint16_t *restrict src, float *restrict dst, int64_t n, int dtype)
{
    int64_t i;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    /* 16 at a time, the last group masked: rows of under 8 (7x7 images' frames) ran the scalar
     * loop only. fp16 by vcvtph2ps as below (a group holding a NaN takes the scalar path);
     * bf16 is the top half of its fp32. Masked loads read nothing past n. */
    if (dtype == PYPTO_BF16) {
        for (i = 0; i < n; i += 16) {
            const __mmask16 lanes = pypto_lanes_below(n - i);
            const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, src + i));
            _mm512_mask_storeu_epi32(dst + i, lanes, _mm512_slli_epi32(h, 16));
        }
        return;
    }
    {
        const __m256i magnitude = _mm256_set1_epi16(0x7fff), infinity = _mm256_set1_epi16(0x7c00);
        for (i = 0; i < n; i += 16) {
            const __mmask16 lanes = pypto_lanes_below(n - i);
            const __m256i h = _mm256_maskz_loadu_epi16(lanes, src + i);
            if (_mm256_mask_cmpgt_epu16_mask(lanes, _mm256_and_si256(h, magnitude), infinity) == 0) {
                _mm512_mask_storeu_ps(dst + i, lanes, _mm512_cvtph_ps(h));
            } else {
                for (int64_t j = i; j < n && j < i + 16; j++) dst[j] = pypto_half_to_float(src[j]);
            }
        }
        return;
    }
#endif
#if defined(__AVX2__) && defined(__F16C__)
    /* fp16 by F16C's vcvtph2ps, 8 at a time: exact, the scalar function's bits, except that it
     * quiets signalling NaNs; a group holding a NaN takes the scalar path. */
    if (dtype != PYPTO_BF16) {
        const __m128i magnitude = _mm_set1_epi16(0x7fff), infinity = _mm_set1_epi16(0x7c00);
        for (i = 0; i + 8 <= n; i += 8) {
            const __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
            /* magnitudes are below 0x8000: the signed compare is an unsigned one here */
            if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, magnitude), infinity)) == 0) {
                _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
            } else {
                for (int64_t j = i; j < i + 8; j++) dst[j] = pypto_half_to_float(src[j]);
            }
        }
        for (; i < n; i++) dst[i] = pypto_half_to_float(src[i]);
        return;
    }
#endif
#if defined(__aarch64__)
    /* fp16 by the hardware conversion (fcvtl), 4 at a time: exact, the scalar function's bits,
     * except that it quiets signalling NaNs; a group holding a NaN takes the scalar path. */
    if (dtype != PYPTO_BF16) {
        const uint16x4_t magnitude = vdup_n_u16(0x7fff), infinity = vdup_n_u16(0x7c00);
        for (i = 0; i + 4 <= n; i += 4) {
            const uint16x4_t h = vld1_u16(src + i);
            const uint16x4_t nan = vcgt_u16(vand_u16(h, magnitude), infinity);
            if (vget_lane_u64(vreinterpret_u64_u16(nan), 0) == 0) {
                vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(h)));
            } else {
                for (int64_t j = i; j < i + 4; j++) dst[j] = pypto_half_to_float(src[j]);
            }
        }
        for (; i < n; i++) dst[i] = pypto_half_to_float(src[i]);
        return;
    }
#endif
    if (dtype == PYPTO_BF16)
        for (i = 0; i < n; i++) dst[i] = pypto_bf16_to_float(src[i]);
    else
        for (i = 0; i < n; i++) dst[i] = pypto_half_to_float(src[i]);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* 16 floats at once, bit for bit what pypto_float_to_half / pypto_float_to_bf16 give: fp16 by
 * vcvtps2ph (IEEE round-to-nearest-even, subnormals and NaN payloads included), bf16 by
 * vcvtneps2bf16 where the level has it and no lane is an fp32 subnormal, else by the same
 * integer rounding as the scalar function. */
static inline __m256i pypto_narrow16(__m512 v, int dtype)
{
    if (dtype != PYPTO_BF16)
        return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i x = _mm512_castps_si512(v);
#if defined(__AVX512BF16__)
    /* vcvtneps2bf16 rounds to nearest even and quiets a NaN (its top half | 0x40) as the
     * arithmetic below does, in one instruction instead of ten (the write-out of 1x1 layers
     * was a fifth of their time), but takes fp32 subnormals for zero: those go below. */
    const __mmask16 subnormal = _mm512_mask_test_epi32_mask(
        _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7f800000)), x,
        _mm512_set1_epi32(0x007fffff));
    if (subnormal == 0)
        return (__m256i)_mm512_cvtneps_pbh(v);
#endif
    __m512i high = _mm512_srli_epi32(x, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i bias = _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)),
                                    _mm512_set1_epi32(0x7fff));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
    rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(rounded);
}
#endif

#if !(defined(__AVX512F__) && defined(__AVX512BW__)) && defined(__AVX2__) && defined(__F16C__)
/* The AVX2 (+F16C) form of pypto_narrow16: 8 floats at once, the same bits as the scalar
 * functions. */
static inline __m128i pypto_narrow8(__m256 v, int dtype)
{
    if (dtype != PYPTO_BF16)
        return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i x = _mm256_castps_si256(v);
    __m256i high = _mm256_srli_epi32(x, 16);
    /* NaN: |x| > 0x7f800000, compared as signed ints (both sides are non-negative) */
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    __m256i bias = _mm256_add_epi32(_mm256_and_si256(high, _mm256_set1_epi32(1)),
                                    _mm256_set1_epi32(0x7fff));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
    rounded = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, _mm256_set1_epi32(0x40)), nan);
    /* 8 x 32-bit (each < 0x10000) -> 8 x 16-bit */
    __m128i lo = _mm256_castsi256_si128(rounded), hi = _mm256_extracti128_si256(rounded, 1);
    return _mm_packus_epi32(lo, hi);
}
#endif

static inline void pypto_narrow(const float *restrict src, uint16_t *restrict dst, int64_t n, int dtype)
{
    int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    /* whole vectors, then one masked vector: rows are often shorter than 16 */
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), pypto_narrow16(_mm512_loadu_ps(src + i), dtype));
    if (i < n) {
        __mmask16 tail = (__mmask16)((1u << (n - i)) - 1u);
        _mm256_mask_storeu_epi16(dst + i, tail,
                                 pypto_narrow16(_mm512_maskz_loadu_ps(tail, src + i), dtype));
    }
    return;
#elif defined(__AVX2__) && defined(__F16C__)
    for (; i + 8 <= n; i += 8)    /* whole vectors; the tail below stays scalar */
        _mm_storeu_si128((__m128i *)(dst + i), pypto_narrow8(_mm256_loadu_ps(src + i), dtype));
#endif
    if (dtype == PYPTO_BF16)
        for (; i < n; i++) dst[i] = pypto_float_to_bf16(src[i]);
    else
        for (; i < n; i++) dst[i] = pypto_float_to_half(src[i]);
}

#endif
