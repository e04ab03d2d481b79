/* Exact conversions between fp32 and the 16-bit storage types (fp16, bf16).
 *
 * Widening is exact. Narrowing rounds to nearest, ties to even, once: that is the op's only
 * rounding. Everything is branch-light integer/float arithmetic that gcc vectorizes at every
 * ISA level (gcc 12 never emits vcvtph2ps on its own, and a (float)(_Float16) cast is scalar);
 * narrowing also has explicit AVX-512 and AVX2 forms (pypto_narrow16/8; AVX-512 masks the tail),
 * checked bit for bit against the scalar functions on every fp32 pattern.
 * Bit-exactness against NumPy (fp16) and ml_dtypes (bf16) is tested on every 16-bit pattern.
 * Needs IEEE fp32 without flush-to-zero: never build with -ffast-math.
 */
#ifndef PYPTO_NUMERIC_H
#define PYPTO_NUMERIC_H

#include <stdint.h>
#include <string.h>
#if (defined(__AVX512F__) && defined(__AVX512BW__)) || (defined(__AVX2__) && defined(__F16C__))
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

/* Contiguous runs; the dtype branch sits outside the loop so the loop vectorizes. */
static inline void pypto_widen(const uint16_t *restrict src, float *restrict dst, int64_t n, int dtype)
{
    int64_t i;
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
 * vcvtps2ph (IEEE round-to-nearest-even, subnormals and NaN payloads included), bf16 by the
 * same integer rounding as the scalar function. */
static inline __m256i pypto_narrow16(__m512 v, int dtype)
{
    if (dtype != PYPTO_BF16)
        return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i x = _mm512_castps_si512(v);
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

/* The least nonzero and the largest magnitude (sign bit cleared) of n fp16/bf16 patterns, in one
 * pass: *least_minus_one = min(magnitude - 1) in unsigned 16-bit arithmetic (a zero wraps to
 * 0xffff, above every nonzero one), *most = max(magnitude). An and, a subtract, an unsigned min
 * and max per element: four instructions per vector. The largest tells Inf/NaN (at least the
 * all-ones exponent); the least gives the least exponent (pypto_bf16_least_exponent). */
static inline void pypto_magnitudes(const uint16_t *restrict x, int64_t n,
                                    uint16_t *least_minus_one, uint16_t *most)
{
    uint16_t least = 0xffffu, largest = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t magnitude = (uint16_t)(x[i] & 0x7fffu);
        const uint16_t key = (uint16_t)(magnitude - 1u);
        least = key < least ? key : least;
        largest = magnitude > largest ? magnitude : largest;
    }
    *least_minus_one = least;
    *most = largest;
}

/* Smallest biased exponent among nonzero bf16 values from pypto_magnitudes' least (255 when all
 * are zero; 0 when any is subnormal). With two such exponents Ed and Ew, every product of a
 * nonzero dy and w is a multiple of 2^(Ed-127 + Ew-127 - 14), and so is every fp32 partial sum
 * of them: when Ed + Ew >= 142 none can be a nonzero value below 2^-126, so the bf16
 * dot-product instruction's flush of subnormals never changes a bit. */
static inline int pypto_bf16_least_exponent(uint16_t least_minus_one)
{
    return least_minus_one == 0xffffu ? 255 : (int)(((uint32_t)least_minus_one + 1u) >> 7);
}

#if defined(__AVX512F__)
static inline __mmask16 pypto_lanes_below(int64_t k)   /* lanes i < k of 16 */
{
    return k <= 0 ? (__mmask16)0 : k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << k) - 1u);
}
#endif

/* dst[i] = src[i * stride] for i < n (n, stride small: a weight block's transpose). AVX-512
 * gathers 16 at a time, the tail under a mask; elsewhere a plain loop. */
static inline void pypto_gather_f32(const float *restrict src, int64_t stride, int64_t n,
                                    float *restrict dst)
{
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512i index = _mm512_mullo_epi32(_mm512_set1_epi32((int)stride),
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_i32gather_ps(index, src + i * stride, 4));
    if (i < n) {
        const __mmask16 tail = pypto_lanes_below(n - i);
        _mm512_mask_storeu_ps(dst + i, tail, _mm512_mask_i32gather_ps(
            _mm512_setzero_ps(), tail, index, src + i * stride, 4));
    }
    return;
#endif
    for (; i < n; i++)
        dst[i] = src[i * stride];
}

/* dst[0 .. n) = 0 for 32-bit elements. AVX-512 (AVX2) stores 16 (8) at a time under a mask:
 * GCC turns the plain loop into a memset call, which costs more than the store on the short
 * runs here (a frame row's halo, a weight panel's padding rows). */
static inline void pypto_zero32(void *dst, int64_t n)
{
#if defined(__AVX512F__) && defined(__AVX512BW__)
    for (int64_t j = 0; j < n; j += 16)
        _mm512_mask_storeu_epi32((uint32_t *)dst + j, pypto_lanes_below(n - j),
                                 _mm512_setzero_si512());
#elif defined(__AVX2__)
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t j = 0; j < n; j += 8) {
        const int64_t left = n - j;
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 8 ? left : 8)),
                                                lane);
        _mm256_maskstore_epi32((int *)dst + j, mask, _mm256_setzero_si256());
    }
#else
    for (int64_t j = 0; j < n; j++) ((uint32_t *)dst)[j] = 0;
#endif
}

/* Prefetch the cache lines of n 16-bit values from p, to read (the frame fill's dy rows some
 * channels ahead) or, with for_write, to write (the write-out's next output rows). Such rows
 * are a channel plane apart, which the hardware prefetchers do not follow. for_write is a
 * constant at every call, so each inlined copy keeps one of the two prefetches. (The write hint
 * becomes prefetchw only where the target has it; the x86 levels' -march flags do not enable
 * it, so there both are prefetcht0, and the measured gains came from that.) */
static inline void pypto_prefetch_row(const uint16_t *p, int64_t n, int for_write)
{
    const char *first = (const char *)p, *last = (const char *)(p + n - 1);
    for (const char *q = first; q <= last; q += 64) {
        if (for_write) __builtin_prefetch(q, 1, 3);
        else __builtin_prefetch(q, 0, 3);
    }
    if (for_write) __builtin_prefetch(last, 1, 3);   /* a row that starts inside a line */
    else __builtin_prefetch(last, 0, 3);
}

/* One row of the dgrad's dy frame: dst[j] = src[j] widened to fp32 for lo <= j < hi, 0
 * elsewhere in [0, n) (the zero halo). Inline loops: rows are short and libc calls would cost
 * more than the copy. */
static inline void pypto_frame_row_f32(const uint16_t *restrict src, int64_t lo, int64_t hi,
                                        int64_t n, float *restrict dst, int dtype)
{
    pypto_zero32(dst, lo);
    pypto_widen(src + lo, dst + lo, hi - lo, dtype);
    pypto_zero32(dst + hi, n - hi);
}

/* The bf16 dot product's frame row: dst[j] = (a[j], b[j]) as one uint32 for lo <= j < hi
 * (b may be NULL: a zero second channel), 0 elsewhere in [0, n). The copy is a plain loop that
 * GCC vectorizes with whole-vector loads: AVX-512 masked loads of the same rows measured 3x
 * slower where dy comes from memory (case f: the fill went from 14% to half of the call). */
static inline void pypto_frame_row_pairs(const uint16_t *restrict a, const uint16_t *restrict b,
                                          int64_t lo, int64_t hi, int64_t n,
                                          uint32_t *restrict dst)
{
    int64_t j;
    pypto_zero32(dst, lo);
    if (b)
        for (j = lo; j < hi; j++) dst[j] = (uint32_t)a[j] | ((uint32_t)b[j] << 16);
    else
        for (j = lo; j < hi; j++) dst[j] = a[j];
    pypto_zero32(dst + hi, n - hi);
}

#endif
