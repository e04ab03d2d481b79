# Shapes for tools/asan_check.sh (not a pytest module).
"""Shapes covering every kernel branch: strides 1/2/3, dilation, padding 0/max, odd channels,
kernels 1x1..7x7, tiles smaller/larger than the problem, tileML1 < Win and multiples of Win,
fp16/bf16 (bf16 dot path and the fp32 fallback with a subnormal)."""

import ml_dtypes
import numpy as np

import pypto
from pypto._core.rules import validate_conv_backward_input
from pypto.pypto_impl import ConvBpTileL0Info as L0
from pypto.pypto_impl import ConvBpTileL1Info as L1

rng = np.random.default_rng(0)
cases = [  # dy shape, w shape, size, s, p, d, l1, l0
    (
        (1, 16, 5, 32),
        (16, 16, 3, 3),
        (1, 16, 5, 32),
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        (16, 144, 16),
        (16, 16, 16),
    ),
    (
        (2, 20, 7, 7),
        (20, 3, 3, 3),
        (2, 3, 13, 14),
        (2, 2),
        (1, 1, 1, 1),
        (1, 1),
        (14, 288, 16),
        (16, 32, 16),
    ),
    (
        (1, 17, 4, 5),
        (17, 24, 7, 5),
        (1, 24, 15, 11),
        (3, 2),
        (3, 3, 2, 2),
        (1, 1),
        (33, 560, 32),
        (48, 64, 32),
    ),
    (
        (2, 8, 6, 6),
        (8, 40, 3, 3),
        (2, 40, 10, 10),
        (1, 1),
        (0, 0, 0, 0),
        (2, 2),
        (10, 144, 48),
        (16, 144, 48),
    ),
    (
        (1, 32, 9, 9),
        (32, 16, 1, 1),
        (1, 16, 27, 27),
        (3, 3),
        (0, 0, 0, 0),
        (1, 1),
        (27, 32, 16),
        (32, 32, 16),
    ),
    (  # 1x1/2: three phases of four without taps, zeroed straight into dx
        (2, 32, 7, 7),
        (32, 24, 1, 1),
        (2, 24, 14, 14),
        (2, 2),
        (0, 0, 0, 0),
        (1, 1),
        (28, 32, 16),
        (32, 32, 16),
    ),
    (
        (1, 5, 3, 3),
        (5, 16, 5, 5),
        (1, 16, 7, 7),
        (1, 1),
        (4, 4, 2, 2),
        (2, 1),
        (7, 400, 16),
        (16, 400, 16),
    ),
]
for dt, npd in ((pypto.DT_FP16, np.float16), (pypto.DT_BF16, ml_dtypes.bfloat16)):
    for dys, ws, size, s, p, d, l1, l0 in cases:
        (_, hmax), (_, wmax) = pypto.conv_backward_input_size_range(dys, ws, s, p, d)
        size = (dys[0], ws[1], hmax, wmax)
        rep = pypto.explain_convbp_input_tiling(
            dys, ws, size, dt, s, p, d, L1(*l1), L0(*l0), vec_tile_shapes=[1, 16, 1, 16]
        )
        if not rep.legal:
            l1, l0 = rep.suggestion[0].as_tuple(), rep.suggestion[1].as_tuple()
        dy = rng.uniform(-1, 1, dys).astype(npd)
        w = rng.uniform(-1, 1, ws).astype(npd)
        if dt == pypto.DT_BF16:
            dy.flat[0] = npd(1e-39)  # a subnormal: forces the fp32 fallback on one run
        for threads in (1, 2):
            with pypto.options(
                convbp_tile_shapes=(L1(*l1), L0(*l0)),
                vec_tile_shapes=[1, 16, 1, 16],
                num_threads=threads,
            ):
                rest = (list(size), pypto.from_numpy(w), dt, list(s), list(p), list(d))
                dy_tensor = pypto.from_numpy(dy)
                out = pypto.conv_backward_input(dy_tensor, *rest).numpy()
                dy_reversed = pypto.from_numpy(dy[:, :, ::-1].copy())
                out2 = pypto.conv_backward_input(dy_reversed, *rest).numpy()
                if threads == 2:  # these shapes run serially by default: the team too
                    call = validate_conv_backward_input(dy_tensor, *rest)
                    plan = pypto._kernels.dispatch._plan_of(call)
                    pypto._kernels.dispatch._kernel().dgrad(
                        dy,
                        w,
                        np.empty_like(out),
                        plan.dtype,
                        plan.attrs,
                        plan.kernel_tiles,
                        plan.vec_chunks,
                        2,
                        serial_macs=0,
                    )
                    if dt == pypto.DT_BF16:  # the tile order on teams of 2 and 3: items cut
                        for team, use_dot in ((2, True), (3, False)):
                            pypto._kernels.dispatch._kernel().dgrad_tile(
                                dy.view(np.uint16),
                                w.view(np.uint16),
                                np.empty(out.shape, np.uint16),
                                plan.attrs,
                                team,
                                False,
                                0,
                                use_dot,
                            )
# The channel-vector kernels' class order (border rows, border columns, inner pixels; the
# accumulator moved back to row order), taken on every tile with border positions
# (unpermute_macs=-1): its position tables and spare row fill the end of each thread's scratch.
kernel = pypto._kernels.dispatch._kernel()
for n, cin, cout, hw, k, pad, dil in (
    (4, 64, 96, 8, 3, 1, 1),
    (2, 64, 40, 3, 5, 2, 1),
    (1, 128, 40, 11, 3, 2, 2),
):
    out_hw = hw + 2 * pad - dil * (k - 1)
    for npd, code in ((np.float16, 0), (ml_dtypes.bfloat16, 1)):
        dy = rng.uniform(-1, 1, (n, cout, out_hw, out_hw)).astype(npd).view(np.uint16)
        w = rng.uniform(-1, 1, (cout, cin, k, k)).astype(npd).view(np.uint16)
        dx = np.empty((n, cin, hw, hw), np.uint16)
        # whole-image tiles of all Cin and Cout, and 3-row tiles
        for rows in (hw, 3):
            tiles = (rows, hw, cin, cout * k * k, rows * hw, cout * k * k, cin)
            for threads in (1, 2):
                kernel.dgrad(
                    dy,
                    w,
                    dx,
                    code,
                    (1, 1, pad, pad, dil, dil),
                    tiles,
                    (16, 16),
                    threads,
                    unpermute_macs=-1,
                    serial_macs=0,  # the team, however small the problem
                )
# The tile order's masked flat frames both ways (lane_order 0: images one after another, 1:
# interleaved), where a level masks lanes: 8 images (whole items through the register
# transpose at one thread), 16 of 32 (a tile one position), waves of 10 of 20, a 1x7 row of 3
for n, cin, cout, hw, kh, kw in (
    (8, 40, 24, 7, 3, 3),
    (32, 20, 24, 5, 3, 3),
    (20, 20, 24, 5, 3, 3),
    (3, 16, 33, 17, 1, 7),
):
    dy = rng.uniform(-1, 1, (n, cout, hw, hw)).astype(ml_dtypes.bfloat16).view(np.uint16)
    w = rng.uniform(-1, 1, (cout, cin, kh, kw)).astype(ml_dtypes.bfloat16).view(np.uint16)
    dx = np.empty((n, cin, hw, hw), np.uint16)
    for lane_order in (0, 1):
        for threads in (1, 2, 3):
            for use_dot in (True, False):
                attrs = (1, 1, kh // 2, kw // 2, 1, 1)
                kernel.dgrad_tile(dy, w, dx, attrs, threads, False, 0, use_dot, lane_order)
print("ok", pypto._kernels.dispatch.kernel_info()["isa"])
