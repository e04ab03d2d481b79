/* Memory helpers of the kernel's loops: the one-pass magnitude scan (Inf/NaN, least exponent),
 * strided gathers and short zero fills for the weight panels, prefetches of plane-strided rows,
 * and the rows of the zero-haloed dy frame (fp32, or bf16 channel pairs). */
#ifndef PYPTO_MEMOPS_H
#define PYPTO_MEMOPS_H

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "pypto_convert.h"

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


/* dst[i] = the 32-bit element src[i * stride] for i < n (n, stride small: a column of a weight
 * block, its transpose): fp32 values or bf16 pairs, bits moved, never converted. AVX-512
 * gathers 16 at a time, the tail under a mask; elsewhere, and for at most 8 (the pixel kernels'
 * 8-channel panels), a plain loop. */
static inline void pypto_gather32(const void *restrict src, int64_t stride, int64_t n,
                                  void *restrict dst)
{
    const char *from = (const char *)src;
    char *to = (char *)dst;
    int64_t i = 0;
#if defined(__AVX512F__)
    if (stride == 1) {   /* a 1x1 layer's block: a copy (its gathers were 60% of the pack) */
        for (; i < n; i += 16) {
            const __mmask16 lanes = pypto_lanes_below(n - i);
            _mm512_mask_storeu_epi32(to + 4 * i, lanes,
                                     _mm512_maskz_loadu_epi32(lanes, from + 4 * i));
        }
        return;
    }
    /* at most 8: the plain loop below (a masked gather costs as much as 16 loads: 2.6 of a
     * small call's 13.6 us) */
    if (n > 8) {
        const __m512i index = _mm512_mullo_epi32(_mm512_set1_epi32((int)stride),
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_si512(to + 4 * i,
                                _mm512_i32gather_epi32(index, from + 4 * i * stride, 4));
        if (i < n) {
            const __mmask16 tail = pypto_lanes_below(n - i);
            _mm512_mask_storeu_epi32(to + 4 * i, tail, _mm512_mask_i32gather_epi32(
                _mm512_setzero_si512(), tail, index, from + 4 * i * stride, 4));
        }
        return;
    }
#endif
    for (; i < n; i++)
        memcpy(to + 4 * i, from + 4 * i * stride, 4);
}

/* dst[i] = a[i] | b[i] << 16 (b NULL: 0), for i < n: two output channels' weights as the bf16
 * dot product's pairs. A plain loop the compiler vectorizes. */
static inline void pypto_pair16(const uint16_t *restrict a, const uint16_t *restrict b,
                                int64_t n, uint32_t *restrict dst)
{
    if (b == NULL) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = a[i];
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = (uint32_t)a[i] | ((uint32_t)b[i] << 16);
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

/* dst[i * step] = 0 for i < n: the output columns of a stride phase without taps. Step 1 is one
 * memset; step 2 on AVX-512 one masked store of 16 columns' even 16-bit lanes (16 scalar
 * stores where there were a transpose and a store of zeros per 16 x 16 block: 1x1/2 layers). */
static inline void pypto_zero_every(uint16_t *dst, int64_t n, int64_t step)
{
    if (step == 1) {
        memset(dst, 0, (size_t)n * sizeof(uint16_t));
        return;
    }
#if defined(__AVX512F__) && defined(__AVX512BW__)
    if (step == 2) {
        for (int64_t i = 0; i < n; i += 16) {
            const int64_t left = n - i < 16 ? n - i : 16;
            _mm512_mask_storeu_epi16(dst + 2 * i,
                                     (__mmask32)(0x55555555ull & ((1ull << (2 * left)) - 1u)),
                                     _mm512_setzero_si512());
        }
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        dst[i * step] = 0;
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
#if defined(__AVX512F__) && defined(__AVX512BW__)
    /* A row of at most 16 (7x7 and 8x8 images with their halo): one masked load per channel
     * and one store; the loop below ran its scalar tail only (8-12% of such layers). */
    if (n <= 16) {
        const __mmask16 in = (__mmask16)(pypto_lanes_below(hi) & ~pypto_lanes_below(lo));
        __m512i pairs = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(in, a));
        if (b)
            pairs = _mm512_or_si512(pairs, _mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(in, b)), 16));
        _mm512_mask_storeu_epi32(dst, pypto_lanes_below(n), pairs);
        return;
    }
#endif
    pypto_zero32(dst, lo);
    if (b)
        for (j = lo; j < hi; j++) dst[j] = (uint32_t)a[j] | ((uint32_t)b[j] << 16);
    else
        for (j = lo; j < hi; j++) dst[j] = a[j];
    pypto_zero32(dst + hi, n - hi);
}

#endif
