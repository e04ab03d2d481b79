"""CPU kernels of pypto (Cython + C). Only pypto._cpu calls them, with validated arguments.

The dgrad of one image is a GEMM with M = Hin*Win pixels, N = Cin, K = Cout*Kh*Kw::

    dx[ci, pixel] = sum_k  Wp[ci, k] * A[k, pixel]        k = (co, kh, kw)
    Wp[ci, k]     = w[co, ci, kh, kw]                      packed once per call into panels
    A[k, pixel]   = dy[co, ho, wo] where ho*sh = hi + pt - kh*dh and wo*sw = wi + pl - kw*dw,
                    0 where no such (ho, wo) exists

Stride > 1 splits each tile into sh*sw phases (pixels with the same (hi+pt) % sh, (wi+pl) % sw);
in a phase every contributing tap is a plain shift of the dy grid, so A row (co, tap) is a
shifted view of one zero-haloed fp32 frame of dy channel co (copied into a panel per register
block only where enough channel blocks reuse it).

Tiling (pypto._tiling is the model; the user's L1/L0 tiles drive it)::

    work item = (image, tileNL1 channels, tileML1 pixels)      <- OpenMP, dynamic schedule
      for each stride phase of the tile
        C[tileNL1][phase pixels] = 0                            (fp32)
        K-L1: tileKL1 / (Kh*Kw) Cout channels -> convert their dy rows into the frame
          M-L0 (tileML0 positions) -> K-L0 (tileKL0) -> register block of NR pixels
            (>= 4 channel blocks: copy the block's A rows into a panel, halo left out)
            N-L0 (tileNL0): C block += W panel x A rows         (register-blocked micro-kernel)
        round C once (RNE) -> fp16/bf16, store NCHW in vec-tile chunks

Register blocks, chosen per call by the tiles (all sum each element over k in the same order,
so every choice gives the same bits, tests/test_kernel_paths.py):

    pixel-vector (every level)  C rows = 8 channels (AVX2: 4), columns NR pixels; A rows read
                                as vectors from the frame or a packed panel, W broadcast
    channel-vector (AVX-512,    tiles of whole 32-channel blocks: C rows = 7 pixels, columns 32
    AVX2: 6 x 16)               channels ([pixel][channel] accumulator, 16x16 transposes at the
                                write-out); A broadcast from the frame at each pixel's offset, so
                                no halo is computed and nothing is packed; small whole-image
                                tiles of several images share a work item (image groups, up to
                                _tiling.CPU_GROUP_PIXELS pixels), so one weight read serves them;
                                with the bf16 dot product and whole 64-channel blocks, the wide
                                one: 6 pixels x 64 channels (24 accumulators)
    few-channel (AVX-512)       all of Cin <= 4 (an RGB stem): 4 channels x 64 pixels

Modules: _dgrad_impl.pxi holds the loops; _dgrad_<isa>.pyx include it once per ISA level; the
levels, their compiler flags and the CPU features each needs are one table, isa_levels.py
(setup.py builds from it); include/pypto_gemm.h holds the micro-kernels, include/pypto_numeric.h
the exact fp16/bf16 conversions. Scratch per thread is sized by the tiles (accumulator, one
frame, A row pointers): there is no whole-image im2col. The weight panels and the scratch are
kept for the next call (fresh pages from the OS cost up to a third of a call). One parallel pass
over the weight finds Inf/NaN (the kernel then returns "non_finite" and the op takes the
real-taps path) and its least exponent (the bf16 dot product's no-subnormal rule); the panels
are packed in the weight's memory order; the frame fill prefetches dy rows some channels ahead
and the write-out the next output rows (plane-strided rows that hardware prefetchers miss).

CPU dispatch (the NumPy rule: nothing above the baseline runs before the CPU check)::

    _cpu_features (built for the baseline only)  -> CPUID + XGETBV / AArch64 HWCAP feature table
    pypto._cpu: levels whose every required feature is present  ∩  levels built (find_spec,
                which locates a module file without running it)
    first kernel use: import _dgrad_<best such level> (or PYPTO_CPU_ISA's, refused with a
                PyptoRtError before any import when the CPU or the build lacks it)

A _dgrad_<isa> module is compiled whole with its level's -march, so even its module
initialisation may use that level's instructions: it is imported only after the check, and no
other code of it (helpers, static data) is reachable before. `pypto info` prints the level in
use and why.
"""
