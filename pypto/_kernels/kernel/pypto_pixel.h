/* Pixel-vector kernels, every level: C[MR x NR] += W[MR x kc] * A[kc x NR] with C rows input
 * channels and C columns output pixels (fp32 FMA and the bf16 dot product, the narrower
 * *_half / *_quarter forms for a tile's last block), and pypto_pack_a, which copies a register
 * block of A out of the frame into a panel. */
#ifndef PYPTO_PIXEL_H
#define PYPTO_PIXEL_H

#include "pypto_isa.h"

/* C rows are input channels, C columns output pixels, so A is read in contiguous vectors and W
 * is broadcast. W is packed as [k][MR] (MR channel weights per k). A row k starts at
 * a_rows[k] + j0: either a shifted view of the zero-haloed dy frame (one shift per kernel tap,
 * halo columns computed and discarded), or, where enough channel blocks share it, a panel that
 * pypto_pack_a copied out of those views with the halo left out (a_rows[k] = panel + k*NR,
 * j0 = 0: aligned, consecutive rows). The block sizes per level are in pypto_isa.h.
 *
 * The AVX-512 and AVX2 kernels also come in a 16-column form (the *_half variants) for an M
 * tile's last block, and AVX2 in an 8-column form (*_quarter) for its last <= 8 positions. */

#if defined(PYPTO_ISA_BASELINE) && !defined(PYPTO_NEON)
/* the portable level's 4-float vector (GCC/Clang vector extensions) */
typedef float pypto_v4 __attribute__((vector_size(16)));
static inline pypto_v4 pypto_v4_load(const float *p) { pypto_v4 v; memcpy(&v, p, sizeof v); return v; }
static inline void pypto_v4_store(float *p, pypto_v4 v) { memcpy(p, &v, sizeof v); }
#endif

#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512)
/* The 8x32 fp32 accumulator block of the AVX-512 kernels: two zmm per channel row, as 16 named
 * variables (with arrays gcc kept a stack copy of the block and moved it in and out on every
 * call). PYPTO_Z_ROWS(X) expands X for each row r; X uses c<r>0, c<r>1. */
#define PYPTO_Z_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define PYPTO_Z_LOAD(r) __m512 c##r##0 = _mm512_loadu_ps(c + (r) * ldc), \
                               c##r##1 = _mm512_loadu_ps(c + (r) * ldc + 16);
#define PYPTO_Z_STORE(r) _mm512_storeu_ps(c + (r) * ldc, c##r##0); \
                         _mm512_storeu_ps(c + (r) * ldc + 16, c##r##1);
/* the 16-column (half) kernels' rows: one zmm each, c<r> */
#define PYPTO_H_LOAD(r) __m512 c##r = _mm512_loadu_ps(c + (r) * ldc);
#define PYPTO_H_STORE(r) _mm512_storeu_ps(c + (r) * ldc, c##r);
#endif

/* A register block of NR positions, k-major: a[k*NR + j] = a_rows[k][position j], 4-byte
 * elements (fp32, or bf16 pairs). The positions are n_runs runs of consecutive frame
 * positions: run s starts at frame offset runs[3s], block column runs[3s+1], and is runs[3s+2]
 * long; columns from `filled` to NR are zero. `a` is 64-byte aligned with 8 elements of slack
 * after its last row. Inline copies only: a libc call per run and row (what gcc makes of a
 * copy loop) cost more than the copy itself. */
#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512)
/* AVX-512: a row is two zmm; each run is merged into them by masked loads from the frame,
 * shifted so that its first element lands in its column (masked-off lanes never fault). */
static inline void pypto_pack_a(int64_t kc, const void *const *a_rows, const int64_t *runs,
                                int n_runs, int64_t filled, uint32_t *restrict a)
{
    (void)filled;  /* columns outside every run stay zero */
    __mmask16 lo[32], hi[32];
    int64_t shift[32];
    for (int s = 0; s < n_runs; s++) {
        const int64_t col = runs[3 * s + 1], len = runs[3 * s + 2];
        const uint32_t bits = (uint32_t)(((1ull << len) - 1) << col);
        lo[s] = (__mmask16)(bits & 0xffffu);
        hi[s] = (__mmask16)(bits >> 16);
        shift[s] = runs[3 * s] - col;
    }
    for (int64_t k = 0; k < kc; k++) {
        const uintptr_t src = (uintptr_t)a_rows[k];
        __m512i r0 = _mm512_setzero_si512(), r1 = _mm512_setzero_si512();
        for (int s = 0; s < n_runs; s++) {
            const void *from = (const void *)(src + (uintptr_t)(shift[s] * 4));
            r0 = _mm512_mask_loadu_epi32(r0, lo[s], from);
            r1 = _mm512_mask_loadu_epi32(r1, hi[s], (const void *)((uintptr_t)from + 64));
        }
        _mm512_store_si512((void *)(a + k * 32), r0);
        _mm512_store_si512((void *)(a + k * 32 + 16), r1);
    }
}
#else
/* Elsewhere: runs copied 8 elements at a time as one vector (AVX2 ymm, else two 16-byte
 * halves); a copy may run up to 7 past a run's end, in the frame (which has that slack) and in
 * `a` (later runs and rows overwrite it). */
typedef uint32_t pypto_u8x32 __attribute__((vector_size(32), aligned(4), may_alias));
static inline void pypto_pack_a(int64_t kc, const void *const *a_rows, const int64_t *runs,
                                int n_runs, int64_t filled, uint32_t *restrict a)
{
    for (int64_t k = 0; k < kc; k++) {
        const uint32_t *src = (const uint32_t *)a_rows[k];
        uint32_t *row = a + k * PYPTO_NR;
        for (int s = 0; s < n_runs; s++) {
            const pypto_u8x32 *from = (const pypto_u8x32 *)(src + runs[3 * s]);
            pypto_u8x32 *to = (pypto_u8x32 *)(row + runs[3 * s + 1]);
            for (int64_t i = 0; i < runs[3 * s + 2]; i += 8)
                *to++ = *from++;
        }
        for (int64_t j = filled; j < PYPTO_NR; j++)
            row[j] = 0;
    }
}
#endif

/* C[r*ldc + j] += sum_{k < kc} w[k*MR + r] * a_rows[k][j0 + j], r < MR, j < NR. */
static inline void pypto_ukernel_f32(int64_t kc, const float *restrict w,
                                     const float *const *a_rows, int64_t j0,
                                     float *restrict c, int64_t ldc)
{
#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512)
    PYPTO_Z_ROWS(PYPTO_Z_LOAD)
    for (int64_t k = 0; k < kc; k++) {
        const float *a = a_rows[k] + j0;
        const __m512 a0 = _mm512_loadu_ps(a), a1 = _mm512_loadu_ps(a + 16);
#define PYPTO_Z_FMA(r) { const __m512 b = _mm512_set1_ps(w[k * 8 + (r)]); \
                         c##r##0 = _mm512_fmadd_ps(b, a0, c##r##0); \
                         c##r##1 = _mm512_fmadd_ps(b, a1, c##r##1); }
        PYPTO_Z_ROWS(PYPTO_Z_FMA)
#undef PYPTO_Z_FMA
    }
    PYPTO_Z_ROWS(PYPTO_Z_STORE)
#elif defined(PYPTO_ISA_AVX2)
    /* Twelve named accumulators: with an array gcc spills some of them to the stack inside the
     * loop (12 + 3 + 1 live values fill all 16 ymm registers), which halves the speed. */
#define PYPTO_ACC_LOAD(r, v) _mm256_loadu_ps(c + (r) * ldc + 8 * (v))
#define PYPTO_ACC_STORE(r, v, x) _mm256_storeu_ps(c + (r) * ldc + 8 * (v), (x))
    __m256 c00 = PYPTO_ACC_LOAD(0, 0), c01 = PYPTO_ACC_LOAD(0, 1), c02 = PYPTO_ACC_LOAD(0, 2);
    __m256 c10 = PYPTO_ACC_LOAD(1, 0), c11 = PYPTO_ACC_LOAD(1, 1), c12 = PYPTO_ACC_LOAD(1, 2);
    __m256 c20 = PYPTO_ACC_LOAD(2, 0), c21 = PYPTO_ACC_LOAD(2, 1), c22 = PYPTO_ACC_LOAD(2, 2);
    __m256 c30 = PYPTO_ACC_LOAD(3, 0), c31 = PYPTO_ACC_LOAD(3, 1), c32 = PYPTO_ACC_LOAD(3, 2);
    for (int64_t k = 0; k < kc; k++) {
        const float *a = a_rows[k] + j0;
        __m256 a0 = _mm256_loadu_ps(a), a1 = _mm256_loadu_ps(a + 8), a2 = _mm256_loadu_ps(a + 16);
        __m256 b = _mm256_broadcast_ss(w + k * 4);
        c00 = _mm256_fmadd_ps(b, a0, c00), c01 = _mm256_fmadd_ps(b, a1, c01), c02 = _mm256_fmadd_ps(b, a2, c02);
        b = _mm256_broadcast_ss(w + k * 4 + 1);
        c10 = _mm256_fmadd_ps(b, a0, c10), c11 = _mm256_fmadd_ps(b, a1, c11), c12 = _mm256_fmadd_ps(b, a2, c12);
        b = _mm256_broadcast_ss(w + k * 4 + 2);
        c20 = _mm256_fmadd_ps(b, a0, c20), c21 = _mm256_fmadd_ps(b, a1, c21), c22 = _mm256_fmadd_ps(b, a2, c22);
        b = _mm256_broadcast_ss(w + k * 4 + 3);
        c30 = _mm256_fmadd_ps(b, a0, c30), c31 = _mm256_fmadd_ps(b, a1, c31), c32 = _mm256_fmadd_ps(b, a2, c32);
    }
    PYPTO_ACC_STORE(0, 0, c00), PYPTO_ACC_STORE(0, 1, c01), PYPTO_ACC_STORE(0, 2, c02);
    PYPTO_ACC_STORE(1, 0, c10), PYPTO_ACC_STORE(1, 1, c11), PYPTO_ACC_STORE(1, 2, c12);
    PYPTO_ACC_STORE(2, 0, c20), PYPTO_ACC_STORE(2, 1, c21), PYPTO_ACC_STORE(2, 2, c22);
    PYPTO_ACC_STORE(3, 0, c30), PYPTO_ACC_STORE(3, 1, c31), PYPTO_ACC_STORE(3, 2, c32);
#undef PYPTO_ACC_LOAD
#undef PYPTO_ACC_STORE
#elif defined(PYPTO_NEON)
    /* 8 channel rows x 12 positions: 24 named accumulators, 3 A vectors and 2 W vectors (the 8
     * weights of this k) = 29 of the 32 registers. Per k: 5 loads, 24 fmla (by lane). The
     * products of two fp16/bf16 values are exact in fp32, so the FMA rounds like the x86 FMA
     * levels do: the same bits. */
#define PYPTO_ACC_DECLARE(r) \
    float32x4_t c##r##0 = vld1q_f32(c + (r) * ldc), c##r##1 = vld1q_f32(c + (r) * ldc + 4), \
                c##r##2 = vld1q_f32(c + (r) * ldc + 8);
#define PYPTO_ACC_STEP(r, wv, lane) \
    c##r##0 = vfmaq_laneq_f32(c##r##0, a0, wv, lane); \
    c##r##1 = vfmaq_laneq_f32(c##r##1, a1, wv, lane); \
    c##r##2 = vfmaq_laneq_f32(c##r##2, a2, wv, lane);
#define PYPTO_ACC_STORE(r) \
    vst1q_f32(c + (r) * ldc, c##r##0), vst1q_f32(c + (r) * ldc + 4, c##r##1), \
    vst1q_f32(c + (r) * ldc + 8, c##r##2);
    PYPTO_ACC_DECLARE(0) PYPTO_ACC_DECLARE(1) PYPTO_ACC_DECLARE(2) PYPTO_ACC_DECLARE(3)
    PYPTO_ACC_DECLARE(4) PYPTO_ACC_DECLARE(5) PYPTO_ACC_DECLARE(6) PYPTO_ACC_DECLARE(7)
    for (int64_t k = 0; k < kc; k++) {
        const float *a = a_rows[k] + j0;
        const float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4), a2 = vld1q_f32(a + 8);
        const float32x4_t w0 = vld1q_f32(w + k * 8), w1 = vld1q_f32(w + k * 8 + 4);
        PYPTO_ACC_STEP(0, w0, 0) PYPTO_ACC_STEP(1, w0, 1) PYPTO_ACC_STEP(2, w0, 2)
        PYPTO_ACC_STEP(3, w0, 3) PYPTO_ACC_STEP(4, w1, 0) PYPTO_ACC_STEP(5, w1, 1)
        PYPTO_ACC_STEP(6, w1, 2) PYPTO_ACC_STEP(7, w1, 3)
    }
    PYPTO_ACC_STORE(0) PYPTO_ACC_STORE(1) PYPTO_ACC_STORE(2) PYPTO_ACC_STORE(3)
    PYPTO_ACC_STORE(4) PYPTO_ACC_STORE(5) PYPTO_ACC_STORE(6) PYPTO_ACC_STORE(7)
#undef PYPTO_ACC_DECLARE
#undef PYPTO_ACC_STEP
#undef PYPTO_ACC_STORE
#else
    /* Eight named 4-float vectors (GCC/Clang vector extensions: SSE on x86, NEON on AArch64):
     * plain float arrays here were spilled to the stack inside the loop. The products of two
     * fp16/bf16 values are exact in fp32, so b * a + acc rounds once, like an FMA. */
    pypto_v4 c00 = pypto_v4_load(c), c01 = pypto_v4_load(c + 4);
    pypto_v4 c10 = pypto_v4_load(c + ldc), c11 = pypto_v4_load(c + ldc + 4);
    pypto_v4 c20 = pypto_v4_load(c + 2 * ldc), c21 = pypto_v4_load(c + 2 * ldc + 4);
    pypto_v4 c30 = pypto_v4_load(c + 3 * ldc), c31 = pypto_v4_load(c + 3 * ldc + 4);
    for (int64_t k = 0; k < kc; k++) {
        const float *a = a_rows[k] + j0;
        pypto_v4 a0 = pypto_v4_load(a), a1 = pypto_v4_load(a + 4);
        const float *b = w + k * 4;
        c00 += b[0] * a0, c01 += b[0] * a1;
        c10 += b[1] * a0, c11 += b[1] * a1;
        c20 += b[2] * a0, c21 += b[2] * a1;
        c30 += b[3] * a0, c31 += b[3] * a1;
    }
    pypto_v4_store(c, c00), pypto_v4_store(c + 4, c01);
    pypto_v4_store(c + ldc, c10), pypto_v4_store(c + ldc + 4, c11);
    pypto_v4_store(c + 2 * ldc, c20), pypto_v4_store(c + 2 * ldc + 4, c21);
    pypto_v4_store(c + 3 * ldc, c30), pypto_v4_store(c + 3 * ldc + 4, c31);
#endif
}

/* bf16 dot-product kernel: k in pairs. a_rows[kp][j0 + j] holds (A[2kp][j], A[2kp+1][j]) as
 * two bf16 in one uint32; w[kp*MR + r] holds (W[r][2kp], W[r][2kp+1]). Products of bf16 are exact
 * in fp32; vdpbf16ps adds them to the accumulator with round-to-nearest-even, treating
 * subnormal inputs and results as zero (its fixed DAZ/FTZ behaviour): the caller uses this
 * kernel only for data where no subnormal can arise (pypto_bf16_least_exponent). */
static inline void pypto_ukernel_bf16(int64_t kc_pairs, const uint32_t *restrict w,
                                      const uint32_t *const *a_rows, int64_t j0,
                                      float *restrict c, int64_t ldc)
{
#ifdef PYPTO_ISA_AVX512BF16
    PYPTO_Z_ROWS(PYPTO_Z_LOAD)
    for (int64_t kp = 0; kp < kc_pairs; kp++) {
        const uint32_t *a = a_rows[kp] + j0;
        const __m512bh a0 = (__m512bh)_mm512_loadu_si512((const void *)a);
        const __m512bh a1 = (__m512bh)_mm512_loadu_si512((const void *)(a + 16));
#define PYPTO_Z_DOT(r) { const __m512bh b = (__m512bh)_mm512_set1_epi32((int)w[kp * 8 + (r)]); \
                         c##r##0 = _mm512_dpbf16_ps(c##r##0, a0, b); \
                         c##r##1 = _mm512_dpbf16_ps(c##r##1, a1, b); }
        PYPTO_Z_ROWS(PYPTO_Z_DOT)
#undef PYPTO_Z_DOT
    }
    PYPTO_Z_ROWS(PYPTO_Z_STORE)
#else
    (void)kc_pairs; (void)w; (void)a_rows; (void)j0; (void)c; (void)ldc;  /* never called */
#endif
}

/* The last register block of an M tile often holds few positions: these variants compute
 * C[MR x PYPTO_NR_HALF] only (same k order, so the same bits): 8x16 on AVX-512, 4x16 on AVX2
 * (of its 24 columns). Elsewhere PYPTO_NR_HALF is NR and they are the full kernels. */
static inline void pypto_ukernel_f32_half(int64_t kc, const float *restrict w,
                                          const float *const *a_rows, int64_t j0,
                                          float *restrict c, int64_t ldc)
{
#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512)
    PYPTO_Z_ROWS(PYPTO_H_LOAD)
    for (int64_t k = 0; k < kc; k++) {
        const __m512 a = _mm512_loadu_ps(a_rows[k] + j0);
#define PYPTO_H_FMA(r) c##r = _mm512_fmadd_ps(_mm512_set1_ps(w[k * 8 + (r)]), a, c##r);
        PYPTO_Z_ROWS(PYPTO_H_FMA)
#undef PYPTO_H_FMA
    }
    PYPTO_Z_ROWS(PYPTO_H_STORE)
#elif defined(PYPTO_ISA_AVX2)
    __m256 c00 = _mm256_loadu_ps(c), c01 = _mm256_loadu_ps(c + 8);
    __m256 c10 = _mm256_loadu_ps(c + ldc), c11 = _mm256_loadu_ps(c + ldc + 8);
    __m256 c20 = _mm256_loadu_ps(c + 2 * ldc), c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
    __m256 c30 = _mm256_loadu_ps(c + 3 * ldc), c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
    for (int64_t k = 0; k < kc; k++) {
        const float *a = a_rows[k] + j0;
        const __m256 a0 = _mm256_loadu_ps(a), a1 = _mm256_loadu_ps(a + 8);
        __m256 b = _mm256_broadcast_ss(w + k * 4);
        c00 = _mm256_fmadd_ps(b, a0, c00), c01 = _mm256_fmadd_ps(b, a1, c01);
        b = _mm256_broadcast_ss(w + k * 4 + 1);
        c10 = _mm256_fmadd_ps(b, a0, c10), c11 = _mm256_fmadd_ps(b, a1, c11);
        b = _mm256_broadcast_ss(w + k * 4 + 2);
        c20 = _mm256_fmadd_ps(b, a0, c20), c21 = _mm256_fmadd_ps(b, a1, c21);
        b = _mm256_broadcast_ss(w + k * 4 + 3);
        c30 = _mm256_fmadd_ps(b, a0, c30), c31 = _mm256_fmadd_ps(b, a1, c31);
    }
    _mm256_storeu_ps(c, c00), _mm256_storeu_ps(c + 8, c01);
    _mm256_storeu_ps(c + ldc, c10), _mm256_storeu_ps(c + ldc + 8, c11);
    _mm256_storeu_ps(c + 2 * ldc, c20), _mm256_storeu_ps(c + 2 * ldc + 8, c21);
    _mm256_storeu_ps(c + 3 * ldc, c30), _mm256_storeu_ps(c + 3 * ldc + 8, c31);
#else
    pypto_ukernel_f32(kc, w, a_rows, j0, c, ldc);
#endif
}

static inline void pypto_ukernel_bf16_half(int64_t kc_pairs, const uint32_t *restrict w,
                                           const uint32_t *const *a_rows, int64_t j0,
                                           float *restrict c, int64_t ldc)
{
#ifdef PYPTO_ISA_AVX512BF16
    PYPTO_Z_ROWS(PYPTO_H_LOAD)
    for (int64_t kp = 0; kp < kc_pairs; kp++) {
        const __m512bh a = (__m512bh)_mm512_loadu_si512((const void *)(a_rows[kp] + j0));
#define PYPTO_H_DOT(r) \
        c##r = _mm512_dpbf16_ps(c##r, a, (__m512bh)_mm512_set1_epi32((int)w[kp * 8 + (r)]));
        PYPTO_Z_ROWS(PYPTO_H_DOT)
#undef PYPTO_H_DOT
    }
    PYPTO_Z_ROWS(PYPTO_H_STORE)
#else
    pypto_ukernel_bf16(kc_pairs, w, a_rows, j0, c, ldc);
#endif
}

/* AVX2: C[8 x 8] for the last <= 8 positions of an M tile. One 8-wide vector on MR = 4 rows
 * would leave 4 accumulators, too few to hide the FMA latency, so it takes two channel blocks:
 * rows 0..3 from w, rows 4..7 (at c + 4*ldc) from w_next, each packed [k][4]. Per k: 1 A load,
 * 8 broadcasts, 8 FMA, for 2 blocks (the half kernel: 2 loads, 4 broadcasts, 8 FMA for one).
 * Same k order, so the same bits. On AVX-512 an 8-column kernel is no faster than the
 * 16-column one (the broadcasts bound both), so there and elsewhere this is the half kernel. */
static inline void pypto_ukernel_f32_quarter(int64_t kc, const float *restrict w,
                                             const float *restrict w_next,
                                             const float *const *a_rows, int64_t j0,
                                             float *restrict c, int64_t ldc)
{
#if defined(PYPTO_ISA_AVX2)
    __m256 c0 = _mm256_loadu_ps(c), c1 = _mm256_loadu_ps(c + ldc);
    __m256 c2 = _mm256_loadu_ps(c + 2 * ldc), c3 = _mm256_loadu_ps(c + 3 * ldc);
    __m256 c4 = _mm256_loadu_ps(c + 4 * ldc), c5 = _mm256_loadu_ps(c + 5 * ldc);
    __m256 c6 = _mm256_loadu_ps(c + 6 * ldc), c7 = _mm256_loadu_ps(c + 7 * ldc);
    for (int64_t k = 0; k < kc; k++) {
        const __m256 a = _mm256_loadu_ps(a_rows[k] + j0);
        const float *b0 = w + k * 4, *b1 = w_next + k * 4;
        c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(b0), a, c0);
        c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(b0 + 1), a, c1);
        c2 = _mm256_fmadd_ps(_mm256_broadcast_ss(b0 + 2), a, c2);
        c3 = _mm256_fmadd_ps(_mm256_broadcast_ss(b0 + 3), a, c3);
        c4 = _mm256_fmadd_ps(_mm256_broadcast_ss(b1), a, c4);
        c5 = _mm256_fmadd_ps(_mm256_broadcast_ss(b1 + 1), a, c5);
        c6 = _mm256_fmadd_ps(_mm256_broadcast_ss(b1 + 2), a, c6);
        c7 = _mm256_fmadd_ps(_mm256_broadcast_ss(b1 + 3), a, c7);
    }
    _mm256_storeu_ps(c, c0), _mm256_storeu_ps(c + ldc, c1);
    _mm256_storeu_ps(c + 2 * ldc, c2), _mm256_storeu_ps(c + 3 * ldc, c3);
    _mm256_storeu_ps(c + 4 * ldc, c4), _mm256_storeu_ps(c + 5 * ldc, c5);
    _mm256_storeu_ps(c + 6 * ldc, c6), _mm256_storeu_ps(c + 7 * ldc, c7);
#else
    (void)w_next;
    pypto_ukernel_f32_half(kc, w, a_rows, j0, c, ldc);
#endif
}

#endif
