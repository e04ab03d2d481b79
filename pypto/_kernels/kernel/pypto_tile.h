/* sum_order "tile" (bf16): each output element sums its products in the order of AMX's
 * TDPBF16PS as the Intel SDM defines it, one instruction per (32-channel block b of Cout, tap):
 *
 *     E = fp32 FMA chain from +0 over the block's even channels (co = 32b, 32b+2, ..., 32b+30)
 *     O = the same chain over its odd channels (32b+1, ..., 32b+31)
 *     C = C + (E + O)
 *
 * blocks ascending, the taps (kh, kw) of the output's stride phase ascending inside a block,
 * Cout padded with zero channels to whole blocks, C from +0; then one RNE rounding to bf16.
 * tools/amx_order_probe.c shows the tile unit computes exactly this (it also flushes
 * subnormals, which the caller's gate makes inert: AMX runs only where none can occur).
 * Skipping a tap that a phase lacks skips an instruction whose E + O is +0: C is never -0, so
 * C + 0 leaves its bits.
 *
 * Data: weights packed per 16-channel block of Cin as [co block][tap][16 ci][32 co] (bf16 for
 * the tile unit, fp32 for the emulation); dy in pair frames, one plane per channel pair
 * (2cp, 2cp + 1) of 32-bit pairs, even channel in the low half, with a zero halo. A C tile is 16
 * input channels x 16 consecutive positions of a stride phase's rows laid end to end at the
 * frame's width (positions in the halo columns are computed and thrown away, so small images
 * fill whole tiles); its B operand, 16 planes x 16 consecutive pairs, is one TILELOADD with the
 * plane as stride.
 */
#ifndef PYPTO_TILE_H
#define PYPTO_TILE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pypto_convert.h"
#include "pypto_isa.h"

enum { PYPTO_TILE_CH = 16, PYPTO_TILE_PX = 16, PYPTO_TILE_K = 32 };
/* pixel tiles per work item (even): their results wait in the item's buffer (32 KiB) for the
 * write-out */
enum { PYPTO_TILE_ITEM_TILES = 16 };
#define PYPTO_TILE_A_ELEMS (PYPTO_TILE_CH * PYPTO_TILE_K) /* one packed (block, tap) */

/* Memory for the packed weight and the frames: whole 64-byte lines, so that every tile row the
 * unit loads from an aligned place is one line, not two. free() releases it. */
static inline void *pypto_tile_alloc(size_t bytes)
{
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

/* The packed weight of input channels 16 cb .. 16 cb + 15, every co block and tap:
 * dst[(b * taps + t) * 512 + r * 32 + k] = w[32 b + k][16 cb + r][t], 0 past Cout or Cin.
 * One 16 x 32 tile at a time, its columns (output channels) read in the weight's order. */
static inline void pypto_tile_pack(const uint16_t *restrict w, int64_t cout, int64_t cin,
                                   int64_t taps, int64_t cb, int as_float, void *restrict dst)
{
    const int64_t blocks = (cout + PYPTO_TILE_K - 1) / PYPTO_TILE_K;
    const int64_t ci0 = cb * PYPTO_TILE_CH;
    const int rows = (int)(cin - ci0 < PYPTO_TILE_CH ? cin - ci0 : PYPTO_TILE_CH);
    uint16_t tile[PYPTO_TILE_CH * PYPTO_TILE_K];
    for (int64_t b = 0; b < blocks; b++) {
        const int cols = (int)(cout - b * PYPTO_TILE_K < PYPTO_TILE_K ? cout - b * PYPTO_TILE_K
                                                                      : PYPTO_TILE_K);
        for (int64_t t = 0; t < taps; t++) {
            memset(tile, 0, sizeof tile);
            for (int k = 0; k < cols; k++) {
                const uint16_t *src = w + ((b * PYPTO_TILE_K + k) * cin + ci0) * taps + t;
                for (int r = 0; r < rows; r++)
                    tile[r * PYPTO_TILE_K + k] = src[r * taps];
            }
            const int64_t at = (b * taps + t) * PYPTO_TILE_A_ELEMS;
            if (as_float)
                for (int i = 0; i < PYPTO_TILE_A_ELEMS; i++)
                    ((float *)dst)[at + i] = pypto_bf16_to_float(tile[i]);
            else
                memcpy((uint16_t *)dst + at, tile, sizeof tile);
        }
    }
}

/* One pair plane: rows top .. top + hout - 1, columns left .. left + wout - 1 from dy rows of
 * the two channels (odd NULL: a zero channel of the padding; even NULL too: all zero), the
 * halo zero. */
static inline void pypto_tile_frame_plane(const uint16_t *restrict even,
                                          const uint16_t *restrict odd, int64_t hout,
                                          int64_t wout, int64_t top, int64_t left, int64_t hf,
                                          int64_t wf, uint32_t *restrict plane)
{
    if (even == NULL) {
        memset(plane, 0, (size_t)(hf * wf) * sizeof(uint32_t));
        return;
    }
    const int64_t right = wf - left - wout;
    memset(plane, 0, (size_t)(top * wf + left) * sizeof(uint32_t));
    for (int64_t h = 0; h < hout; h++) {
        uint32_t *row = plane + (top + h) * wf + left;
        const uint16_t *e = even + h * wout;
        if (odd != NULL) {
            const uint16_t *o = odd + h * wout;
            for (int64_t x = 0; x < wout; x++)
                row[x] = (uint32_t)e[x] | ((uint32_t)o[x] << 16);
        } else {
            for (int64_t x = 0; x < wout; x++)
                row[x] = e[x];
        }
        /* this row's right halo and the next row's left one */
        memset(row + wout, 0, (size_t)(right + (h + 1 < hout ? left : 0)) * sizeof(uint32_t));
    }
    memset(plane + (top + hout) * wf, 0, (size_t)((hf - top - hout) * wf) * sizeof(uint32_t));
}

/* ---- the emulation: the same order in IEEE fp32 on any CPU --------------------------------- */
#if defined(__AVX512F__)
typedef __m512 pypto_tv;
enum { PYPTO_TV = 16 };
#define PYPTO_TV_LOAD(p) _mm512_loadu_ps(p)
#define PYPTO_TV_STORE(p, v) _mm512_storeu_ps(p, v)
#define PYPTO_TV_SET1(x) _mm512_set1_ps(x)
#define PYPTO_TV_ZERO() _mm512_setzero_ps()
#define PYPTO_TV_ADD(a, b) _mm512_add_ps(a, b)
#define PYPTO_TV_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define PYPTO_TV_FUSED 1
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 pypto_tv;
enum { PYPTO_TV = 8 };
#define PYPTO_TV_LOAD(p) _mm256_loadu_ps(p)
#define PYPTO_TV_STORE(p, v) _mm256_storeu_ps(p, v)
#define PYPTO_TV_SET1(x) _mm256_set1_ps(x)
#define PYPTO_TV_ZERO() _mm256_setzero_ps()
#define PYPTO_TV_ADD(a, b) _mm256_add_ps(a, b)
#define PYPTO_TV_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define PYPTO_TV_FUSED 1
#elif defined(__aarch64__)
#include <arm_neon.h>
typedef float32x4_t pypto_tv;
enum { PYPTO_TV = 4 };
#define PYPTO_TV_LOAD(p) vld1q_f32(p)
#define PYPTO_TV_STORE(p, v) vst1q_f32(p, v)
#define PYPTO_TV_SET1(x) vdupq_n_f32(x)
#define PYPTO_TV_ZERO() vdupq_n_f32(0.0f)
#define PYPTO_TV_ADD(a, b) vaddq_f32(a, b)
#define PYPTO_TV_FMA(a, b, c) vfmaq_f32(c, a, b)
#define PYPTO_TV_FUSED 1
#elif defined(__SSE2__)
#include <emmintrin.h>
typedef __m128 pypto_tv;
enum { PYPTO_TV = 4 };
#define PYPTO_TV_LOAD(p) _mm_loadu_ps(p)
#define PYPTO_TV_STORE(p, v) _mm_storeu_ps(p, v)
#define PYPTO_TV_SET1(x) _mm_set1_ps(x)
#define PYPTO_TV_ZERO() _mm_setzero_ps()
#define PYPTO_TV_ADD(a, b) _mm_add_ps(a, b)
/* no FMA: a product of two bf16 is exact in fp32 unless it overflows or falls below 2^-126,
 * so multiply then add equals the FMA where the caller says products are exact */
#define PYPTO_TV_FMA(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
#define PYPTO_TV_FUSED 0
#else
#define PYPTO_TV_FUSED 0
#define PYPTO_TV_NONE 1
#endif

/* B operand of one (co block, tap, pixel tile): 16 pair rows of 16 pixels, split into the even
 * channels' and the odd channels' values, fp32 */
static inline void pypto_tile_split(const uint32_t *restrict b, int64_t plane,
                                    float *restrict even, float *restrict odd)
{
    for (int k = 0; k < PYPTO_TILE_K / 2; k++)
        for (int n = 0; n < PYPTO_TILE_PX; n++) {
            const uint32_t pair = b[k * plane + n];
            even[k * PYPTO_TILE_PX + n] = pypto_u2f(pair << 16);
            odd[k * PYPTO_TILE_PX + n] = pypto_u2f(pair & 0xffff0000u);
        }
}

/* c[16 ch][16 px] += a (16 x 32, fp32) x the split B, in the SDM's order: scalar fmaf */
static inline void pypto_tile_dp_scalar(const float *restrict a, const float *restrict even,
                                        const float *restrict odd, float *restrict c)
{
    for (int m = 0; m < PYPTO_TILE_CH; m++)
        for (int n = 0; n < PYPTO_TILE_PX; n++) {
            float e = 0.0f, o = 0.0f;
            for (int k = 0; k < PYPTO_TILE_K / 2; k++) {
                e = fmaf(a[m * PYPTO_TILE_K + 2 * k], even[k * PYPTO_TILE_PX + n], e);
                o = fmaf(a[m * PYPTO_TILE_K + 2 * k + 1], odd[k * PYPTO_TILE_PX + n], o);
            }
            c[m * PYPTO_TILE_PX + n] += e + o;
        }
}

/* the same, four channels' E and O chains at a time on vectors of pixels; exact: every product
 * is exact in fp32 (the caller's scan), needed only where the vectors have no FMA */
static inline void pypto_tile_dp(const float *restrict a, const float *restrict even,
                                 const float *restrict odd, float *restrict c, int exact)
{
#ifdef PYPTO_TV_NONE
    (void)exact;
    pypto_tile_dp_scalar(a, even, odd, c);
#else
    if (!PYPTO_TV_FUSED && !exact) {
        pypto_tile_dp_scalar(a, even, odd, c);
        return;
    }
    for (int m = 0; m < PYPTO_TILE_CH; m += 4)
        for (int v = 0; v < PYPTO_TILE_PX; v += PYPTO_TV) {
            pypto_tv e0 = PYPTO_TV_ZERO(), e1 = e0, e2 = e0, e3 = e0;
            pypto_tv o0 = e0, o1 = e0, o2 = e0, o3 = e0;
            const float *a0 = a + m * PYPTO_TILE_K;
            for (int k = 0; k < PYPTO_TILE_K / 2; k++) {
                const pypto_tv ev = PYPTO_TV_LOAD(even + k * PYPTO_TILE_PX + v);
                const pypto_tv ov = PYPTO_TV_LOAD(odd + k * PYPTO_TILE_PX + v);
                e0 = PYPTO_TV_FMA(PYPTO_TV_SET1(a0[2 * k]), ev, e0);
                o0 = PYPTO_TV_FMA(PYPTO_TV_SET1(a0[2 * k + 1]), ov, o0);
                e1 = PYPTO_TV_FMA(PYPTO_TV_SET1(a0[PYPTO_TILE_K + 2 * k]), ev, e1);
                o1 = PYPTO_TV_FMA(PYPTO_TV_SET1(a0[PYPTO_TILE_K + 2 * k + 1]), ov, o1);
                e2 = PYPTO_TV_FMA(PYPTO_TV_SET1(a0[2 * PYPTO_TILE_K + 2 * k]), ev, e2);
                o2 = PYPTO_TV_FMA(PYPTO_TV_SET1(a0[2 * PYPTO_TILE_K + 2 * k + 1]), ov, o2);
                e3 = PYPTO_TV_FMA(PYPTO_TV_SET1(a0[3 * PYPTO_TILE_K + 2 * k]), ev, e3);
                o3 = PYPTO_TV_FMA(PYPTO_TV_SET1(a0[3 * PYPTO_TILE_K + 2 * k + 1]), ov, o3);
            }
            float *c0 = c + m * PYPTO_TILE_PX + v;
            PYPTO_TV_STORE(c0, PYPTO_TV_ADD(PYPTO_TV_LOAD(c0), PYPTO_TV_ADD(e0, o0)));
            PYPTO_TV_STORE(c0 + PYPTO_TILE_PX,
                           PYPTO_TV_ADD(PYPTO_TV_LOAD(c0 + PYPTO_TILE_PX), PYPTO_TV_ADD(e1, o1)));
            PYPTO_TV_STORE(c0 + 2 * PYPTO_TILE_PX, PYPTO_TV_ADD(PYPTO_TV_LOAD(c0 + 2 * PYPTO_TILE_PX),
                                                                PYPTO_TV_ADD(e2, o2)));
            PYPTO_TV_STORE(c0 + 3 * PYPTO_TILE_PX, PYPTO_TV_ADD(PYPTO_TV_LOAD(c0 + 3 * PYPTO_TILE_PX),
                                                                PYPTO_TV_ADD(e3, o3)));
        }
#endif
}

/* A block of n_ch (1, 2) channel tiles x n_px (1, 2) pixel tiles over every K step, emulated:
 * c[(ch * 2 + px) * 256 ...] from +0. a[ch]: the channel tiles' packed fp32 weights; b[px]: the
 * frame at the pixel tile's first pixel (tap offsets added); scratch: 512 floats. */
static inline void pypto_tile_block_emulated(const float *const *a, int n_ch,
                                             const uint32_t *const *b, int n_px, int64_t blocks,
                                             int64_t taps, const int64_t *tap_index,
                                             const int64_t *tap_offset, int64_t n_taps,
                                             int64_t plane, float *restrict c,
                                             float *restrict scratch, int exact)
{
    const int64_t tile = PYPTO_TILE_CH * PYPTO_TILE_PX;
    memset(c, 0, 4 * (size_t)tile * sizeof(float));
    float *even = scratch, *odd = scratch + tile;
    for (int64_t blk = 0; blk < blocks; blk++)
        for (int64_t i = 0; i < n_taps; i++) {
            const int64_t a_at = (blk * taps + tap_index[i]) * PYPTO_TILE_A_ELEMS;
            const int64_t b_at = blk * (PYPTO_TILE_K / 2) * plane + tap_offset[i];
            for (int px = 0; px < n_px; px++) {
                pypto_tile_split(b[px] + b_at, plane, even, odd);
                for (int ch = 0; ch < n_ch; ch++)
                    pypto_tile_dp(a[ch] + a_at, even, odd, c + (ch * 2 + px) * tile, exact);
            }
        }
}

/* pypto_tile_run_amx's contract, emulated: pairs of pixel tiles one after the other */
static inline void pypto_tile_run_emulated(const float *const *a, int n_ch,
                                           const uint32_t *const *b, int n_tiles, int64_t blocks,
                                           int64_t taps, const int64_t *tap_index,
                                           const int64_t *tap_offset, int64_t n_taps,
                                           int64_t plane, float *restrict c,
                                           float *restrict scratch, int exact)
{
    for (int p = 0; p < n_tiles; p += 2)
        pypto_tile_block_emulated(a, n_ch, b + p, p + 1 < n_tiles ? 2 : 1, blocks, taps,
                                  tap_index, tap_offset, n_taps, plane,
                                  c + (p / 2) * 4 * PYPTO_TILE_CH * PYPTO_TILE_PX, scratch, exact);
}

/* ---- the tile unit ----------------------------------------------------------------------- */
#if PYPTO_HAVE_AMX
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} pypto_tile_config;

/* palette 1, every tile 16 rows x 64 bytes: C tiles 0-3, A tiles 4-5, B tiles 6-7 */
static inline void pypto_amx_begin(void)
{
    pypto_tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

static inline void pypto_amx_end(void) { _tile_release(); }

/* Every K step for n_tiles pixel tiles (b[i]: the frame at tile i's first pixel) and n_ch
 * channel tiles, on the tile unit (between pypto_amx_begin and _end on this thread); a[ch]:
 * packed bf16 weights. Results in c, per pair of pixel tiles 4 C tiles ((ch * 2 + px) * 256
 * floats). A pair's C tiles stay in tile registers for the whole K loop. Measured on a
 * Sapphire Rapids-class host, builds alternating in one process: keeping the co block outside
 * the pairs (C stored and reloaded between blocks, one block's weights serving every pair from
 * L1) was no faster on 3x3 layers and 5-20% slower on 1x1 ones; software prefetch of the next
 * step's weight or dy tiles moved layers by -7% to +8%, within this VM's noise. */
static inline void pypto_tile_run_amx(const uint16_t *const *a, int n_ch,
                                      const uint32_t *const *b, int n_tiles, int64_t blocks,
                                      int64_t taps, const int64_t *tap_index,
                                      const int64_t *tap_offset, int64_t n_taps, int64_t plane,
                                      float *restrict c)
{
    const int64_t tile = PYPTO_TILE_CH * PYPTO_TILE_PX;
    const int64_t stride = plane * (int64_t)sizeof(uint32_t);
    const int64_t a_bytes = PYPTO_TILE_K * (int64_t)sizeof(uint16_t);
    for (int p = 0; p < n_tiles; p += 2) {
        const int two = p + 1 < n_tiles;
        const uint32_t *b0 = b[p], *b1 = b[p + two];
        float *cp = c + (p / 2) * 4 * tile;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t blk = 0; blk < blocks; blk++)
            for (int64_t i = 0; i < n_taps; i++) {
                const int64_t a_at = (blk * taps + tap_index[i]) * PYPTO_TILE_A_ELEMS;
                const int64_t b_at = blk * (PYPTO_TILE_K / 2) * plane + tap_offset[i];
                _tile_loadd(6, b0 + b_at, stride);
                _tile_loadd(4, a[0] + a_at, a_bytes);
                _tile_dpbf16ps(0, 4, 6);
                if (two) {
                    _tile_loadd(7, b1 + b_at, stride);
                    _tile_dpbf16ps(1, 4, 7);
                }
                if (n_ch == 2) {
                    _tile_loadd(5, a[1] + a_at, a_bytes);
                    _tile_dpbf16ps(2, 5, 6);
                    if (two)
                        _tile_dpbf16ps(3, 5, 7);
                }
            }
        _tile_stored(0, cp, 64);
        _tile_stored(1, cp + tile, 64);
        _tile_stored(2, cp + 2 * tile, 64);
        _tile_stored(3, cp + 3 * tile, 64);
    }
}
#else
/* levels without the tile unit: never called (dgrad_tile's use_amx is 0 there) */
static inline void pypto_amx_begin(void) {}
static inline void pypto_amx_end(void) {}
static inline void pypto_tile_run_amx(const uint16_t *const *a, int n_ch,
                                      const uint32_t *const *b, int n_tiles, int64_t blocks,
                                      int64_t taps, const int64_t *tap_index,
                                      const int64_t *tap_offset, int64_t n_taps, int64_t plane,
                                      float *c)
{
    (void)a, (void)n_ch, (void)b, (void)n_tiles, (void)blocks, (void)taps, (void)tap_index;
    (void)tap_offset, (void)n_taps, (void)plane, (void)c;
}
#endif

/* A C tile rounded once to bf16 into dx. Its 16 positions are q0 .. q0 + 15 of a stride phase's
 * rows laid end to end, wf positions a row (the frame's width): position q is row q / wf, column
 * q % wf, written only where that column is < cols and the row < rows (the others read the
 * halo: their sums are thrown away). dst: the phase's first pixel of the tile's first channel;
 * row_step, col_step, ch_stride: dx's steps between its rows, columns and channels. */
static inline void pypto_tile_write(const float *restrict c, int64_t n_ch, int64_t q0,
                                    int64_t wf, int64_t cols, int64_t rows,
                                    uint16_t *restrict dst, int64_t row_step, int64_t col_step,
                                    int64_t ch_stride)
{
    for (int64_t x = 0; x < PYPTO_TILE_PX;) {
        const int64_t q = q0 + x, row = q / wf, col = q % wf;
        if (row >= rows)
            break;
        const int64_t run = PYPTO_TILE_PX - x < wf - col ? PYPTO_TILE_PX - x : wf - col;
        const int64_t valid = col >= cols ? 0 : (run < cols - col ? run : cols - col);
        uint16_t *out = dst + row * row_step + col * col_step;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
        if (col_step == 1 && valid > 0) {   /* a channel's run: one masked vector each */
            const __mmask16 keep = (__mmask16)(valid == 16 ? 0xffffu : (1u << valid) - 1u);
            for (int64_t m = 0; m < n_ch; m++)
                _mm256_mask_storeu_epi16(
                    out + m * ch_stride, keep,
                    pypto_narrow16(_mm512_maskz_loadu_ps(keep, c + m * PYPTO_TILE_PX + x),
                                   PYPTO_BF16));
            x += run;
            continue;
        }
#endif
        for (int64_t m = 0; m < n_ch; m++) {
            const float *from = c + m * PYPTO_TILE_PX + x;
            uint16_t *to = out + m * ch_stride;
            if (col_step == 1)
                for (int64_t v = 0; v < valid; v++)
                    to[v] = pypto_float_to_bf16(from[v]);
            else
                for (int64_t v = 0; v < valid; v++)
                    to[v * col_step] = pypto_float_to_bf16(from[v]);
        }
        x += run;
    }
}

#endif
