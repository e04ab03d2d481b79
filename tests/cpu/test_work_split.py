"""Work for the thread count (issue 27, item 4): the kernel cuts the NPU's tiles finer where they
give a team too few work items, balances row tiles, and no bit of the result changes.

The model is the kernel's own plan (``work_split``): the same code that cuts a call's work. It
is checked here on the benchmark's layers b..j at batch 1 and 8 for 1 to 64 threads.
"""

import ml_dtypes
import numpy as np
import pytest

import pypto
from pypto._core.shapes import forward_out_size
from pypto._core.tiling import ConvProblem, Tiling
from pypto._kernels.dispatch import BUILT_LEVELS, CPU_LEVELS, load_level
from pypto.bench import CASES
from pypto.bench.networks import NETWORKS

LEVELS = [level for level in CPU_LEVELS if level in BUILT_LEVELS]
ITEMS_PER_THREAD = 4
THREADS = (1, 2, 3, 4, 8, 16, 24, 32, 48, 64)


def _problem(n, cin, cout, hin, win, kh, kw, s, p, d):
    hout, wout = forward_out_size(hin, kh, s, p, p, d), forward_out_size(win, kw, s, p, p, d)
    return ConvProblem(n, cin, cout, hin, win, hout, wout, kh, kw, s, s, p, p, p, p, d, d)


def _suggested(q, dtype=pypto.DT_BF16):
    l1, l0 = pypto.suggest_convbp_input_tile_shapes(
        [q.n, q.cout, q.hout, q.wout],
        [q.cout, q.cin, q.kh, q.kw],
        [q.n, q.cin, q.hin, q.win],
        dtype,
        [q.sh, q.sw],
        [q.pt, q.pb, q.pl, q.pr],
        [q.dh, q.dw],
    )
    return Tiling.from_infos(l1, l0)


def _split(kernel, q, tiling, threads, dot=True, **knobs):
    return kernel.work_split(
        (q.n, q.cout, q.hout, q.wout),
        (q.cout, q.cin, q.kh, q.kw),
        (q.n, q.cin, q.hin, q.win),
        1,
        (q.sh, q.sw, q.pt, q.pl, q.dh, q.dw),
        tiling.kernel_tiles(q),
        threads,
        dot,
        **knobs,
    )


def _at_the_floor(s, q):
    """True when no cut is left that keeps the kernel shape and the summation order: one-row
    tiles, N-L1 blocks of one register panel, column ranges of one register block."""
    return (
        s["m_rows"] == 1
        and (s["nl1"] <= s["panel_channels"] or s["n_blocks"] == 1)
        and s["m_cols"] <= max(s["block_positions"], q.win // 2)
    )


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("name", list("bcdefghij"))
def test_every_thread_gets_four_items_or_the_tiles_are_at_their_floor(name, batch):
    kernel = load_level(LEVELS[-1])
    q = _problem(batch, *CASES[name][1:])
    tiling = _suggested(q)
    short = []
    for threads in THREADS:
        s = _split(kernel, q, tiling, threads)
        assert s["threads"] == threads
        if threads > 1 and s["items"] < ITEMS_PER_THREAD * threads:
            assert _at_the_floor(s, q), (name, batch, threads, s)
            short.append(threads)
    # where it falls short, it is a small layer (one 7x7 or 14x14 image) on 32 or more threads
    assert all(t >= 32 for t in short), (name, batch, short)


def test_row_tiles_are_balanced():
    kernel = load_level(LEVELS[-1])
    q = _problem(8, 128, 128, 28, 28, 3, 3, 1, 1, 1)  # case c
    tiling = Tiling(28 * 9, 1152, 128, 252, 128, 128)  # 9-row M tiles: 9 + 9 + 9 + 1
    s = _split(kernel, q, tiling, 1)
    assert (s["row_tiles"], s["m_rows"]) == (4, 7)


def test_image_groups_are_equal_and_spread_over_the_team():
    """Whole-image tiles of 8x8 images (Inception's Mixed_7c 1x3 layer, 384 -> 384 channels)
    share work items in groups of equal size; with a team, the group whose items the threads
    share out best."""
    kernel = load_level(LEVELS[-1])
    q = _problem(8, 384, 384, 8, 8, 1, 3, 1, 0, 1)._replace(pl=1, pr=1, wout=8)
    tiling = Tiling(64, 768, 128, 64, 128, 128)
    one = _split(kernel, q, tiling, 1)
    assert (one["group"], one["items"]) == (4, 4), one  # 4 + 4, not 7 + 1
    two = _split(kernel, q, tiling, 2)
    # 2 images a group, 2 items of 192 channels each: 4 items a thread, the same work in each;
    # groups of 3 (3 + 3 + 2) made 9 items, one thread ran 5 of them
    assert (two["group"], two["items"]) == (2, 8), two
    for threads in THREADS:
        s = _split(kernel, q, tiling, threads)
        groups = -(-q.n // s["group"])
        assert groups * s["group"] - q.n < groups, (threads, s)  # sizes differ by at most one


def test_few_row_tiles_are_merged_against_the_kernel_halo():
    """One-row NPU tiles of a wide image (Inception's Conv2d_2a shape) fill every dy row into
    three frames for a 3x3 kernel: they are merged up to four times the halo rows (8) while
    four items a thread remain, then cut again for more threads."""
    kernel = load_level(LEVELS[-1])
    q = _problem(2, 32, 32, 40, 149, 3, 3, 1, 1, 1)
    tiling = _suggested(q)
    assert tiling.kernel_tiles(q)[0] == 1, "the suggested tiles are no longer one row"
    assert _split(kernel, q, tiling, 1)["m_rows"] == 8
    three = _split(kernel, q, tiling, 3)
    assert three["items"] >= 3 * ITEMS_PER_THREAD and 1 < three["m_rows"] < 8
    assert _split(kernel, q, tiling, 16)["m_rows"] == 1


SPLIT_PROBLEMS = [
    # (n, cin, cout, hin, win, kh, kw, s, p, d)
    (1, 64, 64, 56, 56, 3, 3, 1, 1, 1),  # b at batch 1: rows, then column ranges
    (1, 256, 256, 14, 14, 3, 3, 1, 1, 1),  # d: channel blocks
    (2, 512, 64, 7, 7, 3, 3, 1, 1, 1),  # e-like: groups, then everything
    (1, 96, 40, 23, 19, 3, 3, 2, 1, 1),  # stride 2: phases in every cut
    (3, 3, 16, 30, 30, 7, 7, 2, 3, 1),  # the few-channel stem
    (1, 72, 24, 9, 31, 3, 5, 1, 1, 1),  # 3x5, Cin off the 32 grid
    # one-row (or few-row) NPU tiles, merged against the halo rows (8, 16, 24 rows), then cut
    (2, 32, 32, 40, 149, 3, 3, 1, 1, 1),  # channel-vector kernels
    (1, 16, 24, 30, 200, 5, 5, 1, 2, 1),  # pixel-vector, 5x5
    (1, 40, 16, 37, 96, 3, 3, 2, 1, 1),  # stride 2
    (1, 3, 8, 64, 160, 7, 7, 2, 3, 1),  # the few-channel stem, 7x7/2
]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [0, 1], ids=["fp16", "bf16"])
@pytest.mark.parametrize("index", range(len(SPLIT_PROBLEMS)))
def test_finer_cuts_for_more_threads_change_no_bit(level, dtype, index):
    kernel = load_level(level)
    q = _problem(*SPLIT_PROBLEMS[index])
    rng = np.random.default_rng(index)
    np_dtype = np.float16 if dtype == 0 else ml_dtypes.bfloat16
    dy = rng.uniform(-1, 1, (q.n, q.cout, q.hout, q.wout)).astype(np_dtype).view(np.uint16)
    w = rng.uniform(-1, 1, (q.cout, q.cin, q.kh, q.kw)).astype(np_dtype).view(np.uint16)
    tiles = _suggested(q, pypto.DT_FP16 if dtype == 0 else pypto.DT_BF16).kernel_tiles(q)
    attrs = (q.sh, q.sw, q.pt, q.pl, q.dh, q.dw)
    results, cuts = {}, set()
    for threads in (1, 2, 3, 8, 16):
        out = np.full((q.n, q.cin, q.hin, q.win), 0xABCD, np.uint16)
        # serial_macs=0: the team asked for, however small the problem
        kernel.dgrad(dy, w, out, dtype, attrs, tiles, (16, 64), threads, serial_macs=0)
        results[threads] = out
        s = kernel.work_split(
            dy.shape, w.shape, out.shape, dtype, attrs, tiles, threads, dtype == 1, 0
        )
        cuts.add((s["m_rows"], s["nl1"], s["m_cols"], s["group"]))
    assert len(cuts) > 1, "no thread count cut the work differently: nothing was tested"
    for threads, out in results.items():
        assert np.array_equal(out, results[1]), (SPLIT_PROBLEMS[index], threads)


def test_n_blocks_of_a_3x3_layer_are_merged_so_one_frame_fill_serves_more_channels():
    """ResNet-50's layer3 3x3 (256 -> 256 channels, 14x14): the NPU's N-L1 of 128 channels
    makes two items per image group, and each fills the same dy frame. One thread merges them
    (2 x 128 x 9 channel-taps, within the plan's 4608); two threads keep the NPU's blocks (the
    merge would leave them 4 items, two a thread)."""
    kernel = load_level(LEVELS[-1])
    q = _problem(8, 256, 256, 14, 14, 3, 3, 1, 1, 1)
    tiling = Tiling(196, 1152, 128, 208, 128, 128)
    one = _split(kernel, q, tiling, 1)
    assert (one["nl1"], one["n_blocks"]) == (256, 1), one
    two = _split(kernel, q, tiling, 2)
    assert (two["nl1"], two["items"]) == (128, 8), two


@pytest.mark.parametrize("level", LEVELS)
def test_calls_below_serial_macs_run_on_one_thread_and_larger_ones_on_the_team(level):
    """A call one thread finishes in a few microseconds enters no parallel region (waking the
    team cost more than it saved: the spec example took 19 us on two threads, 15 on one);
    from SERIAL_MACS multiply-adds on, the whole team asked for. Same bits either way."""
    kernel = load_level(level)
    # the spec example: 1 x 16 x 5 x 32 dx, 16 dy channels, 3x3: 368,640 multiply-adds
    small = _problem(1, 16, 16, 5, 32, 3, 3, 1, 1, 1)
    macs = small.n * small.cout * small.hout * small.wout * small.cin * small.kh * small.kw
    assert macs == 368640
    # the smallest batch of the same layer at or above the level's threshold
    n = -(-kernel.SERIAL_MACS // (macs // small.n))
    large = small._replace(n=n)
    for q, want in ((small, 1 if macs < kernel.SERIAL_MACS else 8), (large, 8)):
        tiling = _suggested(q, pypto.DT_FP16)
        assert _split(kernel, q, tiling, 8)["threads"] == want, (q, want)
        assert _split(kernel, q, tiling, 8, serial_macs=0)["threads"] == 8
    if n > 1:  # the batch below the threshold (on the baseline level the example is above it)
        below = large._replace(n=n - 1)
        assert _split(kernel, below, _suggested(below, pypto.DT_FP16), 8)["threads"] == 1
    rng = np.random.default_rng(0)
    dy = rng.uniform(-1, 1, (1, 16, 5, 32)).astype(np.float16)
    w = rng.uniform(-1, 1, (16, 16, 3, 3)).astype(np.float16)
    tiles, attrs = _suggested(small, pypto.DT_FP16).kernel_tiles(small), (1, 1, 1, 1, 1, 1)
    outs = [np.empty((1, 16, 5, 32), np.float16) for _ in range(3)]
    for out, threads, serial in zip(outs, (1, 2, 2), (kernel.SERIAL_MACS, kernel.SERIAL_MACS, 0)):
        kernel.dgrad(dy, w, out, 0, attrs, tiles, (16, 16), threads, serial_macs=serial)
    assert all(np.array_equal(outs[0].view(np.uint16), o.view(np.uint16)) for o in outs[1:])


# sum_order "tile" (bf16's default) cuts its own items: (channel block, phase, run of tiles)
TILE_FORMS = ("f32", "dot", "amx")


def _tile_split(kernel, q, form, threads):
    return kernel.tile_work_split(
        (q.n, q.cout, q.hout, q.wout),
        (q.cout, q.cin, q.kh, q.kw),
        (q.n, q.cin, q.hin, q.win),
        (q.sh, q.sw, q.pt, q.pl, q.dh, q.dw),
        form,
        threads,
    )


def _tile_items_at_their_floor(s, q, form):
    """An item of one pair of tiles (one tile a column phase at stride 2 across) and of the
    fewest channels its form takes: 16 emulated, 32 on the tile unit (its 2 x 2 C tiles)."""
    return s["item_tiles"] == (1 if q.sw == 2 else 2) and s["item_channels"] == (
        32 if form == "amx" else 16
    )


@pytest.mark.parametrize("form", TILE_FORMS)
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("name", list("bcdefghij"))
def test_the_tile_order_gives_every_thread_four_items_or_its_items_are_at_their_floor(
    name, batch, form
):
    """The tile order's items shrink (tiles, then channels) where a call would give a team
    fewer than four a thread: at batch 1, ResNet-50's 7x7 layer e made 8 items of 64 channels
    x 8 tiles, half a thread's worth on 16 threads; now 64, four a thread."""
    kernel = load_level(LEVELS[-1])
    q = _problem(batch, *CASES[name][1:])
    short = []
    for threads in THREADS:
        s = _tile_split(kernel, q, form, threads)
        if threads > 1 and s["items"] < ITEMS_PER_THREAD * threads:
            assert _tile_items_at_their_floor(s, q, form), (name, batch, threads, s)
            short.append(threads)
    # short only for one image on many threads: emulated, 7x7 to 28x28 from 24 threads; the
    # tile unit's items keep 32 channels, so from 16 threads and for 56x56 at 64
    assert all(t >= (16 if form == "amx" else 24) for t in short), (name, batch, short)
    assert not short or batch == 1, (name, batch, short)


@pytest.mark.parametrize("form", TILE_FORMS)
def test_the_tile_orders_weight_reads(form):
    """tile_work_split's model of the packed weight the items read: each item its channel
    block's rows for its phases' taps. e at batch 1 on one thread: an item a channel block,
    the weight read once; b at batch 8: one channel block, each of its position items reads
    all of it; a 1x1/2 layer: only the tapped row phase has items, each reading its block."""
    kernel = load_level(LEVELS[-1])
    s = _tile_split(kernel, _problem(1, *CASES["e"][1:]), form, 1)
    assert s["weight_reads"] == s["weight_bytes"], s
    # Cin 64: one channel block emulated, two on the tile unit (32 channels an item)
    for q in (_problem(8, *CASES["b"][1:]), _problem(1, 64, 64, 28, 28, 1, 1, 2, 0, 1)):
        s = _tile_split(kernel, q, form, 2)
        block = s["weight_bytes"] * min(64, s["item_channels"]) // 64
        assert s["items"] > 1 and s["weight_reads"] == s["items"] * block, s


@pytest.mark.parametrize("form", ["f32", "dot"])
def test_the_emulations_pair_planes_are_an_odd_number_of_lines(form):
    """A K step of the emulation reads the same position of a co block's 16 pair planes: planes
    an odd number of 64-byte lines apart fall in 16 sets of L1. Planes of 8 KiB (Inception-v3's
    17x17 layers in waves of 7 images, 2048 positions) fell in one set of 8 ways, and those
    layers took 1.8x the time at avx512_bf16 on one thread. Every layer of the benchmark's
    networks, for 1 to 64 threads."""
    kernel = load_level(LEVELS[-1])
    for net in NETWORKS.values():
        for layer in net.layers:
            for batch in (1, net.batch):
                q = layer.problem(batch)
                for threads in THREADS:
                    plane = _tile_split(kernel, q, form, threads)["plane"]
                    assert plane % 16 == 0 and plane // 16 % 2 == 1, (layer, batch, threads)


TILE_SPLIT_PROBLEMS = [
    SPLIT_PROBLEMS[1],  # d: 14x14, masked flat frames
    SPLIT_PROBLEMS[2],  # e-like, 2 images
    SPLIT_PROBLEMS[3],  # stride 2, odd sizes: dense positions, both column phases
    (1, 64, 128, 28, 28, 1, 1, 2, 0, 1),  # stride 2 even: one row phase's items paired
    (1, 48, 96, 10, 10, 1, 1, 1, 0, 1),  # 1x1: flat frames without masks
]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("index", range(len(TILE_SPLIT_PROBLEMS)))
def test_the_tile_orders_smaller_items_change_no_bit(level, index):
    kernel = load_level(level)
    q = _problem(*TILE_SPLIT_PROBLEMS[index])
    rng = np.random.default_rng(index)
    dy = rng.uniform(-1, 1, (q.n, q.cout, q.hout, q.wout)).astype(ml_dtypes.bfloat16)
    w = rng.uniform(-1, 1, (q.cout, q.cin, q.kh, q.kw)).astype(ml_dtypes.bfloat16)
    attrs = (q.sh, q.sw, q.pt, q.pl, q.dh, q.dw)
    for use_dot in (False, True) if kernel.HAS_BF16_DOT else (False,):
        results, cuts = {}, set()
        for threads in (1, 2, 3, 8, 16):
            out = np.full((q.n, q.cin, q.hin, q.win), 0xABCD, np.uint16)
            # serial_macs=0: the team asked for, however small the problem
            kernel.dgrad_tile(dy.view(np.uint16), w.view(np.uint16), out, attrs, threads,
                              False, 0, use_dot)  # fmt: skip
            results[threads] = out
            s = _tile_split(kernel, q, "dot" if use_dot else "f32", threads)
            cuts.add((s["item_tiles"], s["item_channels"]))
        assert len(cuts) > 2, f"the items hardly changed with the threads: {cuts}"
        for threads, out in results.items():
            assert np.array_equal(out, results[1]), (TILE_SPLIT_PROBLEMS[index], threads)
