/* The AMX tile unit's instructions that pypto_tile.h uses, in software, for a build of the
 * avx512_amx level with -DPYPTO_AMX_EMULATED and no AMX flags (tests/support/amx_emulated.py;
 * tools/amx_order_probe.c too): the kernel's tile-unit path (its tile configuration, operand
 * layouts, loads, stores and the order of its TDPBF16PS) then runs on any AVX-512 CPU, so
 * that it can be checked bit for bit where no CPU has the unit. Never part of a shipped
 * module (setup.py builds no such level).
 *
 * Each instruction as the Intel SDM defines it: TILELOADD / TILESTORED move rows[t] rows of
 * colsb[t] bytes (the rest of a loaded tile zero); TDPBF16PS, for each row m of C and each of
 * its fp32 columns n, two FMA chains from +0 over the K pairs, E over the even bf16 elements
 * of A's row m and B's row k's element 2n, O over the odd ones, then C = C + (E + O); inputs
 * and results flushed as the unit does (DAZ, FTZ), round to nearest even. A shape the unit
 * would refuse (#GP, #UD) aborts the process.
 *
 * Two wrong units, the negative controls of the check, by PYPTO_AMX_EMULATED_ORDER in the
 * environment (read at each tile configuration): "single" sums a row's pairs in one chain (k
 * ascending, the even element then the odd), "c_first" adds the chains to C one at a time,
 * (C + E) + O (tests/cpu/test_sum_order.py). */
#ifndef PYPTO_AMX_EMULATED_H
#define PYPTO_AMX_EMULATED_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t rows[8];
    uint16_t colsb[8];
    uint8_t data[8][16][64];
    int configured, order;   /* PYPTO_AMX_EMULATED_ORDER: 0 the SDM's, 1 single, 2 c_first */
} pypto_amx_emu_state;

static __thread pypto_amx_emu_state pypto_amx_emu;   /* each thread's tile registers */

static inline void pypto_amx_emu_fault(const char *what)
{
    fprintf(stderr, "pypto_amx_emulated: %s\n", what);
    abort();
}

static inline float pypto_amx_emu_flush(float x)   /* DAZ / FTZ: a subnormal is a signed 0 */
{
    return fabsf(x) < 0x1p-126f ? copysignf(0.0f, x) : x;
}

static inline float pypto_amx_emu_bf16(const uint8_t *p)
{
    uint32_t bits = (uint32_t)(p[0] | p[1] << 8) << 16;
    float x;
    memcpy(&x, &bits, sizeof x);
    return pypto_amx_emu_flush(x);
}

static inline void pypto_amx_emu_config(const void *config)
{
    const uint8_t *cfg = (const uint8_t *)config;
    const char *order = getenv("PYPTO_AMX_EMULATED_ORDER");
    if (cfg[0] != 1)
        pypto_amx_emu_fault("palette other than 1");
    memset(&pypto_amx_emu, 0, sizeof pypto_amx_emu);
    for (int t = 0; t < 8; t++) {
        memcpy(&pypto_amx_emu.colsb[t], cfg + 16 + 2 * t, 2);
        pypto_amx_emu.rows[t] = cfg[48 + t];
        if (pypto_amx_emu.rows[t] > 16 || pypto_amx_emu.colsb[t] > 64
            || pypto_amx_emu.colsb[t] % 4 != 0)
            pypto_amx_emu_fault("a tile larger than 16 rows x 64 bytes, or not of whole dwords");
    }
    pypto_amx_emu.configured = 1;
    pypto_amx_emu.order = order == NULL ? 0 : strcmp(order, "single") == 0 ? 1
                          : strcmp(order, "c_first") == 0 ? 2 : 0;
}

static inline void pypto_amx_emu_check(int t)
{
    if (!pypto_amx_emu.configured)
        pypto_amx_emu_fault("a tile instruction without a tile configuration");
    if (t < 0 || t > 7)
        pypto_amx_emu_fault("no such tile register");
}

static inline void pypto_amx_emu_zero(int t)
{
    pypto_amx_emu_check(t);
    memset(pypto_amx_emu.data[t], 0, sizeof pypto_amx_emu.data[t]);
}

static inline void pypto_amx_emu_load(int t, const void *base, int64_t stride)
{
    pypto_amx_emu_zero(t);
    for (int r = 0; r < pypto_amx_emu.rows[t]; r++)
        memcpy(pypto_amx_emu.data[t][r], (const char *)base + r * stride, pypto_amx_emu.colsb[t]);
}

static inline void pypto_amx_emu_store(int t, void *base, int64_t stride)
{
    pypto_amx_emu_check(t);
    for (int r = 0; r < pypto_amx_emu.rows[t]; r++)
        memcpy((char *)base + r * stride, pypto_amx_emu.data[t][r], pypto_amx_emu.colsb[t]);
}

static inline void pypto_amx_emu_dpbf16ps(int c, int a, int b)
{
    pypto_amx_emu_check(c);
    pypto_amx_emu_check(a);
    pypto_amx_emu_check(b);
    const int m_rows = pypto_amx_emu.rows[c], n_cols = pypto_amx_emu.colsb[c] / 4;
    const int k_pairs = pypto_amx_emu.colsb[a] / 4;
    if (c == a || c == b || a == b || pypto_amx_emu.rows[a] != m_rows
        || pypto_amx_emu.colsb[b] != pypto_amx_emu.colsb[c] || pypto_amx_emu.rows[b] != k_pairs)
        pypto_amx_emu_fault("TDPBF16PS on tiles of shapes the unit refuses");
    for (int m = 0; m < m_rows; m++)
        for (int n = 0; n < n_cols; n++) {
            const uint8_t *arow = pypto_amx_emu.data[a][m];
            float even = 0.0f, odd = 0.0f, sum, acc;
            for (int k = 0; k < k_pairs; k++) {
                const uint8_t *brow = pypto_amx_emu.data[b][k];
                const float a0 = pypto_amx_emu_bf16(arow + 4 * k);
                const float a1 = pypto_amx_emu_bf16(arow + 4 * k + 2);
                const float b0 = pypto_amx_emu_bf16(brow + 4 * n);
                const float b1 = pypto_amx_emu_bf16(brow + 4 * n + 2);
                if (pypto_amx_emu.order == 1) {   /* a wrong unit: one chain */
                    even = pypto_amx_emu_flush(fmaf(a0, b0, even));
                    even = pypto_amx_emu_flush(fmaf(a1, b1, even));
                } else {
                    even = pypto_amx_emu_flush(fmaf(a0, b0, even));
                    odd = pypto_amx_emu_flush(fmaf(a1, b1, odd));
                }
            }
            memcpy(&acc, pypto_amx_emu.data[c][m] + 4 * n, sizeof acc);
            acc = pypto_amx_emu_flush(acc);
            if (pypto_amx_emu.order == 2) {   /* a wrong unit: (C + E) + O */
                acc = pypto_amx_emu_flush(pypto_amx_emu_flush(acc + even) + odd);
            } else {
                sum = pypto_amx_emu_flush(even + odd);
                acc = pypto_amx_emu_flush(acc + sum);
            }
            memcpy(pypto_amx_emu.data[c][m] + 4 * n, &acc, sizeof acc);
        }
}

/* immintrin.h may define these (as macros of the real instructions) whatever the flags */
#undef _tile_loadconfig
#undef _tile_release
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stored
#undef _tile_dpbf16ps
#define _tile_loadconfig(config) pypto_amx_emu_config(config)
#define _tile_release() memset(&pypto_amx_emu, 0, sizeof pypto_amx_emu)
#define _tile_zero(t) pypto_amx_emu_zero(t)
#define _tile_loadd(t, base, stride) pypto_amx_emu_load((t), (base), (stride))
#define _tile_stored(t, base, stride) pypto_amx_emu_store((t), (base), (stride))
#define _tile_dpbf16ps(c, a, b) pypto_amx_emu_dpbf16ps((c), (a), (b))

#endif
