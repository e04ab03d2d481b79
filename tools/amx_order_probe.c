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
 * With one pair per result (the rest of the tile zero), the models differ only in how a pair
 * is rounded. A model pypto could use would match 100% at every size.
 * The second table repeats this with one product per pair (each pair's second element zero):
 * with one such pair per result (one product added per instruction) every result equals
 * acc + p0 rounded once, so pypto's order could be kept by feeding the unit a single product
 * per instruction. The last line times that use: 16 x 16 products per TDPBF16PS, against the
 * 16 x 16 x 32 of a full tile, in about the same time.
 *
 * Build and run (x86-64 Linux with AMX-BF16; not part of the package or its tests):
 *   gcc -O2 -mamx-tile -mamx-bf16 tools/amx_order_probe.c -o /tmp/amx_order_probe -lm
 *   /tmp/amx_order_probe
 * Result on an Intel Xeon with AMX-BF16 (Sapphire Rapids class, KVM), 2026-12-05, in
 * docs/performance.md: no model matched every result, not even with one pair; one product
 * per instruction matched all, at about 54 G products/s a core, under half the fp32
 * multiply-add's 116 G (pypto's peak loop): no faster than the path pypto has. */
#include <immintrin.h>
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

static void table(int single);
static void throughput(void);

int main(void)
{
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) {
        printf("the kernel refuses AMX tile data to this process (or the CPU has no AMX)\n");
        return 1;
    }
    table(0);
    printf("\none product per pair (each pair's second element zero):\n");
    table(1);
    throughput();
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
    printf("pairs per result  results   pair-seq  pair-rev  pair-once  all-once  (share that match)\n");
    const int sizes[] = {1, 2, 4, 16};
    for (int s = 0; s < 4; s++) {
        const int pairs = sizes[s];
        long total = 0, seq = 0, rev = 0, once = 0, all = 0;
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
                }
        }
        printf("%17d  %7ld   %8.4f  %8.4f  %9.4f  %8.4f\n", pairs, total, (double)seq / total,
               (double)rev / total, (double)once / total, (double)all / total);
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
