/* Few-channel kernels (AVX-512 levels): 4 channel rows x 64 positions, for tiles of at most 4
 * input channels (an RGB stem: Cin = 3). Other levels have stubs (pypto_isa.h). */
#ifndef PYPTO_FEW_H
#define PYPTO_FEW_H

#include "pypto_isa.h"

/* Where the 8-row pixel-vector kernels would compute half or more of their rows on padding.
 * W is packed [k][4] (bf16: [k/2][4] pairs); A rows are read from the frame like the
 * pixel-vector kernels' unpacked rows. Same k order as every kernel, so the same bits. */
#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512)
#define PYPTO_FEW_ROWS(X) X(0) X(1) X(2) X(3)
#define PYPTO_FEW_LOAD(r) __m512 c##r##0 = _mm512_loadu_ps(c + (r) * ldc), \
    c##r##1 = _mm512_loadu_ps(c + (r) * ldc + 16), c##r##2 = _mm512_loadu_ps(c + (r) * ldc + 32), \
    c##r##3 = _mm512_loadu_ps(c + (r) * ldc + 48);

static inline void pypto_ukernel_few_f32(int64_t kc, const float *restrict w,
                                         const float *const *a_rows, int64_t j0,
                                         float *restrict c, int64_t ldc)
{
    PYPTO_FEW_ROWS(PYPTO_FEW_LOAD)
    for (int64_t k = 0; k < kc; k++) {
        const float *a = a_rows[k] + j0;
        const __m512 a0 = _mm512_loadu_ps(a), a1 = _mm512_loadu_ps(a + 16);
        const __m512 a2 = _mm512_loadu_ps(a + 32), a3 = _mm512_loadu_ps(a + 48);
#define PYPTO_FEW_FMA(r) { const __m512 b = _mm512_set1_ps(w[k * 4 + (r)]); \
        c##r##0 = _mm512_fmadd_ps(b, a0, c##r##0); c##r##1 = _mm512_fmadd_ps(b, a1, c##r##1); \
        c##r##2 = _mm512_fmadd_ps(b, a2, c##r##2); c##r##3 = _mm512_fmadd_ps(b, a3, c##r##3); }
        PYPTO_FEW_ROWS(PYPTO_FEW_FMA)
#undef PYPTO_FEW_FMA
    }
    PYPTO_FEW_ROWS(PYPTO_Z4_STORE)
}

#ifdef PYPTO_ISA_AVX512BF16
static inline void pypto_ukernel_few_bf16(int64_t kc_pairs, const uint32_t *restrict w,
                                          const uint32_t *const *a_rows, int64_t j0,
                                          float *restrict c, int64_t ldc)
{
    PYPTO_FEW_ROWS(PYPTO_FEW_LOAD)
    for (int64_t kp = 0; kp < kc_pairs; kp++) {
        const uint32_t *a = a_rows[kp] + j0;
        const __m512bh a0 = (__m512bh)_mm512_loadu_si512((const void *)a);
        const __m512bh a1 = (__m512bh)_mm512_loadu_si512((const void *)(a + 16));
        const __m512bh a2 = (__m512bh)_mm512_loadu_si512((const void *)(a + 32));
        const __m512bh a3 = (__m512bh)_mm512_loadu_si512((const void *)(a + 48));
#define PYPTO_FEW_DOT(r) { \
        const __m512bh b = (__m512bh)_mm512_set1_epi32((int)w[kp * 4 + (r)]); \
        c##r##0 = _mm512_dpbf16_ps(c##r##0, a0, b); c##r##1 = _mm512_dpbf16_ps(c##r##1, a1, b); \
        c##r##2 = _mm512_dpbf16_ps(c##r##2, a2, b); c##r##3 = _mm512_dpbf16_ps(c##r##3, a3, b); }
        PYPTO_FEW_ROWS(PYPTO_FEW_DOT)
#undef PYPTO_FEW_DOT
    }
    PYPTO_FEW_ROWS(PYPTO_Z4_STORE)
}
#endif
#endif

#endif
