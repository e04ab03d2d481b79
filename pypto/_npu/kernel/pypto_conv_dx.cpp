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
 * Block 0 writes doneToken into its slot of the user workspace when it is done: the generated
 * launch wrapper returns 0 without launching when the device binary failed to register, and the
 * host must be able to tell.
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
    const PyptoConvDxApiTiling t = launch.api; /* a stack copy: the API keeps a pointer to it */
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
    dgrad.Init(reinterpret_cast<const TConv3DBackpropInputTiling*>(&t));
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
__aicore__ inline void MarkDone(GM_ADDR userWorkspace, const PyptoConvDxLaunch& launch)
{
    AscendC::PipeBarrier<PIPE_ALL>();
    AscendC::GlobalTensor<uint32_t> flag;
    flag.SetGlobalBuffer(reinterpret_cast<__gm__ uint32_t*>(
        userWorkspace + static_cast<uint64_t>(launch.doneSlot) * PYPTO_CONV_DX_DONE_SLOT_BYTES));
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
    /* The user part of the workspace follows the system part the runtime reserves on A2/A3. The
     * kernel uses no system workspace, so it needs neither SetSysWorkspace (deprecated in newer
     * asc-devkit) nor GetUserWorkspace (which ignores its argument on CANN >= 9 device builds). */
    GM_ADDR userWorkspace = workspace + PYPTO_CONV_DX_SYSTEM_WORKSPACE_BYTES;

    if (launch.dtype == PYPTO_CONV_DX_BF16) {
        RunTaskFor<bfloat16_t>(dy, weight, dx, launch);
    } else {
        RunTaskFor<half>(dy, weight, dx, launch);
    }
    if (AscendC::GetBlockIdx() == 0) {
        MarkDone(userWorkspace, launch);
    }
}
