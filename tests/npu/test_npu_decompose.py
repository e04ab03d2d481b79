"""The NPU planner's rewrites (pypto/_npu/decompose.py) and its coverage of accepted problems.

No runtime needed: the rewrites are index arithmetic and array copies, checked here against the
definition of dgrad; test_npu_fake_runtime.py runs them through the fake AscendCL runtime.
"""

import random
from dataclasses import replace

import numpy as np
import pytest

from pypto._core.rules import tile_violation
from pypto._core.shapes import forward_out_size
from pypto._core.tiling import C0, ConvProblem, Tiling
from pypto._dtypes import DataType
from pypto._npu.decompose import Piece, decompositions, dilation_phases, stride_phases, whole_axis
from pypto._npu.plan import CallPlan, _call_plan
from support.npu_problems import extreme_problem, legal_tiles
from support.reference import dgrad_brute_force


def _triples(size_in, size_out, kernel, stride, pad, dilation):
    """Every (dx, dy, tap) index triple of one axis: i = j*stride - pad + t*dilation."""
    return {
        (j * stride - pad + t * dilation, j, t)
        for j in range(size_out)
        for t in range(kernel)
        if 0 <= j * stride - pad + t * dilation < size_in
    }


def _piece_triples(a):
    """The triples an AxisPiece computes, in the whole axis's indices (fold groups unrolled)."""
    out = []
    k = a.folded_kernel
    for g in range(a.groups):
        for m in range(a.size_out):
            for u in range(k):
                tap = g * k + u
                q = (m + g * a.group_shift) * a.stride - a.pad + u * a.dilation
                if tap < a.kernel and 0 <= q < a.size_in:
                    out.append(
                        (
                            a.dx_start + q * a.dx_step,
                            a.dy_start + m * a.dy_step,
                            a.tap_start + tap * a.tap_step,
                        )
                    )
    return out


def _random_axis(rng):
    kernel, stride, dilation = rng.randint(1, 40), rng.randint(1, 63), rng.randint(1, 63)
    reach = (kernel - 1) * dilation
    pad = rng.randint(0, min(255, reach))
    lo = max(1, reach + 1 - 2 * pad)
    size_in = rng.randint(lo, lo + 200)
    size_out = forward_out_size(size_in, kernel, stride, pad, pad, dilation)
    return size_in, size_out, kernel, stride, pad, dilation


def test_phases_and_folds_cover_every_contribution_exactly_once():
    rng = random.Random(11)
    for _ in range(400):
        axis = _random_axis(rng)
        want = _triples(*axis)
        whole = whole_axis(*axis)
        strided = stride_phases(whole)
        both = [q for a in strided for q in dilation_phases(a)]
        dilated = dilation_phases(whole)
        for pieces in ([whole], strided, dilated, both):
            got = [triple for a in pieces for triple in _piece_triples(a)]
            assert len(got) == len(set(got)) and set(got) == want, (axis, pieces)
            # disjoint dx: each dx index belongs to one piece, so each sum stays in one launch
            dx = [i for a in pieces for i in range(a.size_in * a.dx_step)[a.dx_slice()]]
            assert len(dx) == len(set(dx)), axis
        assert all(a.stride == 1 for a in strided) and all(a.dilation == 1 for a in dilated)
        assert all(a.stride == 1 and a.dilation == 1 for a in both)
        for a in both[:3]:
            for groups in (2, 3, a.kernel):
                folded = replace(a, groups=groups)
                got = _piece_triples(folded)
                assert sorted(got) == sorted(_piece_triples(a)), (axis, groups)


@pytest.mark.parametrize("seed", range(6))
def test_pieces_recompose_the_whole_dgrad(seed):
    """Each candidate piece list, computed piece by piece from its own dy/weight copies and put
    back at its dx indices, equals the whole problem's dgrad (float64)."""
    rng = random.Random(seed)
    kh, kw = rng.randint(1, 7), rng.randint(1, 7)
    sh, sw, dh, dw = (rng.randint(1, 4) for _ in range(4))
    ph, pw = rng.randint(0, (kh - 1) * dh), rng.randint(0, (kw - 1) * dw)
    hin = rng.randint(max(1, (kh - 1) * dh + 1 - 2 * ph), 14 + (kh - 1) * dh)
    win = rng.randint(max(1, (kw - 1) * dw + 1 - 2 * pw), 14 + (kw - 1) * dw)
    hout = forward_out_size(hin, kh, sh, ph, ph, dh)
    wout = forward_out_size(win, kw, sw, pw, pw, dw)
    p = ConvProblem(2, 3, 5, hin, win, hout, wout, kh, kw, sh, sw, ph, ph, pw, pw, dh, dw)
    np_rng = np.random.default_rng(seed)
    dy, w = np_rng.standard_normal((2, 5, hout, wout)), np_rng.standard_normal((5, 3, kh, kw))
    want = dgrad_brute_force(dy, w, (hin, win), (sh, sw), (ph, pw), (dh, dw))
    for pieces in list(decompositions(p))[:6]:
        got = np.zeros_like(want)
        for piece in pieces:
            sub = piece.problem(p)
            got[piece.dx_index()] = dgrad_brute_force(
                piece.dy(dy),
                piece.weight(w),
                (sub.hin, sub.win),
                (sub.sh, sub.sw),
                (sub.pt, sub.pl),
                (sub.dh, sub.dw),
            )
            assert piece.dy(dy).shape == (p.n, sub.cout, sub.hout, sub.wout)
            assert piece.weight(w).shape == (sub.cout, p.cin, sub.kh, sub.kw)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_every_accepted_extreme_problem_has_an_npu_plan():
    """Kernels up to 255 and up to the TS6 limit of taps, strides and dilations up to 63,
    paddings up to 255, with tiles the op accepts: each gets launches that fit the API's L1
    (before the rewrites, about one in four of these had none)."""
    rng = random.Random(2026)
    planned = rewritten = 0
    while planned < 1500:
        p = extreme_problem(rng)
        t = p and legal_tiles(rng, p)
        if t is None:
            continue
        plan = _call_plan(p, t, rng.choice([DataType.DT_FP16, DataType.DT_BF16]))
        assert isinstance(plan, CallPlan)
        planned += 1
        rewritten += len(plan.pieces) != 1 or plan.pieces[0].piece != Piece(
            whole_axis(p.hin, p.hout, p.kh, p.sh, p.pt, p.dh),
            whole_axis(p.win, p.wout, p.kw, p.sw, p.pl, p.dw),
        )
    assert rewritten > 100  # the sample does reach the rewrites


def test_large_kernels_fold_their_taps_and_strong_dilations_split_into_phases():
    t = Tiling(1, C0 * 31 * 31, 16, 16, 16, 16)
    p = ConvProblem(1, 16, 16, 300, 300, 270, 270, 31, 31, 1, 1, 0, 0, 0, 0, 1, 1)
    assert tile_violation(p, t) is None
    plan = _call_plan(p, t, DataType.DT_FP16)
    assert [pp.piece.groups for pp in plan.pieces] == [2]  # kernel rows in two groups: 16x31
    assert plan.pieces[0].problem.kh == 16 and plan.pieces[0].problem.cout == 32

    t = Tiling(1, 144, 16, 16, 16, 16)
    p = ConvProblem(1, 16, 16, 256, 256, 130, 130, 3, 3, 1, 1, 0, 0, 0, 0, 63, 63)
    plan = _call_plan(p, t, DataType.DT_FP16)
    assert len(plan.pieces) == 63 * 63
    assert all(pp.problem.dh == pp.problem.dw == 1 for pp in plan.pieces)
