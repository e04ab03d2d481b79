/* The launch arguments of pypto's AscendC dgrad kernel, shared by every side that touches them:
 *
 *   - the kernel (pypto_conv_dx.cpp) receives a PyptoConvDxLaunch by value;
 *   - the host (pypto/_npu/launch_struct.py) mirrors these structs with ctypes, and the tests
 *     compile a C program against this header to compare sizeof and every offset;
 *   - the test double of the runtime (tests/npu/fake_ascend) reads the same struct.
 *
 * PyptoConvDxApiTiling has exactly the layout of CANN's TConv3DBackpropInputTiling (280 bytes,
 * natural alignment, field order of conv3d_bp_input_tilingdata.h); the kernel static_asserts
 * every offset against CANN's own struct, so a CANN release that changes it fails the build
 * instead of running with shifted fields. Plain C (C99/C11) and C++: no CANN header needed here.
 */
#ifndef PYPTO_CONV_DX_TILING_H
#define PYPTO_CONV_DX_TILING_H

#include <stddef.h>
#include <stdint.h>

#define PYPTO_CONV_DX_MAGIC 0x50434458u /* "PCDX": a header/library mismatch fails loudly */
#define PYPTO_CONV_DX_API_TILING_BYTES 280
#define PYPTO_CONV_DX_LAUNCH_BYTES 328
/* The workspace holds the completion flags only, one 64-byte slot (a cache line) per launch,
 * from its first byte. The kernel uses no AscendC system workspace (the 16 MiB RESERVED_WORKSPACE
 * that KFC and Matmul kernels keep in front of the user part on A2/A3). */
#define PYPTO_CONV_DX_DONE_SLOT_BYTES 64
#define PYPTO_CONV_DX_MAX_BLOCKS 65535 /* blockDim range of a launch */

enum { PYPTO_CONV_DX_FP16 = 0, PYPTO_CONV_DX_BF16 = 1 };

/* How the API turns the weight block into L0B (its B2Condition): it depends on baseK against
 * Kh*Kw*16, so the kernel instantiates the API once per case and the host says which applies. */
enum {
    PYPTO_CONV_DX_B2_BASEK_LT_HKWK = 0, /* baseK divides Kh*Kw*16 */
    PYPTO_CONV_DX_B2_BASEK_GE_HKWK = 1, /* baseK is a multiple of Kh*Kw*16 */
    PYPTO_CONV_DX_B2_HKWK_EQ_ONE = 2    /* 1x1 kernel */
};

/* The 60 uint32 fields of TConv3DBackpropInputTiling, in CANN's order (X-macro: the struct below
 * and the kernel's per-field static_asserts expand the same list). */
#define PYPTO_CONV_DX_API_U32_FIELDS(X)                                                        \
    X(batch) X(cin) X(cout) X(cout1) X(cin1) X(cout1G) X(cin1G) X(c0) X(c0Bits) X(dout) X(ho)  \
    X(wo) X(di) X(hi) X(wi) X(dk) X(hk) X(wk) X(group) X(strideD) X(strideH) X(strideW)        \
    X(padFront) X(padBack) X(padUp) X(padDown) X(padLeft) X(padRight) X(backpropPadTail)       \
    X(backpropPadUp) X(backpropPadDown) X(backpropPadLeft) X(backpropPadRight) X(dilationD)    \
    X(dilationH) X(dilationW) X(al0Pbuffer) X(bl0Pbuffer) X(cl0Pbuffer) X(al1Pbuffer)          \
    X(bl1Pbuffer) X(singleCoreGroup) X(singleCoreCout) X(singleCoreCout1) X(singleCoreCin1)    \
    X(singleCoreDin) X(singleCoreHo) X(baseM) X(baseK) X(baseN) X(baseD) X(baseBatch)          \
    X(baseGroup) X(stepM) X(stepN) X(stepKa) X(stepKb) X(stepBatch) X(stepGroup)              \
    X(iterateOrder)

/* The remaining fields: three int32 flags, then three uint64 (4 bytes of padding before them). */
#define PYPTO_CONV_DX_API_I32_FIELDS(X) X(hf32Flag) X(initOutputFlag) X(reserved)
#define PYPTO_CONV_DX_API_U64_FIELDS(X) X(singleCoreBatch) X(singleCoreM) X(singleCoreCin)

#define PYPTO_CONV_DX_U32_MEMBER(name) uint32_t name;
#define PYPTO_CONV_DX_I32_MEMBER(name) int32_t name;
#define PYPTO_CONV_DX_U64_MEMBER(name) uint64_t name;

/* Each struct is declared as `struct X { ... };` on a line of its own, then typedef'd: the
 * generator of ascendc_library's launch wrapper (asc-devkit extract_host_stub.py) finds by-value
 * struct parameters with the pattern ^\s*struct\s+(\w+)\s*\{ on the preprocessed source and
 * copies those definitions into the host stub. `typedef struct X { ... } X;` never matches it: the
 * stub then names PyptoConvDxLaunch undefined and takes it by value (tests/npu/test_npu_kernel_source.py). */
struct PyptoConvDxApiTiling {
    PYPTO_CONV_DX_API_U32_FIELDS(PYPTO_CONV_DX_U32_MEMBER)
    PYPTO_CONV_DX_API_I32_FIELDS(PYPTO_CONV_DX_I32_MEMBER)
    PYPTO_CONV_DX_API_U64_FIELDS(PYPTO_CONV_DX_U64_MEMBER)
};
typedef struct PyptoConvDxApiTiling PyptoConvDxApiTiling;

/* One launch: a batch range of one W-stripe of the problem, one dx block per AI core block.
 * Block b computes image batchStart + b / (mTasks * nTasks), row block (b / nTasks) % mTasks and
 * channel block b % nTasks of the dx buffer. */
struct PyptoConvDxLaunch {
    uint32_t magic;       /* PYPTO_CONV_DX_MAGIC */
    uint32_t dtype;       /* PYPTO_CONV_DX_FP16 or PYPTO_CONV_DX_BF16 (dy, weight and dx alike) */
    uint32_t loadB2Mode;  /* PYPTO_CONV_DX_B2_*: which API instantiation runs */
    uint32_t batchStart;  /* first image of this launch */
    uint32_t batchCount;  /* images of this launch; blocks = batchCount * mTasks * nTasks */
    uint32_t mTasks;      /* row blocks per image */
    uint32_t nTasks;      /* channel blocks per image */
    uint32_t rowsPerTask; /* dx rows per block: the user's tileML1 in whole rows */
    uint32_t cinPerTask;  /* dx channels per block: the user's tileNL1, a multiple of 16 */
    uint32_t doneSlot;    /* this launch's completion slot in the user workspace */
    uint32_t doneToken;   /* what block 0 writes there when it is done (0 is never used) */
    uint32_t reserved;
    PyptoConvDxApiTiling api; /* what the Conv3DBackpropInput API reads */
};
typedef struct PyptoConvDxLaunch PyptoConvDxLaunch;

#ifdef __cplusplus
#define PYPTO_CONV_DX_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define PYPTO_CONV_DX_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

PYPTO_CONV_DX_STATIC_ASSERT(sizeof(PyptoConvDxApiTiling) == PYPTO_CONV_DX_API_TILING_BYTES,
                            "PyptoConvDxApiTiling must be 280 bytes like TConv3DBackpropInputTiling");
PYPTO_CONV_DX_STATIC_ASSERT(offsetof(PyptoConvDxApiTiling, hf32Flag) == 240, "hf32Flag at 240");
PYPTO_CONV_DX_STATIC_ASSERT(offsetof(PyptoConvDxApiTiling, singleCoreBatch) == 256,
                            "singleCoreBatch at 256");
PYPTO_CONV_DX_STATIC_ASSERT(offsetof(PyptoConvDxLaunch, api) == 48, "api at 48");
PYPTO_CONV_DX_STATIC_ASSERT(sizeof(PyptoConvDxLaunch) == PYPTO_CONV_DX_LAUNCH_BYTES,
                            "PyptoConvDxLaunch must be 328 bytes");

#endif /* PYPTO_CONV_DX_TILING_H */
