/* TEST DOUBLE of pypto's AscendC kernel library (libpypto_conv_dx.so). Not a device kernel.
 *
 * Exports the exact launch wrapper ascendc_library generates for pypto_conv_dx,
 *   uint32_t aclrtlaunch_pypto_conv_dx(uint32_t numBlocks, void *stream, void *dy, void *weight,
 *                                      void *dx, void *workspace, PyptoConvDxLaunch *launch);
 * copies the launch struct like the real wrapper, and enqueues the work on the fake runtime's
 * stream. When the stream runs, it first checks what the real kernel relies on (the launch
 * struct is self-consistent, the AscendC API's buffer limits hold, every buffer is a live
 * allocation large enough) and reports a violation as an AI Core fault; then it computes each
 * block's dx plainly from the NC1HWC0 dy and FRACTAL_Z weight it was given, with the API's own
 * formulation (stride-dilated dy, backprop padding, flipped taps), fp32 accumulation in K order
 * (Cout blocks, taps, Cout lanes) and one round-to-nearest-even to fp16/bf16. Like the API with
 * initOutputFlag = 1, it leaves positions that receive nothing unwritten, and it skips blocks
 * below the last dy row, so a missing zero-fill shows up as garbage.
 *
 * The conversion to fp16/bf16 models the Fixpipe's two overflow modes (CTRL[48], which the real
 * kernel sets to keep Inf/NaN): by default Inf/NaN are kept, i.e. IEEE round-to-nearest-even of
 * the fp32 sum (beyond the largest finite value: +-Inf; NaN stays NaN); saturating, a sum beyond
 * the largest finite value and +-Inf become +-max finite (+-65504 for fp16, +-0x1.fep127 for
 * bf16), and NaN becomes 0.
 *
 * Environment (read at launch): FAKE_ACL_FAIL_LAUNCH=1 makes the wrapper fail;
 * FAKE_ACL_SKIP_LAUNCH=1 makes it print "[ERROR]" and return 0 without launching, as the real
 * wrapper does when its device binary failed to register;
 * FAKE_KERNEL_SATURATE=1 converts in the saturating mode (a kernel whose overflow setting did not
 * take effect);
 * FAKE_KERNEL_WRONG_KH=<k>: when the launch's kernel height (the API tiling's hk, after any
 * rewrite of the problem into sub-problems) is k, 1.0 is added to every output element it
 * writes, before rounding (a kernel wrong on one class of problems, for self-check tests).
 * Links nothing: fake_acl_* comes from libascendcl.so, loaded RTLD_GLOBAL before this library.
 * pypto loads this library itself RTLD_LOCAL. Built with the production version script
 * (tests/test_npu_kernel_source.py), it exports aclrtlaunch_pypto_conv_dx only; the test suite's
 * own build (tests/test_device.py) also exports fake_conv_dx_envelope for its sweeps.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pypto_conv_dx_tiling.h"

typedef int (*kernel_run_fn)(void *arg, char *error, size_t error_size);
extern int fake_acl_enqueue_kernel(void *stream, kernel_run_fn run, void *arg);
extern int fake_acl_device_span(const void *pointer, size_t bytes);
extern void fake_acl_set_error(const char *text);

#define ACL_ERROR_RT_PARAM_INVALID 107000u
#define ACL_ERROR_RT_INTERNAL_ERROR 507000u
#define L1_API_BYTES (524288u - 128u)
#define C0 16u

struct job {
    uint32_t blocks;
    uint16_t *dy, *weight, *dx;
    uint8_t *workspace;
    PyptoConvDxLaunch launch;
    int saturate;     /* FAKE_KERNEL_SATURATE: the Fixpipe's saturating mode */
    int64_t wrong_kh; /* FAKE_KERNEL_WRONG_KH: add 1 to the outputs of launches with this hk; -1 none */
};

/* ---- fp16 / bf16 <-> fp32 ------------------------------------------------------------------- */
static float half_to_float(uint16_t h)
{
    int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    float v = exponent == 0    ? ldexpf((float)mantissa, -24)
              : exponent == 31 ? (mantissa ? NAN : INFINITY)
                               : ldexpf((float)(mantissa | 0x400), exponent - 25);
    return (h & 0x8000) ? -v : v;
}

static uint16_t float_to_half(float f) /* round to nearest, ties to even */
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    float a = fabsf(f);
    if (isnan(f)) return sign | 0x7e00;
    if (a >= 65520.0f) return sign | 0x7c00;
    if (a < 0x1p-14f) return sign | (uint16_t)nearbyintf(a * 0x1p24f); /* subnormal steps 2^-24 */
    int e;
    float q = nearbyintf(ldexpf(frexpf(a, &e), 11)); /* 11 significant bits, in [1024, 2048] */
    if (q == 2048.0f) {
        q = 1024.0f;
        e++;
    }
    int exponent = e - 1 + 15;
    return exponent >= 31 ? (uint16_t)(sign | 0x7c00)
                          : (uint16_t)(sign | (exponent << 10) | ((uint16_t)q - 1024));
}

static float bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t float_to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if (isnan(f)) return (uint16_t)((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

/* The Fixpipe's fp32 -> fp16/bf16 conversion (F322F16 / F322BF16, round to nearest even) in
 * either CTRL[48] mode: Inf/NaN kept (IEEE), or saturating (+-Inf and out-of-range sums -> +-max
 * finite, NaN -> 0). */
static uint16_t fixpipe_convert(float f, int bf16, int saturate)
{
    const uint16_t infinity = bf16 ? 0x7f80 : 0x7c00, max_finite = bf16 ? 0x7f7f : 0x7bff;
    if (saturate && isnan(f)) return 0;
    uint16_t out = bf16 ? float_to_bf16(f) : float_to_half(f);
    if (saturate && (out & 0x7fff) == infinity) out = (uint16_t)((out & 0x8000) | max_finite);
    return out;
}

/* ---- what the real kernel relies on --------------------------------------------------------- */
static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

static uint32_t fmap_rows(uint32_t base_m, uint32_t wi, uint32_t kh, uint32_t dh) /* API CalFmapH */
{
    uint32_t rows = base_m >= wi ? base_m / wi + (base_m % wi ? 2 : 0) : (wi % base_m == 0 ? 1 : 2);
    return rows + (kh - 1) * dh;
}

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            snprintf(error, error_size, "fake kernel fault: launch check failed: %s", #cond);    \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

#define ENVELOPE(cond, ...)                                                                      \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            int used = snprintf(error, error_size, "fake kernel fault: outside the API's envelope: "); \
            snprintf(error + used, error_size - (size_t)used, __VA_ARGS__);                      \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

/* What the Conv3DBackpropInput API does with each M block of each task, in its own (unsigned)
 * arithmetic: the row window of UpdateCurHoSize, the A1 buffer InitTque sizes for it, the skip
 * rule of CalcHDstDataSkipLine and load3d's 8-bit padding. The official tiling keeps backprop
 * pads in [0, (k-1)*d]; a launch outside that may wrap the row count and copy past A1. Exported
 * so tests can sweep plans through it without running the computation. */
__attribute__((visibility("default"))) int fake_conv_dx_envelope(const PyptoConvDxLaunch *l, char *error,
                                                                 size_t error_size)
{
    const PyptoConvDxApiTiling *t = &l->api;
    const uint32_t fmap = fmap_rows(t->baseM * t->stepM, t->wi, t->hk, t->dilationH); /* CalFmapH */
    const uint32_t ho_expand = (t->ho - 1) * t->strideH + 1;
    const uint32_t a1_rows = fmap < ho_expand ? fmap : ho_expand; /* InitTque's A1 rows */
    ENVELOPE(t->backpropPadLeft <= 255 && t->backpropPadRight <= 255,
             "load3d pads left/right %u/%u over 255", t->backpropPadLeft, t->backpropPadRight);
    for (uint32_t m_task = 0; m_task < l->mTasks; m_task++) {
        const uint32_t hi_start = m_task * l->rowsPerTask;
        const int32_t ho_start = (int32_t)hi_start - (int32_t)t->backpropPadUp;
        const uint32_t first_dy = ho_start < 0 ? 0 : ((uint32_t)ho_start + t->strideH - 1) / t->strideH;
        if (first_dy >= t->ho) continue; /* the kernel returns before the API runs */
        const uint32_t rows = t->hi - hi_start < l->rowsPerTask ? t->hi - hi_start : l->rowsPerTask;
        const uint64_t m_iter = ceil_div((uint64_t)rows * t->wi, t->baseM);
        for (uint64_t m = 0; m < m_iter; m++) {
            const int32_t cur = ho_start + (int32_t)(m * t->baseM / t->wi); /* curHoIdx_ */
            uint32_t size = fmap;                                            /* curHoSize_ */
            if (cur < 0) {
                size += (uint32_t)cur; /* the API adds the negative start to the unsigned count */
                if (size > ho_expand) size = ho_expand;
            } else if ((uint32_t)cur + size >= ho_expand) {
                size = (uint32_t)cur < ho_expand ? ho_expand - (uint32_t)cur : 0;
            }
            ENVELOPE(cur >= 0 || (uint32_t)(-cur) <= fmap,
                     "task rows %u.., M block %llu: row start %d with %u rows wraps UpdateCurHoSize "
                     "(backpropPadUp %u > rows the block loads)", hi_start, (unsigned long long)m, cur,
                     fmap, t->backpropPadUp);
            ENVELOPE(size <= a1_rows, "task rows %u.., M block %llu: %u dy rows copied into an A1 "
                     "buffer of %u", hi_start, (unsigned long long)m, size, a1_rows);
            ENVELOPE(cur >= -255, "task rows %u..: load3d top padding %d over 255", hi_start, -cur);
            const uint32_t start = cur < 0 ? 0 : (uint32_t)cur; /* CalcHDstDataSkipLine */
            const uint32_t skip = t->strideH > 1 && start % t->strideH
                                      ? (start + t->strideH - 1) / t->strideH * t->strideH - start : 0;
            ENVELOPE(size > skip || t->initOutputFlag == 1,
                     "task rows %u.., M block %llu loads no dy row (l1H 0) and initOutputFlag is 0",
                     hi_start, (unsigned long long)m);
        }
    }
    return 0;
}

static int check_launch(const struct job *job, char *error, size_t error_size)
{
    const PyptoConvDxLaunch *l = &job->launch;
    const PyptoConvDxApiTiling *t = &l->api;
    CHECK(l->magic == PYPTO_CONV_DX_MAGIC);
    CHECK(l->dtype == PYPTO_CONV_DX_FP16 || l->dtype == PYPTO_CONV_DX_BF16);
    CHECK(t->c0 == C0 && t->c0Bits == 4);
    CHECK(t->batch >= 1 && t->cin >= 1 && t->cout >= 1);
    CHECK(t->cout1 == ceil_div(t->cout, C0) && t->cin1 == ceil_div(t->cin, C0));
    CHECK(t->cout1G == t->cout1 && t->cin1G == t->cin1 && t->group == 1);
    CHECK(t->dk == 1 && t->di == 1 && t->dout == 1 && t->strideD == 1 && t->dilationD == 1);
    CHECK(t->padFront == 0 && t->padBack == 0 && t->backpropPadTail == 0);
    CHECK(t->ho >= 1 && t->wo >= 1 && t->hi >= 1 && t->wi >= 1 && t->hk >= 1 && t->wk >= 1);
    CHECK(t->strideH >= 1 && t->strideW >= 1 && t->dilationH >= 1 && t->dilationW >= 1);
    CHECK(t->backpropPadUp <= 255 && t->backpropPadDown <= 255);
    CHECK(t->backpropPadLeft <= 255 && t->backpropPadRight <= 255);
    /* the full convolution of the padded, stride-dilated dy must have exactly hi x wi outputs */
    CHECK((int64_t)t->backpropPadUp + (int64_t)(t->ho - 1) * t->strideH + 1 + t->backpropPadDown -
              (int64_t)(t->hk - 1) * t->dilationH == t->hi);
    CHECK((int64_t)t->backpropPadLeft + (int64_t)(t->wo - 1) * t->strideW + 1 + t->backpropPadRight -
              (int64_t)(t->wk - 1) * t->dilationW == t->wi);
    CHECK(t->stepM == 1 && t->stepN == 1 && t->iterateOrder <= 1);
    CHECK(t->baseD == 1 && t->baseBatch == 1 && t->baseGroup == 1 && t->stepBatch == 1 && t->stepGroup == 1);
    CHECK(t->hf32Flag == 0 && (t->initOutputFlag == 0 || t->initOutputFlag == 1));
    CHECK(t->baseM > 0 && t->baseK > 0 && t->baseN > 0);
    CHECK(t->baseM % C0 == 0 && t->baseK % C0 == 0 && t->baseN % C0 == 0);
    const uint32_t taps = t->hk * t->wk, taps16 = C0 * taps;
    CHECK(t->baseK % taps16 == 0 || taps16 % t->baseK == 0);
    CHECK(l->loadB2Mode == (taps == 1 ? PYPTO_CONV_DX_B2_HKWK_EQ_ONE
                            : t->baseK / C0 >= taps ? PYPTO_CONV_DX_B2_BASEK_GE_HKWK
                                                   : PYPTO_CONV_DX_B2_BASEK_LT_HKWK));
    CHECK(t->stepKa >= 1 && t->stepKb >= 1);
    CHECK(t->stepKa * t->baseK % taps16 == 0 && t->stepKb * t->baseK % taps16 == 0);
    CHECK(t->stepKa % t->stepKb == 0 || t->stepKb % t->stepKa == 0);
    CHECK(t->al0Pbuffer == t->bl0Pbuffer && (t->al0Pbuffer == 1 || t->al0Pbuffer == 2));
    CHECK(t->cl0Pbuffer == 1 || t->cl0Pbuffer == 2);
    CHECK(t->al1Pbuffer == 1 || t->al1Pbuffer == 2);
    CHECK(t->bl1Pbuffer == 1 || t->bl1Pbuffer == 2);
    CHECK((uint64_t)t->baseM * t->baseK * 2 * t->al0Pbuffer <= 65536);
    CHECK((uint64_t)t->baseK * t->baseN * 2 * t->bl0Pbuffer <= 65536);
    CHECK((uint64_t)t->baseM * t->baseN * 4 * t->cl0Pbuffer <= 131072);
    uint64_t dy_rows = fmap_rows(t->baseM, t->wi, t->hk, t->dilationH);
    uint64_t ho_expanded = (uint64_t)(t->ho - 1) * t->strideH + 1;
    if (dy_rows > ho_expanded) dy_rows = ho_expanded;
    uint64_t a_bytes = dy_rows * t->wo * t->strideW * ((uint64_t)t->stepKa * t->baseK / taps) * 2;
    uint64_t b_bytes = (uint64_t)t->baseN * t->stepKb * t->baseK * 2;
    CHECK(t->al1Pbuffer * a_bytes + t->bl1Pbuffer * b_bytes <= L1_API_BYTES);
    CHECK(!(t->strideW == 1 && t->strideH > 1) || (uint64_t)(t->strideH - 1) * t->wo <= 65535);
    CHECK(l->rowsPerTask >= 1 && l->cinPerTask >= C0 && l->cinPerTask % C0 == 0);
    CHECK(l->mTasks == ceil_div(t->hi, l->rowsPerTask) && l->nTasks == ceil_div(t->cin, l->cinPerTask));
    CHECK(t->singleCoreCout == t->cout1 * C0 && t->singleCoreCout1 == t->cout1);
    CHECK(t->singleCoreCin1 == l->cinPerTask / C0 && t->singleCoreCin == l->cinPerTask);
    CHECK(t->singleCoreM == (uint64_t)l->rowsPerTask * t->wi && t->singleCoreBatch == 1);
    CHECK(job->blocks == (uint64_t)l->batchCount * l->mTasks * l->nTasks);
    CHECK(job->blocks <= PYPTO_CONV_DX_MAX_BLOCKS);
    CHECK(l->batchCount >= 1 && (uint64_t)l->batchStart + l->batchCount <= t->batch);
    CHECK(l->doneToken != 0);
    CHECK(fake_acl_device_span(job->dy, (uint64_t)t->batch * t->cout1 * t->ho * t->wo * C0 * 2));
    CHECK(fake_acl_device_span(job->weight, (uint64_t)t->cin1 * taps * t->cout1 * C0 * C0 * 2));
    CHECK(fake_acl_device_span(job->dx, (uint64_t)t->batch * t->cin1 * t->hi * t->wi * C0 * 2));
    /* the done slots from the workspace's first byte: the kernel uses no system workspace */
    CHECK(fake_acl_device_span(job->workspace, ((uint64_t)l->doneSlot + 1) * PYPTO_CONV_DX_DONE_SLOT_BYTES));
    return fake_conv_dx_envelope(l, error, error_size);
}

/* ---- the computation, block by block -------------------------------------------------------- */
static float *widen(const uint16_t *src, uint64_t n, int bf16)
{
    float *dst = malloc(n * sizeof *dst);
    for (uint64_t i = 0; i < n; i++) dst[i] = bf16 ? bf16_to_float(src[i]) : half_to_float(src[i]);
    return dst;
}

static void run_block(const struct job *job, const float *dy_f32, const float *w_f32, uint32_t block)
{
    const PyptoConvDxLaunch *l = &job->launch;
    const PyptoConvDxApiTiling *t = &l->api;
    const int bf16 = l->dtype == PYPTO_CONV_DX_BF16;
    const uint32_t tasks_per_image = l->mTasks * l->nTasks;
    const uint64_t image = l->batchStart + block / tasks_per_image;
    const uint32_t hi_start = (block / l->nTasks) % l->mTasks * l->rowsPerTask;
    const uint32_t ci_start = block % l->nTasks * l->cinPerTask;
    uint32_t rows = t->hi - hi_start, channels = t->cin - ci_start;
    if (rows > l->rowsPerTask) rows = l->rowsPerTask;
    if (channels > l->cinPerTask) channels = l->cinPerTask;
    channels = (uint32_t)ceil_div(channels, C0) * C0; /* the API writes whole channel blocks */
    if ((int64_t)hi_start - (int64_t)t->backpropPadUp > (int64_t)(t->ho - 1) * t->strideH)
        return; /* below the last dy row: the real kernel skips the block */

    for (uint32_t i = hi_start; i < hi_start + rows; i++)
        for (uint32_t j = 0; j < t->wi; j++)
            for (uint32_t ci = ci_start; ci < ci_start + channels; ci++) {
                float acc = 0.0f;
                int touched = 0;
                for (uint32_t co1 = 0; co1 < t->cout1; co1++)
                    for (uint32_t th = 0; th < t->hk; th++)
                        for (uint32_t tw = 0; tw < t->wk; tw++) {
                            /* tap (th, tw) of the flipped kernel over the stride-dilated dy */
                            int64_t r = (int64_t)i - t->backpropPadUp + (int64_t)th * t->dilationH;
                            int64_t c = (int64_t)j - t->backpropPadLeft + (int64_t)tw * t->dilationW;
                            if (r < 0 || c < 0 || r % t->strideH || c % t->strideW) continue;
                            uint64_t ho = (uint64_t)r / t->strideH, wo = (uint64_t)c / t->strideW;
                            if (ho >= t->ho || wo >= t->wo) continue;
                            touched = 1;
                            uint32_t kh = t->hk - 1 - th, kw = t->wk - 1 - tw;
                            const float *dy = dy_f32 + (((image * t->cout1 + co1) * t->ho + ho) * t->wo + wo) * C0;
                            const float *w = w_f32 +
                                ((((uint64_t)(ci / C0) * t->hk + kh) * t->wk + kw) * t->cout1 + co1) * C0 * C0 + ci % C0;
                            for (uint32_t co0 = 0; co0 < C0; co0++) acc += dy[co0] * w[co0 * C0];
                        }
                if (!touched && t->initOutputFlag == 1) continue; /* the API skips, not writes */
                if (job->wrong_kh == (int64_t)t->hk) acc += 1.0f; /* FAKE_KERNEL_WRONG_KH */
                job->dx[(((image * t->cin1 + ci / C0) * t->hi + i) * t->wi + j) * C0 + ci % C0] =
                    fixpipe_convert(acc, bf16, job->saturate);
            }
}

static int run_job(void *arg, char *error, size_t error_size)
{
    const struct job *job = arg;
    if (check_launch(job, error, error_size)) return 1;
    const PyptoConvDxApiTiling *t = &job->launch.api;
    const int bf16 = job->launch.dtype == PYPTO_CONV_DX_BF16;
    /* widened once: fp16/bf16 values are exact in fp32, and so are their products */
    float *dy_f32 = widen(job->dy, (uint64_t)t->batch * t->cout1 * t->ho * t->wo * C0, bf16);
    float *w_f32 = widen(job->weight, (uint64_t)t->cin1 * t->hk * t->wk * t->cout1 * C0 * C0, bf16);
    for (uint32_t block = 0; block < job->blocks; block++) run_block(job, dy_f32, w_f32, block);
    free(dy_f32);
    free(w_f32);
    /* block 0's completion mark, in its slot from the workspace's first byte */
    uint8_t *slot = job->workspace + (uint64_t)job->launch.doneSlot * PYPTO_CONV_DX_DONE_SLOT_BYTES;
    memcpy(slot, &job->launch.doneToken, sizeof(uint32_t));
    return 0;
}

__attribute__((visibility("default"))) uint32_t aclrtlaunch_pypto_conv_dx(
    uint32_t numBlocks, void *stream, void *dy, void *weight, void *dx, void *workspace,
    PyptoConvDxLaunch *launch)
{
    const char *fail = getenv("FAKE_ACL_FAIL_LAUNCH"), *skip = getenv("FAKE_ACL_SKIP_LAUNCH");
    if (fail && *fail) {
        fake_acl_set_error("kernel launch rejected by the runtime (injected by FAKE_ACL_FAIL_LAUNCH)");
        return ACL_ERROR_RT_INTERNAL_ERROR;
    }
    if (skip && *skip) {
        fprintf(stderr, "[ERROR] fake: pypto_conv_dx device binary not registered, launch skipped "
                        "(FAKE_ACL_SKIP_LAUNCH)\n");
        return 0;
    }
    if (numBlocks == 0 || launch == NULL) {
        fake_acl_set_error("aclrtlaunch_pypto_conv_dx: no blocks or no launch struct");
        return ACL_ERROR_RT_PARAM_INVALID;
    }
    const char *saturate = getenv("FAKE_KERNEL_SATURATE"), *wrong_kh = getenv("FAKE_KERNEL_WRONG_KH");
    char *end = NULL;
    long long kh = wrong_kh && *wrong_kh ? strtoll(wrong_kh, &end, 10) : -1;
    struct job *job = malloc(sizeof *job);
    *job = (struct job){numBlocks, dy, weight, dx, workspace, *launch, /* copied, like the wrapper */
                        saturate && *saturate && strcmp(saturate, "0") != 0,
                        end && *end == '\0' && kh >= 0 ? (int64_t)kh : -1};
    return (uint32_t)fake_acl_enqueue_kernel(stream, run_job, job);
}
