"""The kernel's kept buffers and its non-finite scan.

A call keeps its weight-panel and scratch buffers for the next one (fresh pages cost up to a
third of a call); a reused buffer holds the last call's data, so results must not depend on
what was there. scan_magnitudes is the kernel's one pass over the weight (Inf/NaN and the
least exponent).
"""

import ml_dtypes
import numpy as np
import pytest

from pypto._core.tiling import ConvProblem, Tiling
from pypto._kernels.dispatch import BUILT_LEVELS, CPU_LEVELS, load_level

LEVELS = [level for level in CPU_LEVELS if level in BUILT_LEVELS]


def _call(kernel, seed, n, cin, cout, hw, dtype):
    rng = np.random.default_rng(seed)
    np_dtype = np.float16 if dtype == 0 else ml_dtypes.bfloat16
    dy = rng.uniform(-1, 1, (n, cout, hw, hw)).astype(np_dtype).view(np.uint16)
    w = rng.uniform(-1, 1, (cout, cin, 3, 3)).astype(np_dtype).view(np.uint16)
    out = np.empty((n, cin, hw, hw), np.uint16)
    problem = ConvProblem(n, cin, cout, hw, hw, hw, hw, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1)
    tiles = Tiling(hw * hw, 16 * 9, 64, 64, 64, 32).kernel_tiles(problem)
    kernel.dgrad(dy, w, out, dtype, (1, 1, 1, 1, 1, 1), tiles, (16, 16), 2)
    return out


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [0, 1], ids=["fp16", "bf16"])
def test_kept_buffers_change_no_result(level, dtype):
    kernel = load_level(level)
    shapes = [(2, 64, 32, 14), (1, 16, 16, 5), (3, 96, 48, 9), (1, 8, 20, 7)]
    kernel.release_buffers()
    assert kernel.kept_buffer_bytes() == 0
    fresh = []
    for i, shape in enumerate(shapes):  # each from freed buffers
        kernel.release_buffers()
        fresh.append(_call(kernel, i, *shape, dtype))
    assert kernel.kept_buffer_bytes() > 0
    for _ in range(2):  # large, small, large again: every buffer once dirty
        for i, shape in enumerate(shapes):
            assert np.array_equal(_call(kernel, i, *shape, dtype), fresh[i]), (level, shape)
    kernel.release_buffers()
    assert kernel.kept_buffer_bytes() == 0


def _least_exponent(bits):
    """The least biased exponent (bits 7..14, as bf16) of the nonzero patterns: 255 if none."""
    magnitudes = bits & 0x7FFF
    nonzero = magnitudes[magnitudes != 0]
    return 255 if nonzero.size == 0 else int(nonzero.min()) >> 7


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [0, 1], ids=["fp16", "bf16"])
@pytest.mark.parametrize("threads", [1, 2])
def test_scan_magnitudes_matches_numpy(level, dtype, threads):
    """The kernel's one pass over the weight: Inf/NaN as NumPy sees them, and the least
    exponent that decides the bf16 dot product, over every pattern and in chunks."""
    kernel = load_level(level)
    np_dtype = np.float16 if dtype == 0 else ml_dtypes.bfloat16
    rng = np.random.default_rng(dtype)
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    finite = every[np.isfinite(every.view(np_dtype).astype(np.float32))]
    assert kernel.scan_magnitudes(finite, dtype, threads) == (False, 0)  # subnormals in it
    assert kernel.scan_magnitudes(np.empty(0, np.uint16), dtype, threads) == (False, 255)
    assert kernel.scan_magnitudes(np.zeros(5, np.uint16) | 0x8000, dtype, threads) == (False, 255)
    for value in (np.inf, -np.inf, np.nan):
        for length in (1, 7, 64, 1001, 200_003):  # the last one spans several chunks
            bits = rng.choice(finite, length)
            assert not kernel.scan_magnitudes(bits, dtype, threads)[0]
            bits[rng.integers(length)] = np.array(value, np_dtype).view(np.uint16)
            assert kernel.scan_magnitudes(bits, dtype, threads)[0], (value, length)
    # every NaN payload and both infinities, each alone among finite values
    non_finite = every[~np.isfinite(every.view(np_dtype).astype(np.float32))]
    for pattern in non_finite[:: max(1, len(non_finite) // 97)]:
        bits = rng.choice(finite, 33)
        bits[17] = pattern
        assert kernel.scan_magnitudes(bits, dtype, threads)[0]
    # least exponents: random normal values with one small one planted anywhere
    for length in (3, 1000, 150_001):
        bits = (rng.integers(0x3F00, 0x4100, length) | (rng.integers(0, 2, length) << 15)).astype(
            np.uint16
        )
        bits[rng.integers(length)] = rng.integers(1, 0x7F00)
        bits[rng.integers(length)] = 0  # zeros do not count
        assert kernel.scan_magnitudes(bits, 1, threads) == (False, _least_exponent(bits))


def test_release_kernel_buffers_frees_what_the_op_kept():
    import pypto
    from pypto._kernels import dispatch as _cpu

    dy = np.random.default_rng(0).uniform(-1, 1, (1, 32, 8, 8)).astype(np.float16)
    w = np.random.default_rng(1).uniform(-1, 1, (32, 32, 3, 3)).astype(np.float16)
    tiles = pypto.suggest_convbp_input_tile_shapes(
        dy.shape, w.shape, [1, 32, 8, 8], pypto.DT_FP16, [1, 1], [1, 1, 1, 1], [1, 1]
    )
    with pypto.options(convbp_tile_shapes=tiles, vec_tile_shapes=[16, 16, 16, 16]):
        pypto.conv_backward_input(
            pypto.from_numpy(dy),
            [1, 32, 8, 8],
            pypto.from_numpy(w),
            pypto.DT_FP16,
            [1, 1],
            [1, 1, 1, 1],
            [1, 1],
        )
    kernel = _cpu._kernel()
    assert kernel.kept_buffer_bytes() > 0
    _cpu.release_kernel_buffers()
    assert kernel.kept_buffer_bytes() == 0
