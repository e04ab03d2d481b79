"""Sub-problems for what no single AscendC launch fits: stride phases, dilation phases, folding.

The API keeps a stride-dilated dy window as tall as the kernel's reach, and a weight block of all
Kh*Kw taps, in L1; large strides, dilations or kernels overflow it. Three exact rewrites make
problems the API can hold. Each keeps every dx element's whole sum inside one launch, so the
result is still fp32 accumulation and one rounding. Along one axis, with dx index i, dy index j,
tap t and i = j*s - p + t*d:

stride phases (s > 1)
    dx indices i = r + q*s (one phase per residue r) receive only the taps with
    t*d = r + p (mod s): t = t0 + u*(s/g), g = gcd(s, d). Each phase is a stride-1 problem over
    all of dy: q = j - p' + u*(d/g), p' = (p + r - t0*d) / s. No zero insertion, fewer taps.
dilation phases (d > 1)
    dx indices i = r + v*d receive only the dy indices with j*s = r + p (mod d):
    j = j0 + m*(d/g). Each phase is a dilation-1 problem over those dy rows:
    v = m*(s/g) - p' + t, p' = (r + p - j0*s) / d.
tap folding (s = 1)
    the taps in G groups of k' = ceil(k/G) become G times the dy channels: group g's copy of dy is
    shifted by g*k'*d, so dx[i] = sum over (g, channel) and u < k' of dy_g[i + p - u*d] w[g*k' + u].
    Same K, a G-times smaller kernel, G copies of dy (the memory cost, so G is kept small).

``decompositions`` yields candidate piece lists, the cheapest first; the planner takes the first
whose every piece has a launch plan.
"""

from dataclasses import dataclass, replace
from math import gcd

import numpy as np

from .._core.tiling import C0, ConvProblem, Tiling, ceil_div

__all__ = [
    "AxisPiece",
    "Piece",
    "whole_axis",
    "stride_phases",
    "dilation_phases",
    "decompositions",
    "piece_tiling",
]


@dataclass(frozen=True)
class AxisPiece:
    """One axis of a sub-problem: which dx, dy and tap indices it covers, and its geometry.

    The sub-problem's dx index q is dx index ``dx_start + q*dx_step``; its dy index m is dy index
    ``dy_start + m*dy_step``; its tap u is tap ``tap_start + u*tap_step``; and
    q = m*stride - pad + u*dilation (pad may be negative). ``groups`` > 1: tap folding.
    """

    dx_start: int
    dx_step: int
    size_in: int
    dy_start: int
    dy_step: int
    size_out: int
    tap_start: int
    tap_step: int
    kernel: int
    stride: int
    pad: int
    dilation: int
    groups: int = 1

    @property
    def folded_kernel(self):
        return ceil_div(self.kernel, self.groups)

    @property
    def group_shift(self):
        """dy offset between consecutive fold groups."""
        return self.folded_kernel * self.dilation

    @property
    def folded_size_out(self):
        return self.size_out + (self.groups - 1) * self.group_shift

    def dx_slice(self):
        return slice(
            self.dx_start, self.dx_start + (self.size_in - 1) * self.dx_step + 1, self.dx_step
        )

    def dy_slice(self):
        return slice(
            self.dy_start, self.dy_start + (self.size_out - 1) * self.dy_step + 1, self.dy_step
        )

    def tap_slice(self):
        return slice(
            self.tap_start, self.tap_start + (self.kernel - 1) * self.tap_step + 1, self.tap_step
        )


def whole_axis(size_in, size_out, kernel, stride, pad, dilation):
    return AxisPiece(0, 1, size_in, 0, 1, size_out, 0, 1, kernel, stride, pad, dilation)


def _first_solution(target, factor, modulus):
    """The least x >= 0 with x*factor = target (mod modulus), or None when there is none."""
    g = gcd(factor, modulus)
    if target % g:
        return None
    return target // g * pow(factor // g, -1, modulus // g) % (modulus // g)


def stride_phases(a):
    """The stride phases of ``a`` (stride 1 each); dx indices no tap reaches are left out."""
    if a.stride == 1:
        return [a]
    s, d = a.stride, a.dilation
    step = s // gcd(s, d)  # taps of one phase are step apart
    pieces = []
    for r in range(min(s, a.size_in)):
        t0 = _first_solution(r + a.pad, d, s)  # first tap with t*d = r + p (mod s)
        if t0 is None or t0 >= a.kernel:
            continue
        pieces.append(
            replace(
                a,
                dx_start=a.dx_start + r * a.dx_step,
                dx_step=a.dx_step * s,
                size_in=ceil_div(a.size_in - r, s),
                tap_start=a.tap_start + t0 * a.tap_step,
                tap_step=a.tap_step * step,
                kernel=ceil_div(a.kernel - t0, step),
                stride=1,
                pad=(a.pad + r - t0 * d) // s,
                dilation=d * step // s,
            )
        )
    return pieces


def dilation_phases(a):
    """The dilation phases of ``a`` (dilation 1 each); dx indices no dy index reaches are left
    out."""
    if a.dilation == 1:
        return [a]
    s, d = a.stride, a.dilation
    step = d // gcd(s, d)  # dy indices of one phase are step apart
    pieces = []
    for r in range(min(d, a.size_in)):
        j0 = _first_solution(r + a.pad, s, d)  # first dy index with j*s = r + p (mod d)
        if j0 is None or j0 >= a.size_out:
            continue
        pieces.append(
            replace(
                a,
                dx_start=a.dx_start + r * a.dx_step,
                dx_step=a.dx_step * d,
                size_in=ceil_div(a.size_in - r, d),
                dy_start=a.dy_start + j0 * a.dy_step,
                dy_step=a.dy_step * step,
                size_out=ceil_div(a.size_out - j0, step),
                stride=s * step // d,
                pad=(r + a.pad - j0 * s) // d,
                dilation=1,
            )
        )
    return pieces


def _fold(a, max_kernel):
    return a if a.kernel <= max_kernel else replace(a, groups=ceil_div(a.kernel, max_kernel))


@dataclass(frozen=True)
class Piece:
    """A sub-problem: rows and columns of the whole problem, rewritten."""

    rows: AxisPiece
    cols: AxisPiece

    @property
    def groups(self):
        return self.rows.groups * self.cols.groups

    def problem(self, p):
        r, c = self.rows, self.cols
        return ConvProblem(
            p.n,
            p.cin,
            p.cout * self.groups,
            r.size_in,
            c.size_in,
            r.folded_size_out,
            c.folded_size_out,
            r.folded_kernel,
            c.folded_kernel,
            r.stride,
            c.stride,
            r.pad,
            r.pad,
            c.pad,
            c.pad,
            r.dilation,
            c.dilation,
            p.dtype_size,
        )

    def dx_index(self):
        return (Ellipsis, self.rows.dx_slice(), self.cols.dx_slice())

    def dy(self, dy):
        """This piece's dy ``[N, Cout*groups, Hout', Wout']`` from the whole dy (a view when not
        folded)."""
        picked = dy[:, :, self.rows.dy_slice(), self.cols.dy_slice()]
        if self.groups == 1:
            return picked
        r, c = self.rows, self.cols
        n, cout, hout, wout = picked.shape
        out = np.zeros((n, cout * self.groups, r.folded_size_out, c.folded_size_out), dy.dtype)
        for gh in range(r.groups):
            for gw in range(c.groups):
                first = (gh * c.groups + gw) * cout
                top, left = gh * r.group_shift, gw * c.group_shift
                out[:, first : first + cout, top : top + hout, left : left + wout] = picked
        return out

    def weight(self, w):
        """This piece's weight ``[Cout*groups, Cin, Kh', Kw']`` (taps past the kernel are zero)."""
        picked = w[:, :, self.rows.tap_slice(), self.cols.tap_slice()]
        if self.groups == 1:
            return picked
        r, c = self.rows, self.cols
        cout, cin = picked.shape[:2]
        kh, kw = r.folded_kernel, c.folded_kernel
        out = np.zeros((cout * self.groups, cin, kh, kw), w.dtype)
        for gh in range(r.groups):
            for gw in range(c.groups):
                first = (gh * c.groups + gw) * cout
                part = picked[:, :, gh * kh : (gh + 1) * kh, gw * kw : (gw + 1) * kw]
                out[first : first + cout, :, : part.shape[2], : part.shape[3]] = part
        return out


def _pieces(rows, cols):
    return tuple(Piece(r, c) for r in rows for c in cols)


def _shrinking(kernel):
    """Kernel sizes to fold down to: about 3/4 of the last each time, down to 1."""
    size = kernel
    while size > 1:
        size = min(size - 1, ceil_div(size * 3, 4))
        yield size


def decompositions(p):
    """Candidate piece lists for problem ``p``, in order of preference.

    The whole problem; then its stride phases; then also their dilation phases; then those with
    kernel rows folded ever further, then kernel columns too. Every list covers each dx element
    that receives anything exactly once.
    """
    rows = [whole_axis(p.hin, p.hout, p.kh, p.sh, p.pt, p.dh)]
    cols = [whole_axis(p.win, p.wout, p.kw, p.sw, p.pl, p.dw)]
    yield _pieces(rows, cols)
    if p.sh > 1 or p.sw > 1:
        rows = [q for a in rows for q in stride_phases(a)]
        cols = [q for a in cols for q in stride_phases(a)]
        yield _pieces(rows, cols)
    if p.dh > 1 or p.dw > 1:
        rows = [q for a in rows for q in dilation_phases(a)]
        cols = [q for a in cols for q in dilation_phases(a)]
        yield _pieces(rows, cols)
    widest = max((a.kernel for a in rows), default=1)
    for size in _shrinking(widest):
        yield _pieces([_fold(a, size) for a in rows], cols)
    rows = [_fold(a, 1) for a in rows]
    for size in _shrinking(max((a.kernel for a in cols), default=1)):
        yield _pieces(rows, [_fold(a, size) for a in cols])


def piece_tiling(t, sub):
    """The user's tiles for a sub-problem: tileKL1 rounded down to whole Kh'*Kw'*16 blocks."""
    taps16 = C0 * sub.taps
    kl1 = max(1, t.kl1 // taps16) * taps16
    return Tiling(t.ml1, kl1, t.nl1, t.ml0, min(t.kl0, kl1), t.nl0)
