/* Channel-vector kernels (AVX-512 and AVX2 levels): C rows PYPTO_CV_M output pixels, C columns
 * PYPTO_CV_N input channels, A broadcast from the frame (fp32; with the bf16 dot product also the
 * wide 6 x 64 one), and their write-out: in-register transposes and pypto_cv_store_block. Other
 * levels have stubs (pypto_isa.h). */
#ifndef PYPTO_CHANVEC_H
#define PYPTO_CHANVEC_H

#include "pypto_isa.h"
#include "pypto_convert.h"

/* The transposed register block, for layers with many input channels. C rows are PYPTO_CV_M
 * output pixels, C columns PYPTO_CV_N = 32 input channels (two zmm; AVX2: 6 x 16, two ymm):
 * c[m*ldc + n] += sum_k a_rows[k][offs[m]] * w[k*32 + n]. A is read by broadcasting one dy
 * value (or bf16 pair) per pixel straight from the frame, at the pixel's offset, so there is
 * no halo to compute and nothing to pack; W is packed [k][32] per block of 32 channels. Each
 * element is the same sum in the same k order as the pixel-vector kernels (the weight stays
 * the first multiplicand), so the bits are the same. 7 pixels: ResNet's image widths (7, 14,
 * 28, 56, 112, 224) are multiples of 7, and 14 accumulators cover the FMA and dot-product
 * latencies. */
#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512) || defined(PYPTO_ISA_AVX2)
/* The level's fp32 vector: two of them make a row of PYPTO_CV_N channels. */
#if defined(PYPTO_ISA_AVX2)
#define PYPTO_CV_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
typedef __m256 pypto_cv_vec;
#define PYPTO_CV_VLOAD _mm256_loadu_ps
#define PYPTO_CV_VSTORE _mm256_storeu_ps
#define PYPTO_CV_VSET1 _mm256_broadcast_ss
#define PYPTO_CV_VFMA _mm256_fmadd_ps
#define PYPTO_CV_VZERO _mm256_setzero_ps
#else
#define PYPTO_CV_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6)
typedef __m512 pypto_cv_vec;
#define PYPTO_CV_VLOAD _mm512_loadu_ps
#define PYPTO_CV_VSTORE _mm512_storeu_ps
#define PYPTO_CV_VSET1(p) _mm512_set1_ps(*(p))
#define PYPTO_CV_VFMA _mm512_fmadd_ps
#define PYPTO_CV_VZERO _mm512_setzero_ps
#endif
enum { PYPTO_CV_HALF = PYPTO_CV_N / 2 };
/* first: the block's first k; its accumulators start at 0 instead of loading C (the same
 * +0.0 the zeroed C held, without the memset and the loads) */
#define PYPTO_CV_INIT(p) (first ? PYPTO_CV_VZERO() : PYPTO_CV_VLOAD(p))
#define PYPTO_CV_LOAD(r) const int64_t o##r = offs[r]; \
    pypto_cv_vec c##r##0 = PYPTO_CV_INIT(c + (r) * ldc), \
                 c##r##1 = PYPTO_CV_INIT(c + (r) * ldc + PYPTO_CV_HALF);
#define PYPTO_CV_STORE_ROW(r) PYPTO_CV_VSTORE(c + (r) * ldc, c##r##0); \
    PYPTO_CV_VSTORE(c + (r) * ldc + PYPTO_CV_HALF, c##r##1);

static inline void pypto_ukernel_cv_f32(int64_t kc, const float *restrict w,
                                        const float *const *a_rows, const int64_t *offs,
                                        float *restrict c, int64_t ldc,
                                        int first, const pypto_taps *taps)
{
    PYPTO_CV_ROWS(PYPTO_CV_LOAD)
#define PYPTO_CV_FMA(r) { const pypto_cv_vec b = PYPTO_CV_VSET1(a + o##r); \
                          c##r##0 = PYPTO_CV_VFMA(w0, b, c##r##0); \
                          c##r##1 = PYPTO_CV_VFMA(w1, b, c##r##1); }
#define PYPTO_CV_STEP(k) { const float *a = a_rows[k]; \
        const pypto_cv_vec w0 = PYPTO_CV_VLOAD(w + (k) * PYPTO_CV_N); \
        const pypto_cv_vec w1 = PYPTO_CV_VLOAD(w + (k) * PYPTO_CV_N + PYPTO_CV_HALF); \
        PYPTO_CV_ROWS(PYPTO_CV_FMA) }
    PYPTO_K_LOOP(kc, taps, PYPTO_CV_STEP)
#undef PYPTO_CV_STEP
#undef PYPTO_CV_FMA
    PYPTO_CV_ROWS(PYPTO_CV_STORE_ROW)
}

/* The streamed run write-outs (pypto_cv_stream_run, one per level): the positions of a run
 * starting at p before its first whole 64-byte line (0..31), and the fence that orders the
 * non-temporal stores before what follows (the work item's end, other threads' reads of dx
 * after the parallel region); the caller ends each run write-out with it. */
static inline int64_t pypto_line_lead(const uint16_t *p)
{
    return (int64_t)((64 - ((uintptr_t)p & 63)) & 63) / 2;
}

static inline void pypto_stream_fence(void) { _mm_sfence(); }
#endif

#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512)

/* The half channel-vector kernels: PYPTO_CV_M pixels x 16 channels (one zmm), for a block's last
 * panel when it holds at most 16 channels (Cin 48 = 32 + 16, 80 = 2 x 32 + 16: the 7 x 32
 * kernel would pad it to 32, the pixel kernels pack A for the whole block). W stays packed
 * [k][PYPTO_CV_N]; its first 16 columns are read. 7 accumulators still cover the FMA and dot
 * latencies. The same sums in the same k order as the 7 x 32 kernels, lane for lane. */
#define PYPTO_CVH_LOAD(r) const int64_t o##r = offs[r]; \
    __m512 c##r = PYPTO_CV_INIT(c + (r) * ldc);
#define PYPTO_CVH_STORE(r) _mm512_storeu_ps(c + (r) * ldc, c##r);

static inline void pypto_ukernel_cvh_f32(int64_t kc, const float *restrict w,
                                         const float *const *a_rows, const int64_t *offs,
                                         float *restrict c, int64_t ldc, int first,
                                         const pypto_taps *taps)
{
    PYPTO_CV_ROWS(PYPTO_CVH_LOAD)
#define PYPTO_CVH_FMA(r) c##r = _mm512_fmadd_ps(w0, _mm512_set1_ps(a[o##r]), c##r);
#define PYPTO_CVH_STEP(k) { const float *a = a_rows[k]; \
        const __m512 w0 = _mm512_loadu_ps(w + (k) * PYPTO_CV_N); \
        PYPTO_CV_ROWS(PYPTO_CVH_FMA) }
    PYPTO_K_LOOP(kc, taps, PYPTO_CVH_STEP)
#undef PYPTO_CVH_STEP
#undef PYPTO_CVH_FMA
    PYPTO_CV_ROWS(PYPTO_CVH_STORE)
}

#ifdef PYPTO_ISA_AVX512BF16
static inline void pypto_ukernel_cvh_bf16(int64_t kc_pairs, const uint32_t *restrict w,
                                          const uint32_t *const *a_rows, const int64_t *offs,
                                          float *restrict c, int64_t ldc, int first,
                                          const pypto_taps *taps)
{
    PYPTO_CV_ROWS(PYPTO_CVH_LOAD)
#define PYPTO_CVH_DOT(r) \
        c##r = _mm512_dpbf16_ps(c##r, (__m512bh)_mm512_set1_epi32((int)a[o##r]), w0);
#define PYPTO_CVH_STEP(kp) { const uint32_t *a = a_rows[kp]; \
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512((const void *)(w + (kp) * PYPTO_CV_N)); \
        PYPTO_CV_ROWS(PYPTO_CVH_DOT) }
    PYPTO_K_LOOP(kc_pairs, taps, PYPTO_CVH_STEP)
#undef PYPTO_CVH_STEP
#undef PYPTO_CVH_DOT
    PYPTO_CV_ROWS(PYPTO_CVH_STORE)
}
#endif

/* The wide channel-vector kernel (bf16 dot product): 6 pixels x 64 channels (four zmm), for
 * N-L1 blocks of whole 64-channel panels. 24 accumulators instead of 14: each broadcast of A
 * feeds four vectors and each W vector six pixels (10 loads per 24 dot products, against 9 per
 * 14), and half the kernel calls: 3-8% on the 3x3 layers (on Zen 4 the fp32 kernels, at 97%
 * of the FMA peak already, gained nothing from the same shape; on Intel's avx512 level they
 * did: pypto_ukernel_cvw_f32). The same sums in the same k order as the 7 x 32 kernel. */
#define PYPTO_CVW_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define PYPTO_CVW_LOAD(r) const int64_t o##r = offs[r]; \
    __m512 c##r##0 = PYPTO_CV_INIT(c + (r) * ldc), c##r##1 = PYPTO_CV_INIT(c + (r) * ldc + 16), \
           c##r##2 = PYPTO_CV_INIT(c + (r) * ldc + 32), c##r##3 = PYPTO_CV_INIT(c + (r) * ldc + 48);

#ifdef PYPTO_ISA_AVX512BF16
/* k in pairs: a_rows[kp][offs[m]] is the pixel's (channel 2kp, 2kp+1) bf16 pair, w[kp*32 + n]
 * the pair of weights of channel n. */
static inline void pypto_ukernel_cv_bf16(int64_t kc_pairs, const uint32_t *restrict w,
                                         const uint32_t *const *a_rows, const int64_t *offs,
                                         float *restrict c, int64_t ldc,
                                         int first, const pypto_taps *taps)
{
    PYPTO_CV_ROWS(PYPTO_CV_LOAD)
#define PYPTO_CV_DOT(r) { const __m512bh b = (__m512bh)_mm512_set1_epi32((int)a[o##r]); \
                          c##r##0 = _mm512_dpbf16_ps(c##r##0, b, w0); \
                          c##r##1 = _mm512_dpbf16_ps(c##r##1, b, w1); }
#define PYPTO_CV_STEP(kp) { const uint32_t *a = a_rows[kp]; \
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512((const void *)(w + (kp) * 32)); \
        const __m512bh w1 = (__m512bh)_mm512_loadu_si512((const void *)(w + (kp) * 32 + 16)); \
        PYPTO_CV_ROWS(PYPTO_CV_DOT) }
    PYPTO_K_LOOP(kc_pairs, taps, PYPTO_CV_STEP)
#undef PYPTO_CV_STEP
#undef PYPTO_CV_DOT
    PYPTO_CV_ROWS(PYPTO_CV_STORE_ROW)
}

static inline void pypto_ukernel_cvw_bf16(int64_t kc_pairs, const uint32_t *restrict w,
                                          const uint32_t *const *a_rows, const int64_t *offs,
                                          float *restrict c, int64_t ldc,
                                          int first, const pypto_taps *taps)
{
    PYPTO_CVW_ROWS(PYPTO_CVW_LOAD)
#define PYPTO_CVW_DOT(r) { const __m512bh b = (__m512bh)_mm512_set1_epi32((int)a[o##r]); \
        c##r##0 = _mm512_dpbf16_ps(c##r##0, b, w0); c##r##1 = _mm512_dpbf16_ps(c##r##1, b, w1); \
        c##r##2 = _mm512_dpbf16_ps(c##r##2, b, w2); c##r##3 = _mm512_dpbf16_ps(c##r##3, b, w3); }
#define PYPTO_CVW_STEP(kp) { const uint32_t *a = a_rows[kp]; \
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512((const void *)(w + (kp) * 64)); \
        const __m512bh w1 = (__m512bh)_mm512_loadu_si512((const void *)(w + (kp) * 64 + 16)); \
        const __m512bh w2 = (__m512bh)_mm512_loadu_si512((const void *)(w + (kp) * 64 + 32)); \
        const __m512bh w3 = (__m512bh)_mm512_loadu_si512((const void *)(w + (kp) * 64 + 48)); \
        PYPTO_CVW_ROWS(PYPTO_CVW_DOT) }
    PYPTO_K_LOOP(kc_pairs, taps, PYPTO_CVW_STEP)
#undef PYPTO_CVW_STEP
#undef PYPTO_CVW_DOT
    PYPTO_CVW_ROWS(PYPTO_Z4_STORE)
}
#endif

/* The wide shape with fp32 multiply-adds, where PYPTO_HAVE_CV_WIDE_F32 (pypto_isa.h): w[k*64 + n]
 * is the weight of channel n. The same sums in the same k order as pypto_ukernel_cv_f32. */
static inline void pypto_ukernel_cvw_f32(int64_t kc, const float *restrict w,
                                         const float *const *a_rows, const int64_t *offs,
                                         float *restrict c, int64_t ldc,
                                         int first, const pypto_taps *taps)
{
    PYPTO_CVW_ROWS(PYPTO_CVW_LOAD)
#define PYPTO_CVW_FMA(r) { const __m512 b = _mm512_set1_ps(a[o##r]); \
        c##r##0 = _mm512_fmadd_ps(w0, b, c##r##0); c##r##1 = _mm512_fmadd_ps(w1, b, c##r##1); \
        c##r##2 = _mm512_fmadd_ps(w2, b, c##r##2); c##r##3 = _mm512_fmadd_ps(w3, b, c##r##3); }
#define PYPTO_CVW_STEP(k) { const float *a = a_rows[k]; \
        const __m512 w0 = _mm512_loadu_ps(w + (k) * 64), w1 = _mm512_loadu_ps(w + (k) * 64 + 16); \
        const __m512 w2 = _mm512_loadu_ps(w + (k) * 64 + 32); \
        const __m512 w3 = _mm512_loadu_ps(w + (k) * 64 + 48); \
        PYPTO_CVW_ROWS(PYPTO_CVW_FMA) }
    PYPTO_K_LOOP(kc, taps, PYPTO_CVW_STEP)
#undef PYPTO_CVW_STEP
#undef PYPTO_CVW_FMA
    PYPTO_CVW_ROWS(PYPTO_Z4_STORE)
}

/* 16x16 16-bit transpose in registers. x[i] holds rows i and i+8 (16 words each, the low and
 * high 256 bits); on return x[k] holds columns k (low 256 bits) and k+8 (high): within each
 * 128-bit lane an 8x8 transpose by three rounds of unpacks, then one lane shuffle a register
 * puts rows 0-7 of a column beside its rows 8-15. */
static inline void pypto_transpose_16x16_epi16(__m512i *x)
{
    __m512i t[8], u[8];
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm512_unpacklo_epi16(x[2 * k], x[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_epi16(x[2 * k], x[2 * k + 1]);
    }
    for (int h = 0; h < 2; h++) {   /* u[4h+m]: rows 4h..4h+3 of columns 2m, 2m+1 (a lane's) */
        u[4 * h] = _mm512_unpacklo_epi32(t[4 * h], t[4 * h + 2]);
        u[4 * h + 1] = _mm512_unpackhi_epi32(t[4 * h], t[4 * h + 2]);
        u[4 * h + 2] = _mm512_unpacklo_epi32(t[4 * h + 1], t[4 * h + 3]);
        u[4 * h + 3] = _mm512_unpackhi_epi32(t[4 * h + 1], t[4 * h + 3]);
    }
    for (int m = 0; m < 4; m++) {   /* lanes: rows 0-7 of k, of k+8, rows 8-15 of k, of k+8 */
        x[2 * m] = _mm512_unpacklo_epi64(u[m], u[4 + m]);
        x[2 * m + 1] = _mm512_unpackhi_epi64(u[m], u[4 + m]);
    }
    for (int k = 0; k < 8; k++)
        x[k] = _mm512_shuffle_i64x2(x[k], x[k], _MM_SHUFFLE(3, 1, 2, 0));
}

/* n_pos (<= 16) positions x n_ch (<= 16) channels of the [position][channel] accumulator (acc:
 * the first position's first channel, rows ldc apart), rounded once, then transposed as 16-bit
 * words: half the data to move as fp32, 32 shuffles where there were 64 (a 1x1 layer's
 * write-out -25%). Channel j's values: pypto_cv_channel(x, j). */
static inline void pypto_cv_round_transpose(const float *acc, int64_t ldc, int n_pos, int n_ch,
                                            int dtype, __m512i *x)
{
    const __mmask16 ch_mask = (__mmask16)((1u << n_ch) - 1u);
    if (n_pos == 16 && n_ch == 16) {
        /* a whole block (most of them): unmasked loads, no per-row conditions (with the whole
         * block's stores below, a 1x1 layer's write-out -33% against its multiply) */
        for (int i = 0; i < 8; i++)
            x[i] = _mm512_inserti64x4(
                _mm512_castsi256_si512(pypto_narrow16(_mm512_loadu_ps(acc + i * ldc), dtype)),
                pypto_narrow16(_mm512_loadu_ps(acc + (i + 8) * ldc), dtype), 1);
        pypto_transpose_16x16_epi16(x);
        return;
    }
    for (int i = 0; i < 8; i++) {
        const __m512 lo = i < n_pos ? _mm512_maskz_loadu_ps(ch_mask, acc + i * ldc)
                                    : _mm512_setzero_ps();
        const __m512 hi = i + 8 < n_pos ? _mm512_maskz_loadu_ps(ch_mask, acc + (i + 8) * ldc)
                                        : _mm512_setzero_ps();
        x[i] = _mm512_inserti64x4(_mm512_castsi256_si512(pypto_narrow16(lo, dtype)),
                                  pypto_narrow16(hi, dtype), 1);
    }
    pypto_transpose_16x16_epi16(x);
}

static inline __m256i pypto_cv_channel(const __m512i *x, int j)
{
    return j < 8 ? _mm512_castsi512_si256(x[j]) : _mm512_extracti64x4_epi64(x[j - 8], 1);
}

/* The channel-vector write-out of one block: channel j's n_pos values go to dst + j*ch_stride
 * + i*step (step: the stride's column step). Step 2 (a stride-2 phase: every other column)
 * spreads the 16 values to the even 16-bit lanes of a zmm and stores them under a mask, one
 * store where there were 16 (the scalar stores were 8-15% of ResNet's and YOLOv5s's 3x3/2
 * layers); other steps store lane by lane. */
static inline void pypto_cv_store_block(const float *acc, int64_t ldc, int n_pos, int n_ch,
                                        uint16_t *dst, int64_t ch_stride, int64_t step,
                                        int dtype)
{
    static const uint16_t even_lanes[32] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7,
                                            8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14,
                                            15, 15};
    __m512i x[8];
    pypto_cv_round_transpose(acc, ldc, n_pos, n_ch, dtype, x);
    if (n_pos == 16 && n_ch == 16 && step == 1) {
        /* a whole block (most of a 1x1 layer's write-out): unmasked stores, the loop unrolled,
         * the transposed rows kept in registers */
        for (int j = 0; j < 8; j++) {
            _mm256_storeu_si256((__m256i *)(dst + j * ch_stride), _mm512_castsi512_si256(x[j]));
            _mm256_storeu_si256((__m256i *)(dst + (j + 8) * ch_stride),
                                _mm512_extracti64x4_epi64(x[j], 1));
        }
        return;
    }
    const __mmask16 pos_mask = (__mmask16)((1u << n_pos) - 1u);
    /* lanes 2i, i < n_pos (n_pos <= 16: 2 * n_pos <= 32 bits) */
    const uint32_t every_other = (uint32_t)(0x55555555ull & ((1ull << (2 * n_pos)) - 1u));
    for (int j = 0; j < n_ch; j++) {
        const __m256i narrow = pypto_cv_channel(x, j);
        if (step == 1) {
            _mm256_mask_storeu_epi16(dst + j * ch_stride, pos_mask, narrow);
        } else if (step == 2) {
            const __m512i spread = _mm512_permutexvar_epi16(
                _mm512_loadu_si512((const void *)even_lanes), _mm512_castsi256_si512(narrow));
            _mm512_mask_storeu_epi16(dst + j * ch_stride, (__mmask32)every_other, spread);
        } else {
            uint16_t lanes[16];
            _mm256_storeu_si256((__m256i *)lanes, narrow);
            for (int i = 0; i < n_pos; i++)
                dst[j * ch_stride + i * step] = lanes[i];
        }
    }
}

/* A run write-out that streams dx past the caches: n positions x n_ch (<= PYPTO_CV_STREAM_CH,
 * transposed 16 at a time) channels of a whole-width stride-1 tile, channel j's run at dst +
 * j*ch_stride. Each 64-byte line of dx that a run covers whole is written by one non-temporal
 * store, without the read for ownership that an ordinary store of a line not in cache costs (dx
 * bigger than the caches: 1x1 layers on large images spent a fifth to a third of their time
 * writing dx, at 2 threads more than at 1). A run starts anywhere in a line (channel planes
 * are not whole lines), so each channel's 32 values of a step are shifted to its lines by one
 * two-source permute with the step before (kept in carry); the partial lines at a run's ends
 * get masked ordinary stores (a neighbouring tile, or another thread, owns the rest of those
 * lines). The caller ends with pypto_stream_fence(). */
static inline void pypto_cv_stream_run(const float *acc, int64_t ldc, int64_t n, int n_ch,
                                       uint16_t *dst, int64_t ch_stride, int dtype)
{
    static const uint16_t iota[32] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                      17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    __m512i x[8], y[8], carry[PYPTO_CV_STREAM_CH];
    int64_t lead[PYPTO_CV_STREAM_CH];   /* channel j's run positions before its first line */
    const __m512i lanes = _mm512_loadu_si512((const void *)iota);
    for (int j = 0; j < n_ch; j++) {
        lead[j] = pypto_line_lead(dst + j * ch_stride);
        carry[j] = _mm512_setzero_si512();
    }
    /* one step past the last values: the lines that end the runs */
    for (int64_t pb = 0; pb < n + 32; pb += 32) {
        const int n_lo = (int)(n - pb < 0 ? 0 : (n - pb < 16 ? n - pb : 16));
        const int n_hi = (int)(n - pb - 16 < 0 ? 0 : (n - pb - 16 < 16 ? n - pb - 16 : 16));
        for (int cb = 0; cb < n_ch; cb += 16) {
            const int n_blk = n_ch - cb < 16 ? n_ch - cb : 16;
            pypto_cv_round_transpose(acc + pb * ldc + cb, ldc, n_lo, n_blk, dtype, x);
            pypto_cv_round_transpose(acc + (pb + 16) * ldc + cb, ldc, n_hi, n_blk, dtype, y);
            for (int b = 0; b < n_blk; b++) {
                const int j = cb + b;
                const __m512i cur = _mm512_inserti64x4(
                    _mm512_castsi256_si512(pypto_cv_channel(x, b)), pypto_cv_channel(y, b), 1);
                /* line lane i: run position first + i, carry's lane lead + i or cur's */
                const __m512i line = _mm512_permutex2var_epi16(
                    carry[j], _mm512_add_epi16(lanes, _mm512_set1_epi16((short)lead[j])), cur);
                carry[j] = cur;
                /* the line's run positions: [first, first + 32), of which [0, n) are the run's */
                const int64_t first = pb - 32 + lead[j];
                const int64_t lo = first < 0 ? 0 : first, hi = first + 32 > n ? n : first + 32;
                if (lo >= hi)
                    continue;
                uint16_t *to = (uint16_t *)((uintptr_t)(dst + j * ch_stride) + 2 * first);
                if (hi - lo == 32)
                    _mm512_stream_si512((void *)to, line);
                else
                    _mm512_mask_storeu_epi16((void *)to,
                                             (__mmask32)(((1ull << (hi - first)) - 1u)
                                                         & ~((1ull << (lo - first)) - 1u)),
                                             line);
            }
        }
    }
}

/* The write-out of two stride-2 phases that share output rows, one block of each: the first
 * phase's n_pos values of channel j go to the even columns dst[2i], the second's n_pos_b (n_pos
 * or one fewer) to the odd ones, one store of 32 columns (each output line was written twice,
 * by two masked stores of half its columns, a phase apart). */
static inline void pypto_cv_store_pair(const float *acc, const float *acc_b, int64_t ldc,
                                       int n_pos, int n_pos_b, int n_ch, uint16_t *dst,
                                       int64_t ch_stride, int dtype)
{
    static const uint16_t interleave[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38,
                                            7, 39, 8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13,
                                            45, 14, 46, 15, 47};
    __m512i x[8], y[8];
    const __m512i index = _mm512_loadu_si512((const void *)interleave);
    const __mmask32 mask = (__mmask32)((0x55555555ull & ((1ull << (2 * n_pos)) - 1u))
                                       | (0xaaaaaaaaull & ((1ull << (2 * n_pos_b)) - 1u)));
    pypto_cv_round_transpose(acc, ldc, n_pos, n_ch, dtype, x);
    pypto_cv_round_transpose(acc_b, ldc, n_pos_b, n_ch, dtype, y);
    for (int j = 0; j < n_ch; j++)
        _mm512_mask_storeu_epi16(
            dst + j * ch_stride, mask,
            _mm512_permutex2var_epi16(_mm512_castsi256_si512(pypto_cv_channel(x, j)), index,
                                      _mm512_castsi256_si512(pypto_cv_channel(y, j))));
}
#elif defined(PYPTO_ISA_AVX2)
/* AVX2: 6 pixels x 16 channels (two ymm; pypto_ukernel_cv_f32 above): 12 accumulators, 2 W
 * loads and 6 broadcasts per k fill its 16 ymm registers. fp32 only (no bf16 dot product). */

/* 16x16 16-bit transpose in registers: x[i] holds row i (16 words; columns 0-7 in the low
 * 128-bit lane, 8-15 in the high); on return x[k] holds column k. Three rounds of unpacks
 * within the lanes (8x8 blocks), then one lane permute a column puts rows 0-7 beside 8-15. */
static inline void pypto_transpose_16x16_epi16_avx2(__m256i *x)
{
    __m256i a[16], b[16];
    for (int p = 0; p < 8; p++) {   /* a[2p], a[2p+1]: rows 2p, 2p+1 at columns 0-3, 4-7 */
        a[2 * p] = _mm256_unpacklo_epi16(x[2 * p], x[2 * p + 1]);
        a[2 * p + 1] = _mm256_unpackhi_epi16(x[2 * p], x[2 * p + 1]);
    }
    for (int q = 0; q < 4; q++) {   /* b[4q + m]: rows 4q..4q+3 at columns 2m, 2m+1 */
        b[4 * q] = _mm256_unpacklo_epi32(a[4 * q], a[4 * q + 2]);
        b[4 * q + 1] = _mm256_unpackhi_epi32(a[4 * q], a[4 * q + 2]);
        b[4 * q + 2] = _mm256_unpacklo_epi32(a[4 * q + 1], a[4 * q + 3]);
        b[4 * q + 3] = _mm256_unpackhi_epi32(a[4 * q + 1], a[4 * q + 3]);
    }
    for (int h = 0; h < 2; h++)     /* a[8h + c]: rows 8h..8h+7 at column c (low), c+8 (high) */
        for (int m = 0; m < 4; m++) {
            a[8 * h + 2 * m] = _mm256_unpacklo_epi64(b[8 * h + m], b[8 * h + 4 + m]);
            a[8 * h + 2 * m + 1] = _mm256_unpackhi_epi64(b[8 * h + m], b[8 * h + 4 + m]);
        }
    for (int c = 0; c < 8; c++) {
        x[c] = _mm256_permute2x128_si256(a[c], a[8 + c], 0x20);
        x[8 + c] = _mm256_permute2x128_si256(a[c], a[8 + c], 0x31);
    }
}

/* n_pos (<= 16) positions x n_ch (<= 16) channels of the [position][channel] accumulator,
 * rounded once, then transposed as 16-bit words (the AVX-512 levels' order: half the data to
 * move, and one 32-byte store a channel where 8x8 fp32 blocks took two 16-byte ones): channel
 * j's values in x[j], zeros past n_pos. */
static inline void pypto_cv_round_transpose16(const float *acc, int64_t ldc, int n_pos, int n_ch,
                                              int dtype, __m256i *x)
{
    float row[16];
    for (int i = 0; i < 16; i++) {
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        if (i < n_pos && n_ch == 16) {
            lo = _mm256_loadu_ps(acc + i * ldc);
            hi = _mm256_loadu_ps(acc + i * ldc + 8);
        } else if (i < n_pos) {
            for (int c = 0; c < 16; c++) row[c] = c < n_ch ? acc[i * ldc + c] : 0.0f;
            lo = _mm256_loadu_ps(row);
            hi = _mm256_loadu_ps(row + 8);
        }
        x[i] = _mm256_set_m128i(pypto_narrow8(hi, dtype), pypto_narrow8(lo, dtype));
    }
    pypto_transpose_16x16_epi16_avx2(x);
}

/* pypto_cv_store_block of the AVX-512 levels (n_pos, n_ch <= 16). */
static inline void pypto_cv_store_block(const float *acc, int64_t ldc, int n_pos, int n_ch,
                                        uint16_t *dst, int64_t ch_stride, int64_t step,
                                        int dtype)
{
    __m256i x[16];
    pypto_cv_round_transpose16(acc, ldc, n_pos, n_ch, dtype, x);
    for (int j = 0; j < n_ch; j++) {
        uint16_t lanes[16];
        if (step == 1 && n_pos == 16) {  /* whole blocks: one store, not a libc call */
            _mm256_storeu_si256((__m256i *)(dst + j * ch_stride), x[j]);
            continue;
        }
        _mm256_storeu_si256((__m256i *)lanes, x[j]);
        if (step == 1) {
            memcpy(dst + j * ch_stride, lanes, (size_t)n_pos * sizeof(uint16_t));
        } else {
            for (int i = 0; i < n_pos; i++)
                dst[j * ch_stride + i * step] = lanes[i];
        }
    }
}

/* pypto_cv_stream_run of the AVX-512 levels (see there): a step's 32 positions of each
 * channel are rounded into a staging row after the step before's, and the channel's line is
 * read from it at the run's offset in its line (AVX2 has no 16-bit cross-lane permute), then
 * stored non-temporally as two 32-byte halves; partial lines are copied. */
static inline void pypto_cv_stream_run(const float *acc, int64_t ldc, int64_t n, int n_ch,
                                       uint16_t *dst, int64_t ch_stride, int dtype)
{
    /* stage[j]: run positions pb - 32 .. pb + 31 of channel j */
    uint16_t stage[PYPTO_CV_STREAM_CH][64] __attribute__((aligned(32)));
    int64_t lead[PYPTO_CV_STREAM_CH];   /* channel j's run positions before its first line */
    __m256i x[16];
    for (int j = 0; j < n_ch; j++)
        lead[j] = pypto_line_lead(dst + j * ch_stride);
    /* one step past the last values: the lines that end the runs */
    for (int64_t pb = 0; pb < n + 32; pb += 32) {
        for (int cb = 0; cb < n_ch; cb += 16) {
            const int n_blk = n_ch - cb < 16 ? n_ch - cb : 16;
            for (int h = 0; h < 2; h++) {
                const int64_t left = n - pb - 16 * h;
                const int n_pos = (int)(left < 0 ? 0 : (left < 16 ? left : 16));
                pypto_cv_round_transpose16(acc + (pb + 16 * h) * ldc + cb, ldc, n_pos, n_blk,
                                           dtype, x);
                for (int b = 0; b < n_blk; b++)
                    _mm256_store_si256((__m256i *)(stage[cb + b] + 32 + 16 * h), x[b]);
            }
        }
        for (int j = 0; j < n_ch; j++) {
            /* the line's run positions: [first, first + 32), stage[j][lead + i] for lane i */
            const int64_t first = pb - 32 + lead[j];
            const int64_t lo = first < 0 ? 0 : first, hi = first + 32 > n ? n : first + 32;
            if (lo < hi) {
                uint16_t *to = (uint16_t *)((uintptr_t)(dst + j * ch_stride) + 2 * first);
                const uint16_t *from = stage[j] + lead[j];
                if (hi - lo == 32) {
                    _mm256_stream_si256((__m256i *)to,
                                        _mm256_loadu_si256((const __m256i *)from));
                    _mm256_stream_si256((__m256i *)(to + 16),
                                        _mm256_loadu_si256((const __m256i *)(from + 16)));
                } else {
                    memcpy(to + (lo - first), from + (lo - first),
                           (size_t)(hi - lo) * sizeof(uint16_t));
                }
            }
            _mm256_store_si256((__m256i *)stage[j], _mm256_load_si256((__m256i *)(stage[j] + 32)));
            _mm256_store_si256((__m256i *)(stage[j] + 16),
                               _mm256_load_si256((__m256i *)(stage[j] + 48)));
        }
    }
}
#endif

#endif
