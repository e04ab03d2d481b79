"""Helpers shared by the numeric tests: problems, tiles, running the op, the accuracy check.

Used by cpu/test_numerics.py and by the core tests that check results (arrays, threads,
fuzz); the strategies of support/strategies.py build on ``tiles_legal``.

The error bound used everywhere (``check_accuracy``)
----------------------------------------------------
Let ref = the exact dx element (float64 is exact enough: see below), s = the fp32 value the
kernel accumulates, out = s rounded once to fp16/bf16, u = 2**-24 (fp32 unit roundoff) and
K = Cout*Kh*Kw, the length of the GEMM's K dimension.

* Products: fp16 x fp16 has at most 11 + 11 = 22 significant bits and bf16 x bf16 8 + 8 = 16,
  so every product is exact in fp32 (24 bits; the exponents of our O(1) data stay far from
  fp32's range limits). Adding a zero term (a tap that hits no dy pixel) is exact too.
* Summation: recursive fp32 summation of at most K terms has
  |s - ref| <= gamma_{K-1} * sum|terms| <= K*u * abs_ref, where abs_ref = sum |dy*w| over the
  element's terms (Higham, Accuracy and Stability, eq. 4.4; gamma_n = n*u/(1-n*u) <= (n+1)*u
  while n*(n+1)*u <= 1, i.e. for K < 4096 — every case here).
* One final rounding: |out - s| <= ulp(out)/2. (If 2**e <= |s| < 2**(e+1), rounding is monotone
  and 2**e is on the grid, so |out| >= 2**e and ulp(out) >= the step of s's binade.)

So |out - ref| <= ulp/2 + K*u*abs_ref. We take ulp = max(ulp(round_once(ref)), ulp(out)): the
first is the textbook "half an ulp of the correctly rounded value", the second covers s falling
into the binade above ref's. float64's own error in the oracle (about K * 2**-53 * abs_ref) is
2**-29 of the fp32 term, far inside the slack.

The bound alone would let a kernel that always misrounds by half an ulp pass, so we also count
the elements that differ from round_once(ref) — the correctly rounded float64 value. With fp32
accumulation that happens only when ref lies within the fp32 error of a rounding boundary:
at most about sqrt(K)/4096 of random fp16 elements (0.2% measured at K = 576), far fewer for
bf16. We require at most 2% (+1 element, for tiny outputs).
"""

import ml_dtypes
import numpy as np

import pypto
from pypto import pypto_impl
from support.reference import dgrad_abs_reference, dgrad_reference, round_once_f64, ulp

BF16 = np.dtype(ml_dtypes.bfloat16)
FP16 = np.dtype(np.float16)
U32 = 2.0**-24  # fp32 unit roundoff
MAX_DIFF_FRACTION = 0.02

DTYPES = {"fp16": (FP16, pypto.DT_FP16), "bf16": (BF16, pypto.DT_BF16)}


# ---------------------------------------------------------------------------------------------
# Problems, tiles and running the op
# ---------------------------------------------------------------------------------------------
def ceil16(v):
    return -(-v // 16) * 16


def tiles_legal(prob, l1, l0, dtype_size=2):
    """Rules TS1-TS6 of the specification, written out independently of pypto._core.rules."""
    ml1, kl1, nl1 = l1
    ml0, kl0, nl0 = l0
    taps = prob["kh"] * prob["kw"]
    win = prob["win"]
    if not (ml1 >= 1 and (ml1 <= win or ml1 % win == 0)):
        return False  # TS1
    if not (nl1 >= 1 and nl1 % 16 == 0):
        return False  # TS2
    if not (kl1 >= 1 and kl1 % (16 * taps) == 0):
        return False  # TS3
    if any(v < 16 or v % 16 for v in (ml0, kl0, nl0)):
        return False  # TS4
    if ml0 > ceil16(ml1) or kl0 > kl1 or nl0 > nl1:
        return False
    if ml0 * kl0 * dtype_size > 65536 or kl0 * nl0 * dtype_size > 65536:
        return False  # TS5
    if ml0 * nl0 * 4 > 131072:
        return False
    hout_l1 = min(
        -(-ml1 // win) + (prob["kh"] - 1) * prob["dh"], (prob["hout"] - 1) * prob["sh"] + 1
    )
    wout_l1 = min(
        min(ml1, win) + (prob["kw"] - 1) * prob["dw"], (prob["wout"] - 1) * prob["sw"] + 1
    )
    cout_l1 = kl1 // taps
    return (kl1 * nl1 + hout_l1 * wout_l1 * cout_l1) * dtype_size <= 524288  # TS6


def auto_tiles(prob):
    """A legal, moderately sized tile set for a problem."""
    win, taps = prob["win"], prob["kh"] * prob["kw"]
    ml1 = win * max(1, 64 // win) if win <= 64 else 64
    ml0 = min(64, ceil16(ml1))
    nl1 = min(64, ceil16(prob["cin"]))
    nl0 = min(nl1, 32)
    for j in range(min(4, -(-prob["cout"] // 16)), 0, -1):
        kl1 = 16 * taps * j
        kl0 = min(kl1, 64)
        l1, l0 = (ml1, kl1, nl1), (ml0, kl0, nl0)
        if tiles_legal(prob, l1, l0):
            return l1, l0
    raise AssertionError(f"no legal auto tiles for {prob}")


def make_problem(
    n, cin, cout, hout, wout, kh, kw, strides=(1, 1), pads=(0, 0), dil=(1, 1), hin="min", win="min"
):
    """A problem dict; Hin/Win picked from pypto.conv_backward_input_size_range ('min'/'max')."""
    sh, sw = strides
    ph, pw = pads
    dh, dw = dil
    (hlo, hhi), (wlo, whi) = pypto.conv_backward_input_size_range(
        [n, cout, hout, wout], [cout, cin, kh, kw], [sh, sw], [ph, ph, pw, pw], [dh, dw]
    )
    # the same range from the specification's formula (section 3)
    hmin = (hout - 1) * sh - 2 * ph + (kh - 1) * dh + 1
    wmin = (wout - 1) * sw - 2 * pw + (kw - 1) * dw + 1
    assert (hlo, hhi) == (max(hmin, 1), hmin + sh - 1)
    assert (wlo, whi) == (max(wmin, 1), wmin + sw - 1)
    pick = {"min": lambda lo, hi: lo, "max": lambda lo, hi: hi}
    hin = pick[hin](hlo, hhi) if isinstance(hin, str) else hin
    win = pick[win](wlo, whi) if isinstance(win, str) else win
    return dict(
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


def make_data(prob, dtype, rng, dist="normal"):
    shape_dy = (prob["n"], prob["cout"], prob["hout"], prob["wout"])
    shape_w = (prob["cout"], prob["cin"], prob["kh"], prob["kw"])
    if dist == "uniform":  # what upstream's system tests use (torch.rand)
        dy, w = rng.random(shape_dy), rng.random(shape_w)
    else:
        dy, w = rng.standard_normal(shape_dy), rng.standard_normal(shape_w)
    return dy.astype(dtype), w.astype(dtype)


def set_tiles(l1, l0, vec=(16, 16, 16, 16)):
    pypto.set_convbp_input_tile_shapes(
        pypto_impl.ConvBpTileL1Info(*l1), pypto_impl.ConvBpTileL0Info(*l0)
    )
    pypto.set_vec_tile_shapes(*vec)


def size_of(prob):
    """input_size of a problem."""
    return [prob["n"], prob["cin"], prob["hin"], prob["win"]]


def call_op(prob, dy, w, dtype=None):
    """conv_backward_input on arrays (wrapped as given) under the configuration in effect."""
    dtype = dtype if dtype is not None else pypto.from_numpy(dy).dtype
    return pypto.conv_backward_input(
        pypto.from_numpy(dy),
        size_of(prob),
        pypto.from_numpy(w),
        dtype,
        [prob["sh"], prob["sw"]],
        [prob["ph"], prob["ph"], prob["pw"], prob["pw"]],
        [prob["dh"], prob["dw"]],
    )


def run_op(prob, dy, w, tiles=None, vec=(16, 16, 16, 16)):
    l1, l0 = tiles if tiles is not None else auto_tiles(prob)
    set_tiles(l1, l0, vec)
    res = call_op(prob, dy, w).numpy()
    assert res.dtype == dy.dtype
    assert res.shape == (prob["n"], prob["cin"], prob["hin"], prob["win"])
    return res


def geometry(prob):
    return (
        (prob["hin"], prob["win"]),
        (prob["sh"], prob["sw"]),
        (prob["ph"], prob["pw"]),
        (prob["dh"], prob["dw"]),
    )


# ---------------------------------------------------------------------------------------------
# The accuracy check
# ---------------------------------------------------------------------------------------------
def check_against(out, ref, abs_ref, k_len, label=""):
    """Assert the bound of the module docstring element-wise; count elements != round_once(ref).

    Returns a dict of statistics (max error in ulps, number of elements that differ).
    """
    dtype = out.dtype
    o = out.astype(np.float64)
    assert o.shape == ref.shape
    assert np.isfinite(o).all(), f"{label}: non-finite output"
    r1 = round_once_f64(ref, dtype)
    u = np.maximum(ulp(r1, dtype), ulp(o, dtype))
    bound = 0.5 * u + k_len * U32 * abs_ref
    err = np.abs(o - ref)
    bad = err > bound
    if bad.any():
        idx = np.unravel_index(np.argmax(err - bound), err.shape)
        raise AssertionError(
            f"{label}: {int(bad.sum())} of {o.size} elements outside the fp32-accumulation bound; "
            f"worst at {idx}: out={o[idx]!r} ref={ref[idx]!r} |err|={err[idx]:.3g} "
            f"bound={bound[idx]:.3g} abs_ref={abs_ref[idx]:.3g}"
        )
    # positions that no window reaches (no term at all) are exactly zero
    no_terms = abs_ref == 0
    assert (o[no_terms] == 0).all(), f"{label}: nonzero output where no dy pixel contributes"
    u_r1 = ulp(r1, dtype)
    n_diff = int((o != r1).sum())
    stats = {
        "label": label,
        "elements": o.size,
        "max_err_ulp_vs_ref64": float((err / u_r1).max()),
        "max_err_ulp_vs_rounded": float((np.abs(o - r1) / u_r1).max()),
        "n_differ_from_round_once": n_diff,
        "fraction_differ": n_diff / o.size,
    }
    print(f"[numerics] {stats}")
    assert n_diff <= MAX_DIFF_FRACTION * o.size + 1, (
        f"{label}: {n_diff} of {o.size} elements differ from the once-rounded float64 value "
        f"(allowed {MAX_DIFF_FRACTION:.0%})"
    )
    return stats


def check_accuracy(out, prob, dy, w, label=""):
    hw, s, p, d = geometry(prob)
    ref = dgrad_reference(dy, w, hw, s, p, d)
    abs_ref = dgrad_abs_reference(dy, w, hw, s, p, d)
    return check_against(out, ref, abs_ref, prob["cout"] * prob["kh"] * prob["kw"], label)
