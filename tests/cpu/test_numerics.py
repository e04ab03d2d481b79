"""Numeric tests of pypto.conv_backward_input (dgrad) on the CPU kernel.

What the specification promises (section 1): fp16/bf16 inputs, products and sums in fp32, the
accumulated value rounded once, round-to-nearest-even, to the output dtype. Every test here
holds the kernel to that, against an independent float64 oracle (tests/support/reference.py),
against PyTorch's own convolution_backward in float64, and against the adjoint identity of the
forward convolution, which needs no dgrad oracle at all.

The error bound every check here uses (``check_accuracy``, ``check_against``) and its
derivation are in tests/support/numerics.py.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pypto
from support.numerics import (
    BF16,
    DTYPES,
    FP16,
    U32,
    ceil16,
    check_accuracy,
    check_against,
    geometry,
    make_data,
    make_problem,
    run_op,
    tiles_legal,
)
from support.reference import (
    conv2d_forward_reference,
    dgrad_abs_reference,
    dgrad_brute_force,
    dgrad_reference,
    round_once,
    round_once_f64,
    ulp,
)


# ---------------------------------------------------------------------------------------------
# The reference itself: a sanity check against a brute-force loop and the exact roundings
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "geom",
    [
        ((2, 1), (1, 0), (1, 2), (3, 2), "max"),
        ((3, 3), (0, 2), (2, 1), (1, 5), "max"),
        ((1, 2), (1, 1), (1, 1), (3, 3), "min"),
        ((3, 1), (0, 0), (1, 1), (1, 1), "max"),
    ],
)
def test_reference_matches_brute_force(geom):
    s, p, d, k, which = geom
    rng = np.random.default_rng(1)
    prob = make_problem(2, 3, 4, 4, 5, k[0], k[1], s, p, d, which, which)
    dy = rng.standard_normal((2, 4, 4, 5))
    w = rng.standard_normal((4, 3) + k)
    hw = (prob["hin"], prob["win"])
    np.testing.assert_allclose(
        dgrad_reference(dy, w, hw, s, p, d),
        dgrad_brute_force(dy, w, hw, s, p, d),
        rtol=0,
        atol=1e-12,
    )


def test_round_once_matches_numpy_and_ml_dtypes():
    rng = np.random.default_rng(2)
    v = rng.standard_normal(200000) * np.exp2(rng.uniform(-150, 130, 200000))
    # exact ties and the overflow thresholds
    v = np.concatenate(
        [
            v,
            [
                65504.0,
                65519.999,
                65520.0,
                -65520.0,
                2.0**-25,
                3 * 2.0**-25,
                1 + 2.0**-11,
                1 + 3 * 2.0**-11,
                1 + 2.0**-8,
                1 + 3 * 2.0**-8,
                (2 - 2.0**-8) * 2.0**127,
                2.0**-134,
                3 * 2.0**-134,
                0.0,
            ],
        ]
    )
    with np.errstate(over="ignore"):
        assert np.array_equal(round_once(v, FP16).view(np.uint16), v.astype(FP16).view(np.uint16))
        # ml_dtypes casts float64 -> bf16 with one rounding (1 + 2**-8 + 2**-30 -> 1 + 2**-7;
        # going through fp32 would give 1.0); our own rounding must agree bit for bit.
        assert np.array_equal(round_once(v, BF16).view(np.uint16), v.astype(BF16).view(np.uint16))
    assert float(round_once([1 + 2.0**-8 + 2.0**-30], BF16)[0]) == 1 + 2.0**-7
    assert float(np.array([1 + 2.0**-8 + 2.0**-30]).astype(BF16)[0]) == 1 + 2.0**-7


def test_ulp_helper():
    assert list(ulp([0.0, 1.0, 1.5, 2.0**-14, 1e-6, 65504.0, 65510.0], FP16)) == [
        2.0**-24,
        2.0**-10,
        2.0**-10,
        2.0**-24,
        2.0**-24,
        32.0,
        32.0,
    ]
    assert list(ulp([0.0, 1.0, 3.0, 2.0**-126, 1e-40, 3e38], BF16)) == [
        2.0**-133,
        2.0**-7,
        2.0**-6,
        2.0**-133,
        2.0**-133,
        2.0**120,
    ]


# ---------------------------------------------------------------------------------------------
# Cases against the oracle
# ---------------------------------------------------------------------------------------------
# (id, problem kwargs, tiles or None, data distribution, slow)
CASES = [
    (
        "spec_example",
        dict(n=1, cin=16, cout=16, hout=5, wout=32, kh=3, kw=3, pads=(1, 1)),
        ((16, 144, 16), (16, 16, 16)),
        "normal",
    ),
    (
        "st_stride2_13x13",
        dict(n=1, cin=16, cout=16, hout=7, wout=7, kh=3, kw=3, strides=(2, 2), pads=(1, 1)),
        ((13, 144, 16), (16, 16, 16)),
        "uniform",
    ),
    (
        "st_batch2_8x8",
        dict(n=2, cin=16, cout=16, hout=8, wout=8, kh=3, kw=3, pads=(1, 1)),
        ((16, 144, 16), (16, 16, 16)),
        "uniform",
    ),
    (
        "dilation2",
        dict(n=1, cin=16, cout=32, hout=10, wout=12, kh=3, kw=3, pads=(2, 2), dil=(2, 2)),
        None,
        "normal",
    ),
    ("no_padding", dict(n=1, cin=32, cout=16, hout=6, wout=9, kh=3, kw=3), None, "normal"),
    (
        "stride3_dil2",
        dict(
            n=1,
            cin=16,
            cout=16,
            hout=5,
            wout=6,
            kh=3,
            kw=3,
            strides=(3, 3),
            pads=(1, 1),
            dil=(2, 2),
            hin="max",
            win="max",
        ),
        None,
        "normal",
    ),
    (
        "stride_2x1",
        dict(
            n=1, cin=16, cout=16, hout=6, wout=7, kh=3, kw=3, strides=(2, 1), pads=(1, 1), hin="max"
        ),
        None,
        "normal",
    ),
    (
        "stride_1x3",
        dict(
            n=1, cin=16, cout=16, hout=6, wout=5, kh=3, kw=3, strides=(1, 3), pads=(1, 1), win="max"
        ),
        None,
        "normal",
    ),
    ("kernel_1x1", dict(n=1, cin=32, cout=48, hout=9, wout=10, kh=1, kw=1), None, "normal"),
    (
        "k7x7_s2_p3_cin3",
        dict(
            n=1,
            cin=3,
            cout=16,
            hout=8,
            wout=8,
            kh=7,
            kw=7,
            strides=(2, 2),
            pads=(3, 3),
            hin="max",
            win="max",
        ),
        None,
        "normal",
    ),
    (
        "kernel_5x1",
        dict(n=1, cin=16, cout=16, hout=7, wout=6, kh=5, kw=1, pads=(2, 0)),
        None,
        "normal",
    ),
    (
        "kernel_1x5",
        dict(n=1, cin=16, cout=16, hout=6, wout=7, kh=1, kw=5, pads=(0, 2)),
        None,
        "normal",
    ),
    ("cout20", dict(n=1, cin=16, cout=20, hout=6, wout=6, kh=3, kw=3, pads=(1, 1)), None, "normal"),
    ("cin3", dict(n=1, cin=3, cout=16, hout=6, wout=6, kh=3, kw=3, pads=(1, 1)), None, "normal"),
    (
        "cin24_cout20",
        dict(n=2, cin=24, cout=20, hout=5, wout=7, kh=3, kw=3, strides=(2, 2), pads=(1, 1)),
        ((26, 144 * 2, 32), (16, 48, 16)),
        "normal",
    ),
    # HinMax/WinMax with no padding: the last sh-1 rows / sw-1 columns get no term: zeros
    (
        "hin_max_zero_edge",
        dict(
            n=1, cin=16, cout=16, hout=5, wout=6, kh=3, kw=3, strides=(3, 3), hin="max", win="max"
        ),
        None,
        "normal",
    ),
    # stride larger than the (dilated) kernel: rows/cols between windows are exactly 0
    (
        "stride_gt_kernel",
        dict(
            n=1, cin=16, cout=16, hout=5, wout=6, kh=1, kw=2, strides=(3, 3), hin="max", win="max"
        ),
        None,
        "normal",
    ),
    # tileML1 < Win, not dividing it: M tiles split rows, last column tile partial; the
    # 24-pixel L1 tile is two L0 blocks (16 + 8)
    (
        "m_tiles_split_rows",
        dict(n=1, cin=16, cout=16, hout=6, wout=40, kh=3, kw=3, pads=(1, 1)),
        ((24, 144, 16), (16, 16, 16)),
        "normal",
    ),
    (
        "m_tile_7_cols",
        dict(n=1, cin=20, cout=16, hout=5, wout=19, kh=3, kw=3, strides=(1, 2), pads=(1, 1)),
        ((7, 144, 32), (16, 144, 16)),
        "normal",
    ),
]

RESNET = (
    "resnet_2x64x28x28",
    dict(n=2, cin=64, cout=64, hout=28, wout=28, kh=3, kw=3, pads=(1, 1)),
    ((112, 576, 64), (112, 144, 64)),
    "normal",
)


def _run_case(case, dtype_name, seed=0):
    name, kwargs, tiles, dist = case
    dtype, _ = DTYPES[dtype_name]
    prob = make_problem(**kwargs)
    if tiles is not None:
        assert tiles_legal(prob, *tiles), (name, tiles)
    rng = np.random.default_rng(seed)
    dy, w = make_data(prob, dtype, rng, dist)
    out = run_op(prob, dy, w, tiles)
    return prob, dy, w, out, check_accuracy(out, prob, dy, w, f"{name}/{dtype_name}")


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_against_oracle(case, dtype_name):
    prob, dy, w, out, _ = _run_case(case, dtype_name)
    o = out.astype(np.float64)
    name = case[0]
    if name == "hin_max_zero_edge":
        # rows >= HinMin (and cols >= WinMin) are beyond every window: exactly 0
        hmin = (prob["hout"] - 1) * prob["sh"] + (prob["kh"] - 1) * prob["dh"] + 1
        wmin = (prob["wout"] - 1) * prob["sw"] + (prob["kw"] - 1) * prob["dw"] + 1
        assert prob["hin"] > hmin and prob["win"] > wmin
        assert (o[:, :, hmin:, :] == 0).all() and (o[:, :, :, wmin:] == 0).all()
        assert (o[:, :, :hmin, :wmin] != 0).mean() > 0.9
    if name == "stride_gt_kernel":
        # Kh=1: only rows hi = 3*ho are reached; Kw=2: cols 3*wo and 3*wo+1
        rows = np.arange(prob["hin"])
        cols = np.arange(prob["win"])
        assert (o[:, :, rows % 3 != 0, :] == 0).all()
        assert (o[:, :, :, cols % 3 == 2] == 0).all()
        assert (o[:, :, ::3, :][:, :, :, cols % 3 != 2] != 0).mean() > 0.9


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
def test_resnet_size(dtype_name):
    # Not asserted in ulps: near-zero results of heavy cancellation are legitimately several
    # fp16 ulps off (the fp32 error scales with sum|dy*w|, not with |dx|); the bound covers it.
    _run_case(RESNET, dtype_name)


# ---------------------------------------------------------------------------------------------
# PyTorch cross-check (float64 convolution_backward on the same fp16/bf16 data)
# ---------------------------------------------------------------------------------------------
TORCH_CASES = [
    c
    for c in CASES
    if c[0]
    in {
        "spec_example",
        "st_stride2_13x13",
        "st_batch2_8x8",
        "dilation2",
        "stride3_dil2",
        "stride_2x1",
        "stride_1x3",
        "k7x7_s2_p3_cin3",
        "cin24_cout20",
        "hin_max_zero_edge",
        "stride_gt_kernel",
        "m_tiles_split_rows",
    }
] + [RESNET]


def torch_dgrad64(prob, dy, w):
    torch = pytest.importorskip("torch")
    dy_t = torch.from_numpy(dy.astype(np.float64))
    w_t = torch.from_numpy(w.astype(np.float64))
    x0 = torch.zeros((prob["n"], prob["cin"], prob["hin"], prob["win"]), dtype=torch.float64)
    dx = torch.ops.aten.convolution_backward(
        dy_t,
        x0,
        w_t,
        None,
        [prob["sh"], prob["sw"]],
        [prob["ph"], prob["pw"]],
        [prob["dh"], prob["dw"]],
        False,
        [0, 0],
        1,
        [True, False, False],
    )[0]
    return dx.numpy()


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
@pytest.mark.parametrize("case", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_against_torch(case, dtype_name):
    pytest.importorskip("torch")
    name, kwargs, tiles, dist = case
    dtype, _ = DTYPES[dtype_name]
    prob = make_problem(**kwargs)
    dy, w = make_data(prob, dtype, np.random.default_rng(3), dist)
    out = run_op(prob, dy, w, tiles)
    golden = torch_dgrad64(prob, dy, w)
    hw, s, p, d = geometry(prob)
    abs_ref = dgrad_abs_reference(dy, w, hw, s, p, d)
    # torch's float64 result itself agrees with the oracle to float64 accuracy
    ref = dgrad_reference(dy, w, hw, s, p, d)
    assert (np.abs(golden - ref) <= 1e-12 * abs_ref + 1e-300).all()
    check_against(
        out, golden, abs_ref, prob["cout"] * prob["kh"] * prob["kw"], f"torch:{name}/{dtype_name}"
    )


# ---------------------------------------------------------------------------------------------
# Adjoint identity: <conv2d(x, w), dy> == <x, dgrad(dy, w)>, with no dgrad oracle involved
# ---------------------------------------------------------------------------------------------
ADJOINT_CASES = [
    dict(n=1, cin=16, cout=16, hout=5, wout=32, kh=3, kw=3, pads=(1, 1)),
    dict(
        n=2,
        cin=8,
        cout=24,
        hout=6,
        wout=5,
        kh=3,
        kw=3,
        strides=(2, 2),
        pads=(1, 1),
        hin="max",
        win="max",
    ),
    dict(
        n=1,
        cin=5,
        cout=16,
        hout=4,
        wout=7,
        kh=3,
        kw=2,
        strides=(3, 1),
        pads=(2, 1),
        dil=(2, 1),
        hin="max",
    ),
    dict(
        n=1,
        cin=16,
        cout=7,
        hout=6,
        wout=4,
        kh=2,
        kw=4,
        strides=(1, 3),
        pads=(0, 3),
        dil=(3, 2),
        win="max",
    ),
    dict(
        n=1,
        cin=3,
        cout=16,
        hout=5,
        wout=5,
        kh=7,
        kw=7,
        strides=(2, 2),
        pads=(3, 3),
        hin="max",
        win="max",
    ),
    dict(n=1, cin=16, cout=16, hout=4, wout=4, kh=1, kw=1, strides=(3, 3), hin="max", win="max"),
]


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
@pytest.mark.parametrize(
    "kwargs", ADJOINT_CASES, ids=[f"adj{i}" for i in range(len(ADJOINT_CASES))]
)
def test_adjoint_identity(kwargs, dtype_name):
    dtype, _ = DTYPES[dtype_name]
    prob = make_problem(**kwargs)
    rng = np.random.default_rng(4)
    dy, w = make_data(prob, dtype, rng)
    out = run_op(prob, dy, w).astype(np.float64)
    hw, s, p, d = geometry(prob)
    x = rng.standard_normal((prob["n"], prob["cin"]) + hw)
    y = conv2d_forward_reference(x, w, s, p, d)
    assert y.shape == dy.shape  # Hin in [HinMin, HinMax] gives back Hout
    lhs = float(np.vdot(y, dy.astype(np.float64)))
    # sum_i |x_i| * abs_ref_i = <conv2d(|x|, |w|), |dy|> by the same identity on |.|
    scale = float(
        np.vdot(
            conv2d_forward_reference(np.abs(x), np.abs(w.astype(np.float64)), s, p, d),
            np.abs(dy.astype(np.float64)),
        )
    )
    k_len = prob["cout"] * prob["kh"] * prob["kw"]
    # per element |out - dx| <= ulp(out)/2 + K*u*abs_ref (support/numerics.py), weighted by |x|
    tol = 0.5 * float(np.vdot(np.abs(x), ulp(out, dtype))) + k_len * U32 * scale + 1e-12 * scale
    rhs = float(np.vdot(x, out))
    assert abs(lhs - rhs) <= tol, (lhs, rhs, tol)
    # the oracle satisfies the identity to float64 accuracy
    rhs_ref = float(np.vdot(x, dgrad_reference(dy, w, hw, s, p, d)))
    assert abs(lhs - rhs_ref) <= 1e-12 * scale, (lhs, rhs_ref, scale)


# ---------------------------------------------------------------------------------------------
# Tile and thread agnosticism
# ---------------------------------------------------------------------------------------------
AGNOSTIC_PROB = dict(n=2, cin=40, cout=36, hout=12, wout=20, kh=3, kw=3, pads=(1, 1))
AGNOSTIC_TILES = [  # (L1 (M, K, N), L0 (M, K, N), vec tile)
    ((16, 144, 16), (16, 16, 16), (16, 16, 16, 16)),  # the smallest 16s
    ((7, 288, 32), (16, 32, 16), (1, 3, 1, 16)),  # tileML1 < Win, not dividing it
    ((20, 144, 32), (32, 144, 32), (1, 16, 1, 1, 32)),  # tileML1 == Win, whole K-L1 in L0
    ((40, 432, 48), (32, 48, 48), (2, 5, 2, 16)),  # two rows per M tile
    ((240, 576, 64), (128, 128, 64), (1, 64, 12, 64)),  # a whole image per M tile
    ((320, 864, 128), (64, 256, 128), (1, 7, 3, 48)),  # every tile larger than the problem
]


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
def test_tile_agnosticism(dtype_name):
    dtype, _ = DTYPES[dtype_name]
    prob = make_problem(**AGNOSTIC_PROB)
    dy, w = make_data(prob, dtype, np.random.default_rng(5))
    outs = []
    for l1, l0, vec in AGNOSTIC_TILES:
        assert tiles_legal(prob, l1, l0), (l1, l0)
        out = run_op(prob, dy, w, (l1, l0), vec)
        check_accuracy(out, prob, dy, w, f"tiles {l1} {l0}/{dtype_name}")
        outs.append(out)
    base = outs[0].astype(np.float64)
    bitwise = []
    for (l1, l0, _), out in zip(AGNOSTIC_TILES[1:], outs[1:]):
        o = out.astype(np.float64)
        # within one ulp of each other
        assert (np.abs(o - base) <= ulp(np.maximum(np.abs(o), np.abs(base)), dtype)).all(), (l1, l0)
        bitwise.append(np.array_equal(out.view(np.uint16), outs[0].view(np.uint16)))
    print(f"[numerics] tile sets bitwise equal ({dtype_name}): {bitwise}")


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
def test_thread_count_bitwise(dtype_name):
    dtype, _ = DTYPES[dtype_name]
    prob = make_problem(
        n=2, cin=48, cout=20, hout=9, wout=11, kh=3, kw=3, strides=(2, 1), pads=(1, 1)
    )
    dy, w = make_data(prob, dtype, np.random.default_rng(6))
    tiles = ((11, 144 * 2, 16), (16, 32, 16))  # 2 images x 3 Cin blocks x 17 rows = 102 items
    outs = []
    for threads in (1, 2, 3):
        pypto.set_num_threads(threads)
        assert pypto.get_num_threads() == threads
        outs.append(run_op(prob, dy, w, tiles))
    for out in outs[1:]:
        assert np.array_equal(out.view(np.uint16), outs[0].view(np.uint16))
    check_accuracy(outs[0], prob, dy, w, f"threads/{dtype_name}")


# ---------------------------------------------------------------------------------------------
# Exact rounding: single products, so dx = round(fp32(dy * w)) exactly
# ---------------------------------------------------------------------------------------------
def _normal_product_pools(dtype_name):
    """(dy values, w values) whose pairwise products include RNE ties rounded both ways and the
    overflow threshold, all in the normal range of fp32 and of the output type."""
    if dtype_name == "fp16":
        # m*2**-10 (m odd, 11 bits) times 3: 3m has 12 bits and is odd -> exactly half an ulp;
        # consecutive odd m alternate the parity of (3m-1)/2, so ties go up and down
        ties = np.arange(1025, 1197, 2) * 2.0**-10
        # 152*431 = 65512, 44*1489 = 65516, 1598*41 = 65518 -> 65504 (below the 65520 tie);
        # 63*1040 = 65520 (the tie: even is 2**16) and 362*181 = 65522 -> inf; 2047*32 = 65504
        big = np.array([152, 44, 1598, 63, 362, 2047, -63, -362, 65504])
        wv = np.array(
            [
                3.0,
                -3.0,
                431,
                1489,
                41,
                1040,
                181,
                32,
                1.0,
                1.5,
                -1.25,
                0.099975586,
                7.0,
                2.0**-10,
                0.5,
                -0.5,
            ]
        )
    else:
        ties = np.arange(129, 170, 2) * 2.0**-7  # x3: 9-bit odd products -> ties
        # (7*2**60)*(73*2**59) = 511*2**119 = the bf16 overflow tie -> inf;
        # (15*2**60)*(17*2**60) = 255*2**120 = bf16 max; (13*2**58)*(157*2**59) = 2041*2**117
        # and (9*2**58)*(227*2**59) = 2043*2**117 -> max; (66*2**58)*(31*2**59) = 2046*2**117
        # -> inf; some cross products exceed fp32's range: inf already in fp32
        big = np.array(
            [7 * 2.0**60, 15 * 2.0**60, 13 * 2.0**58, 9 * 2.0**58, 66 * 2.0**58, -7 * 2.0**60]
        )
        wv = np.array(
            [
                3.0,
                -3.0,
                73 * 2.0**59,
                17 * 2.0**60,
                157 * 2.0**59,
                227 * 2.0**59,
                31 * 2.0**59,
                1.0,
                1.5,
                -1.25,
                0.1,
                7.0,
                0.5,
                -0.5,
            ]
        )
    rng = np.random.default_rng(7)
    dyv = np.concatenate([ties, -ties, big])
    return np.concatenate([dyv, rng.standard_normal(256 - dyv.size) * 4]), wv


def _subnormal_product_pools(dtype_name):
    """(dy values, w values) whose products are subnormal in the output type (fp16), or in
    fp32 itself (bf16), including exact ties of the subnormal grid."""
    p, emin = (11, -14) if dtype_name == "fp16" else (8, -126)
    # 2**emin * (1 + k*2**(1-p)), k odd, times 0.5: exactly half a subnormal step above a grid
    # point, alternating parity -> ties both ways
    sub_ties = 2.0**emin * (1 + np.arange(1, 81, 2) * 2.0 ** (1 - p))
    step = 2.0 ** (emin + 1 - p)
    tiny = np.arange(1, 21) * step  # subnormal inputs themselves
    dyv = np.concatenate([sub_ties, -sub_ties, tiny, -tiny])
    rng = np.random.default_rng(9)
    rest = rng.integers(1, 2 ** (p + 1), 256 - dyv.size) * step  # up to twice the smallest normal
    dyv = np.concatenate([dyv, rest * rng.choice([-1.0, 1.0], rest.size)])
    wv = np.array(
        [
            0.5,
            -0.5,
            1.0,
            0.25,
            0.75,
            1.5,
            2.0**-3,
            3.0,
            0.375,
            -1.0,
            0.625,
            0.125,
            0.1,
            2.0,
            0.9,
            1.25,
        ]
    )
    return dyv, wv


def _single_products(dtype_name, dyv, wv):
    """Run a dgrad in which every dx element is at most ONE product dy*w; return
    (exact products p32 as fp32 forms them, the expected fp16/bf16 array, the kernel's values).

    3x3 kernel, stride 2, pad 1: only tap (kh0, kw0) of Cout channel co0 has nonzero weights,
    so dx[ci, 2*ho - 1 + kh0, 2*wo - 1 + kw0] = dy[co0, ho, wo] * w[co0, ci, kh0, kw0]; the
    other dy channels meet only zero weights and every other dx pixel must be exactly 0.
    """
    dtype, _ = DTYPES[dtype_name]
    dyv = dyv.astype(dtype)
    wv = wv.astype(dtype)
    assert dyv.size == 256 and (dyv.astype(np.float64) != 0).all()
    prob = make_problem(1, wv.size, 3, 16, 16, 3, 3, (2, 2), (1, 1), hin="max", win="max")
    co0, kh0, kw0 = 1, 2, 1
    dy = np.random.default_rng(8).standard_normal((1, 3, 16, 16)).astype(dtype)
    dy[0, co0] = dyv.reshape(16, 16)
    w = np.zeros((3, wv.size, 3, 3), dtype=dtype)
    w[co0, :, kh0, kw0] = wv
    out = run_op(prob, dy, w, ((32, 432, 16), (32, 48, 16)))
    o = out.astype(np.float64)
    mask = np.zeros(o.shape, dtype=bool)
    mask[0][:, kh0 - 1 :: 2, kw0 - 1 :: 2] = True
    assert (o[~mask] == 0).all(), "nonzero dx where no nonzero product lands"
    hit = out[0][:, kh0 - 1 :: 2, kw0 - 1 :: 2]
    # products in float64 are exact; the kernel forms them in fp32: exact for fp16 x fp16, and
    # for bf16 x bf16 unless below fp32's normal range (fp32 subnormal rounding) or above it
    p64 = dyv.astype(np.float64).reshape(1, 16, 16) * wv.astype(np.float64)[:, None, None]
    with np.errstate(over="ignore"):
        p32 = p64.astype(np.float32).astype(np.float64)
    expected = round_once(p32, dtype)
    assert hit.shape == expected.shape
    return p32, expected, hit


def _assert_bitwise(p32, expected, hit, label):
    wrong = np.argwhere(expected.view(np.uint16) != hit.view(np.uint16))
    assert wrong.size == 0, (
        f"{label}: {len(wrong)} of {hit.size} single products not rounded once (RNE); "
        "first (exact product, expected, got): "
        + str(
            [
                (float(p32[tuple(i)]), float(expected[tuple(i)]), float(hit[tuple(i)]))
                for i in wrong[:6]
            ]
        )
    )


def _ties(p32, expected, dtype):
    step = ulp(p32, dtype)
    with np.errstate(invalid="ignore"):  # inf / inf for the overflowed products
        frac = np.abs(p32) / step - np.floor(np.abs(p32) / step)
    e = np.abs(expected.astype(np.float64))
    tie = (frac == 0.5) & np.isfinite(e)
    return tie & (e > np.abs(p32)), tie & (e < np.abs(p32))


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
def test_exact_rounding_of_single_products(dtype_name):
    dtype, _ = DTYPES[dtype_name]
    p32, expected, hit = _single_products(dtype_name, *_normal_product_pools(dtype_name))
    up, down = _ties(p32, expected, dtype)
    e = expected.astype(np.float64)
    print(
        f"[numerics] exact products {dtype_name}: ties {up.sum()} up / {down.sum()} down, "
        f"{np.isinf(e).sum()} overflows"
    )
    # the data did exercise what it is meant to
    assert up.sum() >= 20 and down.sum() >= 20
    assert np.isposinf(e).any() and np.isneginf(e).any()
    top = float(np.finfo(np.float16).max if dtype_name == "fp16" else ml_dtypes.finfo(BF16).max)
    assert ((e == top) & (p32 > top)).any()  # rounded down onto the largest finite value
    if dtype_name == "fp16":
        assert (p32 == 65520.0).any() and np.isposinf(e[p32 == 65520.0]).all()
    else:
        assert (p32 == 511 * 2.0**119).any() and np.isposinf(e[p32 == 511 * 2.0**119]).all()
    _assert_bitwise(p32, expected, hit, f"normal-range products/{dtype_name}")


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
def test_subnormal_products_round_once(dtype_name):
    """fp16: products subnormal in fp16 (the narrowing's subnormal path). bf16: subnormal bf16
    inputs and products subnormal in fp32 itself: IEEE fp32 arithmetic keeps them (the spec's
    fp32 accumulation has no flush-to-zero)."""
    dtype, _ = DTYPES[dtype_name]
    p32, expected, hit = _single_products(dtype_name, *_subnormal_product_pools(dtype_name))
    up, down = _ties(p32, expected, dtype)
    smallest_normal = 2.0**-14 if dtype_name == "fp16" else 2.0**-126
    sub = np.abs(p32) < smallest_normal
    assert (up & sub).sum() >= 10 and (down & sub).sum() >= 10
    assert (sub & (expected.astype(np.float64) != 0)).sum() >= 1000
    _assert_bitwise(p32, expected, hit, f"subnormal products/{dtype_name}")


# ---------------------------------------------------------------------------------------------
# Conversion exactness: dx == dy for a 1x1, one-channel, w = 1 convolution, on every pattern
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
def test_every_bit_pattern_round_trips(dtype_name):
    dtype, _ = DTYPES[dtype_name]
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    dy = bits.view(dtype).reshape(1, 1, 256, 256)
    w = np.ones((1, 1, 1, 1), dtype=dtype)
    prob = make_problem(1, 1, 1, 256, 256, 1, 1)
    out = run_op(prob, dy, w, ((256, 16, 16), (256, 16, 16)), vec=(1, 1, 16, 64))
    ob = out.view(np.uint16).ravel()
    with np.errstate(invalid="ignore"):
        v = dy.ravel().astype(np.float64)
    nan = np.isnan(v)
    assert nan.sum() == (2046 if dtype_name == "fp16" else 254)
    # NaN in, NaN out
    assert np.isnan(out.ravel()[nan].astype(np.float64)).all()
    # -0: the fp32 accumulator starts at +0 and +0 + (-0) = +0, so -0 comes back as +0
    # (PyTorch's convolution_backward gives +0 too). Every other pattern, inf included, is
    # returned bit for bit: widening to fp32 and the one RNE narrowing are exact inverses.
    neg_zero = bits == 0x8000
    assert v[neg_zero][0] == 0 and out.ravel()[neg_zero].astype(np.float64)[0] == 0
    print(f"[numerics] {dtype_name}: -0 comes back as bits {ob[neg_zero][0]:#06x}")
    keep = ~nan & ~neg_zero
    wrong = np.nonzero(keep & (ob != bits))[0]
    smallest_normal = 2.0**-14 if dtype_name == "fp16" else 2.0**-126
    subnormal = keep & ((bits & 0x7FFF) != 0) & (np.abs(v) < smallest_normal)
    assert wrong.size == 0, (
        f"{dtype_name}: {wrong.size} bit patterns not returned unchanged "
        f"({np.isin(wrong, np.nonzero(subnormal)[0]).sum()} of them subnormal); "
        f"first (in, out): {[(hex(bits[i]), hex(ob[i])) for i in wrong[:8]]}"
    )


# ---------------------------------------------------------------------------------------------
# Property test: random problems, random legal tiles, against the oracle
# ---------------------------------------------------------------------------------------------
@st.composite
def problems_and_tiles(draw):
    n = draw(st.integers(1, 2))
    cin = draw(st.integers(1, 40))
    cout = draw(st.integers(1, 40))
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    ph = draw(st.integers(0, (kh - 1) * dh))
    pw = draw(st.integers(0, (kw - 1) * dw))
    hout, wout = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    hmin = (hout - 1) * sh - 2 * ph + (kh - 1) * dh + 1
    wmin = (wout - 1) * sw - 2 * pw + (kw - 1) * dw + 1
    assume(hmin + sh - 1 >= 1 and wmin + sw - 1 >= 1)  # else no input size is valid
    hin = draw(st.integers(max(hmin, 1), hmin + sh - 1))
    win = draw(st.integers(max(wmin, 1), wmin + sw - 1))
    prob = dict(
        n=n,
        cin=cin,
        cout=cout,
        hout=hout,
        wout=wout,
        kh=kh,
        kw=kw,
        sh=sh,
        sw=sw,
        ph=ph,
        pw=pw,
        dh=dh,
        dw=dw,
        hin=hin,
        win=win,
    )
    taps = kh * kw
    # tiles derived from the problem, sometimes larger than it
    if draw(st.booleans()):
        ml1 = draw(st.integers(1, win))
    else:
        ml1 = win * draw(st.integers(1, hin + 1))
    nl1 = 16 * draw(st.integers(1, -(-cin // 16) + 1))
    kl1 = 16 * taps * draw(st.integers(1, -(-cout // 16) + 1))
    ml0 = 16 * draw(st.integers(1, min(ceil16(ml1) // 16, 8)))
    kl0 = 16 * draw(st.integers(1, min(kl1 // 16, 32)))
    nl0 = 16 * draw(st.integers(1, nl1 // 16))
    l1, l0 = (ml1, kl1, nl1), (ml0, kl0, nl0)
    assume(tiles_legal(prob, l1, l0))  # drops the TS5/TS6 failures
    vec = [
        draw(st.integers(1, 4)),
        draw(st.integers(1, 40)),
        draw(st.integers(1, 8)),
        16 * draw(st.integers(1, 4)),
    ]
    if draw(st.booleans()):
        vec.insert(2, 1)  # NCDHW form with D = 1
    dtype_name = draw(st.sampled_from(["fp16", "bf16"]))
    seed = draw(st.integers(0, 2**32 - 1))
    return prob, (l1, l0), tuple(vec), dtype_name, seed


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(problems_and_tiles())
def test_property_random_problems(case):
    prob, tiles, vec, dtype_name, seed = case
    pypto.reset_options()
    (hlo, hhi), (wlo, whi) = pypto.conv_backward_input_size_range(
        [prob["n"], prob["cout"], prob["hout"], prob["wout"]],
        [prob["cout"], prob["cin"], prob["kh"], prob["kw"]],
        [prob["sh"], prob["sw"]],
        [prob["ph"]] * 2 + [prob["pw"]] * 2,
        [prob["dh"], prob["dw"]],
    )
    assert hlo <= prob["hin"] <= hhi and wlo <= prob["win"] <= whi
    dtype, _ = DTYPES[dtype_name]
    dy, w = make_data(prob, dtype, np.random.default_rng(seed))
    out = run_op(prob, dy, w, tiles, vec)
    check_accuracy(out, prob, dy, w, f"hypothesis {prob} {tiles} {vec} {dtype_name}")


# ---------------------------------------------------------------------------------------------
# Inf and NaN: only real taps contribute (the definition's semantics, and PyTorch's)
# ---------------------------------------------------------------------------------------------
def check_non_finite(out, prob, dy, w, label=""):
    """Inf/NaN exactly where the float64 definition has them (same sign for Inf); the finite
    elements within the bound of support/numerics.py."""
    hw, s, p, d = geometry(prob)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = dgrad_reference(dy, w, hw, s, p, d)
        abs_ref = dgrad_abs_reference(
            np.where(np.isfinite(dy), dy, 0), np.where(np.isfinite(w), w, 0), hw, s, p, d
        )
    o = out.astype(np.float64)
    for name, test in (("NaN", np.isnan), ("+Inf", np.isposinf), ("-Inf", np.isneginf)):
        wrong = test(o) != test(ref)
        assert not wrong.any(), (
            f"{label}: {int(wrong.sum())} elements disagree on {name}, "
            f"first at {tuple(np.argwhere(wrong)[0])}"
        )
    finite = np.isfinite(ref)
    u = np.maximum(
        ulp(round_once_f64(np.where(finite, ref, 0), out.dtype), out.dtype),
        ulp(np.where(finite, o, 0), out.dtype),
    )
    bound = 0.5 * u + prob["cout"] * prob["kh"] * prob["kw"] * U32 * abs_ref
    assert (np.abs(o[finite] - ref[finite]) <= bound[finite]).all(), f"{label}: finite elements off"


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
def test_non_finite_weight_reaches_only_through_real_taps(value, dtype_name):
    """A 2x2 dy, no padding, 3x3 kernel: w[0, 0, 2, 2] meets dy only at dx rows/cols 2..3; the
    kernels' zero halo must not turn it into NaN anywhere else (0 * Inf)."""
    dtype, _ = DTYPES[dtype_name]
    prob = make_problem(n=1, cin=16, cout=16, hout=2, wout=2, kh=3, kw=3)
    dy = np.ones((1, 16, 2, 2), dtype)
    w = np.zeros((16, 16, 3, 3), dtype)
    w[0, 0] = 1
    w[0, 0, 2, 2] = value
    out = run_op(prob, dy, w).astype(np.float64)
    expected = np.array([[1, 2, 2, 1], [2, 4, 4, 2], [2, 4, value, value], [1, 2, value, value]])
    np.testing.assert_array_equal(out[0, 0], expected)  # NaN == NaN here
    assert (out[0, 1:] == 0).all()
    check_non_finite(out.astype(dtype), prob, dy, w, f"single {value} {dtype_name}")


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(problems_and_tiles(), st.integers(1, 4), st.integers(0, 3), st.booleans())
def test_property_non_finite_weights_and_dy(case, n_bad_w, n_bad_dy, zeros_in_dy):
    """Random problems and tiles with Inf/NaN in w (and sometimes in dy, and exact zeros in dy
    where Inf * 0 must give NaN by definition)."""
    prob, tiles, vec, dtype_name, seed = case
    pypto.reset_options()
    dtype, _ = DTYPES[dtype_name]
    rng = np.random.default_rng(seed)
    dy, w = make_data(prob, dtype, rng)
    specials = np.array([np.inf, -np.inf, np.nan])
    for array, count in ((w, n_bad_w), (dy, n_bad_dy)):
        for _ in range(count):
            array[tuple(rng.integers(0, s) for s in array.shape)] = rng.choice(specials)
    if zeros_in_dy:
        dy[rng.random(dy.shape) < 0.2] = 0
    out = run_op(prob, dy, w, tiles, vec)
    check_non_finite(out, prob, dy, w, f"hypothesis {prob} {tiles} {dtype_name}")
