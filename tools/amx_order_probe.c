/* Does AMX's bf16 tile multiply (TDPBF16PS) add in a fixed order that pypto could promise?
 *
 * pypto sums each output over k in one documented order, rounding after every add (fp32), so
 * that every level gives the same bits (the bf16 dot product: its own pair order). This probe
 * multiplies random bf16 tiles (normal values, exponents spread over up to +-12 binades, no
 * subnormals) with TDPBF16PS and counts how many fp32 results equal each sequential model:
 *   pair-seq   acc += p0, then += p1, per pair (the SDM's pseudo-code), rounding each add
 *   pair-rev   acc += p1, then += p0 (vdpbf16ps's order), rounding each add
 *   pair-once  acc += (p0 + p1) summed in double, one rounding per pair
 *   all-once   acc + every product of the call summed in double, one rounding
 * (double is exact while the terms of a sum span at most 53 bits, as most here do)
 *   sdm        the Intel SDM's TDPBF16PS: per instruction two fp32 FMA chains from +0, one over
 *              the even and one over the odd elements of the 32-element K block, then even + odd,
 *              then C + that; inputs and results below 2^-126 flushed (DAZ, FTZ), RNE
 * With one pair per result (the rest of the tile zero), the models differ only in how a pair
 * is rounded. A model pypto could use would match 100% at every size: only sdm does.
 * Then sdm alone, on bulk random tiles (exponent spreads up to +-60 binades, cancelling data,
 * C carried over 1 to 8 instructions) and on edge cases (subnormal inputs and C, products and
 * chains below 2^-126, overflow to Inf, Inf - Inf, signed zeros, NaN), each must print 1.0000
 * (NaN results compare as NaN, payloads not required).
 * The second table repeats this with one product per pair (each pair's second element zero):
 * with one such pair per result (one product added per instruction) every result equals
 * acc + p0 rounded once, so pypto's order could be kept by feeding the unit a single product
 * per instruction. The next-to-last line times that use: 16 x 16 products per TDPBF16PS, against the
 * 16 x 16 x 32 of a full tile, in about the same time.
 *
 * Build and run (x86-64 Linux with AMX-BF16; not part of the package):
 *   gcc -O2 -ffp-contract=off -mamx-tile -mamx-bf16 tools/amx_order_probe.c -o /tmp/amx_order_probe -lm
 *   /tmp/amx_order_probe
 * With -DPYPTO_AMX_EMULATED and no AMX flags it runs the same tables against pypto's software
 * tile unit (pypto_amx_emulated.h) on any x86-64 CPU, timings left out: tests/cpu/
 * test_sum_order.py does so, the sdm column checking the software unit as it checked the
 * hardware.
 * Results on an Intel Xeon with AMX-BF16 (Sapphire Rapids class, KVM, family 6 model 167):
 * 2026-12-05, the four sequential models only: none matched every result, not even with one
 * pair. 2026-12-06, with the sdm column (gcc 12, -ffp-contract=off as above): sdm 1.0000 in
 * every row of both tables (512,000 results each), 1,536,000 of 1,536,000 bulk results and 16
 * of 16 edge cases; full tiles 4.27 ns per TDPBF16PS, 1,920 G products/s on one core (16x the
 * fp32 multiply-add's 116 G). So the unit adds in the SDM's documented order, which pypto's
 * sum_order "tile" computes bit for bit on every CPU. */
#include <immintrin.h>
#ifdef PYPTO_AMX_EMULATED   /* against pypto's software tile unit: no AMX needed, no timings */
#include "../pypto/_kernels/kernel/pypto_amx_emulated.h"
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static uint64_t state = 88172645463325252ull;
static uint64_t next(void) { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return state; }

static float bf16_value(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }

/* a random normal bf16 with its exponent within +-spread of 0 */
static uint16_t random_bf16(int spread)
{
    uint16_t sign = next() & 1, mantissa = next() & 0x7f;
    int exponent = 127 + (int)(next() % (uint64_t)(2 * spread + 1)) - spread;
    return (uint16_t)((sign << 15) | (exponent << 7) | mantissa);
}

static uint16_t A[16][32], B[16][32];   /* A: 16 rows x 32 k; B: 16 k pairs x 16 columns x 2 */
static float C[16][16], C0[16][16];

static int same(float a, float b) { return memcmp(&a, &b, 4) == 0; }
static int same_or_nan(float a, float b) { return same(a, b) || (isnan(a) && isnan(b)); }

/* DAZ on an input, FTZ on a result: a subnormal becomes a zero of its sign */
static float flush(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }

/* the SDM's TDPBF16PS for one element: row a (2 * pairs bf16) times column n of b (pairs rows of
 * 32 bf16: the pair 2n, 2n + 1), added to c */
static float sdm_element(float c, const uint16_t *a, const uint16_t (*b)[32], int n, int pairs)
{
    float even = 0.0f, odd = 0.0f;
    for (int k = 0; k < pairs; k++) {
        even = flush(fmaf(flush(bf16_value(a[2 * k])), flush(bf16_value(b[k][2 * n])), even));
        odd = flush(fmaf(flush(bf16_value(a[2 * k + 1])), flush(bf16_value(b[k][2 * n + 1])), odd));
    }
    return flush(flush(c) + flush(even + odd));
}

static void configure(int a_cols_bytes, int b_rows)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = 16;
    cfg.colsb[0] = 64;
    cfg.rows[1] = 16;
    cfg.colsb[1] = a_cols_bytes;
    cfg.rows[2] = b_rows;
    cfg.colsb[2] = 64;
    _tile_loadconfig(&cfg);
}

/* C (16 x 16 fp32) += A (16 x 2*pairs bf16) x B (pairs x 32 bf16) on the tile unit */
static void tile_multiply(int pairs)
{
    configure(4 * pairs, pairs);
    _tile_loadd(0, C, 64);
    _tile_loadd(1, A, 64);
    _tile_loadd(2, B, 64);
    _tile_dpbf16ps(0, 1, 2);
    _tile_stored(0, C, 64);
    _tile_release();
}

static void table(int single);
static void bulk(void);
static void edges(void);
static void throughput(void);
static void full_tile_rate(void);
static double seconds(void);

int main(void)
{
#ifndef PYPTO_AMX_EMULATED
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) {
        printf("the kernel refuses AMX tile data to this process (or the CPU has no AMX)\n");
        return 1;
    }
#endif
    table(0);
    printf("\none product per pair (each pair's second element zero):\n");
    table(1);
    bulk();
    edges();
#ifndef PYPTO_AMX_EMULATED
    throughput();
    full_tile_rate();
#endif
    return 0;
}

/* the share of results each model reproduces; single: one product per pair */
static void table(int single)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 3; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    printf("pairs per result  results   pair-seq  pair-rev  pair-once  all-once       sdm  (share that match)\n");
    const int sizes[] = {1, 2, 4, 16};
    for (int s = 0; s < 4; s++) {
        const int pairs = sizes[s];
        long total = 0, seq = 0, rev = 0, once = 0, all = 0, sdm = 0;
        for (int round = 0; round < 2000; round++) {
            const int spread = 1 + round % 12;
            memset(A, 0, sizeof A);
            memset(B, 0, sizeof B);
            for (int m = 0; m < 16; m++)
                for (int k = 0; k < 2 * pairs; k++)
                    A[m][k] = single && (k & 1) ? 0 : random_bf16(spread);
            for (int k = 0; k < pairs; k++)
                for (int n = 0; n < 32; n++)
                    B[k][n] = random_bf16(spread);
            for (int m = 0; m < 16; m++)
                for (int n = 0; n < 16; n++)
                    C0[m][n] = bf16_value(random_bf16(spread)) * 1.37f;
            memcpy(C, C0, sizeof C);
            _tile_loadd(0, C, 64);
            _tile_loadd(1, A, 64);
            _tile_loadd(2, B, 64);
            _tile_dpbf16ps(0, 1, 2);
            _tile_stored(0, C, 64);
            for (int m = 0; m < 16; m++)
                for (int n = 0; n < 16; n++) {
                    volatile float f_seq = C0[m][n], f_rev = C0[m][n], f_once = C0[m][n];
                    double exact = C0[m][n];
                    for (int k = 0; k < pairs; k++) {
                        /* products of two bf16 are exact in fp32 */
                        const float p0 = bf16_value(A[m][2 * k]) * bf16_value(B[k][2 * n]);
                        const float p1 = bf16_value(A[m][2 * k + 1]) * bf16_value(B[k][2 * n + 1]);
                        f_seq = f_seq + p0;
                        f_seq = f_seq + p1;
                        f_rev = f_rev + p1;
                        f_rev = f_rev + p0;
                        f_once = (float)((double)f_once + (double)p0 + (double)p1);
                        exact += (double)p0 + (double)p1;
                    }
                    total++;
                    seq += same(f_seq, C[m][n]);
                    rev += same(f_rev, C[m][n]);
                    once += same(f_once, C[m][n]);
                    all += same((float)exact, C[m][n]);
                    sdm += same(sdm_element(C0[m][n], A[m], (const uint16_t (*)[32])B, n, 16), C[m][n]);
                }
        }
        printf("%17d  %7ld   %8.4f  %8.4f  %9.4f  %8.4f  %8.4f\n", pairs, total, (double)seq / total,
               (double)rev / total, (double)once / total, (double)all / total, (double)sdm / total);
    }
    _tile_release();
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* products a second of the single-product use: A 16 rows x 1 pair, B 1 pair x 16 columns,
 * four independent accumulator tiles */
static void throughput(void)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    for (int t = 4; t < 6; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 4;
    }
    for (int t = 6; t < 8; t++) {
        cfg.rows[t] = 1;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    memset(C, 0, sizeof C);
    _tile_loadd(0, C, 64);
    _tile_loadd(1, C, 64);
    _tile_loadd(2, C, 64);
    _tile_loadd(3, C, 64);
    _tile_loadd(4, A, 64);
    _tile_loadd(5, A, 64);
    _tile_loadd(6, B, 64);
    _tile_loadd(7, B, 64);
    const long n = 2000000;
    const double start = seconds();
    for (long i = 0; i < n; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    const double took = seconds() - start;
    _tile_stored(0, C, 64);
    printf("\none product per instruction: %.2f ns per TDPBF16PS, %.1f G products/s (one core)\n",
           took / (4.0 * n) * 1e9, 4.0 * n * 256 / took / 1e9);
    _tile_release();
}

/* any bf16 bit pattern of a normal value with exponent within +-spread, or (rarely) a zero */
static uint16_t random_wide(int spread)
{
    if (next() % 64 == 0)
        return (uint16_t)((next() & 1) << 15);
    return random_bf16(spread);
}

/* SDM model against the unit on random tiles: full K blocks, C carried over several
 * instructions, and data whose halves cancel (B's odd elements the negated even ones) */
static void bulk(void)
{
    long total = 0, match = 0;
    for (int round = 0; round < 6000; round++) {
        const int spread = 1 + round % 60, steps = 1 + round % 8, cancel = round % 3 == 0;
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 16; n++)
                C0[m][n] = round % 5 == 0 ? 0.0f : bf16_value(random_wide(spread)) * 1.37f;
        memcpy(C, C0, sizeof C);
        float model[16][16];
        memcpy(model, C0, sizeof model);
        for (int step = 0; step < steps; step++) {
            for (int m = 0; m < 16; m++)
                for (int k = 0; k < 32; k++)
                    A[m][k] = random_wide(spread);
            for (int k = 0; k < 16; k++)
                for (int n = 0; n < 32; n++)
                    B[k][n] = cancel && (n & 1) ? (uint16_t)(B[k][n - 1] ^ 0x8000) : random_wide(spread);
            if (cancel)
                for (int m = 0; m < 16; m++)
                    for (int k = 1; k < 32; k += 2)
                        A[m][k] = A[m][k - 1];
            tile_multiply(16);
            for (int m = 0; m < 16; m++)
                for (int n = 0; n < 16; n++)
                    model[m][n] = sdm_element(model[m][n], A[m], (const uint16_t (*)[32])B, n, 16);
        }
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 16; n++) {
                total++;
                match += same_or_nan(model[m][n], C[m][n]);
            }
    }
    printf("\nbulk: %ld results (spreads up to +-60 binades, 1-8 instructions, a third cancelling): "
           "sdm matches %.6f\n", total, (double)match / total);
}

static uint16_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16); }

/* one element's edge case: a and b (32 values each, as floats exactly representable in bf16),
 * starting from c; prints the unit's and the model's results */
static int edge(const char *name, const float *a, const float *b, float c)
{
    memset(A, 0, sizeof A);
    memset(B, 0, sizeof B);
    for (int k = 0; k < 32; k++) {
        A[0][k] = bits_of(a[k]);
        B[k / 2][k % 2] = bits_of(b[k]);
    }
    memset(C, 0, sizeof C);
    C[0][0] = c;
    const float before = c;
    tile_multiply(16);
    const float model = sdm_element(before, A[0], (const uint16_t (*)[32])B, 0, 16);
    const int ok = same_or_nan(model, C[0][0]);
    printf("  %-44s unit %-14g model %-14g %s\n", name, C[0][0], model, ok ? "same" : "DIFFERENT");
    return ok;
}

static float bits_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void edges(void)
{
    float a[32], b[32];
    int ok = 0, n = 0;
    printf("\nedge cases (element [0][0]; the rest of A and B zero):\n");
#define CASE(name, c) (n++, ok += edge(name, a, b, c))
#define CLEAR() (memset(a, 0, sizeof a), memset(b, 0, sizeof b))
    CLEAR(); a[0] = bits_float(0x00410000u); b[0] = 0x1p100f;   /* bf16 subnormal 65 * 2^-133 */
    CASE("subnormal input x 2^100 (DAZ: 0)", 0.0f);
    CLEAR(); a[0] = 0x1p-70f; b[0] = 0x1p-70f;
    CASE("product 2^-140 (FTZ: 0)", 0.0f);
    CLEAR(); a[0] = 0x1p-63f; b[0] = 0x1p-63f; a[2] = -0x1.8p-64f; b[2] = 0x1p-63f;
    a[4] = 0x1p-63f; b[4] = 0x1p-63f;
    CASE("even chain crossing 2^-126 (FTZ mid-chain)", 0.0f);
    CLEAR(); a[0] = 0x1p-63f; b[0] = 0x1p-63f; a[1] = -0x1.8p-64f; b[1] = 0x1p-63f;
    CASE("even + odd below 2^-126", 0.0f);
    CLEAR(); a[0] = 1.0f; b[0] = 0x1p-100f;
    CASE("subnormal C from TILELOADD (DAZ)", 0x1p-130f);
    CLEAR(); a[0] = 0x1p100f; b[0] = 0x1p100f;
    CASE("product overflows (Inf)", 1.0f);
    CLEAR(); a[0] = 0x1.fep127f; b[0] = 2.0f; a[2] = -0x1.fep127f; b[2] = 2.0f;
    CASE("Inf - Inf in one chain", 0.0f);
    CLEAR(); a[0] = 0x1.fep127f; b[0] = 2.0f; a[1] = -0x1.fep127f; b[1] = 2.0f;
    CASE("even Inf + odd -Inf", 0.0f);
    CLEAR(); a[0] = 0x1.fep127f; b[0] = 1.0f; a[2] = 0x1.fep127f; b[2] = 1.0f;
    a[4] = -0x1.fep127f; b[4] = 1.0f;
    CASE("chain overflows then comes back (no: Inf)", 0.0f);
    CLEAR(); a[0] = 0x1.fep127f; b[0] = 1.0f; a[1] = 0x1.fep127f; b[1] = 1.0f;
    CASE("even + odd overflows", 0.0f);
    CLEAR(); for (int k = 0; k < 32; k++) { a[k] = -1.0f; b[k] = 0.0f; }
    CASE("all products -0, C = -0", -0.0f);
    CLEAR(); for (int k = 0; k < 32; k++) { a[k] = -1.0f; b[k] = 0.0f; }
    CASE("all products -0, C = +0", 0.0f);
    CLEAR(); a[0] = bits_float(0x7fc10000u); b[0] = 1.0f;
    CASE("NaN input", 1.0f);
    CLEAR(); a[0] = 0x1p100f; b[0] = 0x1p100f; a[1] = 0.0f; b[1] = 0.0f;
    CASE("Inf product, NaN C", bits_float(0x7fc00000u));
    CLEAR(); a[0] = 1.0f; b[0] = 1.0f; a[2] = 0x1p-24f; b[2] = 1.0f; a[4] = 0x1p-24f; b[4] = 1.0f;
    CASE("ties: 1 + 2^-24 + 2^-24 in one chain", 0.0f);
    CLEAR(); a[0] = 1.0f; b[0] = 1.0f; a[1] = 0x1p-24f; b[1] = 1.0f;
    CASE("ties: even 1, odd 2^-24", 0x1p-24f);
#undef CASE
#undef CLEAR
    printf("edge cases: %d of %d the same\n", ok, n);
}

/* the tile unit's rate at full tiles: 16 x 16 x 32 products per TDPBF16PS, 4 accumulators */
static void full_tile_rate(void)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    memset(A, 0, sizeof A);
    memset(B, 0, sizeof B);
    memset(C, 0, sizeof C);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, A, 64);
    _tile_loadd(5, A, 64);
    _tile_loadd(6, B, 64);
    _tile_loadd(7, B, 64);
    const long n = 2000000;
    const double start = seconds();
    for (long i = 0; i < n; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    const double took = seconds() - start;
    _tile_stored(0, C, 64);
    printf("full tiles: %.2f ns per TDPBF16PS, %.0f G products/s (one core)\n",
           took / (4.0 * n) * 1e9, 4.0 * n * 8192 / took / 1e9);
    _tile_release();
}
