/* The ISA level a kernel module is compiled for: PYPTO_ISA_* and its name from the compiler's
 * macros, the register-block sizes of each kernel shape at this level and which shapes it has
 * (PYPTO_HAVE_*), and stubs for the kernels of the shapes and instructions a level lacks. */
#ifndef PYPTO_ISA_H
#define PYPTO_ISA_H

/* The same source is compiled once per ISA level (pypto/_kernels/levels.py, setup.py); the
 * compiler's macros pick the level:
 *
 *   PYPTO_ISA_AVX512BF16  AVX-512F + AVX512_BF16: fp32 kernel 8x32, plus the bf16 dot-product
 *                         kernel (vdpbf16ps: k in pairs, A of bf16 pairs, W as [k/2][MR][2])
 *   PYPTO_ISA_AVX512      AVX-512F: 8x32 fp32 FMA
 *   PYPTO_ISA_AVX2        AVX2 + FMA: 4x24 fp32 FMA (8x32 would spill the 16 ymm registers)
 *   PYPTO_ISA_BASELINE    on AArch64 (ARMv8-A: NEON and FMA are part of the base ISA): 8x12 NEON
 *                         FMA by lane, 24 accumulators of the 32 vector registers; elsewhere
 *                         portable C 4x8 on GCC/Clang 4-float vectors (SSE2, ...)
 *
 * and each kernel shape's header its bodies (README.md describes the shapes):
 *
 *   pypto_pixel.h    pixel-vector, every level: C[MR x NR] (rows input channels, columns output
 *                    pixels), with 16-column (*_half) forms on AVX-512 and AVX2 and an 8-column
 *                    (*_quarter) form on AVX2
 *   pypto_chanvec.h  channel-vector, AVX-512 and AVX2: C[PYPTO_CV_M pixels x PYPTO_CV_N
 *                    channels], 7 x 32 (AVX2 6 x 16); on AVX-512 also 7 x 16 (*_cvh_*) for a
 *                    last panel of at most 16 channels; with the bf16 dot product the wide
 *                    6 x 64 (*_cvw_*) for whole 64-channel blocks
 *   pypto_few.h      few-channel, AVX-512: C[4 channels x 64 positions] for tiles of at most 4
 *                    input channels
 *
 * Each C element is accumulated in fp32 over k in ascending order (pairs (k, k+1) at a time in
 * the bf16 kernels), independent of where the block sits and of its shape: neither threads nor
 * the shape chosen change a bit. */

#include <stdint.h>
#include <string.h>

/* The taps a channel-vector kernel call computes, where not all: k runs over (channel slot,
 * tap) with the tap inner, and k's tap is (first + k) % count; the kernel skips every k whose
 * tap's bit in mask is 0 (taps whose dy rows and columns are padding for all of the block's
 * pixels: their products are zeros). NULL: every k. */
typedef struct {
    uint64_t mask;
    int64_t first, count;
} pypto_taps;

/* for (k = 0; k < kc; k++) STEP(k), skipping the k of taps not in taps->mask: in runs of
 * computed and of skipped k, without a test per k inside a run */
#define PYPTO_K_LOOP(kc, taps, STEP)                                                        \
    if ((taps) == NULL) {                                                                   \
        for (int64_t k_ = 0; k_ < (kc); k_++) STEP(k_)                                      \
    } else {                                                                                \
        const uint64_t mask_ = (taps)->mask; /* no bit at or above count */                 \
        const int64_t count_ = (taps)->count;                                               \
        int64_t k_ = 0, t_ = (taps)->first;                                                 \
        while (k_ < (kc)) {                                                                 \
            const uint64_t rest_ = mask_ >> t_;                                             \
            /* the run from tap t_: taps in the mask, or not, up to the period's end */     \
            int64_t n_ = (rest_ & 1) ? __builtin_ctzll(~rest_)                              \
                         : rest_ ? __builtin_ctzll(rest_) : count_ - t_;                    \
            if (n_ > (kc) - k_)                                                             \
                n_ = (kc) - k_;                                                             \
            if (rest_ & 1) {                                                                \
                for (const int64_t end_ = k_ + n_; k_ < end_; k_++) STEP(k_)                \
            } else {                                                                        \
                k_ += n_;                                                                   \
            }                                                                               \
            t_ += n_;                                                                       \
            if (t_ == count_)                                                               \
                t_ = 0;                                                                     \
        }                                                                                   \
    }

#if defined(__AVX512F__) && defined(__AVX512BF16__)
#define PYPTO_ISA_AVX512BF16 1
#define PYPTO_ISA_NAME "avx512_bf16"
#elif defined(__AVX512F__)
/* the avx512_amx level is the avx512 level plus the tile unit for sum_order "tile" (its
 * vdpbf16ps runs at half the fp32 FMA's rate on these CPUs, so it is not built in) */
#define PYPTO_ISA_AVX512 1
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define PYPTO_HAVE_AMX 1
#define PYPTO_ISA_NAME "avx512_amx"
#elif defined(PYPTO_AMX_EMULATED)   /* the unit in software: pypto_amx_emulated.h */
#define PYPTO_HAVE_AMX 1
#define PYPTO_ISA_NAME "avx512_amx"
#else
#define PYPTO_ISA_NAME "avx512"
#endif
#elif defined(__AVX2__) && defined(__FMA__)
#define PYPTO_ISA_AVX2 1
#define PYPTO_ISA_NAME "avx2"
#else
#define PYPTO_ISA_BASELINE 1
#define PYPTO_ISA_NAME "baseline"
#endif

#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512) || defined(PYPTO_ISA_AVX2)
#include <immintrin.h>
#endif
#if defined(PYPTO_ISA_AVX512) && defined(PYPTO_AMX_EMULATED) && !defined(__AMX_TILE__)
#include "pypto_amx_emulated.h"
#endif
#if defined(PYPTO_ISA_BASELINE) && defined(__aarch64__)
#define PYPTO_NEON 1
#include <arm_neon.h>
#endif

#ifndef PYPTO_HAVE_AMX
#define PYPTO_HAVE_AMX 0
#endif

static const char *pypto_isa_name(void) { return PYPTO_ISA_NAME; }

/* Pixel-vector blocks: MR channels x NR pixels; the *_half and *_quarter forms' columns. */
#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512)
enum { PYPTO_MR = 8, PYPTO_NR = 32, PYPTO_NR_HALF = 16, PYPTO_NR_QUARTER = 16 };
#elif defined(PYPTO_ISA_AVX2)
enum { PYPTO_MR = 4, PYPTO_NR = 24, PYPTO_NR_HALF = 16, PYPTO_NR_QUARTER = 8 };
#elif defined(PYPTO_NEON)
enum { PYPTO_MR = 8, PYPTO_NR = 12, PYPTO_NR_HALF = 12, PYPTO_NR_QUARTER = 12 };
#else
enum { PYPTO_MR = 4, PYPTO_NR = 8, PYPTO_NR_HALF = 8, PYPTO_NR_QUARTER = 8 };
#endif

#ifdef PYPTO_ISA_AVX512BF16
enum { PYPTO_HAVE_BF16_DOT = 1 };
#else
enum { PYPTO_HAVE_BF16_DOT = 0 };
#endif

/* Channel-vector blocks: PYPTO_CV_M pixels x PYPTO_CV_N channels, written out in transposed
 * blocks of PYPTO_CV_STORE positions x channels. The sizes stay defined where the shape is
 * absent (the kernel never chooses it there). */
#if defined(PYPTO_ISA_AVX2)
enum { PYPTO_HAVE_CHAN_VEC = 1, PYPTO_CV_M = 6, PYPTO_CV_N = 16, PYPTO_CV_STORE = 16 };
#elif defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512)
enum { PYPTO_HAVE_CHAN_VEC = 1, PYPTO_CV_M = 7, PYPTO_CV_N = 32, PYPTO_CV_STORE = 16 };
#else
enum { PYPTO_HAVE_CHAN_VEC = 0, PYPTO_CV_M = 7, PYPTO_CV_N = 32, PYPTO_CV_STORE = 16 };
#endif
/* The wide channel-vector kernel: 6 pixels x 64 channels, with the bf16 dot product. */
enum { PYPTO_HAVE_CV_WIDE = PYPTO_HAVE_BF16_DOT, PYPTO_CVW_M = 6, PYPTO_CVW_N = 64 };
/* The avx512 level's own choices: only Intel cores run it by default (the AMX generation
 * passes avx512_bf16 over, levels.py), whose two FMA units a cycle wait on loads.
 * PYPTO_CV_L0_BYTES, the bytes of weight panel one channel-vector K-L0 block reads
 * (plan.pxi): 24 KiB there, an L1's worth (72 KiB chunks' loads from L2 held the multiply
 * back: tap layers about 7% faster, 1x1 layers 3-7%, docs/performance-log.md); 72 KiB elsewhere,
 * fastest on AMD Zen 4 (measured at its level, avx512_bf16; kept for avx2, not measured on
 * its own CPUs). PYPTO_HAVE_CV_WIDE_F32: the wide kernel with fp32 multiply-adds too (on
 * Zen 4 the fp32 wide shape gained nothing). PYPTO_PIXEL_COLS, PYPTO_PIXEL_K: stride-1
 * KhxKw tiles at least PYPTO_PIXEL_COLS wide whose K (Cout x Kh x Kw) is at least
 * PYPTO_PIXEL_K take the pixel-vector kernel instead of the channel-vector ones (0: never);
 * there the halo costs at most 3% and it ran the SD VAE decoder's 3x3 layers 3-13% faster at 1
 * and 2 threads (docs/performance-log.md). */
#if defined(PYPTO_ISA_AVX512) && !defined(PYPTO_ISA_AVX512BF16)
enum {
    PYPTO_CV_L0_BYTES = 24576,
    PYPTO_HAVE_CV_WIDE_F32 = 1,
    PYPTO_PIXEL_COLS = 64,
    PYPTO_PIXEL_K = 2304
};
#else
enum { PYPTO_CV_L0_BYTES = 73728, PYPTO_HAVE_CV_WIDE_F32 = 0, PYPTO_PIXEL_COLS = 0, PYPTO_PIXEL_K = 0 };
#endif
/* Calls of fewer multiply-adds than PYPTO_SERIAL_MACS run on one thread, whatever the team
 * (plan.pxi): one thread of the level does them in a few microseconds, and waking the team
 * cost more than it saved. 2 threads, Intel Xeon (AMX generation, VM): the spec example's
 * 369k multiply-adds took 15 us on one thread and 19 on two at the avx512 level (avx2 24 and
 * 32 us, with a 6 us options scope each), 737k broke even; the baseline level (4 wide) gained
 * from the team at 369k already. */
#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512) || defined(PYPTO_ISA_AVX2)
enum { PYPTO_SERIAL_MACS = 1 << 19 };
#else
enum { PYPTO_SERIAL_MACS = 1 << 17 };
#endif
/* the half channel-vector kernels (PYPTO_CV_M pixels x 16 channels, a last panel's 1-16), the
 * paired write-out of two stride-2 phases and the streamed run write-out */
#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512)
enum { PYPTO_HAVE_CV_HALF = 1, PYPTO_HAVE_CV_PAIR = 1 };
#else
enum { PYPTO_HAVE_CV_HALF = 0, PYPTO_HAVE_CV_PAIR = 0 };
#endif
#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512) || defined(PYPTO_ISA_AVX2)
enum { PYPTO_HAVE_CV_STREAM = 1 };
#else
enum { PYPTO_HAVE_CV_STREAM = 0 };
#endif
/* channels one streamed run write-out carries from step to step (64 bytes each) */
enum { PYPTO_CV_STREAM_CH = 64 };

/* Few-channel blocks: PYPTO_FEW_MR channels x PYPTO_FEW_NR positions. */
#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512)
enum { PYPTO_HAVE_FEW = 1, PYPTO_FEW_MR = 4, PYPTO_FEW_NR = 64 };
#else
enum { PYPTO_HAVE_FEW = 0, PYPTO_FEW_MR = 4, PYPTO_FEW_NR = 64 };
#endif

#if defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512)
/* a C row of four zmm (64 columns), c<r>0 .. c<r>3: the few-channel and wide channel-vector
 * kernels' store */
#define PYPTO_Z4_STORE(r) _mm512_storeu_ps(c + (r) * ldc, c##r##0); \
    _mm512_storeu_ps(c + (r) * ldc + 16, c##r##1); _mm512_storeu_ps(c + (r) * ldc + 32, c##r##2); \
    _mm512_storeu_ps(c + (r) * ldc + 48, c##r##3);
#endif

/* Stubs: the kernels of the shapes (and the bf16 dot product) a level lacks, with their
 * signatures, so that one Cython body compiles at every level; the kernel never calls them
 * there (PYPTO_HAVE_* are 0). The pixel-vector bf16 kernels exist at every level, empty
 * without the dot product (pypto_pixel.h). */
#if !(defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512))
/* Other levels have no few-channel kernel, no half channel-vector one and no paired
 * write-out (the kernel never chooses them there). */
static inline void pypto_ukernel_few_f32(int64_t kc, const float *restrict w,
                                         const float *const *a_rows, int64_t j0,
                                         float *restrict c, int64_t ldc)
{
    (void)kc; (void)w; (void)a_rows; (void)j0; (void)c; (void)ldc;  /* never called */
}
static inline void pypto_ukernel_cvh_f32(int64_t kc, const float *restrict w,
                                         const float *const *a_rows, const int64_t *offs,
                                         float *restrict c, int64_t ldc, int first,
                                         const pypto_taps *taps)
{
    (void)kc; (void)w; (void)a_rows; (void)offs; (void)c; (void)ldc; (void)first; (void)taps;
}
static inline void pypto_cv_store_pair(const float *acc, const float *acc_b, int64_t ldc,
                                       int n_pos, int n_pos_b, int n_ch, uint16_t *dst,
                                       int64_t ch_stride, int dtype)
{
    (void)acc; (void)acc_b; (void)ldc; (void)n_pos; (void)n_pos_b; (void)n_ch; (void)dst;
    (void)ch_stride; (void)dtype;
}
#endif

#if !(defined(PYPTO_ISA_AVX512BF16) || defined(PYPTO_ISA_AVX512) || defined(PYPTO_ISA_AVX2))
/* Other levels have no channel-vector kernel (the kernel never chooses it there). */
static inline void pypto_cv_stream_run(const float *acc, int64_t ldc, int64_t n, int n_ch,
                                       uint16_t *dst, int64_t ch_stride, int dtype)
{
    (void)acc; (void)ldc; (void)n; (void)n_ch; (void)dst; (void)ch_stride; (void)dtype;
}
static inline void pypto_stream_fence(void) {}
static inline void pypto_ukernel_cv_f32(int64_t kc, const float *restrict w,
                                        const float *const *a_rows, const int64_t *offs,
                                        float *restrict c, int64_t ldc,
                                        int first, const pypto_taps *taps)
{
    (void)kc; (void)w; (void)a_rows; (void)offs; (void)c; (void)ldc; (void)first; (void)taps;
}
static inline void pypto_cv_store_block(const float *acc, int64_t ldc, int n_pos, int n_ch,
                                        uint16_t *dst, int64_t ch_stride, int64_t step,
                                        int dtype)
{
    (void)acc; (void)ldc; (void)n_pos; (void)n_ch; (void)dst; (void)ch_stride; (void)step;
    (void)dtype;  /* never called */
}
#endif

#if !defined(PYPTO_ISA_AVX512BF16) && !defined(PYPTO_ISA_AVX512)
/* Levels without AVX-512 never choose the wide kernels. */
static inline void pypto_ukernel_cvw_f32(int64_t kc, const float *restrict w,
                                         const float *const *a_rows, const int64_t *offs,
                                         float *restrict c, int64_t ldc, int first,
                                         const pypto_taps *taps)
{
    (void)kc; (void)w; (void)a_rows; (void)offs; (void)c; (void)ldc; (void)first; (void)taps;
}
#endif

#ifndef PYPTO_ISA_AVX512BF16
/* Levels without the bf16 dot product never choose its kernels. */
static inline void pypto_ukernel_few_bf16(int64_t kc_pairs, const uint32_t *restrict w,
                                          const uint32_t *const *a_rows, int64_t j0,
                                          float *restrict c, int64_t ldc)
{
    (void)kc_pairs; (void)w; (void)a_rows; (void)j0; (void)c; (void)ldc;
}
static inline void pypto_ukernel_cv_bf16(int64_t kc_pairs, const uint32_t *restrict w,
                                         const uint32_t *const *a_rows, const int64_t *offs,
                                         float *restrict c, int64_t ldc, int first,
                                         const pypto_taps *taps)
{
    (void)kc_pairs; (void)w; (void)a_rows; (void)offs; (void)c; (void)ldc; (void)first;
    (void)taps;
}
static inline void pypto_ukernel_cvw_bf16(int64_t kc_pairs, const uint32_t *restrict w,
                                          const uint32_t *const *a_rows, const int64_t *offs,
                                          float *restrict c, int64_t ldc, int first,
                                         const pypto_taps *taps)
{
    (void)kc_pairs; (void)w; (void)a_rows; (void)offs; (void)c; (void)ldc; (void)first;
    (void)taps;
}
static inline void pypto_ukernel_cvh_bf16(int64_t kc_pairs, const uint32_t *restrict w,
                                          const uint32_t *const *a_rows, const int64_t *offs,
                                          float *restrict c, int64_t ldc, int first,
                                         const pypto_taps *taps)
{
    (void)kc_pairs; (void)w; (void)a_rows; (void)offs; (void)c; (void)ldc; (void)first;
    (void)taps;
}
#endif

#endif
