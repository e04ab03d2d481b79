/* pypto's conv backward-input (dgrad) kernel for Atlas A2/A3 (dav-c220), on AscendC's high-level
 * Conv3DBackpropInput API with D = 1.
 *
 * Data (prepared by the host, pypto/_npu/layout.py):
 *   dy     NC1HWC0     [batch][cout1][ho][wo][16]          fp16 or bf16, channels zero-padded
 *   weight FRACTAL_Z   [cin1][hk][wk][cout1][16 co][16 ci] the forward weight; the API itself
 *                                                         flips the taps and swaps Cin/Cout
 *   dx     NC1HWC0     [batch][cin1][hi][wi][16]          written through Fixpipe (fp32 -> out)
 *
 * Work split: one block = one task = (image, rowsPerTask rows of dx, cinPerTask channels). The
 * host sizes tasks from the user's L1 tiles (tileML1 -> rows, tileNL1 -> channels) and chunks
 * launches so a launch has at most 65535 blocks. Inside a task the API walks the GEMM
 * M = rows*wi, N = channels, K = cout1*hk*wk*16 in ORDER_N: for each baseN block of channels,
 * for each baseM block of pixels, the K loop in baseK steps (stepKa/stepKb of them per L1 load)
 * accumulates in L0C in fp32, then one Fixpipe rounding to fp16/bf16 writes the block:
 *   tileML0 -> baseM, tileNL0 -> baseN, tileKL0 -> baseK, tileKL1 -> stepKb*baseK (= stepKa*baseK
 *   unless the dy window needs a shallower L1 block). Stride > 1 is zero-insertion of dy into L1
 * (the API's "amplification"), padding is the backprop padding (k-1)*d - p of that amplified dy.
 *
 * Block 0 writes doneToken into its slot of the workspace when it is done: the generated launch
 * wrapper returns 0 without launching when the device binary failed to register, and the host
 * must be able to tell. The workspace holds those slots only (no AscendC system workspace: see
 * the kernel entry).
 *
 * Overflow, Inf and NaN: the kernel sets the Fixpipe's non-saturating mode itself (kernel entry),
 * so fp32 sums beyond the output dtype's range become +-Inf and NaN stays NaN, as on the CPU.
 */
#include "kernel_operator.h"
#include "lib/conv_backprop/conv3d_bp_input_api.h"

#include "pypto_conv_dx_tiling.h"

/* The host fills PyptoConvDxApiTiling and the API reads TConv3DBackpropInputTiling: they must be
 * the same bytes, field by field, for the CANN this is compiled against. */
#define PYPTO_SAME_FIELD(name)                                                                  \
    static_assert(offsetof(TConv3DBackpropInputTiling, name) ==                                \
                      offsetof(PyptoConvDxApiTiling, name),                                    \
                  "CANN's TConv3DBackpropInputTiling differs from pypto_conv_dx_tiling.h at " #name);
PYPTO_CONV_DX_API_U32_FIELDS(PYPTO_SAME_FIELD)
PYPTO_CONV_DX_API_I32_FIELDS(PYPTO_SAME_FIELD)
PYPTO_CONV_DX_API_U64_FIELDS(PYPTO_SAME_FIELD)
#undef PYPTO_SAME_FIELD
static_assert(sizeof(TConv3DBackpropInputTiling) == sizeof(PyptoConvDxApiTiling),
              "CANN's TConv3DBackpropInputTiling is not 280 bytes: update pypto_conv_dx_tiling.h");

namespace {

using ConvBackpropApi::B2Condition;
using ConvBackpropApi::Conv3dConfig;

/* The API's configuration is a template argument; one per weight-transpose loop. */
constexpr Conv3dConfig CONFIG_BASEK_LT_HKWK = {B2Condition::BASEK_LT_HKWK, false};
constexpr Conv3dConfig CONFIG_BASEK_GE_HKWK = {B2Condition::BASEK_GE_HKWK, false};
constexpr Conv3dConfig CONFIG_HKWK_EQ_ONE = {B2Condition::HKWK_EQ_ONE, false};

template <typename T, const Conv3dConfig& CONFIG>
using DgradApi = ConvBackpropApi::Conv3DBpInputIntf<
    ConvBackpropApi::Conv3DBpInputCfg<
        ConvBackpropApi::ConvType<AscendC::TPosition::GM, ConvCommonApi::ConvFormat::FRACTAL_Z_3D, T>,
        ConvBackpropApi::ConvType<AscendC::TPosition::GM, ConvCommonApi::ConvFormat::ND, int32_t>,
        ConvBackpropApi::ConvType<AscendC::TPosition::GM, ConvCommonApi::ConvFormat::NDC1HWC0, T>,
        ConvBackpropApi::ConvType<AscendC::TPosition::GM, ConvCommonApi::ConvFormat::NDC1HWC0, T>,
        CONFIG>,
    ConvBackpropApi::Conv3DBpInputImpl>;

__aicore__ inline uint32_t MinU32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* This block's task: one image, a run of dx rows, a run of dx channels. */
template <typename T, const Conv3dConfig& CONFIG>
__aicore__ inline void RunTask(GM_ADDR dy, GM_ADDR weight, GM_ADDR dx, const PyptoConvDxLaunch& launch)
{
    /* The API's own tiling type, filled byte for byte: the static_asserts above prove the two
     * layouts equal, and memcpy is the defined way to move bytes between unrelated struct types
     * (a pointer cast would be a strict-aliasing violation the -O3 device build may exploit). A
     * stack copy, because the API keeps a pointer to it until End(). */
    TConv3DBackpropInputTiling t;
    __builtin_memcpy(&t, &launch.api, sizeof(t));
    const uint32_t block = AscendC::GetBlockIdx();
    const uint32_t tasksPerImage = launch.mTasks * launch.nTasks;
    const uint64_t image = launch.batchStart + block / tasksPerImage;
    const uint32_t mTask = (block / launch.nTasks) % launch.mTasks;
    const uint32_t nTask = block % launch.nTasks;

    const uint32_t hiStart = mTask * launch.rowsPerTask;
    const uint32_t rows = MinU32(launch.rowsPerTask, t.hi - hiStart);
    const uint32_t cinStart = nTask * launch.cinPerTask;
    const uint32_t channels = MinU32(launch.cinPerTask, t.cin - cinStart);

    /* First dx row of the task in the coordinates of the stride-dilated, padded dy, and the first
     * real dy row at or below it. Rows past the last dy row receive nothing: the host zeroed dx. */
    const int32_t hoStartAmplified = static_cast<int32_t>(hiStart) - static_cast<int32_t>(t.backpropPadUp);
    const uint32_t firstDyRow =
        hoStartAmplified < 0 ? 0 : (static_cast<uint32_t>(hoStartAmplified) + t.strideH - 1) / t.strideH;
    if (firstDyRow >= t.ho) {
        return;
    }

    const uint64_t c0 = t.c0;
    const uint64_t dyOffset = (image * t.cout1 * t.ho + firstDyRow) * t.wo * c0;
    const uint64_t weightOffset = static_cast<uint64_t>(cinStart / t.c0) * t.hk * t.wk * t.cout1 * c0 * c0;
    const uint64_t dxOffset = ((image * t.cin1 + cinStart / t.c0) * t.hi + hiStart) * t.wi * c0;

    AscendC::GlobalTensor<T> dyGm;
    AscendC::GlobalTensor<T> weightGm;
    AscendC::GlobalTensor<T> dxGm;
    dyGm.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dy));
    weightGm.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(weight));
    dxGm.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dx));

    DgradApi<T, CONFIG> dgrad;
    dgrad.Init(&t);
    dgrad.SetSingleShape(static_cast<uint64_t>(rows) * t.wi, static_cast<uint64_t>(t.cout1) * t.hk * t.wk * c0,
                         channels);
    dgrad.SetStartPosition(0, hoStartAmplified);
    dgrad.SetGradOutput(dyGm[dyOffset]);
    dgrad.SetWeight(weightGm[weightOffset]);
    while (dgrad.Iterate()) {
        dgrad.GetTensorC(dxGm[dxOffset]);
    }
    dgrad.End();
}

template <typename T>
__aicore__ inline void RunTaskFor(GM_ADDR dy, GM_ADDR weight, GM_ADDR dx, const PyptoConvDxLaunch& launch)
{
    if (launch.loadB2Mode == PYPTO_CONV_DX_B2_HKWK_EQ_ONE) {
        RunTask<T, CONFIG_HKWK_EQ_ONE>(dy, weight, dx, launch);
    } else if (launch.loadB2Mode == PYPTO_CONV_DX_B2_BASEK_GE_HKWK) {
        RunTask<T, CONFIG_BASEK_GE_HKWK>(dy, weight, dx, launch);
    } else {
        RunTask<T, CONFIG_BASEK_LT_HKWK>(dy, weight, dx, launch);
    }
}

/* Scalar store to GM from the cube core, then flush the data cache line so the host sees it. */
__aicore__ inline void MarkDone(GM_ADDR doneSlots, const PyptoConvDxLaunch& launch)
{
    AscendC::PipeBarrier<PIPE_ALL>();
    AscendC::GlobalTensor<uint32_t> flag;
    flag.SetGlobalBuffer(reinterpret_cast<__gm__ uint32_t*>(
        doneSlots + static_cast<uint64_t>(launch.doneSlot) * PYPTO_CONV_DX_DONE_SLOT_BYTES));
    flag.SetValue(0, launch.doneToken);
    AscendC::DataCacheCleanAndInvalid<uint32_t, AscendC::CacheLine::SINGLE_CACHE_LINE,
                                      AscendC::DcciDst::CACHELINE_OUT>(flag);
}

} // namespace

extern "C" __global__ __aicore__ void pypto_conv_dx(GM_ADDR dy, GM_ADDR weight, GM_ADDR dx, GM_ADDR workspace,
                                                    PyptoConvDxLaunch launch)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    /* A library built from another header version: do nothing, so the host's completion check
     * reports it instead of the kernel reading misplaced fields. */
    if (launch.magic != PYPTO_CONV_DX_MAGIC) {
        return;
    }
    /* Fixpipe's fp32 -> fp16/bf16 conversion on A2/A3 (F322F16/F322BF16) follows CTRL[48]:
     * 1 keeps Inf/NaN (a sum past the dtype's range becomes +-Inf, as on the CPU), 0 saturates
     * (Inf -> +-MAX, NaN -> 0). The kernel sets the bit instead of inheriting it: the process
     * default (Inf/NaN on A2/A3) can be changed by aclrtSetDeviceSatMode, by another framework
     * in the process, or by whatever CTRL state the runtime loads. It restores the bit on the
     * way out, as asc-devkit's own samples do, so nothing leaks into the next kernel on the core.
     * Why this may not be the last word: asc-devkit's DataCopy (L0C to GM) page documents this
     * bit for A2/A3 float move-out, but its asc_copy_l0c2gm page for arch 2201 says the F322F16
     * and F322BF16 results do not support the INF_NAN mode. Which one the hardware follows is
     * settled on the hardware: examples/npu_check.py's overflow and Inf/NaN cases and the NPU
     * self-check (docs/npu.md, "First run on a new Atlas host"). The #error keeps a device pass
     * that lacks the arch macro from silently skipping the setting. */
#if defined(__NPU_ARCH__) && (__NPU_ARCH__ == 2201)
    const uint64_t overflowBitBefore = (get_ctrl() >> 48) & 1u;
    AscendC::AscendCUtils::SetOverflow(1);
#elif defined(__DAV_C220_CUBE__) || defined(__DAV_C220_VEC__)
#error "dav-c220 device pass without __NPU_ARCH__ == 2201: the Fixpipe overflow mode would not be set"
#endif
    /* No AscendC system workspace: the kernel is AIC only and uses neither KFC nor Matmul, and
     * the generated launch wrapper passes `workspace` through as a plain argument, so the done
     * slots start at its first byte (neither SetSysWorkspace, deprecated in newer asc-devkit,
     * nor GetUserWorkspace, which adds the 16 MiB system reserve, is called). */
    if (launch.dtype == PYPTO_CONV_DX_BF16) {
        RunTaskFor<bfloat16_t>(dy, weight, dx, launch);
    } else {
        RunTaskFor<half>(dy, weight, dx, launch);
    }
    if (AscendC::GetBlockIdx() == 0) {
        MarkDone(workspace, launch);
    }
#if defined(__NPU_ARCH__) && (__NPU_ARCH__ == 2201)
    AscendC::PipeBarrier<PIPE_ALL>(); /* the last Fixpipe has converted before the bit changes */
    AscendC::AscendCUtils::SetOverflow(overflowBitBefore);
#endif
}
