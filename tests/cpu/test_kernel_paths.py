"""The kernel's register-block shapes give the same bits.

Pixel-vector kernels (C rows are 8 input channels, columns output pixels) serve every level;
on the AVX-512 levels the channel-vector kernels (rows are pixels, columns 32 input channels;
no halo, no A packing, 16x16 transposes on the way out) serve tiles of whole 32-channel
blocks, a last panel of at most 16 channels on their 16-column forms (with the bf16 dot
product, the wide one: 6 pixels x 64 channels, for whole 64-channel blocks), and the
few-channel kernels (4 rows x 64 positions) tiles of at most 4 channels. All sum each element
over k in the same order, so they must agree bit for bit with the 8-row pixel kernels, on fp16
and bf16 (with and without the dot product), for every stride, tile and vec-tile chunk shape,
on any thread count, with Inf and NaN in dy too. (Whole-width tiles of stride-1 layers are
written out as one run per channel, 16 positions at a time across row ends: the 7- and
17-wide rows here, with two threads in non-temporal stores of whole lines, each channel's run
shifted to its lines; the two column phases of a stride-2 row phase are written out together,
interleaved: padding 1 puts the odd columns' phase first, padding 2 the even columns'.)
"""

import ml_dtypes
import numpy as np
import pytest

import pypto
from pypto._core.shapes import forward_out_size
from pypto._core.tiling import ConvProblem, Tiling
from pypto._kernels.dispatch import BUILT_LEVELS, CPU_LEVELS, load_level

CHAN_VEC_LEVELS = [
    level for level in CPU_LEVELS if level in BUILT_LEVELS and load_level(level).HAS_CHAN_VEC
]
FEW_LEVELS = [level for level in CPU_LEVELS if level in BUILT_LEVELS and load_level(level).HAS_FEW]

# (n, cin, cout, hin, win, kh, kw, (sh, sw), (pt, pl), (dh, dw), nl1 or None: suggested)
PROBLEMS = [
    (2, 64, 40, 9, 13, 3, 3, (1, 1), (1, 1), (1, 1), None),  # 117 pixels: 16 x 7 + 5
    (1, 32, 16, 7, 7, 3, 3, (1, 1), (1, 1), (1, 1), None),  # 49 = 7 x 7
    (1, 60, 24, 11, 10, 3, 3, (2, 2), (1, 1), (1, 1), None),  # Cin 60: one block, padded
    (1, 96, 33, 12, 17, 3, 3, (2, 1), (1, 0), (1, 2), 32),  # three N-L1 blocks of 32
    (2, 128, 20, 5, 23, 1, 1, (1, 1), (0, 0), (1, 1), 64),  # 1x1, odd Cout
    (1, 32, 17, 20, 19, 5, 5, (3, 3), (2, 2), (1, 1), None),  # stride 3: 9 phases
    (1, 64, 16, 14, 14, 7, 7, (2, 2), (3, 3), (1, 1), None),
    (1, 32, 48, 6, 40, 3, 3, (1, 1), (1, 1), (2, 2), None),  # dilation, wide rows
    (3, 96, 20, 6, 7, 3, 3, (1, 1), (1, 1), (1, 1), 32),  # image groups of 3, or 2 + 1
    (5, 64, 24, 4, 4, 3, 3, (2, 2), (1, 1), (1, 1), 32),  # 5 images: 3 + 2
    (4, 128, 18, 7, 7, 3, 3, (1, 1), (1, 1), (1, 1), 64),  # 6-pixel blocks across images: 2 + 2
    (1, 64, 24, 9, 10, 1, 1, (2, 2), (0, 0), (1, 1), None),  # phases without taps: zeros
    (2, 160, 24, 9, 11, 1, 7, (1, 1), (0, 3), (1, 1), 128),  # 1x7; 128 + 32: never wide
    (1, 64, 24, 9, 41, 3, 3, (2, 2), (1, 1), (1, 1), None),  # stride-2 stores: 16 + 5, 16 + 4
    (2, 96, 24, 6, 17, 3, 3, (1, 1), (1, 1), (1, 1), None),  # 17-wide rows, stored as runs
    (1, 288, 20, 7, 9, 3, 3, (2, 2), (1, 1), (1, 1), 128),  # 128 + 128 + 32: never wide
    (2, 80, 21, 9, 11, 3, 3, (1, 1), (1, 1), (1, 1), 80),  # 32 + 32 + 16: the 7 x 16 kernels
    (1, 48, 16, 8, 9, 5, 5, (1, 1), (2, 2), (1, 1), None),  # 32 + 16, 5x5
    (1, 80, 18, 6, 7, 3, 3, (2, 2), (1, 1), (1, 1), 64),  # blocks of 64 and of 16
    (2, 64, 20, 9, 37, 3, 3, (2, 2), (2, 2), (1, 1), None),  # paired stores: even phase first
    # taps that read padding for a whole pixel block are skipped: one-column images (every
    # block skips four of a 5x5 kernel's columns), 7x1 on 17 rows, 5x5 dilated 2 with stride 2
    (2, 64, 20, 9, 1, 5, 5, (1, 1), (2, 2), (1, 1), None),
    (2, 64, 24, 17, 17, 7, 1, (1, 1), (3, 0), (1, 1), None),
    (1, 96, 24, 11, 6, 5, 5, (2, 2), (4, 4), (2, 2), None),
    # 1xN kernels: positions column after column (blocks down a column, across columns and
    # images: 8x8 images in groups), a dilated 1x5
    (4, 64, 20, 8, 8, 1, 3, (1, 1), (0, 1), (1, 1), None),
    (1, 64, 24, 6, 13, 1, 5, (1, 1), (0, 4), (1, 2), None),
]
# problem index: {threads: images per item}; groups keep four work items per thread
GROUPED = {8: {1: 2}, 9: {1: 3}, 10: {1: 2}}
VEC_CHUNKS = [(16, 64), (3, 5), (1, 1), (40, 7)]  # (channels, columns) per write-out chunk


def _case(problem, dtype, rng, non_finite=False):
    n, cin, cout, hin, win, kh, kw, (sh, sw), (pt, pl), (dh, dw), nl1 = problem
    hout = forward_out_size(hin, kh, sh, pt, pt, dh)
    wout = forward_out_size(win, kw, sw, pl, pl, dw)
    np_dtype = np.float16 if dtype == 0 else ml_dtypes.bfloat16
    dy = rng.uniform(-1, 1, (n, cout, hout, wout)).astype(np_dtype)
    w = rng.uniform(-1, 1, (cout, cin, kh, kw)).astype(np_dtype)
    if non_finite:
        dy[0, 0, 0, 0], dy[-1, -1, -1, -1] = np.inf, np.nan
    l1, l0 = pypto.suggest_convbp_input_tile_shapes(
        dy.shape,
        w.shape,
        [n, cin, hin, win],
        pypto.DT_FP16 if dtype == 0 else pypto.DT_BF16,
        [sh, sw],
        [pt, pt, pl, pl],
        [dh, dw],
    )
    tiling = Tiling.from_infos(l1, l0)
    if nl1:
        tiling = tiling._replace(nl1=nl1, nl0=min(tiling.nl0, nl1))
    p = ConvProblem(n, cin, cout, hin, win, hout, wout, kh, kw, sh, sw, pt, pt, pl, pl, dh, dw)
    return (
        dy.view(np.uint16),
        w.view(np.uint16),
        (sh, sw, pt, pl, dh, dw),
        tiling.kernel_tiles(p),
        (n, cin, hin, win),
    )


def _run(kernel, case, dtype, vec, threads, dot, shape_kind, stream_bytes=1 << 62, **knobs):
    """The kernel on ``case`` with one register-block shape allowed: "pixel" (the 8-row
    pixel-vector kernels), "chan_vec" (7 x 32), "wide" (6 x 64 where the tile allows, else
    7 x 32) or "few"; with several threads the write-out streams dx from ``stream_bytes``
    (knobs: the kernel's other keywords, unpermute_macs; serial_macs 0 unless given, so that
    these small problems run on the team asked for)."""
    knobs.setdefault("serial_macs", 0)
    dy, w, attrs, tiles, shape = case
    out = np.full(shape, 0xABCD, np.uint16)  # a pattern no write leaves behind
    path = kernel.dgrad(
        dy,
        w,
        out,
        dtype,
        attrs,
        tiles,
        vec,
        threads,
        dot,
        shape_kind in ("chan_vec", "wide"),
        shape_kind == "few",
        shape_kind == "wide",
        stream_bytes,
        **knobs,
    )
    return path, out


def _same_bits_as_pixel_kernels(kernel, case, dtype, shape_kind, label, groups=None):
    """Every vec chunk shape, 1 and 2 threads, the dot product on and off: ``shape_kind``'s
    result equals the pixel kernels' bit for bit (groups: {threads: images per item})."""
    for i, vec in enumerate(VEC_CHUNKS):
        threads = 1 + i % 2
        for dot in (True, False) if dtype == 1 else (True,):
            path, expected = _run(kernel, case, dtype, vec, threads, dot, "pixel")
            assert "+chan_vec" not in path and "+few" not in path, path
            kinds = [shape_kind]
            if shape_kind == "chan_vec" and (kernel.HAS_CV_WIDE or kernel.HAS_CV_WIDE_F32):
                kinds.append("wide")
            for kind in kinds:
                # with 2 threads, the run write-out streamed (pypto_cv_stream_run), however
                # small dx is
                path, out = _run(kernel, case, dtype, vec, threads, dot, kind, 0)
                assert f"+{shape_kind}" in path, path
                streams = threads > 1 and kernel.openmp_enabled() and kernel.HAS_CV_STREAM
                streams = streams and shape_kind == "chan_vec"
                assert ("+stream" in path) == streams, path
                # the wide kernel serves exactly the tiles of whole 64-channel blocks, the
                # last block too, where the level has it for the path taken (the bf16 dot
                # product's, or fp32's on the avx512 level)
                nl1, cin = case[3][2], case[4][1]
                wide = nl1 % 64 == 0 and cin % 64 == 0
                wide = wide and (
                    kernel.HAS_CV_WIDE if path.startswith("bf16_dot") else kernel.HAS_CV_WIDE_F32
                )
                assert ("+wide" in path) == (kind == "wide" and wide), (path, nl1)
                group = (groups or {}).get(threads, 1)
                assert ("+group" not in path) if group == 1 else path.endswith(f"+group{group}")
                assert np.array_equal(out, expected), (label, kind, vec, threads, dot)


@pytest.mark.skipif(not CHAN_VEC_LEVELS, reason="no level with channel-vector kernels here")
@pytest.mark.parametrize("level", CHAN_VEC_LEVELS)
@pytest.mark.parametrize("dtype", [0, 1], ids=["fp16", "bf16"])
@pytest.mark.parametrize("index", range(len(PROBLEMS)))
def test_channel_vector_kernels_give_the_pixel_kernels_bits(level, dtype, index):
    case = _case(PROBLEMS[index], dtype, np.random.default_rng(index), non_finite=index % 3 == 0)
    _same_bits_as_pixel_kernels(
        load_level(level), case, dtype, "chan_vec", PROBLEMS[index], GROUPED.get(index)
    )


# Stride-1 KhxKw layers whose tiles have border positions: in class order (border rows of
# every image of a group together, then border columns, then inner pixels), pixel blocks skip
# the taps their row or column reads in the padding, and the accumulator goes back to row
# order before the write-out. unpermute_macs=-1 takes class order on every such tile; the
# default weighs it against the move.
CLASS_PROBLEMS = [
    (4, 64, 96, 8, 8, 3, 3, (1, 1), (1, 1), (1, 1), None),  # 8x8 images in groups
    (2, 64, 40, 3, 4, 5, 5, (1, 1), (2, 2), (1, 1), None),  # no inner pixel: all border rows
    (1, 64, 24, 10, 9, 3, 3, (1, 1), (2, 2), (2, 2), None),  # dilation 2: two border lines
    (2, 128, 40, 12, 11, 3, 5, (1, 1), (1, 2), (1, 1), None),  # 3x5; 1 + 2 border columns
    (3, 96, 20, 6, 7, 3, 3, (1, 1), (1, 1), (1, 1), 32),  # groups of 3, or 2 + 1
    (2, 80, 21, 9, 11, 3, 3, (1, 1), (1, 1), (1, 1), 80),  # 32 + 32 + 16: the 7 x 16 kernels
    (2, 96, 24, 6, 17, 3, 3, (1, 1), (1, 1), (1, 1), None),  # whole-width runs after the move
    (1, 64, 24, 11, 13, 3, 3, (1, 1), (0, 0), (1, 1), None),  # padding 0: the full conv's rim
    # stride 2: row order, each phase's tables made again in every K-L1 block
    (2, 64, 32, 11, 13, 3, 3, (2, 2), (1, 1), (1, 1), None),
]


@pytest.mark.skipif(not CHAN_VEC_LEVELS, reason="no level with channel-vector kernels here")
@pytest.mark.parametrize("level", CHAN_VEC_LEVELS)
@pytest.mark.parametrize("dtype", [0, 1], ids=["fp16", "bf16"])
@pytest.mark.parametrize("index", range(len(CLASS_PROBLEMS)))
def test_class_order_gives_the_pixel_kernels_bits(level, dtype, index):
    problem = CLASS_PROBLEMS[index]
    case = _case(problem, dtype, np.random.default_rng(100 + index), non_finite=index == 0)
    kernel = load_level(level)
    _, expected = _run(kernel, case, dtype, (16, 64), 1, True, "pixel")
    # row tiles of 3 rows too (top, inner and bottom tiles), where the image has more, and
    # K-L1 blocks of 16 dy channels (the first block's position tables serve the others)
    tiles = case[3]
    rows = (min(3, tiles[0]),) + tiles[1:]
    k_blocks = tiles[:3] + (16 * problem[5] * problem[6],) + tiles[4:]
    wide = (dtype == 1 and kernel.HAS_CV_WIDE) or kernel.HAS_CV_WIDE_F32
    kinds = ["chan_vec", "wide"] if wide else ["chan_vec"]
    for tiles_case in (case, case[:3] + (rows,) + case[4:], case[:3] + (k_blocks,) + case[4:]):
        for threads in (1, 2):
            for kind in kinds:
                for macs in (-1, 32):
                    path, out = _run(
                        kernel, tiles_case, dtype, (16, 64), threads, True, kind,
                        unpermute_macs=macs,
                    )  # fmt: skip
                    assert "+chan_vec" in path, path
                    assert np.array_equal(out, expected), (problem, kind, threads, macs)


FEW_PROBLEMS = [
    (2, 3, 64, 30, 30, 7, 7, (2, 2), (3, 3), (1, 1), None),  # the RGB stem, small
    (1, 1, 17, 9, 70, 3, 3, (1, 1), (1, 1), (1, 1), None),  # one channel, wide rows
    (3, 4, 20, 11, 13, 5, 3, (1, 2), (2, 1), (2, 1), None),
    (1, 2, 33, 16, 16, 1, 1, (1, 1), (0, 0), (1, 1), None),
]


@pytest.mark.skipif(not FEW_LEVELS, reason="no level with few-channel kernels here")
@pytest.mark.parametrize("level", FEW_LEVELS)
@pytest.mark.parametrize("dtype", [0, 1], ids=["fp16", "bf16"])
@pytest.mark.parametrize("index", range(len(FEW_PROBLEMS)))
def test_few_channel_kernels_give_the_pixel_kernels_bits(level, dtype, index):
    case = _case(
        FEW_PROBLEMS[index], dtype, np.random.default_rng(index), non_finite=index % 2 == 0
    )
    _same_bits_as_pixel_kernels(load_level(level), case, dtype, "few", FEW_PROBLEMS[index])


@pytest.mark.skipif(not CHAN_VEC_LEVELS, reason="no level with channel-vector kernels here")
@pytest.mark.parametrize("level", CHAN_VEC_LEVELS)
@pytest.mark.parametrize("shape", ["3x3", "1x3"])
def test_padding_taps_are_computed_where_a_sum_can_be_negative_zero(level, shape):
    """bf16 products that underflow: each real product (a tiny negative dy value times a
    positive weight) rounds the fp32 sum to -0.0, and a padding tap after them (0 times the
    weight, +0.0) turns it into +0.0: pixels whose last tap reads padding (the top row and the
    left column: tap (Kh-1, Kw-1) reads the row above and the column to the left) end at
    +0.0, the others at -0.0. The channel-vector kernels skip padding taps only where no sum
    can be -0.0 (least exponents of dy and w summing to >= 142); here they must compute them,
    and the pixel kernels' bits, +0.0 and -0.0 alike, come out."""
    kh, kw = (3, 3) if shape == "3x3" else (1, 3)
    n, cin, cout, hin, win = 2, 64, 8, 4, 42  # rows of whole 6- and 7-pixel blocks
    dy = np.full((n, cout, hin, win), -(2.0**-100), ml_dtypes.bfloat16)
    w = np.full((cout, cin, kh, kw), 2.0**-60, ml_dtypes.bfloat16)
    tiles = (hin, win, cin, cout * kh * kw, hin * win, cout * kh * kw, cin)
    case = (
        dy.view(np.uint16),
        w.view(np.uint16),
        (1, 1, kh // 2, kw // 2, 1, 1),
        tiles,
        (n, cin, hin, win),
    )
    kernel = load_level(level)
    path, expected = _run(kernel, case, 1, (16, 64), 1, True, "pixel")
    signs = np.signbit(expected.view(ml_dtypes.bfloat16).astype(np.float32))
    assert signs.any() and not signs.all(), "the case makes no -0.0 and +0.0 to tell apart"
    for threads in (1, 2):
        for dot in (True, False):
            path, out = _run(kernel, case, 1, (16, 64), threads, dot, "chan_vec", 0)
            assert "+chan_vec" in path, path
            assert np.array_equal(out, expected), (level, shape, threads, dot)


@pytest.mark.parametrize("level", CHAN_VEC_LEVELS)
def test_wide_tiles_of_long_k_take_the_pixel_kernels_where_the_level_says(level):
    """On a level with PIXEL_COLS (avx512: Intel cores, pypto_isa.h) a stride-1 3x3 tile at
    least PIXEL_COLS wide with K = Cout x 9 >= PIXEL_K takes the pixel kernels although its
    channel blocks suit the channel-vector ones; a narrower tile, a shorter K or a 1x1 layer
    keeps the channel-vector kernels. The same bits either way."""
    kernel = load_level(level)
    rng = np.random.default_rng(7)
    cols, k = (kernel.PIXEL_COLS, kernel.PIXEL_K) if kernel.PIXEL_COLS else (64, 2304)
    cout = -(-k // 9)
    for win, cout_, kh, pixel in (
        (cols, cout, 3, bool(kernel.PIXEL_COLS)),
        (cols - 1, cout, 3, False),
        (cols, cout - 1, 3, False),
        (cols, cout * 9, 1, False),
    ):
        case = _case((1, 32, cout_, 2, win, kh, kh, (1, 1), (kh // 2, kh // 2), (1, 1), 32), 0, rng)
        assert case[3][1] == win, case[3]  # one tile across the row
        path, out = _run(kernel, case, 0, (16, 64), 1, True, "chan_vec")
        assert ("+chan_vec" not in path) == pixel, (level, win, cout_, kh, path)
        _, expected = _run(kernel, case, 0, (16, 64), 1, True, "pixel")
        assert np.array_equal(out, expected), (level, win, cout_, kh)
