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
 * Data, in one of three forms (a call's weight and frames share one): weights per 16-channel
 * block of Cin as [co block][tap][16 ci][32 slots]; dy in pair frames, one plane of 32-bit
 * pairs (bf16 low and high halves) per pair of a block's slots, with a zero halo.
 *   PYPTO_TILE_FORM_AMX: the tile unit's operands. Slot k holds channel k (bf16); the weight
 *     in pairs of slots per input channel, and the frames per block position-major (a
 *     position's 32 channels in 64 bytes, pypto_tile_frame_block), the same bytes as the
 *     block's 16 pair planes.
 *   PYPTO_TILE_FORM_F32: the fp32 emulation. The frames as AMX's; a weight row (fp32) holds the
 *     block's even channels, then its odd ones.
 *   PYPTO_TILE_FORM_DOT: the VDPBF16PS emulation (avx512_bf16). Rows and frames hold pairs
 *     (4s, 4s + 2) for s = 0..7, then (4s + 1, 4s + 3), the earlier channel in the high half.
 * pypto_tile_slot_channel says which channel of a block sits in each slot. Frames have a zero
 * halo; a C tile is 16 input channels x 16 consecutive positions of a stride phase's
 * rows laid end to end at the frame's width (positions in the halo columns are computed and
 * thrown away, so small images fill whole tiles); on the tile unit its B operand, 16 planes x
 * 16 consecutive pairs, is one TILELOADD with the plane as stride.
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
/* A work item's C tiles wait in its thread's buffer (PYPTO_TILE_C_BYTES, in the call's kept
 * scratch: on the stack they made a frame of 75 KiB, more than a 64 KiB OMP_STACKSIZE) for the
 * write-out:
 * PYPTO_TILE_ITEM_C of them, channel tiles x pixel tiles (an even count), at most
 * PYPTO_TILE_ITEM_TILES pixel tiles. The tile unit's items take 2 channel tiles (its 4 C
 * registers: 2 x 2); the emulation's 8 (x 8 pixel tiles): each split B (pypto_tile_split,
 * fp32) or gathered B (dense positions, the dot form) then serves 128 channels (ResNet-50's
 * avx2 pass spent 11% of its time splitting when it served 32; 64 -> 128 channels: avx2
 * 0.97-0.98x the time on ResNet-50 and Inception-v3, avx512 0.99x). A team with few items
 * cuts them smaller (tile_order.pxi, _items_for_team). C tile (ch, pixel tile t) sits at
 * pypto_tile_c_slot. */
enum { PYPTO_TILE_ITEM_C = 64, PYPTO_TILE_ITEM_TILES = 16 };
enum { PYPTO_AMX_ITEM_CH = 2, PYPTO_EMU_ITEM_CH = 8 };
enum { PYPTO_TILE_C_BYTES = PYPTO_TILE_ITEM_C * PYPTO_TILE_CH * PYPTO_TILE_PX * 4 };
/* K steps (co block, tap) a group of C tiles runs on the tile unit between its loads and
 * stores (pypto_tile_run_amx), in whole co blocks: max(1, this / taps) of them a pass */
enum { PYPTO_AMX_PASS_STEPS = 8 };
#define PYPTO_TILE_A_ELEMS (PYPTO_TILE_CH * PYPTO_TILE_K) /* one packed (block, tap) */

enum { PYPTO_TILE_FORM_AMX = 0, PYPTO_TILE_FORM_F32 = 1, PYPTO_TILE_FORM_DOT = 2 };

/* The channel of a 32-channel block in slot k (0-31) of a packed weight row (frame: 0) or in
 * the low (k even) or high half of pair plane k / 2 of a frame (frame: 1). */
static inline int pypto_tile_slot_channel(int form, int k, int frame)
{
    if (form == PYPTO_TILE_FORM_F32 && !frame)
        return k < 16 ? 2 * k : 2 * (k - 16) + 1;
    if (form == PYPTO_TILE_FORM_DOT) {
        const int pair = k >> 1, first = pair < 8 ? 4 * pair : 4 * (pair - 8) + 1;
        return first + ((k & 1) ? 0 : 2);
    }
    return k;
}

/* C tile (channel tile ch, pixel tile t) of an item of item_ch channel tiles in its buffer c:
 * pixel pairs outermost, each pair's tiles (ch, t) at ch * 2 + t % 2 */
static inline float *pypto_tile_c_slot(float *c, int t, int ch, int item_ch)
{
    return c + ((t / 2) * 2 * item_ch + ch * 2 + t % 2) * PYPTO_TILE_CH * PYPTO_TILE_PX;
}

/* Channels of co block b below Cout (32 but in a short last block) */
static inline int pypto_tile_block_channels(int64_t cout, int64_t b)
{
    const int64_t left = cout - b * PYPTO_TILE_K;
    return (int)(left < PYPTO_TILE_K ? left : PYPTO_TILE_K);
}

/* The packed weight of input channels 16 cb .. 16 cb + 15, every co block and tap:
 * dst[(b * taps + t) * 512 + r * 32 + k] = w[32 b + slot_channel(k, 0)][16 cb + r][t], 0 past
 * Cout or Cin; bf16, or fp32 in PYPTO_TILE_FORM_F32; in PYPTO_TILE_FORM_AMX the same elements
 * at (b * taps + t) * 512 + (k / 2) * 32 + 2 r + k % 2 (pairs of channels per input channel). */

#if defined(__AVX512F__)
/* 16 x 16 32-bit elements: out[j] holds element j of each of in[0..15] (unpack 32 and 64 bit
 * within lanes, then two rounds of lane shuffles) */
static inline void pypto_transpose16(__m512i *restrict v)
{
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int g = 0; g < 16; g += 4) {   /* u[g + j]: rows g .. g + 3 of columns 4 lane + j */
        u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    for (int j = 0; j < 4; j++) {
        const __m512i lo0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
        const __m512i hi0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee);
        const __m512i lo1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
        const __m512i hi1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
        v[j] = _mm512_shuffle_i32x4(lo0, lo1, 0x88);
        v[4 + j] = _mm512_shuffle_i32x4(lo0, lo1, 0xdd);
        v[8 + j] = _mm512_shuffle_i32x4(hi0, hi1, 0x88);
        v[12 + j] = _mm512_shuffle_i32x4(hi0, hi1, 0xdd);
    }
}

/* 16 32-bit lanes from two runs of bf16: lo[x] in the low half, hi[x] in the high one (so a
 * lane with lo NULL is hi[x] as fp32); a NULL run gives zeros, and nothing outside `keep` is
 * read */
static inline __m512i pypto_tile_pairs16(__mmask16 keep, const uint16_t *lo, const uint16_t *hi)
{
    __m512i v = _mm512_setzero_si512();
    if (lo != NULL)
        v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(keep, lo));
    if (hi != NULL)
        v = _mm512_or_si512(v, _mm512_slli_epi32(
                                   _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(keep, hi)), 16));
    return v;
}

#if PYPTO_HAVE_AMX
/* pypto_tile_pack in PYPTO_TILE_FORM_AMX: each 64-byte row (co block b, tap t, pair s) from
 * two gathers of 16 input channels, one per channel of the pair (a 32-bit gather whose low
 * halves are the elements: the pair holding w's last element is copied one by one, so that
 * nothing past w is read). Every row is written, zeros included. */
static inline void pypto_tile_pack_amx(const uint16_t *restrict w, int64_t cout, int64_t cin,
                                       int64_t taps, int64_t ci0, int rows,
                                       uint16_t *restrict dst)
{
    const int64_t blocks = (cout + PYPTO_TILE_K - 1) / PYPTO_TILE_K;
    const __m512i index = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)taps));
    const __mmask16 valid = (__mmask16)((1u << rows) - 1u);
    const __m512i low = _mm512_set1_epi32(0xffff);
    for (int64_t b = 0; b < blocks; b++)
        for (int s = 0; s < PYPTO_TILE_K / 2; s++) {
            const int64_t co = b * PYPTO_TILE_K + 2 * s;
            const uint16_t *even = w + (co * cin + ci0) * taps;
            const uint16_t *odd = even + cin * taps;
            const int last = co + 2 >= cout && ci0 + rows == cin;   /* holds w's last element */
            if (taps == 1) {   /* 1x1: a row is two runs of w, widened and interleaved */
                _mm512_storeu_si512((__m512i *)(dst + b * PYPTO_TILE_A_ELEMS
                                                + s * 2 * PYPTO_TILE_CH),
                                    pypto_tile_pairs16(valid, co < cout ? even : NULL,
                                                       co + 1 < cout ? odd : NULL));
                continue;
            }
            for (int64_t t = 0; t < taps; t++) {
                uint16_t *row = dst + (b * taps + t) * PYPTO_TILE_A_ELEMS + s * 2 * PYPTO_TILE_CH;
                if (last) {
                    for (int r = 0; r < PYPTO_TILE_CH; r++) {
                        row[2 * r] = co < cout && r < rows ? even[r * taps + t] : 0;
                        row[2 * r + 1] = co + 1 < cout && r < rows ? odd[r * taps + t] : 0;
                    }
                    continue;
                }
                const __m512i e = co < cout
                    ? _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, index,
                                                  even + t, 2)
                    : _mm512_setzero_si512();
                const __m512i o = co + 1 < cout
                    ? _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, index,
                                                  odd + t, 2)
                    : _mm512_setzero_si512();
                _mm512_storeu_si512((__m512i *)row, _mm512_or_si512(_mm512_and_si512(e, low),
                                                                    _mm512_slli_epi32(o, 16)));
            }
        }
}
#endif

/* pypto_tile_pack in PYPTO_TILE_FORM_F32 or _DOT. A co block's 32 channels each hold their
 * rows x taps elements of the 16 input channels in one run of w (j = r * taps + t); 16
 * consecutive j of the runs, widened to 32 bits (DOT: each lane pairs the two channels of a
 * slot pair), are transposed in registers into the rows of those j. So w is read in order,
 * each line once: the gathers this replaced read 32 channels' lines per row, which for a
 * 1x1 layer of 2048 input channels lie 4 KiB apart, in one set of L1 (a 7x7 layer's call
 * spent 23% of its time packing on Zen 4). Masked loads read nothing past a run; rows past
 * Cin are zero (their C is never written out: zero keeps it defined). */
static inline void pypto_tile_pack_rows(const uint16_t *restrict w, int64_t cout, int64_t cin,
                                        int64_t taps, int64_t ci0, int rows, int form,
                                        void *restrict dst)
{
    const int64_t blocks = (cout + PYPTO_TILE_K - 1) / PYPTO_TILE_K;
    const int64_t run = rows * taps;   /* elements of each channel's run */
    const int dot = form == PYPTO_TILE_FORM_DOT;
    int first[16], second[16];         /* per lane, the channels of its two halves */
    for (int l = 0; l < 16; l++) {
        first[l] = pypto_tile_slot_channel(form, dot ? 2 * l : l, 0);
        second[l] = pypto_tile_slot_channel(form, dot ? 2 * l + 1 : 16 + l, 0);
    }
    const size_t elem = dot ? sizeof(uint16_t) : sizeof(float);
    for (int64_t b = 0; b < blocks; b++) {
        const int n_co = pypto_tile_block_channels(cout, b);
        const uint16_t *src = w + (b * PYPTO_TILE_K * cin + ci0) * taps;
        if (rows < PYPTO_TILE_CH)   /* the rows past Cin, every tap */
            for (int64_t t = 0; t < taps; t++)
                memset((char *)dst + ((b * taps + t) * PYPTO_TILE_A_ELEMS
                                      + rows * PYPTO_TILE_K) * elem,
                       0, (size_t)(PYPTO_TILE_CH - rows) * PYPTO_TILE_K * elem);
        for (int64_t j0 = 0; j0 < run; j0 += 16) {
            const int n = (int)(run - j0 < 16 ? run - j0 : 16);
            const __mmask16 keep = (__mmask16)((1u << n) - 1u);
            __m512i lo[16], hi[16];
            for (int l = 0; l < 16; l++) {
                const uint16_t *a = first[l] < n_co ? src + first[l] * cin * taps + j0 : NULL;
                const uint16_t *c = second[l] < n_co ? src + second[l] * cin * taps + j0 : NULL;
                if (dot)   /* the slot pair in one lane */
                    lo[l] = pypto_tile_pairs16(keep, a, c);
                else {     /* each widened to fp32 */
                    lo[l] = pypto_tile_pairs16(keep, NULL, a);
                    hi[l] = pypto_tile_pairs16(keep, NULL, c);
                }
            }
            pypto_transpose16(lo);
            if (!dot)
                pypto_transpose16(hi);
            for (int q = 0; q < n; q++) {
                const int64_t j = j0 + q;
                const int64_t at = (b * taps + j % taps) * PYPTO_TILE_A_ELEMS
                                   + j / taps * PYPTO_TILE_K;
                if (dot)
                    _mm512_storeu_si512((uint16_t *)dst + at, lo[q]);
                else {
                    _mm512_storeu_si512((float *)dst + at, lo[q]);
                    _mm512_storeu_si512((float *)dst + at + 16, hi[q]);
                }
            }
        }
    }
}
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
/* 8 x 8 32-bit elements: out[j] holds element j of each of in[0..7] */
static inline void pypto_transpose8(__m256 *restrict v)
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
    }
    for (int g = 0; g < 8; g += 4) {   /* u[g + j]: rows g .. g + 3 of columns 4 lane + j */
        u[g] = _mm256_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
        v[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
}

/* pypto_tile_pack in PYPTO_TILE_FORM_F32 on AVX2, as pypto_tile_pack_rows on AVX-512: 8
 * consecutive elements (j = r * taps + t) of the runs of a group of 8 slots' channels, widened
 * to fp32, transposed in registers into 8 slots of the rows of those j; w read in order
 * (scalar loads of a row's 32 channels, 4 KiB apart in a 1x1 layer of 2048 input channels,
 * read them from L2 16 times over). A run's last partial 8 goes through a zeroed copy
 * (nothing past w is read); rows past Cin are zero. No gathers: QEMU 7.2's Haswell (the
 * CI's stand-in for AVX2 CPUs) gave wrong lanes from vpgatherdd in this pack. */
static inline void pypto_tile_pack_rows_avx2(const uint16_t *restrict w, int64_t cout,
                                             int64_t cin, int64_t taps, int64_t ci0, int rows,
                                             float *restrict dst)
{
    const int64_t blocks = (cout + PYPTO_TILE_K - 1) / PYPTO_TILE_K;
    const int64_t run = rows * taps;   /* elements of each channel's run */
    int channel[PYPTO_TILE_K];         /* of each slot, in its block */
    for (int k = 0; k < PYPTO_TILE_K; k++)
        channel[k] = pypto_tile_slot_channel(PYPTO_TILE_FORM_F32, k, 0);
    for (int64_t b = 0; b < blocks; b++) {
        const int n_co = pypto_tile_block_channels(cout, b);
        const uint16_t *src = w + (b * PYPTO_TILE_K * cin + ci0) * taps;
        if (rows < PYPTO_TILE_CH)
            for (int64_t t = 0; t < taps; t++)
                memset(dst + (b * taps + t) * PYPTO_TILE_A_ELEMS + rows * PYPTO_TILE_K, 0,
                       (size_t)(PYPTO_TILE_CH - rows) * PYPTO_TILE_K * sizeof(float));
        for (int64_t j0 = 0; j0 < run; j0 += 8) {
            const int n = (int)(run - j0 < 8 ? run - j0 : 8);
            for (int q0 = 0; q0 < PYPTO_TILE_K; q0 += 8) {
                __m256 v[8];
                for (int l = 0; l < 8; l++) {
                    const int co = channel[q0 + l];
                    __m128i h = _mm_setzero_si128();
                    if (co < n_co && n == 8)
                        h = _mm_loadu_si128((const __m128i *)(src + co * cin * taps + j0));
                    else if (co < n_co) {
                        uint16_t part[8] = {0};
                        memcpy(part, src + co * cin * taps + j0, (size_t)n * sizeof(uint16_t));
                        h = _mm_loadu_si128((const __m128i *)part);
                    }
                    v[l] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
                }
                pypto_transpose8(v);
                for (int q = 0; q < n; q++) {
                    const int64_t j = j0 + q;
                    _mm256_storeu_ps(dst + (b * taps + j % taps) * PYPTO_TILE_A_ELEMS
                                         + j / taps * PYPTO_TILE_K + q0, v[q]);
                }
            }
        }
    }
}
#endif

static inline void pypto_tile_pack(const uint16_t *restrict w, int64_t cout, int64_t cin,
                                   int64_t taps, int64_t cb, int form, void *restrict dst)
{
    const int64_t blocks = (cout + PYPTO_TILE_K - 1) / PYPTO_TILE_K;
    const int64_t ci0 = cb * PYPTO_TILE_CH;
    const int rows = (int)(cin - ci0 < PYPTO_TILE_CH ? cin - ci0 : PYPTO_TILE_CH);
#if PYPTO_HAVE_AMX
    if (form == PYPTO_TILE_FORM_AMX && taps <= INT32_MAX / PYPTO_TILE_CH) {
        pypto_tile_pack_amx(w, cout, cin, taps, ci0, rows, (uint16_t *)dst);
        return;
    }
#endif
#if defined(__AVX512F__)
    if (form != PYPTO_TILE_FORM_AMX) {
        pypto_tile_pack_rows(w, cout, cin, taps, ci0, rows, form, dst);
        return;
    }
#elif defined(__AVX2__)
    if (form == PYPTO_TILE_FORM_F32) {
        pypto_tile_pack_rows_avx2(w, cout, cin, taps, ci0, rows, (float *)dst);
        return;
    }
#endif
    int slot_of[PYPTO_TILE_K];   /* the slot of each channel of a block */
    for (int k = 0; k < PYPTO_TILE_K; k++)
        slot_of[pypto_tile_slot_channel(form, k, 0)] = k;
    memset(dst, 0, (size_t)(blocks * taps * PYPTO_TILE_A_ELEMS)
                       * (form == PYPTO_TILE_FORM_F32 ? sizeof(float) : sizeof(uint16_t)));
    /* w read in order (a channel pair's taps are contiguous), each write landing in the
     * block's taps KiB, which stay in L1 */
    for (int64_t co = 0; co < cout; co++) {
        const int k = slot_of[co % PYPTO_TILE_K];
        const int64_t block = co / PYPTO_TILE_K * taps * PYPTO_TILE_A_ELEMS;
        for (int r = 0; r < rows; r++) {
            const uint16_t *src = w + (co * cin + ci0 + r) * taps;
            const int64_t at = block + (form == PYPTO_TILE_FORM_AMX
                                            ? (k >> 1) * 2 * PYPTO_TILE_CH + 2 * r + (k & 1)
                                            : r * PYPTO_TILE_K + k);
            if (form == PYPTO_TILE_FORM_F32)
                for (int64_t t = 0; t < taps; t++)
                    ((float *)dst)[at + t * PYPTO_TILE_A_ELEMS] = pypto_bf16_to_float(src[t]);
            else
                for (int64_t t = 0; t < taps; t++)
                    ((uint16_t *)dst)[at + t * PYPTO_TILE_A_ELEMS] = src[t];
        }
    }
}

/* The rows d0 .. d1 - 1 of a frame's rows r0 .. r1 - 1 that hold data (rows top .. top +
 * hout - 1); none where d0 >= d1 */
static inline void pypto_tile_data_rows(int64_t top, int64_t hout, int64_t r0, int64_t r1,
                                        int64_t *d0, int64_t *d1)
{
    *d0 = r0 > top ? r0 : top;
    *d1 = r1 < top + hout ? r1 : top + hout;
}

/* Zeros a frame's halo in its rows r0 .. r1 - 1 (all of them, or a team's thread's band): of
 * rows of wf positions of `size` bytes each, every one but the data at rows top .. top + hout
 * - 1, columns left .. left + wout - 1 (both frame forms fill around it: pair planes,
 * pypto_tile_frame_rows, and the tile unit's blocks). A band's last data row zeroes its right
 * halo; the next band its first row's left one. */
static inline void pypto_tile_frame_halo(void *frame, size_t size, int64_t top, int64_t left,
                                         int64_t hout, int64_t wout, int64_t wf, int64_t r0,
                                         int64_t r1)
{
    char *f = (char *)frame;
    int64_t d0, d1;
    pypto_tile_data_rows(top, hout, r0, r1, &d0, &d1);
    if (d0 >= d1) {
        memset(f + (size_t)(r0 * wf) * size, 0, (size_t)((r1 - r0) * wf) * size);
        return;
    }
    memset(f + (size_t)(r0 * wf) * size, 0, (size_t)((d0 - r0) * wf + left) * size);
    for (int64_t h = d0; h < d1; h++)   /* this row's right halo and the next row's left one */
        memset(f + (size_t)(h * wf + left + wout) * size, 0,
               (size_t)(wf - wout - (h + 1 < d1 ? 0 : left)) * size);
    memset(f + (size_t)(d1 * wf) * size, 0, (size_t)((r1 - d1) * wf) * size);
}

/* The pair of dy rows l (low half) and u (high) at position x, either NULL for a channel past
 * Cout (zero) */
static inline uint32_t pypto_tile_pair_at(const uint16_t *l, const uint16_t *u, int64_t x)
{
    return (l != NULL ? (uint32_t)l[x] : 0u) | (u != NULL ? (uint32_t)u[x] << 16 : 0u);
}

#if defined(__AVX2__)
/* pypto_tile_pairs16's 8 lanes on AVX2: 8 pairs from l[0..7] and u[0..7], NULL giving zeros */
static inline __m256i pypto_tile_pairs8(const uint16_t *l, const uint16_t *u)
{
    __m256i v = _mm256_setzero_si256();
    if (l != NULL)
        v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)l));
    if (u != NULL)
        v = _mm256_or_si256(v, _mm256_slli_epi32(
                                   _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)u)), 16));
    return v;
}
#endif

/* n pairs of a pair plane's row from dy rows l (low halves) and u (high), either NULL for a
 * channel past Cout (zero); vectors of 16 (AVX-512, masked at the end) or 8 (AVX2). */
static inline void pypto_tile_pair_row(const uint16_t *restrict l, const uint16_t *restrict u,
                                       int64_t n, uint32_t *restrict row)
{
    int64_t x = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    /* whole vectors stored unmasked: Zen 4's masked store took 9 in 10 of a frame fill's
     * time (Inception-v3's 147x147 layers spent 13% of their time filling frames) */
    for (; x + 16 <= n; x += 16)
        _mm512_storeu_si512(row + x, pypto_tile_pairs16((__mmask16)0xffff,
                                                        l != NULL ? l + x : NULL,
                                                        u != NULL ? u + x : NULL));
    if (x < n) {
        const __mmask16 keep = (__mmask16)((1u << (n - x)) - 1u);
        _mm512_mask_storeu_epi32(row + x, keep,
                                 pypto_tile_pairs16(keep, l != NULL ? l + x : NULL,
                                                    u != NULL ? u + x : NULL));
        x = n;
    }
#elif defined(__AVX2__)
    for (; x + 8 <= n; x += 8)
        _mm256_storeu_si256((__m256i *)(row + x),
                            pypto_tile_pairs8(l != NULL ? l + x : NULL, u != NULL ? u + x : NULL));
#endif
    for (; x < n; x++)
        row[x] = pypto_tile_pair_at(l, u, x);
}

/* The most images a wave of interleaved lanes holds: a tile is then one position */
enum { PYPTO_TILE_LANE_IMAGES = 16 };

/* Lanes p0 .. p1 - 1 of a pair plane with the images inside each position (tile_order.pxi's
 * interleaved lanes): lane q images + n holds image n's pair at position q, from its dy rows
 * low[n] and high[n] (pypto_tile_pair_channels; NULL: a channel past Cout, zero). Blocks of
 * 16 positions of up to 16 images (AVX-512; AVX2: 8 and 8) are transposed in registers, each
 * position stored as one vector whose lanes past its images the next position's store
 * rewrites (a store a lane cost a fill 2-3% of a 8x8 layer's call); the rest lane by lane. */
static inline void pypto_tile_fill_images(const uint16_t *const *low, const uint16_t *const *high,
                                          int64_t images, int64_t p0, int64_t p1,
                                          uint32_t *restrict plane)
{
    const int64_t qb = p1 / images;   /* whole positions: to qb - 1 */
    int64_t q = (p0 + images - 1) / images, lane = p0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    enum { BLOCK = 16 };
#elif defined(__AVX2__)
    enum { BLOCK = 8 };
#else
    enum { BLOCK = 0 };
#endif
    for (; lane < p1 && lane < q * images; lane++)   /* the first position's part */
        plane[lane] = pypto_tile_pair_at(low[lane % images], high[lane % images], lane / images);
    /* a position's store: exactly its images' lanes where they are a power of two, else a
     * whole vector whose last one ends inside this range's whole positions (later stores
     * rewrite the lanes past a position's images) */
    const int exact = images <= BLOCK && (images & (images - 1)) == 0;
    for (; images <= BLOCK
           && (exact ? q + BLOCK <= qb : (q + BLOCK - 1) * images + BLOCK <= qb * images);
         q += BLOCK) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
        __m512i v[16];
        for (int n = 0; n < 16; n++)
            v[n] = n < images ? pypto_tile_pairs16((__mmask16)0xffff,
                                                   low[n] != NULL ? low[n] + q : NULL,
                                                   high[n] != NULL ? high[n] + q : NULL)
                              : _mm512_setzero_si512();
        pypto_transpose16(v);   /* v[p]: position q + p of each image */
        for (int p = 0; p < 16; p++) {
            uint32_t *to = plane + (q + p) * images;
            if (images == 8)
                _mm256_storeu_si256((__m256i *)to, _mm512_castsi512_si256(v[p]));
            else if (images == 4)
                _mm_storeu_si128((__m128i *)to, _mm512_castsi512_si128(v[p]));
            else if (images == 2)
                _mm_storel_epi64((__m128i *)to, _mm512_castsi512_si128(v[p]));
            else if (images == 1)
                to[0] = (uint32_t)_mm_cvtsi128_si32(_mm512_castsi512_si128(v[p]));
            else
                _mm512_storeu_si512(to, v[p]);
        }
#elif defined(__AVX2__)
        __m256 v[8];
        for (int n = 0; n < 8; n++)
            v[n] = _mm256_castsi256_ps(
                pypto_tile_pairs8(n < images && low[n] != NULL ? low[n] + q : NULL,
                                  n < images && high[n] != NULL ? high[n] + q : NULL));
        pypto_transpose8(v);
        for (int p = 0; p < 8; p++) {
            float *to = (float *)(plane + (q + p) * images);
            if (images == 4)
                _mm_storeu_ps(to, _mm256_castps256_ps128(v[p]));
            else if (images == 2)
                _mm_storel_pi((__m64 *)to, _mm256_castps256_ps128(v[p]));
            else if (images == 1)
                _mm_store_ss(to, _mm256_castps256_ps128(v[p]));
            else
                _mm256_storeu_ps(to, v[p]);
        }
#endif
    }
    for (lane = q * images > p0 ? q * images : p0; lane < p1; lane++)
        plane[lane] = pypto_tile_pair_at(low[lane % images], high[lane % images], lane / images);
}

/* The dy planes of pair plane k of block b (low and high halves; NULL: a channel past Cout);
 * dy: an image's first channel, planes of `area` positions */
static inline void pypto_tile_pair_channels(const uint16_t *dy, int64_t cout, int form,
                                            int64_t b, int64_t k, int64_t area,
                                            const uint16_t **low, const uint16_t **high)
{
    const int64_t lo = b * PYPTO_TILE_K + pypto_tile_slot_channel(form, 2 * (int)k, 1);
    const int64_t hi = b * PYPTO_TILE_K + pypto_tile_slot_channel(form, 2 * (int)k + 1, 1);
    *low = lo < cout ? dy + lo * area : NULL;
    *high = hi < cout ? dy + hi * area : NULL;
}

/* Pair plane k of block b of one image's frame, its rows r0 .. r1 - 1 (a team's thread fills
 * its band of them, tile_order.pxi): rows top .. top + hout - 1, columns left .. left + wout - 1
 * from the dy rows of the pair's two channels (low and high halves), the halo zero; a channel
 * past Cout is zero. dy: the image's first channel. A frame without halo columns (a stride-1
 * 1x1 layer without padding) is one run: a 14x14 row a time left most pairs to the scalar end
 * of a vector loop (ResNet-50's layer3 1x1 layers spent 15% of their time filling frames on
 * Zen 4). */
static inline void pypto_tile_frame_rows(const uint16_t *restrict dy, int64_t cout, int form,
                                         int64_t b, int64_t k, int64_t hout, int64_t wout,
                                         int64_t top, int64_t left, int64_t wf, int64_t r0,
                                         int64_t r1, uint32_t *restrict plane)
{
    const uint16_t *low, *high;
    pypto_tile_pair_channels(dy, cout, form, b, k, hout * wout, &low, &high);
    if (low == NULL && high == NULL) {   /* channels past Cout: all zero */
        memset(plane + r0 * wf, 0, (size_t)((r1 - r0) * wf) * sizeof(uint32_t));
        return;
    }
    pypto_tile_frame_halo(plane, sizeof(uint32_t), top, left, hout, wout, wf, r0, r1);
    int64_t d0, d1;   /* the rows holding dy */
    pypto_tile_data_rows(top, hout, r0, r1, &d0, &d1);
    if (wf == wout) {   /* no halo columns: the rows follow each other */
        if (d0 < d1)
            pypto_tile_pair_row(low != NULL ? low + (d0 - top) * wout : NULL,
                                high != NULL ? high + (d0 - top) * wout : NULL,
                                (d1 - d0) * wout, plane + d0 * wf);
        return;
    }
    for (int64_t h = d0; h < d1; h++)
        pypto_tile_pair_row(low != NULL ? low + (h - top) * wout : NULL,
                            high != NULL ? high + (h - top) * wout : NULL, wout,
                            plane + h * wf + left);
}

/* ---- the emulation: the same order on any CPU ------------------------------------------- */
/* Vectors of PYPTO_TV pixels; a register block of PYPTO_TM channels x PYPTO_TNV vectors keeps
 * its E and O chains in registers for one K step, together or (PYPTO_TILE_CHAINS_APART) the
 * E chains first, then the O chains (AVX-512: 8 channels x 2 pixel tiles, 16 chains at a time,
 * each dy vector serving 8 channels and each weight 2 vectors). */
#if defined(__AVX512F__)
typedef __m512 pypto_tv;
/* 8 channels' E chains, then their O chains (PYPTO_TILE_CHAINS_APART): 16 chains, each dy
 * vector serving 8 FMAs (E and O together, 4 channels, took 1.06x the time) */
enum { PYPTO_TV = 16, PYPTO_TM = 8, PYPTO_TNV = 2 };
#define PYPTO_TILE_CHAINS_APART 1
#define PYPTO_TILE_BLOCK_TWO_TILES 1   /* a register block spans a pair's two pixel tiles */
#define PYPTO_TV_LOAD(p) _mm512_loadu_ps(p)
#define PYPTO_TV_STORE(p, v) _mm512_storeu_ps(p, v)
#define PYPTO_TV_SET1(x) _mm512_set1_ps(x)
#define PYPTO_TV_ZERO() _mm512_setzero_ps()
#define PYPTO_TV_ADD(a, b) _mm512_add_ps(a, b)
#define PYPTO_TV_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define PYPTO_TV_FUSED 1
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 pypto_tv;
/* 16 ymm registers hold 8 chains with E and O together (2 channels x 2 vectors): too few to
 * cover the FMA's latency at two a cycle; run apart (PYPTO_TILE_CHAINS_APART), 6 channels'
 * E chains, then their O chains (a channel tile: 6 + 6 + 4), each 12 chains with a dy vector
 * serving 6 FMAs (4 channels, 8 chains: 1.01-1.02x the time on Zen 4; 5 channels 1.04x) */
enum { PYPTO_TV = 8, PYPTO_TM = 6, PYPTO_TNV = 2 };
#define PYPTO_TILE_CHAINS_APART 1
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
enum { PYPTO_TV = 4, PYPTO_TM = 2, PYPTO_TNV = 4 };
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
enum { PYPTO_TV = 4, PYPTO_TM = 2, PYPTO_TNV = 2 };
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

/* pixels one register block covers: two pixel tiles on AVX-512, else part of one */
#define PYPTO_TILE_BLOCK_PX (PYPTO_TV * PYPTO_TNV)

/* The fp32 emulation's B operand of one K step for a pair of pixel tiles (b[px]: the step's
 * first pair plane at tile px's first pixel): even[s][32] and odd[s][32] hold channels 2s and
 * 2s + 1 of the block for s below `slots`, pixels 0-15 from tile 0 and 16-31 from tile 1
 * (n_px 2). Once a step, so the register blocks read fp32 from L1 and the frames stay bf16
 * (half the memory traffic). */
static inline void pypto_tile_split(const uint32_t *const *b, int n_px, int64_t plane,
                                    float *restrict even, float *restrict odd, int slots)
{
    for (int s = 0; s < slots; s++)   /* the planes the chains read */
        for (int px = 0; px < n_px; px++) {
            const uint32_t *restrict from = b[px] + s * plane;
            float *restrict e = even + s * 2 * PYPTO_TILE_PX + px * PYPTO_TILE_PX;
            float *restrict o = odd + s * 2 * PYPTO_TILE_PX + px * PYPTO_TILE_PX;
            for (int x = 0; x < PYPTO_TILE_PX; x++) {
                e[x] = pypto_u2f(from[x] << 16);
                o[x] = pypto_u2f(from[x] & 0xffff0000u);
            }
        }
}

/* Dense positions pay where a run is one masked load with merge (AVX-512) or a whole load
 * ANDed with its lanes (AVX2: its masked loads made ResNet-50's pass slower, 1.254x -> 1.285x
 * the sequential order's time, one thread); other levels keep frame positions
 * (PYPTO_TILE_DENSE_FAST 0: no call is dense there, and the helpers below are not built). The
 * tile unit reads frames as they are and keeps frame positions. */

/* The emulation's tiles in dense positions (the phase's pixels of the wave's images one
 * after another, no halo column and no image's end padded to a whole tile): tile t's 16
 * positions are n[t] runs, run k its positions x[t][k] .. + len[t][k] - 1 from a frame row
 * at src[t][k] (before a K step's offset); positions past the wave's last are in no run. */
typedef struct {
    int n[PYPTO_TILE_ITEM_TILES];
    int x[PYPTO_TILE_ITEM_TILES][PYPTO_TILE_PX], len[PYPTO_TILE_ITEM_TILES][PYPTO_TILE_PX];
    const uint32_t *src[PYPTO_TILE_ITEM_TILES][PYPTO_TILE_PX];
} pypto_tile_runs;

/* Flat frames with lane masks (the dot form): a wave's images' dy planes one after another
 * without a halo, and dense positions that map onto them one to one, so that a tile at a K
 * step's tap is one run of each pair plane, shifted by the tap's rows and columns. Lane x of
 * tile t is the image's row[t][x], col[t][x] (past the wave: PYPTO_TILE_NOWHERE); the lanes
 * whose shifted position leaves the image (rows x cols) read zeros, as a halo would give. */
enum { PYPTO_TILE_NOWHERE = 1 << 30 };
typedef struct {
    int32_t row[PYPTO_TILE_ITEM_TILES][PYPTO_TILE_PX], col[PYPTO_TILE_ITEM_TILES][PYPTO_TILE_PX];
    int32_t rows, cols;
    const int64_t *tap_row, *tap_col;   /* the run's phase's taps' shifts, as its tap_offset */
} pypto_tile_lanes;

#if defined(__AVX512F__)
enum { PYPTO_TILE_DENSE_FAST = 1, PYPTO_TILE_LANES = 1 };

/* The lanes of tile t that a tap shifted by dr rows and dc columns reads (pypto_tile_lanes) */
static inline uint16_t pypto_tile_lane_mask(const pypto_tile_lanes *l, int t, int64_t dr,
                                            int64_t dc)
{
    const __m512i r = _mm512_add_epi32(_mm512_loadu_si512(l->row[t]), _mm512_set1_epi32((int)dr));
    const __m512i c = _mm512_add_epi32(_mm512_loadu_si512(l->col[t]), _mm512_set1_epi32((int)dc));
    return _mm512_cmplt_epu32_mask(r, _mm512_set1_epi32(l->rows))
           & _mm512_cmplt_epu32_mask(c, _mm512_set1_epi32(l->cols));
}

/* pypto_tile_split of flat frames, tile px's lanes outside km[px] read as zeros */
static inline void pypto_tile_split_lanes(const uint32_t *const *b, const uint16_t *km,
                                          int n_px, int64_t plane, float *restrict even,
                                          float *restrict odd)
{
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    for (int px = 0; px < n_px; px++)
        for (int s = 0; s < PYPTO_TILE_K / 2; s++) {
            const __m512i v = km[px] == 0xffff ? _mm512_loadu_si512(b[px] + s * plane)
                                               : _mm512_maskz_loadu_epi32(km[px], b[px] + s * plane);
            const int64_t at = s * 2 * PYPTO_TILE_PX + px * PYPTO_TILE_PX;
            _mm512_store_ps(even + at, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
            _mm512_store_ps(odd + at, _mm512_castsi512_ps(_mm512_and_si512(v, high)));
        }
}

/* Tile t's 16 pairs of each of the 16 pair planes from b_at on (plane apart) into v, each run
 * one masked load a plane placed at its lanes (a masked lane reads no memory); 0 past the
 * wave. Runs outermost: every plane's loads of a run are one unrolled loop, so that the
 * branches follow the runs (1-4 a tile), not the 16 planes times the runs. */
static inline __attribute__((always_inline)) void
pypto_tile_run_planes(const pypto_tile_runs *runs, int t, int64_t b_at, int64_t plane,
                      __m512i v[PYPTO_TILE_K / 2])
{
    for (int s = 0; s < PYPTO_TILE_K / 2; s++)
        v[s] = _mm512_setzero_si512();
    for (int k = 0; k < runs->n[t]; k++) {
        const __mmask16 lanes = (__mmask16)(((1u << runs->len[t][k]) - 1u) << runs->x[t][k]);
        const uint32_t *src = runs->src[t][k] + b_at - runs->x[t][k];
#pragma GCC unroll 16
        for (int s = 0; s < PYPTO_TILE_K / 2; s++)
            v[s] = _mm512_mask_loadu_epi32(v[s], lanes, src + s * plane);
    }
}

/* pypto_tile_split from tiles t and t + n_px - 1 of `runs` (b_at: the K step's offset) */
static inline void pypto_tile_split_runs(const pypto_tile_runs *runs, int t, int n_px,
                                         int64_t b_at, int64_t plane, float *restrict even,
                                         float *restrict odd)
{
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    for (int px = 0; px < n_px; px++) {
        __m512i v[PYPTO_TILE_K / 2];
        pypto_tile_run_planes(runs, t + px, b_at, plane, v);
        for (int s = 0; s < PYPTO_TILE_K / 2; s++) {
            const int64_t at = s * 2 * PYPTO_TILE_PX + px * PYPTO_TILE_PX;
            _mm512_store_ps(even + at, _mm512_castsi512_ps(_mm512_slli_epi32(v[s], 16)));
            _mm512_store_ps(odd + at, _mm512_castsi512_ps(_mm512_and_si512(v[s], high)));
        }
    }
}

/* The dot form's B operand of one K step for tiles t and t + n_px - 1 of `runs`, as pairs:
 * pairs[k][32] holds pair plane k at the two tiles' 32 positions, so the K step reads dense
 * positions as it reads a frame, with 32 as the plane. */
static inline void pypto_tile_gather_runs(const pypto_tile_runs *runs, int t, int n_px,
                                          int64_t b_at, int64_t plane, uint32_t *restrict pairs)
{
    for (int px = 0; px < n_px; px++) {
        __m512i v[PYPTO_TILE_K / 2];
        pypto_tile_run_planes(runs, t + px, b_at, plane, v);
        for (int s = 0; s < PYPTO_TILE_K / 2; s++)
            _mm512_store_si512(pairs + s * 2 * PYPTO_TILE_PX + px * PYPTO_TILE_PX, v[s]);
    }
}
#elif defined(__AVX2__)
enum { PYPTO_TILE_DENSE_FAST = 1, PYPTO_TILE_LANES = 1 };

/* pypto_tile_lane_mask in two 8-lane halves (no unsigned compare: 0 <= x < n both ways) */
static inline uint16_t pypto_tile_lane_mask(const pypto_tile_lanes *l, int t, int64_t dr,
                                            int64_t dc)
{
    const __m256i none = _mm256_set1_epi32(-1);
    const __m256i rows = _mm256_set1_epi32(l->rows), cols = _mm256_set1_epi32(l->cols);
    int mask = 0;
    for (int h = 0; h < PYPTO_TILE_PX; h += 8) {
        const __m256i r = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(l->row[t] + h)),
                                           _mm256_set1_epi32((int)dr));
        const __m256i c = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(l->col[t] + h)),
                                           _mm256_set1_epi32((int)dc));
        const __m256i in = _mm256_and_si256(
            _mm256_and_si256(_mm256_cmpgt_epi32(rows, r), _mm256_cmpgt_epi32(r, none)),
            _mm256_and_si256(_mm256_cmpgt_epi32(cols, c), _mm256_cmpgt_epi32(c, none)));
        mask |= _mm256_movemask_ps(_mm256_castsi256_ps(in)) << h;
    }
    return (uint16_t)mask;
}

/* pypto_tile_split of flat frames, tile px's lanes outside km[px] zero: whole 8-lane loads
 * ANDed with the lanes (AVX2's masked loads were slower; a load's other lanes read up to a
 * tap's shift either side of the image, inside the buffer: the caller's slack) */
static inline void pypto_tile_split_lanes(const uint32_t *const *b, const uint16_t *km,
                                          int n_px, int64_t plane, float *restrict even,
                                          float *restrict odd)
{
    const __m256i high = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i bit = _mm256_set_epi32(128, 64, 32, 16, 8, 4, 2, 1);
    for (int px = 0; px < n_px; px++)
        for (int h = 0; h < PYPTO_TILE_PX; h += 8) {
            const __m256i keep = _mm256_cmpeq_epi32(
                _mm256_and_si256(_mm256_set1_epi32(km[px] >> h), bit), bit);
            for (int s = 0; s < PYPTO_TILE_K / 2; s++) {
                const __m256i v = _mm256_and_si256(
                    keep, _mm256_loadu_si256((const __m256i *)(b[px] + s * plane + h)));
                const int64_t at = s * 2 * PYPTO_TILE_PX + px * PYPTO_TILE_PX + h;
                _mm256_storeu_ps(even + at, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
                _mm256_storeu_ps(odd + at, _mm256_castsi256_ps(_mm256_and_si256(v, high)));
            }
        }
}

/* pypto_tile_split from tiles t and t + n_px - 1 of `runs` (b_at: the K step's offset), 8
 * lanes and 8 planes at a time (16 ymm registers): a run's lanes of a plane are a whole
 * 8-lane load from the run's frame row, shifted to its lanes and ANDed with them (its other
 * lanes read neighbouring frame positions, or up to 15 positions before the frames or past
 * their end: inside the buffer, PYPTO_TILE_READ_SLACK), ORed into the plane's vector; no masked
 * load (AVX2's made dense positions slower than frame positions). */
static inline void pypto_tile_split_runs(const pypto_tile_runs *runs, int t, int n_px,
                                         int64_t b_at, int64_t plane, float *restrict even,
                                         float *restrict odd)
{
    const __m256i high = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i lane = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    const int group = PYPTO_TILE_K / 4;   /* planes a pass */
    for (int px = 0; px < n_px; px++) {
        if (runs->n[t + px] == 1 && runs->len[t + px][0] == PYPTO_TILE_PX) {   /* one run */
            const uint32_t *src = runs->src[t + px][0] + b_at;   /* as a frame tile is split */
            pypto_tile_split(&src, 1, plane, even + px * PYPTO_TILE_PX, odd + px * PYPTO_TILE_PX,
                             PYPTO_TILE_K / 2);
            continue;
        }
        for (int h = 0; h < PYPTO_TILE_PX; h += 8) {
            const __m256i at = _mm256_add_epi32(lane, _mm256_set1_epi32(h));   /* lanes' x */
            for (int s0 = 0; s0 < PYPTO_TILE_K / 2; s0 += group) {
                __m256i v[PYPTO_TILE_K / 4];
                for (int s = 0; s < group; s++)
                    v[s] = _mm256_setzero_si256();
                for (int k = 0; k < runs->n[t + px]; k++) {
                    const int x = runs->x[t + px][k], end = x + runs->len[t + px][k];
                    if (end <= h || x >= h + 8)
                        continue;
                    const __m256i keep = _mm256_andnot_si256(
                        _mm256_cmpgt_epi32(_mm256_set1_epi32(x), at),
                        _mm256_cmpgt_epi32(_mm256_set1_epi32(end), at));
                    const uint32_t *src = runs->src[t + px][k] + b_at + s0 * plane - x + h;
#pragma GCC unroll 8
                    for (int s = 0; s < group; s++)
                        v[s] = _mm256_or_si256(
                            v[s], _mm256_and_si256(
                                      keep, _mm256_loadu_si256((const __m256i *)(src + s * plane))));
                }
                for (int s = 0; s < group; s++) {
                    const int64_t to = (s0 + s) * 2 * PYPTO_TILE_PX + px * PYPTO_TILE_PX + h;
                    _mm256_storeu_ps(even + to, _mm256_castsi256_ps(_mm256_slli_epi32(v[s], 16)));
                    _mm256_storeu_ps(odd + to, _mm256_castsi256_ps(_mm256_and_si256(v[s], high)));
                }
            }
        }
    }
}
#else
enum { PYPTO_TILE_DENSE_FAST = 0, PYPTO_TILE_LANES = 0 };
#endif
/* bytes of the frames' buffer before and after them that an 8-lane load of a dense run may
 * read (AVX2: up to 15 positions either side of a run; flat frames with lanes add their
 * largest tap shift, tile_order.pxi's g.slack) */
enum { PYPTO_TILE_READ_SLACK = 64 };

/* One K step of one channel tile's first `rows` channels and one pixel tile, scalar fmaf
 * (where vectors lack the FMA and a product may round): a: the step's 16 x 32 weights (E
 * slots, then O slots); even, odd: the split B at the tile's first pixel, rows 32 apart. */
static inline void pypto_tile_step_scalar(const float *restrict a, const float *restrict even,
                                          const float *restrict odd, float *restrict c,
                                          int slots, int rows)
{
    const int half = PYPTO_TILE_K / 2;
    for (int m = 0; m < rows; m++)
        for (int n = 0; n < PYPTO_TILE_PX; n++) {
            float e = 0.0f, o = 0.0f;
            for (int s = 0; s < slots; s++) {
                e = fmaf(a[m * PYPTO_TILE_K + s], even[s * 2 * PYPTO_TILE_PX + n], e);
                o = fmaf(a[m * PYPTO_TILE_K + half + s], odd[s * 2 * PYPTO_TILE_PX + n], o);
            }
            c[m * PYPTO_TILE_PX + n] += e + o;
        }
}

#ifdef PYPTO_TILE_CHAINS_APART
/* One chain of the K step (a: PYPTO_TM channels' weights for it, 32 floats apart; b: its split
 * B) over its first `slots` slots for PYPTO_TM channels x nv pixel vectors, from +0, into x */
static inline __attribute__((always_inline)) void
pypto_tile_chains(const float *restrict a, const float *restrict b, const int *v,
                  pypto_tv x[PYPTO_TM][PYPTO_TNV], const int tm, const int nv, const int slots)
{
    const int row = 2 * PYPTO_TILE_PX;
    for (int m = 0; m < tm; m++)
        for (int j = 0; j < PYPTO_TNV; j++)
            x[m][j] = PYPTO_TV_ZERO();
#pragma GCC unroll 4
    for (int s = 0; s < slots; s++) {
        pypto_tv bv[PYPTO_TNV];
        for (int j = 0; j < nv; j++)
            bv[j] = PYPTO_TV_LOAD(b + s * row + v[j]);
        for (int m = 0; m < tm; m++) {
            const pypto_tv w = PYPTO_TV_SET1(a[m * PYPTO_TILE_K + s]);
            for (int j = 0; j < nv; j++)
                x[m][j] = PYPTO_TV_FMA(w, bv[j], x[m][j]);
        }
    }
}
#endif

#ifndef PYPTO_TV_NONE
/* One K step of PYPTO_TM channels (a: the first one's row of the step's weights) x nv pixel
 * vectors of the split B (even + v[j], odd + v[j]; rows 32 apart) into C (cp[j]; channel rows
 * PYPTO_TILE_PX apart): E and O chains in registers over their first `slots` slots, then
 * C += E + O. */
static inline __attribute__((always_inline)) void
pypto_tile_step_f32(const float *restrict a, const float *restrict even,
                    const float *restrict odd, const int *v, float *const *cp, const int tm,
                    const int nv, const int slots)
{
#ifdef PYPTO_TILE_CHAINS_APART   /* E to the stack (L1), then O; each element's sums unchanged */
    pypto_tv e[PYPTO_TM][PYPTO_TNV], o[PYPTO_TM][PYPTO_TNV];
    pypto_tile_chains(a, even, v, e, tm, nv, slots);
    float kept[PYPTO_TM * PYPTO_TNV * PYPTO_TV];
    for (int m = 0; m < tm; m++)
        for (int j = 0; j < nv; j++)
            PYPTO_TV_STORE(kept + (m * PYPTO_TNV + j) * PYPTO_TV, e[m][j]);
    pypto_tile_chains(a + PYPTO_TILE_K / 2, odd, v, o, tm, nv, slots);
    for (int m = 0; m < tm; m++)
        for (int j = 0; j < nv; j++) {
            float *to = cp[j] + m * PYPTO_TILE_PX;
            const pypto_tv sum = PYPTO_TV_ADD(PYPTO_TV_LOAD(kept + (m * PYPTO_TNV + j) * PYPTO_TV),
                                              o[m][j]);
            PYPTO_TV_STORE(to, PYPTO_TV_ADD(PYPTO_TV_LOAD(to), sum));
        }
#else
    const int half = PYPTO_TILE_K / 2, row = 2 * PYPTO_TILE_PX;
    pypto_tv e[PYPTO_TM][PYPTO_TNV], o[PYPTO_TM][PYPTO_TNV];
    for (int m = 0; m < tm; m++)
        for (int j = 0; j < PYPTO_TNV; j++)
            e[m][j] = o[m][j] = PYPTO_TV_ZERO();
#pragma GCC unroll 4
    for (int s = 0; s < slots; s++) {
        pypto_tv ev[PYPTO_TNV], ov[PYPTO_TNV];
        for (int j = 0; j < nv; j++) {
            ev[j] = PYPTO_TV_LOAD(even + s * row + v[j]);
            ov[j] = PYPTO_TV_LOAD(odd + s * row + v[j]);
        }
        for (int m = 0; m < tm; m++) {
            const pypto_tv ae = PYPTO_TV_SET1(a[m * PYPTO_TILE_K + s]);
            const pypto_tv ao = PYPTO_TV_SET1(a[m * PYPTO_TILE_K + half + s]);
            for (int j = 0; j < nv; j++) {
                e[m][j] = PYPTO_TV_FMA(ae, ev[j], e[m][j]);
                o[m][j] = PYPTO_TV_FMA(ao, ov[j], o[m][j]);
            }
        }
    }
    for (int m = 0; m < tm; m++)
        for (int j = 0; j < nv; j++) {
            float *to = cp[j] + m * PYPTO_TILE_PX;
            PYPTO_TV_STORE(to, PYPTO_TV_ADD(PYPTO_TV_LOAD(to), PYPTO_TV_ADD(e[m][j], o[m][j])));
        }
#endif
}
#endif

#ifdef PYPTO_ISA_AVX512BF16
/* The same K step with VDPBF16PS, which adds its odd slot's product, then its even slot's, each
 * rounded as an FMA: pair planes 0-7 hold the E chain two steps at a time (channels 4s in the
 * odd slot, 4s + 2 in the even one), planes 8-15 the O chain (4s + 1, 4s + 3); the weight rows
 * the same pairs. The frames are read as they are (bp[j]: the step's first plane at vector j's
 * pixels). Only where nothing can be subnormal (the instruction flushes). Its register block
 * keeps E and O together, PYPTO_DOT_TM channels x 2 tiles: 16 chains (the fp32 form's 8
 * channels would be 32 chains, more than the registers: 4% slower with the spills). */
enum { PYPTO_DOT_TM = 4 };
static inline __attribute__((always_inline)) void
pypto_tile_step_dot(const uint32_t *restrict a, const uint32_t *const *bp, const uint16_t *km,
                    float *const *cp, int64_t plane, const int nv, const int quarters,
                    const int masked)
{
    const int quarter = PYPTO_TILE_K / 4, half = PYPTO_TILE_K / 2;
    __m512 e[PYPTO_DOT_TM][PYPTO_TNV], o[PYPTO_DOT_TM][PYPTO_TNV];
    for (int m = 0; m < PYPTO_DOT_TM; m++)
        for (int j = 0; j < PYPTO_TNV; j++)
            e[m][j] = o[m][j] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int s = 0; s < quarters; s++) {
        __m512bh ev[PYPTO_TNV], ov[PYPTO_TNV];
        for (int j = 0; j < nv; j++) {
            if (masked) {   /* Zen 4's masked loads: 1.05x the time of plain ones */
                ev[j] = (__m512bh)_mm512_maskz_loadu_epi32(km[j], bp[j] + s * plane);
                ov[j] = (__m512bh)_mm512_maskz_loadu_epi32(km[j], bp[j] + (quarter + s) * plane);
            } else {
                ev[j] = (__m512bh)_mm512_loadu_si512(bp[j] + s * plane);
                ov[j] = (__m512bh)_mm512_loadu_si512(bp[j] + (quarter + s) * plane);
            }
        }
        for (int m = 0; m < PYPTO_DOT_TM; m++) {
            const __m512bh ae = (__m512bh)_mm512_set1_epi32((int)a[m * half + s]);
            const __m512bh ao = (__m512bh)_mm512_set1_epi32((int)a[m * half + quarter + s]);
            for (int j = 0; j < nv; j++) {
                e[m][j] = _mm512_dpbf16_ps(e[m][j], ae, ev[j]);
                o[m][j] = _mm512_dpbf16_ps(o[m][j], ao, ov[j]);
            }
        }
    }
    for (int m = 0; m < PYPTO_DOT_TM; m++)
        for (int j = 0; j < nv; j++) {
            float *to = cp[j] + m * PYPTO_TILE_PX;
            _mm512_storeu_ps(to, _mm512_add_ps(_mm512_loadu_ps(to),
                                               _mm512_add_ps(e[m][j], o[m][j])));
        }
}
#endif

#ifndef PYPTO_TV_NONE
/* Channels m .. m + tm - 1 of one channel tile's K step for a pair of pixel tiles */
static inline __attribute__((always_inline)) void
pypto_tile_step_rows(const float *restrict a, const float *even, const float *odd, int n_px,
                     float *pair_c, const int m, const int tm, const int slots)
{
    const int64_t tile = PYPTO_TILE_CH * PYPTO_TILE_PX;
    const float *am = a + m * PYPTO_TILE_K;
#ifdef PYPTO_TILE_BLOCK_TWO_TILES   /* one register block: both tiles */
    const int v[2] = {0, PYPTO_TILE_PX};
    float *cp[2] = {pair_c + m * PYPTO_TILE_PX, pair_c + tile + m * PYPTO_TILE_PX};
    if (n_px == 2)
        pypto_tile_step_f32(am, even, odd, v, cp, tm, 2, slots);
    else
        pypto_tile_step_f32(am, even, odd, v, cp, tm, 1, slots);
#else
    for (int px = 0; px < n_px; px++)
        for (int x = 0; x < PYPTO_TILE_PX; x += PYPTO_TILE_BLOCK_PX) {
            int v[PYPTO_TNV];
            float *cp[PYPTO_TNV];
            for (int j = 0; j < PYPTO_TNV; j++) {
                v[j] = px * PYPTO_TILE_PX + x + j * PYPTO_TV;
                cp[j] = pair_c + px * tile + m * PYPTO_TILE_PX + x + j * PYPTO_TV;
            }
            pypto_tile_step_f32(am, even, odd, v, cp, tm, PYPTO_TNV, slots);
        }
#endif
}
#endif

/* One K step of a pair of pixel tiles for one channel tile (a: the step's weights), emulated in
 * fp32 from the split B, the chains over their first `slots` slots; register blocks only as
 * far as the tile's first `rows` channels reach (the last tile of a Cin off the 16 grid: a
 * stem's 3 or 4 channels ran 16). */
static inline __attribute__((always_inline)) void
pypto_tile_step_tiles_n(const float *restrict a, const float *even, const float *odd, int n_px,
                        float *pair_c, int exact, const int slots, int rows)
{
    const int64_t tile = PYPTO_TILE_CH * PYPTO_TILE_PX;
#ifndef PYPTO_TV_NONE
    if (PYPTO_TV_FUSED || exact) {
        int m = 0;
        for (; m + PYPTO_TM <= PYPTO_TILE_CH; m += PYPTO_TM) {
            if (m >= rows)
                return;
            pypto_tile_step_rows(a, even, odd, n_px, pair_c, m, PYPTO_TM, slots);
        }
        if (PYPTO_TILE_CH % PYPTO_TM && m < rows)
            pypto_tile_step_rows(a, even, odd, n_px, pair_c, m, PYPTO_TILE_CH % PYPTO_TM, slots);
        return;
    }
#endif
    (void)exact;
    for (int px = 0; px < n_px; px++)
        pypto_tile_step_scalar(a, even + px * PYPTO_TILE_PX, odd + px * PYPTO_TILE_PX,
                               pair_c + px * tile, slots, rows);
}

/* A co block's chains need only the slots of its channels below Cout (a padded channel's
 * products are +0, and a chain from +0 is never -0, so adding them changes no bit): a whole
 * block's 16 with the count a constant, a short last block's fewer. */
static inline void pypto_tile_step_tiles_f32(const float *restrict a, const float *even,
                                             const float *odd, int n_px, float *pair_c,
                                             int exact, int slots, int rows)
{
    if (slots == PYPTO_TILE_K / 2)
        pypto_tile_step_tiles_n(a, even, odd, n_px, pair_c, exact, PYPTO_TILE_K / 2, rows);
    else
        pypto_tile_step_tiles_n(a, even, odd, n_px, pair_c, exact, slots, rows);
}

/* pypto_tile_run_amx's contract, emulated: a[ch] the channel tiles' packed weights and b[t] the
 * frames at tile t's first pixel, in `form` (PYPTO_TILE_FORM_F32 or _DOT), or (runs not NULL)
 * the tiles in dense positions, or (lanes not NULL) in flat frames with masked lanes; C at
 * pypto_tile_c_slot(c, t, ch, item_ch) (n_ch <= item_ch), the last channel tile's channels
 * from `last_rows` on not computed (past Cin: never written out).
 * K steps outermost:
 * a step reads each of its 16 planes as one run over the item's tiles (a step per pixel pair
 * would stream 16 planes per block and tap at once, more than the hardware prefetchers
 * follow: 1x1 layers of many channels were memory-bound so), while the item's C (32 KiB)
 * stays in cache. scratch: 1024 floats. exact: every product is exact in fp32 (the caller's
 * scan), needed only where the vectors have no FMA. */
static inline __attribute__((always_inline)) void
pypto_tile_run_emulated_rows(const void *const *a, int n_ch, const int last_rows, int item_ch,
                             const uint32_t *const *b, const pypto_tile_runs *runs,
                             const pypto_tile_lanes *lanes, int n_tiles, int64_t blocks,
                             int64_t taps, const int64_t *tap_index, const int64_t *tap_offset,
                             int64_t n_taps, int64_t plane, float *restrict c,
                             float *restrict scratch, int form, int exact, int64_t cout)
{
    const int64_t tile = PYPTO_TILE_CH * PYPTO_TILE_PX;
    float *even = scratch, *odd = scratch + PYPTO_TILE_K * PYPTO_TILE_PX;
    memset(c, 0, (size_t)((n_tiles + 1) / 2) * 2 * (size_t)item_ch * (size_t)tile
                     * sizeof(float));
    (void)form;
    for (int64_t blk = 0; blk < blocks; blk++) {
        /* the block's channels below Cout: the chains' slots that hold one (F32: channels
         * 2s and 2s + 1 in slot s; dot: 4s .. 4s + 3 in quarter s) */
        const int n_co = pypto_tile_block_channels(cout, blk);
        const int slots = (n_co + 1) / 2;
        for (int64_t i = 0; i < n_taps; i++) {
            const int64_t a_at = (blk * taps + tap_index[i]) * PYPTO_TILE_A_ELEMS;
            const int64_t b_at = blk * (PYPTO_TILE_K / 2) * plane + tap_offset[i];
            for (int p = 0; p < n_tiles; p += 2) {
                int n_px = p + 1 < n_tiles ? 2 : 1;
                float *pair = pypto_tile_c_slot(c, p, 0, item_ch);   /* the first C tile run */
                const uint32_t *bp[2] = {NULL, NULL};
                if (runs == NULL) {
                    bp[0] = b[p] + b_at;
                    bp[1] = b[p + n_px - 1] + b_at;
                }
#if defined(__AVX512F__) || defined(__AVX2__)
                uint16_t km[2] = {0xffff, 0xffff};
                if (lanes != NULL) {   /* flat: the lanes inside dy's image */
                    km[0] = pypto_tile_lane_mask(lanes, p, lanes->tap_row[i], lanes->tap_col[i]);
                    km[1] = pypto_tile_lane_mask(lanes, p + n_px - 1, lanes->tap_row[i],
                                                 lanes->tap_col[i]);
                    /* a tile all outside: E + O = +0, and C + 0 keeps C's bits */
                    if ((km[0] | km[1]) == 0)
                        continue;
                    if (n_px == 2 && km[0] == 0) {   /* the pair's second tile alone */
                        bp[0] = bp[1];
                        km[0] = km[1];
                        pair += tile;
                        n_px = 1;
                    } else if (n_px == 2 && km[1] == 0) {
                        n_px = 1;
                    }
                }
#else
                (void)lanes;
#endif
#ifdef PYPTO_ISA_AVX512BF16
                if (form == PYPTO_TILE_FORM_DOT) {
                    const int quarters = (n_co + 3) / 4;
                    int64_t step_plane = plane;
                    const int whole = (km[0] & km[1]) == 0xffff;   /* every lane: plain loads */
                    if (runs != NULL) {   /* dense: the pairs gathered, 32 positions a plane */
                        uint32_t *pairs = (uint32_t *)scratch;
                        pypto_tile_gather_runs(runs, p, n_px, b_at, plane, pairs);
                        bp[0] = pairs;
                        bp[1] = pairs + PYPTO_TILE_PX;
                        step_plane = 2 * PYPTO_TILE_PX;
                    }
                    /* whole channel tiles, then a last tile short of 16 channels for its own
                     * channels only (pypto_tile_run_emulated_short's copy). Two loops, not
                     * one with the bound m < (last tile ? last_rows : 16): that one, folded
                     * to 16 in the common copy, still made the networks 1.2% slower */
                    const int whole_tiles = last_rows < PYPTO_TILE_CH ? n_ch - 1 : n_ch;
                    for (int ch = 0; ch < whole_tiles; ch++)
                        for (int m = 0; m < PYPTO_TILE_CH; m += PYPTO_DOT_TM) {
                            const uint32_t *am = (const uint32_t *)a[ch] + a_at / 2
                                                 + m * (PYPTO_TILE_K / 2);
                            float *cp[2] = {pair + ch * 2 * tile + m * PYPTO_TILE_PX,
                                            pair + (ch * 2 + 1) * tile + m * PYPTO_TILE_PX};
                            if (n_px == 2 && quarters == PYPTO_TILE_K / 4 && whole)
                                pypto_tile_step_dot(am, bp, km, cp, step_plane, 2,
                                                    PYPTO_TILE_K / 4, 0);
                            else if (n_px == 2 && quarters == PYPTO_TILE_K / 4)
                                pypto_tile_step_dot(am, bp, km, cp, step_plane, 2,
                                                    PYPTO_TILE_K / 4, 1);
                            else if (n_px == 2)
                                pypto_tile_step_dot(am, bp, km, cp, step_plane, 2, quarters, 1);
                            else
                                pypto_tile_step_dot(am, bp, km, cp, step_plane, 1, quarters, 1);
                        }
                    for (int m = 0; whole_tiles < n_ch && m < last_rows; m += PYPTO_DOT_TM) {
                        const uint32_t *am = (const uint32_t *)a[n_ch - 1] + a_at / 2
                                             + m * (PYPTO_TILE_K / 2);
                        float *cp[2] = {pair + (n_ch - 1) * 2 * tile + m * PYPTO_TILE_PX,
                                        pair + ((n_ch - 1) * 2 + 1) * tile + m * PYPTO_TILE_PX};
                        if (n_px == 2)   /* the vector count a constant: E and O in registers */
                            pypto_tile_step_dot(am, bp, km, cp, step_plane, 2, quarters, 1);
                        else
                            pypto_tile_step_dot(am, bp, km, cp, step_plane, 1, quarters, 1);
                    }
                    continue;
                }
#endif
#if defined(__AVX512F__) || defined(__AVX2__)
                if (lanes != NULL)
                    pypto_tile_split_lanes(bp, km, n_px, plane, even, odd);
                else if (runs != NULL)
                    pypto_tile_split_runs(runs, p, n_px, b_at, plane, even, odd);
                else
#endif
                    pypto_tile_split(bp, n_px, plane, even, odd, slots);
                for (int ch = 0; ch < n_ch; ch++)
                    pypto_tile_step_tiles_f32((const float *)a[ch] + a_at, even, odd, n_px,
                                              pair + ch * 2 * tile, exact, slots,
                                              ch < n_ch - 1 ? PYPTO_TILE_CH : last_rows);
            }
        }
    }
}

/* An item whose last channel tile is short of 16 channels: the same steps out of line, so that
 * the common item's copy keeps its loops as they were (its last_rows a constant 16: a bound
 * of last_rows in them made ResNet-50 1.01-1.025x slower) */
static __attribute__((noinline)) void
pypto_tile_run_emulated_short(const void *const *a, int n_ch, int last_rows, int item_ch,
                              const uint32_t *const *b, const pypto_tile_runs *runs,
                              const pypto_tile_lanes *lanes, int n_tiles, int64_t blocks,
                              int64_t taps, const int64_t *tap_index, const int64_t *tap_offset,
                              int64_t n_taps, int64_t plane, float *restrict c,
                              float *restrict scratch, int form, int exact, int64_t cout)
{
    pypto_tile_run_emulated_rows(a, n_ch, last_rows, item_ch, b, runs, lanes, n_tiles, blocks,
                                 taps, tap_index, tap_offset, n_taps, plane, c, scratch, form,
                                 exact, cout);
}

static inline void pypto_tile_run_emulated(const void *const *a, int n_ch, int last_rows,
                                           int item_ch, const uint32_t *const *b,
                                           const pypto_tile_runs *runs,
                                           const pypto_tile_lanes *lanes, int n_tiles,
                                           int64_t blocks, int64_t taps,
                                           const int64_t *tap_index, const int64_t *tap_offset,
                                           int64_t n_taps, int64_t plane, float *restrict c,
                                           float *restrict scratch, int form, int exact,
                                           int64_t cout)
{
    if (last_rows < PYPTO_TILE_CH)
        pypto_tile_run_emulated_short(a, n_ch, last_rows, item_ch, b, runs, lanes, n_tiles,
                                      blocks, taps, tap_index, tap_offset, n_taps, plane, c,
                                      scratch, form, exact, cout);
    else
        pypto_tile_run_emulated_rows(a, n_ch, PYPTO_TILE_CH, item_ch, b, runs, lanes, n_tiles,
                                     blocks, taps, tap_index, tap_offset, n_taps, plane, c,
                                     scratch, form, exact, cout);
}

/* ---- the tile unit ----------------------------------------------------------------------- */
#if PYPTO_HAVE_AMX
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} pypto_tile_config;

/* palette 1, every tile 16 rows x 64 bytes: C tiles 0-3, the others dy and weight tiles */
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

/* Block b of one image's frame in the tile unit's form: per position, the block's 32 channels
 * (bf16, 64 bytes), so that a tap's dy tile, 16 consecutive positions, is 1 KiB on whole
 * lines wherever the tap starts (a B tile from the pair planes started mid-line for all but
 * one tap in 16, and such loads ran at a third of the speed). Rows top .. top + hout - 1,
 * columns left .. left + wout - 1 from dy, the halo and channels past Cout zero. dy: the
 * image's first channel. */
static inline void pypto_tile_frame_block(const uint16_t *restrict dy, int64_t cout, int64_t b,
                                          int64_t hout, int64_t wout, int64_t top,
                                          int64_t left, int64_t hf, int64_t wf,
                                          uint16_t *restrict block)
{
    const int64_t co0 = b * PYPTO_TILE_K, area = hout * wout;
    const int n_co = pypto_tile_block_channels(cout, b);
    pypto_tile_frame_halo(block, PYPTO_TILE_K * sizeof(uint16_t), top, left, hout, wout, wf, 0,
                          hf);
    for (int64_t h = 0; h < hout; h++) {
        uint16_t *row = block + ((top + h) * wf + left) * PYPTO_TILE_K;
        const uint16_t *src = dy + co0 * area + h * wout;
        for (int64_t x = 0; x < wout; x += PYPTO_TILE_PX) {
            const int n = (int)(wout - x < PYPTO_TILE_PX ? wout - x : PYPTO_TILE_PX);
            const __mmask16 keep = (__mmask16)((1u << n) - 1u);   /* no read past the row */
            __m512i v[16];   /* pair s: channels 2s (low half) and 2s + 1 of 16 positions */
            for (int s = 0; s < PYPTO_TILE_K / 2; s++)
                v[s] = pypto_tile_pairs16(keep, 2 * s < n_co ? src + 2 * s * area + x : NULL,
                                          2 * s + 1 < n_co ? src + (2 * s + 1) * area + x
                                                           : NULL);
            pypto_transpose16(v);
            for (int q = 0; q < n; q++)
                _mm512_storeu_si512((__m512i *)(row + (x + q) * PYPTO_TILE_K), v[q]);
        }
    }
}

/* Every K step for n_tiles pixel tiles and n_ch channel tiles on the tile unit (between
 * pypto_amx_begin and _end on this thread): b[i] the frames (pypto_tile_frame_block) at tile
 * i's first position, a[ch] the packed weights (PYPTO_TILE_FORM_AMX: pairs of channels, VNNI).
 * On the unit a C tile is positions x channels (the dy tile is its A operand, the weight its
 * B); each element's sum is the same, the unit's order being the same for every element.
 * Results in c, per pair of pixel tiles 4 C tiles ((ch * 2 + px) * 256 floats), channels x
 * positions. A group of pixel tiles (two pixel tiles and two channel tiles, or four pixel
 * tiles of one channel tile: layers of few input channels) keeps its C tiles in registers for
 * a pass of K steps over `pass` co blocks, then stores them in c, where the next pass reloads
 * them: a pass's weights and the item's frames stay in L1 while its groups run. */
static inline void pypto_tile_run_amx(const uint16_t *const *a, int n_ch,
                                      const uint32_t *const *b, int n_tiles, int64_t blocks,
                                      int64_t taps, const int64_t *tap_index,
                                      const int64_t *tap_offset, int64_t n_taps, int64_t plane,
                                      float *restrict c)
{
    const int64_t row = PYPTO_TILE_K * sizeof(uint16_t), c_row = PYPTO_TILE_CH * sizeof(float);
    const int group = n_ch == 2 ? 2 : 4;
    int64_t pass = n_taps > 0 ? PYPTO_AMX_PASS_STEPS / n_taps : blocks;
    pass = pass < 1 ? 1 : (pass > blocks ? blocks : pass);
    for (int64_t blk0 = 0; blk0 < blocks; blk0 += pass) {
        const int64_t blk1 = blk0 + pass < blocks ? blk0 + pass : blocks;
        for (int p = 0; p < n_tiles; p += group) {
            const int n = n_tiles - p < group ? n_tiles - p : group;
            const uint32_t *b0 = b[p], *b1 = b[p + (n > 1)];
            const uint32_t *b2 = b[p + (n > 2 ? 2 : 0)], *b3 = b[p + (n > 3 ? 3 : 0)];
            /* tile register r holds (pixel tile p + r, ch 0) or, two channel tiles, (p + r % 2,
             * r / 2); past the item's tiles it repeats one and is never stored */
            float *cr[4];
            for (int r = 0; r < 4; r++) {
                const int t = n_ch == 2 ? r % 2 : r, ch = n_ch == 2 ? r / 2 : 0;
                cr[r] = pypto_tile_c_slot(c, p + (t < n ? t : 0), ch, PYPTO_AMX_ITEM_CH);
            }
            if (blk0 == 0) {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            } else {
                _tile_loadd(0, cr[0], c_row);
                _tile_loadd(1, cr[1], c_row);
                _tile_loadd(2, cr[2], c_row);
                _tile_loadd(3, cr[3], c_row);
            }
            for (int64_t blk = blk0; blk < blk1; blk++)
                for (int64_t i = 0; i < n_taps; i++) {
                    const int64_t a_at = (blk * taps + tap_index[i]) * PYPTO_TILE_A_ELEMS;
                    const int64_t b_at = (blk * plane + tap_offset[i]) * (PYPTO_TILE_K / 2);
                    if (n_ch == 2) {
                        _tile_loadd(6, a[0] + a_at, row);
                        _tile_loadd(4, b0 + b_at, row);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_loadd(5, b1 + b_at, row);
                        _tile_dpbf16ps(1, 5, 6);
                        _tile_loadd(7, a[1] + a_at, row);
                        _tile_dpbf16ps(2, 4, 7);
                        _tile_dpbf16ps(3, 5, 7);
                    } else {
                        _tile_loadd(4, a[0] + a_at, row);
                        _tile_loadd(5, b0 + b_at, row);
                        _tile_dpbf16ps(0, 5, 4);
                        _tile_loadd(6, b1 + b_at, row);
                        _tile_dpbf16ps(1, 6, 4);
                        _tile_loadd(7, b2 + b_at, row);
                        _tile_dpbf16ps(2, 7, 4);
                        _tile_loadd(5, b3 + b_at, row);
                        _tile_dpbf16ps(3, 5, 4);
                    }
                }
            /* stored in reverse: a repeated slot ends with the register that owns it */
            _tile_stored(3, cr[3], c_row);
            _tile_stored(2, cr[2], c_row);
            _tile_stored(1, cr[1], c_row);
            _tile_stored(0, cr[0], c_row);
        }
    }
    for (int t = 0; t < n_tiles; t++)   /* positions x channels -> channels x positions */
        for (int ch = 0; ch < n_ch; ch++) {
            __m512i v[16];
            float *slot = pypto_tile_c_slot(c, t, ch, PYPTO_AMX_ITEM_CH);
            for (int r = 0; r < 16; r++)
                v[r] = _mm512_load_si512((const __m512i *)(slot + r * PYPTO_TILE_PX));
            pypto_transpose16(v);
            for (int r = 0; r < 16; r++)
                _mm512_store_si512((__m512i *)(slot + r * PYPTO_TILE_PX), v[r]);
        }
}
#else
/* levels without the tile unit: never called (dgrad_tile's use_amx is 0 there) */
static inline void pypto_amx_begin(void) {}
static inline void pypto_amx_end(void) {}
static inline void pypto_tile_frame_block(const uint16_t *dy, int64_t cout, int64_t b,
                                          int64_t hout, int64_t wout, int64_t top,
                                          int64_t left, int64_t hf, int64_t wf, uint16_t *block)
{
    (void)dy, (void)cout, (void)b, (void)hout, (void)wout, (void)top, (void)left, (void)hf;
    (void)wf, (void)block;
}
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
#elif defined(__AVX2__)
        if (col_step == 1 && valid >= 8) {   /* 8 values, then the run's last 8 (overlapping) */
            for (int64_t m = 0; m < n_ch; m++) {
                const float *from = c + m * PYPTO_TILE_PX + x;
                uint16_t *to = out + m * ch_stride;
                _mm_storeu_si128((__m128i *)to, pypto_narrow8(_mm256_loadu_ps(from), PYPTO_BF16));
                _mm_storeu_si128((__m128i *)(to + valid - 8),
                                 pypto_narrow8(_mm256_loadu_ps(from + valid - 8), PYPTO_BF16));
            }
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

/* An item's C tiles of one channel tile (tiles[t]: tile t's), rounded once to bf16 into dx
 * lane by lane, in dx's order: lane[k] (t * 16 + x) goes to dst[offset[k]], channel m's to
 * dst[offset[k] + m ch_stride]. For flat frames with the images inside each position
 * (tile_order.pxi's interleaved lanes), whose 16 lanes lie in up to 16 images: written tile
 * by tile, each of a tile's images put 16 channels' stores on lines 4 KiB apart (an image's
 * dx a multiple of 4 KiB), which evicted each other from L1 before the next tile's stores
 * (Inception-v3's 8x8 1x3 layers spent 12% of their time writing); sorted, each dx line
 * takes its stores one after another. */
static inline void pypto_tile_write_sorted(const float *const *tiles, int n_tiles, int64_t n_ch,
                                           const int32_t *restrict lane,
                                           const int64_t *restrict offset, int64_t n_lanes,
                                           uint16_t *restrict dst, int64_t ch_stride)
{
    uint16_t v[PYPTO_TILE_ITEM_TILES * PYPTO_TILE_PX];
    /* runs of consecutive dx elements: a whole run of 16 is one store (stores a lane to lines
     * not yet in L1 filled the store queue), others a store a lane */
    int64_t run_start[PYPTO_TILE_ITEM_TILES * PYPTO_TILE_PX + 1], n_runs = 0;
    for (int64_t k = 0; k < n_lanes; k++)
        if (k == 0 || offset[k] != offset[k - 1] + 1 || k - run_start[n_runs - 1] == PYPTO_TILE_PX)
            run_start[n_runs++] = k;
    run_start[n_runs] = n_lanes;
    for (int64_t m = 0; m < n_ch; m++) {
        for (int t = 0; t < n_tiles; t++)
            pypto_narrow(tiles[t] + m * PYPTO_TILE_PX, v + t * PYPTO_TILE_PX, PYPTO_TILE_PX,
                         PYPTO_BF16);
        uint16_t *out = dst + m * ch_stride;
        for (int64_t r = 0; r < n_runs; r++) {
            const int64_t k0 = run_start[r], len = run_start[r + 1] - k0;
            if (len == PYPTO_TILE_PX) {   /* one store (Zen 4's masked stores are slow) */
                uint16_t run[PYPTO_TILE_PX];
                for (int k = 0; k < PYPTO_TILE_PX; k++)
                    run[k] = v[lane[k0 + k]];
                memcpy(out + offset[k0], run, sizeof run);
                continue;
            }
            for (int64_t k = k0; k < k0 + len; k++)
                out[offset[k]] = v[lane[k]];
        }
    }
}

/* pypto_tile_write_sorted's fast case: 8 tiles of 8 or 16 images whose lanes are all
 * positions, from the first image (16 or 8 positions an image, one run of dx each): two
 * channels' 8 tiles transposed in registers give each image's run of each channel, one store
 * (a lane at a time, Inception-v3's 8x8 layers spent 4-5% of their time writing). dst: the
 * first image's run of the first channel; image_stride: dx's step between images. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
enum { PYPTO_TILE_WRITE_IMAGES = 1 };
static inline void pypto_tile_write_images(const float *const *tiles, int64_t n_ch, int images,
                                           uint16_t *restrict dst, int64_t ch_stride,
                                           int64_t image_stride)
{
    /* images 8: lane x of tile t is image x % 8's position 2 t + x / 8; a transposed row n
     * holds its even positions, row n + 8 its odd ones, channel m in elements 0-7 and m + 1
     * in 8-15 */
    const __m512i first = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));
    for (int64_t m = 0; m < n_ch; m += 2) {
        __m512i v[16];
        for (int r = 0; r < 16; r++) {   /* row r: tile r % 8 of channel m + r / 8 */
            const int64_t ch = m + r / 8;
            v[r] = ch < n_ch
                       ? _mm512_castps_si512(_mm512_loadu_ps(tiles[r % 8] + ch * PYPTO_TILE_PX))
                       : _mm512_setzero_si512();
        }
        pypto_transpose16(v);
        for (int n = 0; n < 8 && images == 8; n++) {
            uint16_t *out = dst + n * image_stride + m * ch_stride;
            _mm256_storeu_si256((__m256i *)out,
                                pypto_narrow16(_mm512_castsi512_ps(_mm512_permutex2var_epi32(
                                                   v[n], first, v[n + 8])), PYPTO_BF16));
            if (m + 1 < n_ch)
                _mm256_storeu_si256((__m256i *)(out + ch_stride),
                                    pypto_narrow16(_mm512_castsi512_ps(_mm512_permutex2var_epi32(
                                                       v[n], second, v[n + 8])), PYPTO_BF16));
        }
        for (int n = 0; n < 16 && images == 16; n++) {   /* tile t: position t of 16 images */
            const __m256i h = pypto_narrow16(_mm512_castsi512_ps(v[n]), PYPTO_BF16);
            uint16_t *out = dst + n * image_stride + m * ch_stride;
            _mm_storeu_si128((__m128i *)out, _mm256_castsi256_si128(h));
            if (m + 1 < n_ch)
                _mm_storeu_si128((__m128i *)(out + ch_stride), _mm256_extracti128_si256(h, 1));
        }
    }
}
#else
enum { PYPTO_TILE_WRITE_IMAGES = 0 };
static inline void pypto_tile_write_images(const float *const *tiles, int64_t n_ch, int images,
                                           uint16_t *dst, int64_t ch_stride, int64_t image_stride)
{
    (void)tiles, (void)n_ch, (void)images, (void)dst, (void)ch_stride, (void)image_stride;
}
#endif

/* An item's write-out in interleaved flat frames (tile_order.pxi): its n_tiles tiles from
 * lane `at` of the wave (lane position * images + n: image n0 + n; lanes from `stop` on are
 * none), n_ch channel tiles of C laid out for c_ch, into dx (the item's first channel of image
 * 0; area: a channel plane, image_stride: an image). Out of line: its lane tables on the
 * item's stack moved the fp32 form's split B and made layers that never interleave 1-2% slower
 * on AVX-512. */
static __attribute__((noinline)) void
pypto_tile_write_interleaved(float *c, int c_ch, int n_ch, int64_t cin_left, int n_tiles,
                             int64_t at, int64_t stop, int64_t images, int64_t n0, uint16_t *dx,
                             int64_t area, int64_t image_stride)
{
    const float *tiles[PYPTO_TILE_ITEM_TILES];
    const int lanes = n_tiles * PYPTO_TILE_PX;
    if (PYPTO_TILE_WRITE_IMAGES && n_tiles == 8 && at % images == 0 && stop - at >= lanes
        && (images == 8 || images == 16)) {   /* every lane a position, from the first image */
        for (int ch = 0; ch < n_ch; ch++) {
            for (int t = 0; t < n_tiles; t++)
                tiles[t] = pypto_tile_c_slot(c, t, ch, c_ch);
            const int64_t left = cin_left - (int64_t)ch * PYPTO_TILE_CH;
            pypto_tile_write_images(tiles, left < PYPTO_TILE_CH ? left : PYPTO_TILE_CH,
                                    (int)images,
                                    dx + n0 * image_stride + ch * PYPTO_TILE_CH * area
                                        + at / images,
                                    area, image_stride);
        }
        return;
    }
    /* the lanes in dx's order: image by image (lanes i, i + images, ...), positions ascending */
    int32_t lane[PYPTO_TILE_ITEM_TILES * PYPTO_TILE_PX];
    int64_t offset[PYPTO_TILE_ITEM_TILES * PYPTO_TILE_PX];
    int64_t k = 0;
    for (int64_t i = 0; i < images && i < lanes; i++)
        for (int64_t j = i; j < lanes && at + j < stop; j += images) {
            const int64_t n = (at + j) % images, q = (at + j) / images;
            lane[k] = (int32_t)j;
            offset[k++] = (n0 + n) * image_stride + q;   /* q: the position in the plane */
        }
    for (int ch = 0; ch < n_ch; ch++) {
        for (int t = 0; t < n_tiles; t++)
            tiles[t] = pypto_tile_c_slot(c, t, ch, c_ch);
        const int64_t left = cin_left - (int64_t)ch * PYPTO_TILE_CH;
        pypto_tile_write_sorted(tiles, n_tiles, left < PYPTO_TILE_CH ? left : PYPTO_TILE_CH, lane,
                                offset, k, dx + ch * PYPTO_TILE_CH * area, area);
    }
}

/* Two C tiles of the column phases 0 and 1 of a stride-2 row phase (c0, c1: the same 16
 * positions q0 .. q0 + 15 of the phase rows at the frame's width wf), rounded once to bf16 and
 * written interleaved: frame column col is dx column 2 col (c0) and 2 col + 1 (c1), each row's
 * columns below win as one run (a phase's own write would store every other element, one at a
 * time). dst: the row phase's first dx row, column 0, of the tiles' first channel; row_step,
 * ch_stride: dx's steps between the phase's rows and between channels. */
static inline void pypto_tile_write_pair(const float *restrict c0, const float *restrict c1,
                                         int64_t n_ch, int64_t q0, int64_t wf, int64_t win,
                                         int64_t rows, uint16_t *restrict dst,
                                         int64_t row_step, int64_t ch_stride)
{
    for (int64_t x = 0; x < PYPTO_TILE_PX;) {
        const int64_t q = q0 + x, row = q / wf, col = q % wf;
        if (row >= rows)
            break;
        const int64_t run = PYPTO_TILE_PX - x < wf - col ? PYPTO_TILE_PX - x : wf - col;
        const int64_t end = 2 * (col + run) < win ? 2 * (col + run) : win;
        const int64_t count = end - 2 * col;   /* dx values of this run, <= 2 run */
        uint16_t *out = dst + row * row_step + 2 * col;
        if (count > 0) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
            const __mmask16 take = (__mmask16)((1u << run) - 1u);
            const __mmask16 first = (__mmask16)(count >= 16 ? 0xffffu : (1u << count) - 1u);
            const __mmask16 second = (__mmask16)(count <= 16 ? 0u : (1u << (count - 16)) - 1u);
            for (int64_t m = 0; m < n_ch; m++) {
                const __m256i e = pypto_narrow16(
                    _mm512_maskz_loadu_ps(take, c0 + m * PYPTO_TILE_PX + x), PYPTO_BF16);
                const __m256i o = pypto_narrow16(
                    _mm512_maskz_loadu_ps(take, c1 + m * PYPTO_TILE_PX + x), PYPTO_BF16);
                const __m256i lo = _mm256_unpacklo_epi16(e, o), hi = _mm256_unpackhi_epi16(e, o);
                uint16_t *to = out + m * ch_stride;
                _mm256_mask_storeu_epi16(to, first, _mm256_permute2x128_si256(lo, hi, 0x20));
                _mm256_mask_storeu_epi16(to + 16, second, _mm256_permute2x128_si256(lo, hi, 0x31));
            }
#elif defined(__AVX2__)
            /* 8 + 8 positions: 16 values stored straight where all are dx's, the row's last
             * ones through a buffer (a memcpy a channel and run was 13% of a 1x1/2 layer) */
            for (int64_t m = 0; m < n_ch; m++) {
                const float *e = c0 + m * PYPTO_TILE_PX + x, *o = c1 + m * PYPTO_TILE_PX + x;
                uint16_t *to = out + m * ch_stride;
                for (int h = 0; 16 * h < count; h++) {
                    const __m128i eh = pypto_narrow8(_mm256_loadu_ps(e + 8 * h), PYPTO_BF16);
                    const __m128i oh = pypto_narrow8(_mm256_loadu_ps(o + 8 * h), PYPTO_BF16);
                    const __m128i lo = _mm_unpacklo_epi16(eh, oh), hi = _mm_unpackhi_epi16(eh, oh);
                    const int64_t left = count - 16 * h;
                    if (left >= 16) {
                        _mm_storeu_si128((__m128i *)(to + 16 * h), lo);
                        _mm_storeu_si128((__m128i *)(to + 16 * h + 8), hi);
                    } else {
                        uint16_t both[16];
                        _mm_storeu_si128((__m128i *)both, lo);
                        _mm_storeu_si128((__m128i *)(both + 8), hi);
                        for (int64_t v = 0; v < left; v++)
                            to[16 * h + v] = both[v];
                    }
                }
            }
#else
            for (int64_t m = 0; m < n_ch; m++) {
                const float *e = c0 + m * PYPTO_TILE_PX + x, *o = c1 + m * PYPTO_TILE_PX + x;
                uint16_t *to = out + m * ch_stride;
                for (int64_t v = 0; v < count; v++)
                    to[v] = pypto_float_to_bf16((v & 1) ? o[v >> 1] : e[v >> 1]);
            }
#endif
        }
        x += run;
    }
}

#endif
