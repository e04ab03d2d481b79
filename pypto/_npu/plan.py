"""How a validated dgrad becomes AscendC launches: the user's tiles mapped onto the API's fields.

Per image the GEMM is M = Hin*Win, N = Cin, K = Cout*Kh*Kw (``pypto._core.tiling``). The user's
tiles (``call.tiling``) become:

=========  ==================================================================================
tileML1    rows of dx per block (``rowsPerTask``): whole rows, because the API starts a block's
           work at a row; a tile inside one row gives one-row blocks
tileNL1    dx channels per block (``cinPerTask``, and the API's ``singleCoreCin``)
tileKL1    ``stepKb * baseK``: the weight block held in L1 (clipped to the padded K)
tileML0    ``baseM``
tileKL0    ``baseK``: the largest multiple of 16 <= tileKL0 that divides tileKL1 and divides, or
           is a multiple of, Kh*Kw*16 (the API's weight-transpose loops need one of the two)
tileNL0    ``baseN``
=========  ==================================================================================

The API's own L1 footprint is not the specification's TS6 estimate: it holds whole
stride-dilated dy rows (Wout*sw elements a row) where TS6 counts a window as wide as the tile.
So the planner evaluates the API's formula (``_fits``) and, while it does not fit, gives up in
this order: L1 double buffering, dy L1 depth (``stepKa``), weight L1 depth (``stepKb``); then
splits W into stripes, each a launch over its own dy window (full width, then halving down to
one column); last, ``baseM = 16``. Backprop
padding above what the official tiling passes (the kernel's reach (k-1)*d, and load3d's 255)
becomes zero rows or columns materialised in the dy window, so the API's unsigned row arithmetic
never wraps and every M block loads dy rows (tests/npu/fake_ascend checks it per launch). A problem
with no fitting launch is rewritten into sub-problems (``_decompose``: stride phases, dilation
phases, folded taps), each planned the same way; one that fits nothing even then raises
NpuUnsupportedError.
"""

import functools
from dataclasses import dataclass
from typing import Optional

from .._core.tiling import BUFFER_BYTES, C0, ConvProblem, ceil_align, ceil_div, task_grid
from .._dtypes import DataType
from .decompose import Piece, decompositions, piece_tiling
from .errors import NpuUnsupportedError
from .launch_struct import (
    B2_BASEK_GE_HKWK,
    B2_BASEK_LT_HKWK,
    B2_HKWK_EQ_ONE,
    BF16,
    FP16,
    MAGIC,
    MAX_BLOCKS,
    ConvDxApiTiling,
    ConvDxLaunch,
    filled,
)

__all__ = [
    "AxisWindow",
    "Blocks",
    "Stripe",
    "LaunchPlan",
    "PlannedPiece",
    "CallPlan",
    "axis_window",
    "plan_launches",
]

MAX_BACKPROP_PAD = 255  # load3d's padding limit
L1_API_BYTES = BUFFER_BYTES["L1"] - 128  # TOTAL_L1_SIZE on dav-c220: the framework keeps 128 B
MAX_U16 = 65535  # DataCopy strides and counts are 16-bit
DTYPE_CODES = {DataType.DT_FP16: FP16, DataType.DT_BF16: BF16}


@dataclass(frozen=True)
class AxisWindow:
    """The dy range a launch reads along one axis, for dx indices [start, start + size)."""

    start: int  # first dx index
    size: int  # dx extent
    first: int  # first dy index read (negative: a zero halo before dy)
    count: int  # dy indices read (past the end: a zero halo after dy)
    pad_before: int  # backprop padding of the stride-dilated window: [0, min(reach, 255)], or
    # [0, stride - 1] when that is larger
    pad_after: int


def axis_window(start, stop, size_out, kernel, stride, pad, dilation):
    """The dy window for dx[start:stop] along one axis, or None when no dy index reaches it.

    dy index j lands on dx index j*stride - pad + t*dilation for taps t < kernel. In the window
    (dy[first:...] stride-dilated), dx[start] sees backprop padding reach - pad' before it, with
    pad' = pad + start - first*stride; likewise after dx[stop - 1].
    """
    reach = (kernel - 1) * dilation
    lowest = ceil_div(start + pad - reach, stride)  # first dy index reaching dx >= start
    highest = (stop - 1 + pad) // stride  # last dy index landing before stop
    first, last = max(lowest, 0), min(highest, size_out - 1)
    if first > last:
        return None
    before = reach - pad - start  # pad_before = before + first * stride
    # The API's envelope is the official tiling's: backprop pads in [0, reach] (and load3d's 255).
    # Sub-problems with negative forward pads, windows starting inside dx and dx rows no dy row
    # reaches give more; zero rows materialised in the window bring it back: `first` moves into a
    # zero halo before dy, `last` past its end (never beyond lowest/highest: pads stay >= 0). Only
    # with stride - 1 > reach can a pad stay above reach, at most stride - 1 (``_fits`` checks it).
    cap = min(MAX_BACKPROP_PAD, reach)
    first = max(lowest, min(first, (cap - before) // stride))
    last = min(highest, max(last, ceil_div(stop - 1 + pad - cap, stride)))
    return AxisWindow(
        start,
        stop - start,
        first,
        last - first + 1,
        before + first * stride,
        stop - 1 + pad - last * stride,
    )


def unreached_window(start, stop):
    """The window of a dx range no dy index reaches: nothing is read, that dx stays zero."""
    return AxisWindow(start, stop - start, 0, 0, 0, 0)


@dataclass(frozen=True)
class Blocks:
    """The API's base blocks, L1 steps and L1 buffer counts for one stripe."""

    base_m: int
    base_k: int
    base_n: int
    step_ka: int
    step_kb: int
    al1: int  # dy L1 buffers (2: double buffering)
    bl1: int  # weight L1 buffers


@dataclass(frozen=True, eq=False)
class Stripe:
    """A range of dx columns computed by its own launches; ``api`` None: nothing reaches it."""

    cols: AxisWindow
    api: Optional[ConvDxApiTiling]
    load_b2_mode: int


@dataclass(frozen=True, eq=False)
class LaunchPlan:
    """Everything the host needs to launch one validated call."""

    dtype_code: int
    rows: Optional[AxisWindow]  # None: no dy row reaches dx, which is all zero
    stripes: tuple
    rows_per_task: int
    cin_per_task: int
    m_tasks: int
    n_tasks: int
    images_per_launch: int
    zero_output: bool  # dx must be zeroed first: some positions are skipped, not written

    @property
    def blocks_per_image(self):
        return self.m_tasks * self.n_tasks

    def batch_chunks(self, batch):
        """(batchStart, batchCount) of each launch of a stripe."""
        return [
            (s, min(self.images_per_launch, batch - s))
            for s in range(0, batch, self.images_per_launch)
        ]

    def launch(self, stripe, batch_start, batch_count, slot, token):
        """The kernel's launch struct: this plan's task grid, one batch chunk, one done slot."""
        return filled(
            ConvDxLaunch,
            magic=MAGIC,
            dtype=self.dtype_code,
            loadB2Mode=stripe.load_b2_mode,
            batchStart=batch_start,
            batchCount=batch_count,
            mTasks=self.m_tasks,
            nTasks=self.n_tasks,
            rowsPerTask=self.rows_per_task,
            cinPerTask=self.cin_per_task,
            doneSlot=slot,
            doneToken=token,
            reserved=0,
            api=stripe.api,
        )


# --- the API's buffer use ---------------------------------------------------------------------
def _fmap_rows(base_m, wi, kh, dh):
    """Stride-dilated dy rows a baseM block of dx pixels needs in L1 (the API's CalFmapH)."""
    if base_m >= wi:
        rows = base_m // wi + (2 if base_m % wi else 0)
    else:
        rows = 1 if wi % base_m == 0 else 2
    return rows + (kh - 1) * dh


def _fits(p, rows, cols, b):
    """True when the API's L1 buffers and 16-bit copy fields hold this stripe with these blocks,
    and the first M block loads at least one dy row (UpdateCurHoSize adds the negative row start
    to the unsigned row count: a top padding of more rows than a block loads wraps it)."""
    fmap_rows = _fmap_rows(b.base_m, cols.size, p.kh, p.dh)
    if rows.pad_before >= fmap_rows:
        return False
    dy_rows = min(fmap_rows, (rows.count - 1) * p.sh + 1)
    a_bytes = dy_rows * cols.count * p.sw * (b.step_ka * b.base_k // p.taps) * p.dtype_size
    b_bytes = b.base_n * b.step_kb * b.base_k * p.dtype_size
    if p.sw == 1 and p.sh > 1 and (p.sh - 1) * cols.count > MAX_U16:
        return False
    return b.al1 * a_bytes + b.bl1 * b_bytes <= L1_API_BYTES


def _aligned_divisors(steps, base_k, taps16):
    """Divisors d of ``steps``, largest first, whose K depth d*base_k is whole Kh*Kw*16 blocks."""
    return [d for d in range(steps, 0, -1) if steps % d == 0 and d * base_k % taps16 == 0]


def _user_blocks(p, t):
    """The user's tiles as API blocks, before any fitting."""
    taps16 = C0 * p.taps
    kl1 = min(t.kl1, ceil_div(p.cout, C0) * taps16)  # both whole multiples of Kh*Kw*16 (TS3)
    base_k = max(
        b
        for b in range(C0, min(t.kl0, kl1) + 1, C0)
        if kl1 % b == 0 and (taps16 % b == 0 or b % taps16 == 0)
    )
    return Blocks(t.ml0, base_k, t.nl0, kl1 // base_k, kl1 // base_k, 2, 2)


def _choose_blocks(p, rows, cols, start, base_m):
    """The first blocks, in order of preference, whose buffers fit; None if none does."""
    taps16 = C0 * p.taps
    k_padded = ceil_div(p.cout, C0) * taps16
    for step_kb in _aligned_divisors(start.step_kb, start.base_k, taps16):
        resident = 1 if step_kb * start.base_k >= k_padded else 2  # a whole-K weight block stays
        for step_ka in _aligned_divisors(step_kb, start.base_k, taps16):
            for al1, bl1 in dict.fromkeys(((2, resident), (2, 1), (1, resident), (1, 1))):
                blocks = Blocks(base_m, start.base_k, start.base_n, step_ka, step_kb, al1, bl1)
                if _fits(p, rows, cols, blocks):
                    return blocks
    return None


def _stripe_widths(win):
    """Full width first, then about half each time (multiples of 16 while wider), down to 1.

    Narrower stripes need fewer dy columns but, below baseM pixels, more dy rows per M block.
    """
    width = win
    while True:
        yield width
        if width == 1:
            return
        half = ceil_div(width, 2)
        width = max(C0, ceil_align(half, C0)) if half > C0 else half


# --- the launch struct's API part, filled in one place ---------------------------------------
def _api_tiling(p, rows, cols, b, rows_per_task, cin_per_task, init_output):
    reach_h, reach_w = (p.kh - 1) * p.dh, (p.kw - 1) * p.dw
    l0ab_double = (
        b.base_m * b.base_k * p.dtype_size <= BUFFER_BYTES["L0A"] // 2
        and b.base_k * b.base_n * p.dtype_size <= BUFFER_BYTES["L0B"] // 2
    )
    cout1, cin1 = ceil_div(p.cout, C0), ceil_div(p.cin, C0)
    return filled(
        ConvDxApiTiling,
        batch=p.n,
        cin=p.cin,
        cout=p.cout,
        cout1=cout1,
        cin1=cin1,
        cout1G=cout1,
        cin1G=cin1,
        c0=C0,
        c0Bits=C0.bit_length() - 1,
        dout=1,
        ho=rows.count,
        wo=cols.count,
        di=1,
        hi=p.hin,
        wi=cols.size,
        dk=1,
        hk=p.kh,
        wk=p.kw,
        group=1,
        strideD=1,
        strideH=p.sh,
        strideW=p.sw,
        padFront=0,
        padBack=0,
        # The forward padding of this window; informational (the kernel reads the backprop pads).
        padUp=max(0, reach_h - rows.pad_before),
        padDown=max(0, reach_h - rows.pad_after),
        padLeft=max(0, reach_w - cols.pad_before),
        padRight=max(0, reach_w - cols.pad_after),
        backpropPadTail=0,
        backpropPadUp=rows.pad_before,
        backpropPadDown=rows.pad_after,
        backpropPadLeft=cols.pad_before,
        backpropPadRight=cols.pad_after,
        dilationD=1,
        dilationH=p.dh,
        dilationW=p.dw,
        al0Pbuffer=2 if l0ab_double else 1,
        bl0Pbuffer=2 if l0ab_double else 1,
        cl0Pbuffer=2 if b.base_m * b.base_n * 4 <= BUFFER_BYTES["L0C"] // 2 else 1,
        al1Pbuffer=b.al1,
        bl1Pbuffer=b.bl1,
        singleCoreGroup=1,
        singleCoreCout=cout1 * C0,
        singleCoreCout1=cout1,
        singleCoreCin1=cin_per_task // C0,
        singleCoreDin=1,
        singleCoreHo=rows_per_task,
        baseM=b.base_m,
        baseK=b.base_k,
        baseN=b.base_n,
        baseD=1,
        baseBatch=1,
        baseGroup=1,
        stepM=1,
        stepN=1,
        stepKa=b.step_ka,
        stepKb=b.step_kb,
        stepBatch=1,
        stepGroup=1,
        iterateOrder=1,  # ORDER_N: channels outer, pixels inner
        hf32Flag=0,
        initOutputFlag=int(init_output),
        reserved=0,
        singleCoreBatch=1,
        singleCoreM=rows_per_task * cols.size,
        singleCoreCin=cin_per_task,
    )


def _load_b2_mode(p, base_k):
    if p.taps == 1:
        return B2_HKWK_EQ_ONE
    return B2_BASEK_GE_HKWK if base_k // C0 >= p.taps else B2_BASEK_LT_HKWK


# --- the plan ---------------------------------------------------------------------------------
def _task_grid(p, t):
    """task_grid and images_per_launch."""
    rows_per_task, cin_per_task, m_tasks, n_tasks = task_grid(p, t)
    return (
        rows_per_task,
        cin_per_task,
        m_tasks,
        n_tasks,
        min(p.n, MAX_BLOCKS // (m_tasks * n_tasks)),
    )


def _stripes(p, rows, start, rows_per_task, cin_per_task, init_output):
    """The widest W stripes whose dy windows fit the API, each with its API tiling; else None."""
    for base_m in dict.fromkeys((start.base_m, C0)):
        chosen = {}  # stripes of equal geometry share their blocks
        for width in _stripe_widths(p.win):
            stripes = []
            for c in range(0, p.win, width):
                stop = min(c + width, p.win)
                cols = axis_window(c, stop, p.wout, p.kw, p.sw, p.pl, p.dw)
                if cols is None:
                    stripes.append(Stripe(unreached_window(c, stop), None, 0))
                    continue
                key = (cols.count, cols.size)
                if key not in chosen:
                    chosen[key] = _choose_blocks(p, rows, cols, start, base_m)
                blocks = chosen[key]
                if blocks is None:
                    break
                api = _api_tiling(p, rows, cols, blocks, rows_per_task, cin_per_task, init_output)
                stripes.append(Stripe(cols, api, _load_b2_mode(p, blocks.base_k)))
            else:
                return tuple(stripes)
    return None


@functools.lru_cache(maxsize=1024)
def _plan(p, t, dtype):
    """The launches of one (sub-)problem, or None when no stripe of it fits the API."""
    rows_per_task, cin_per_task, m_tasks, n_tasks, images_per_launch = _task_grid(p, t)
    rows = axis_window(0, p.hin, p.hout, p.kh, p.sh, p.pt, p.dh)
    # Stride > 1 leaves dx positions without contributions; the API skips, not writes, them
    # (initOutputFlag), and whole blocks below the last dy row are skipped by the kernel. With
    # stride 1 the window's pads are at most the reach: every M block loads dy rows.
    init_output = p.sh > 1
    skips_blocks = rows is not None and (
        (m_tasks - 1) * rows_per_task - rows.pad_before > (rows.count - 1) * p.sh
    )
    stripes = (
        ()
        if rows is None
        else _stripes(p, rows, _user_blocks(p, t), rows_per_task, cin_per_task, init_output)
    )
    if stripes is None:
        return None
    return LaunchPlan(
        DTYPE_CODES[dtype],
        rows,
        stripes,
        rows_per_task,
        cin_per_task,
        m_tasks,
        n_tasks,
        images_per_launch,
        zero_output=init_output or skips_blocks,
    )


@dataclass(frozen=True)
class PlannedPiece:
    """One sub-problem of a call (``_decompose.Piece``), its geometry and its launches."""

    piece: Piece
    problem: ConvProblem  # the sub-problem's
    launches: LaunchPlan

    @property
    def runs(self):
        """Launch stripes that read anything (the others leave their dx zero)."""
        return [stripe for stripe in self.launches.stripes if stripe.api is not None]

    @property
    def launch_count(self):
        return len(self.runs) * len(self.launches.batch_chunks(self.problem.n))

    def buffer_bytes(self):
        """(weight, largest dy window, largest dx stripe) in the kernel's layouts, in bytes."""
        p = self.problem
        cout16, cin16 = ceil_align(p.cout, C0), ceil_align(p.cin, C0)
        dy = max((cout16 * self.launches.rows.count * s.cols.count for s in self.runs), default=0)
        dx = max((cin16 * p.hin * s.cols.size for s in self.runs), default=0)
        return tuple(
            elements * p.dtype_size for elements in (cin16 * cout16 * p.taps, p.n * dy, p.n * dx)
        )

    def host_bytes(self):
        """Host memory this piece's re-layout needs at its peak (``_conv._run_piece``): each
        re-laid-out array exists twice for a moment (zero-padded source, transposed result)."""
        p = self.problem
        folded = self.piece.groups > 1  # a folded piece copies dy and the weight first
        copies = (p.n * p.cout * p.hout * p.wout + p.cout * p.cin * p.taps) if folded else 0
        return copies * p.dtype_size + 2 * sum(self.buffer_bytes())


@dataclass(frozen=True, eq=False)
class CallPlan:
    """A call's sub-problems (one, unless no single launch fits) and their launches."""

    pieces: tuple  # of PlannedPiece

    @property
    def launch_count(self):
        return sum(piece.launch_count for piece in self.pieces)

    def host_bytes(self, p):
        """Host memory of a call at its peak: the output and the largest piece's copies."""
        output = p.n * p.cin * p.hin * p.win * p.dtype_size
        return output + max((piece.host_bytes() for piece in self.pieces), default=0)

    def buffer_bytes(self):
        """(weight, dy window, dx stripe): one device buffer each, sized for the largest use."""
        sizes = [piece.buffer_bytes() for piece in self.pieces] or [(0, 0, 0)]
        return tuple(max(column) for column in zip(*sizes))


@functools.lru_cache(maxsize=64)
def _call_plan(p, t, dtype):
    for pieces in decompositions(p):
        planned = []
        for piece in pieces:
            sub = piece.problem(p)
            launches = _plan(sub, piece_tiling(t, sub), dtype)
            if launches is None:
                break
            planned.append(PlannedPiece(piece, sub, launches))
        else:
            return CallPlan(tuple(planned))
    raise NpuUnsupportedError(
        f"no launch of AscendC's Conv3DBackpropInput fits this problem (kernel {p.kh}x{p.kw}, "
        f"dilation {p.dh}x{p.dw}, stride {p.sh}x{p.sw}, dy {p.hout}x{p.wout}), not even after "
        f"splitting it into stride and dilation phases and folding its taps: every dy window "
        f"needs more than the {L1_API_BYTES} bytes of L1 the API has; compute it on the CPU"
    )


def plan_launches(call):
    """The launch plan of a validated call (``pypto._core.rules.ValidatedCall``); cached."""
    return _call_plan(call.problem, call.tiling, call.dtype)
