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
    kernel.dgrad(dy, w, out, dtype, (1, 1, 1, 1, 1, 1), tiles, (16, 16), 2, serial_macs=0)
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


def _kernel_call(kernel, dy, w, stride, dtype, **paths):
    """dx of a 3x3, padding-1 dgrad of 16-bit patterns dy and w (the dx size stride 1 or 2
    gives), 1 thread, the suggested-style tiles."""
    n, cout, hout, wout = dy.shape
    cin = w.shape[1]
    hin, win = (hout, wout) if stride == 1 else (2 * hout, 2 * wout)
    out = np.empty((n, cin, hin, win), np.uint16)
    problem = ConvProblem(
        n, cin, cout, hin, win, hout, wout, 3, 3, stride, stride, 1, 1, 1, 1, 1, 1
    )
    tiles = Tiling(hin * win, cout * 9, cin, 64, 64, 32).kernel_tiles(problem)
    kernel.dgrad(dy, w, out, dtype, (stride, stride, 1, 1, 1, 1), tiles, (16, 16), 1, **paths)
    return out


def _fresh(kernel, *args, **paths):
    kernel.release_buffers()
    return _kernel_call(kernel, *args, **paths)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [0, 1], ids=["fp16", "bf16"])
def test_a_weight_changed_in_place_is_packed_again(level, dtype):
    """A call whose weight and plan equal the last call's reuses its weight panels; the same
    weight array changed in place by one element, anywhere, is packed again."""
    kernel = load_level(level)
    rng = np.random.default_rng(7)
    np_dtype = np.float16 if dtype == 0 else ml_dtypes.bfloat16
    dy = rng.uniform(-1, 1, (2, 24, 6, 11)).astype(np_dtype).view(np.uint16)
    w = rng.uniform(-1, 1, (24, 40, 3, 3)).astype(np_dtype).view(np.uint16)
    first = _fresh(kernel, dy, w, 1, dtype)
    assert np.array_equal(_kernel_call(kernel, dy, w, 1, dtype), first)  # panels reused
    flat = w.reshape(-1)
    for index in (0, flat.size // 2, flat.size - 1):
        flat[index] ^= 0x0100  # a changed exponent bit: a value 2-16x larger or smaller
        changed = _kernel_call(kernel, dy, w, 1, dtype)
        assert not np.array_equal(changed, first)
        assert np.array_equal(changed, _fresh(kernel, dy, w, 1, dtype)), index
        first = changed


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [0, 1], ids=["fp16", "bf16"])
def test_panels_of_one_plan_serve_no_other(level, dtype):
    """The same weight bits laid out by another plan (another stride's tap tables, another
    register block's panel width) are packed again, not read as the last call left them."""
    kernel = load_level(level)
    rng = np.random.default_rng(8)
    np_dtype = np.float16 if dtype == 0 else ml_dtypes.bfloat16
    dy = rng.uniform(-1, 1, (1, 32, 7, 9)).astype(np_dtype).view(np.uint16)
    w = rng.uniform(-1, 1, (32, 64, 3, 3)).astype(np_dtype).view(np.uint16)
    settings = [(1, {}), (2, {}), (1, {"use_chan_vec": False}), (2, {"use_chan_vec": False})]
    fresh = [_fresh(kernel, dy, w, stride, dtype, **paths) for stride, paths in settings]
    for _ in range(2):
        for (stride, paths), expected in zip(settings, fresh):
            assert np.array_equal(_kernel_call(kernel, dy, w, stride, dtype, **paths), expected)


def _tile_call(kernel, dy, w, stride, use_dot=True):
    """dx of a 3x3, padding-1 bf16 dgrad in sum_order "tile" (the emulation), 1 thread."""
    n, cout, hout, wout = dy.shape
    hin, win = (hout, wout) if stride == 1 else (2 * hout, 2 * wout)
    out = np.empty((n, w.shape[1], hin, win), np.uint16)
    kernel.dgrad_tile(dy, w, out, (stride, stride, 1, 1, 1, 1), 1, False, use_dot=use_dot)
    return out


@pytest.mark.parametrize("level", LEVELS)
def test_the_tile_orders_packed_weight_is_kept_as_dgrads_panels(level):
    """sum_order "tile" keeps its packed weight as dgrad keeps its panels: an equal weight
    reuses it, a weight changed in place by one element anywhere is packed again, and neither
    order, nor the tile order's other form (fp32 or the dot product's pairs), reads the
    other's packing of the same bits."""
    kernel = load_level(level)
    rng = np.random.default_rng(9)
    dy = rng.uniform(-1, 1, (2, 40, 6, 11)).astype(ml_dtypes.bfloat16).view(np.uint16)
    w = rng.uniform(-1, 1, (40, 24, 3, 3)).astype(ml_dtypes.bfloat16).view(np.uint16)
    kernel.release_buffers()
    first = _tile_call(kernel, dy, w, 1)
    assert np.array_equal(_tile_call(kernel, dy, w, 1), first)  # the packed weight reused
    flat = w.reshape(-1)
    for index in (0, flat.size // 2, flat.size - 1):
        flat[index] ^= 0x0100  # a changed exponent bit: a value 2-16x larger or smaller
        changed = _tile_call(kernel, dy, w, 1)
        assert not np.array_equal(changed, first)
        kernel.release_buffers()
        assert np.array_equal(changed, _tile_call(kernel, dy, w, 1)), index
        first = changed
    calls = [
        lambda: _tile_call(kernel, dy, w, 1),
        lambda: _tile_call(kernel, dy, w, 2),
        lambda: _tile_call(kernel, dy, w, 1, use_dot=False),
        lambda: _kernel_call(kernel, dy, w, 1, 1),
    ]
    fresh = []
    for call in calls:
        kernel.release_buffers()
        fresh.append(call())
    for _ in range(2):
        for call, expected in zip(calls, fresh):
            assert np.array_equal(call(), expected)


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
