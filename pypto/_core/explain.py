"""explain_convbp_input_tiling: what the NPU rules say about a set of tiles, with the numbers.

Every verdict comes from the op's own rule checks (pypto._core.rules) and every number from the
one tiling model (pypto._core.tiling), so the explanation can never disagree with the op.
"""

import itertools
from dataclasses import dataclass, field

from ..error import ConvBpInputError, FeError, argument_errors_are_pypto_errors
from ..pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info
from . import options as _config
from .rules import (
    RULES,
    TILE_CHECKS,
    TILE_RULES,
    VEC_CHECKS,
    _problem_of,
    _shape_only_call,
    check_message,
    rule_message,
)
from .tiling import BUFFER_BYTES, C0, MAX_L0_LOOPS, ConvProblem, Tiling, ceil_align, ceil_div

__all__ = ["explain_convbp_input_tiling", "TilingReport"]


@dataclass
class TilingReport:
    """The result of :func:`explain_convbp_input_tiling`; ``str(report)`` prints it."""

    problem: ConvProblem
    tiling: Tiling
    rules: list  # (rule id, passed, what it checks, numbers or message), in the op's order
    buffers: dict  # name -> (bytes used, capacity)
    loops: dict  # name -> count
    suggestion: tuple = None  # nearest legal (ConvBpTileL1Info, ConvBpTileL0Info)
    warnings: list = field(default_factory=list)
    sources: list = field(default_factory=list)  # per row of rules: where its text comes from

    @property
    def legal(self):
        """True when every rule passes."""
        return all(passed for _, passed, _, _ in self.rules)

    def __str__(self):
        p, t = self.problem, self.tiling
        lines = [
            f"dgrad GEMM per image: M = Hin*Win = {p.gemm_m}, N = Cin = {p.gemm_n}, "
            f"K = Cout*Kh*Kw = {p.gemm_k}",
            f"tiles: L1 (M, K, N) = ({t.ml1}, {t.kl1}, {t.nl1}), "
            f"L0 (M, K, N) = ({t.ml0}, {t.kl0}, {t.nl0})",
            "rules, in the order the op checks them [where each text comes from]:",
        ]
        sources = self.sources or [None] * len(self.rules)
        for (rule_id, passed, text, detail), source in zip(self.rules, sources):
            lines.append(
                f"  {rule_id:<4} {'pass' if passed else 'FAIL'}  {text}: {detail}"
                + (f"  [{source}]" if source else "")
            )
        lines.append("buffers (Atlas A2/A3, per AI core):")
        for name, (used, capacity) in self.buffers.items():
            lines.append(
                f"  {name:<4} {used:>9} / {capacity:>7} bytes  {100 * used / capacity:6.1f}%"
            )
        lines.append("loop counts per image:")
        for name, count in self.loops.items():
            lines.append(f"  {name:<34} {count}")
        lines.extend(f"warning: {w}" for w in self.warnings)
        if self.suggestion is not None:
            l1, l0 = self.suggestion
            lines.append(
                f"nearest legal tiles: ConvBpTileL1Info({l1.tileML1}, {l1.tileKL1}, "
                f"{l1.tileNL1}), ConvBpTileL0Info({l0.tileML0}, {l0.tileKL0}, {l0.tileNL0})"
            )
        lines.append("verdict: " + ("legal on Atlas A2/A3" if self.legal else "NOT legal"))
        return "\n".join(lines)


def _numbers(rule_id, p, t, vec_tile):
    """The quantities each rule compares, for the report."""
    if rule_id == "TS1":
        return f"tileML1 {t.ml1}, Win {p.win}"
    if rule_id == "TS2":
        return f"tileNL1 {t.nl1}"
    if rule_id == "TS3":
        return f"tileKL1 {t.kl1}, 16*Kh*Kw {C0 * p.taps}"
    if rule_id == "TS4":
        return (
            f"tileML0 {t.ml0} <= {ceil_align(t.ml1, C0)}, tileKL0 {t.kl0} <= {t.kl1}, "
            f"tileNL0 {t.nl0} <= {t.nl1}"
        )
    if rule_id == "TS5":
        return (
            f"L0A {t.l0a_bytes(p)} <= {BUFFER_BYTES['L0A']}, L0B {t.l0b_bytes(p)} <= "
            f"{BUFFER_BYTES['L0B']}, L0C {t.l0c_bytes(p)} <= {BUFFER_BYTES['L0C']}"
        )
    if rule_id == "TS6":
        hout_l1, wout_l1, cout_l1 = t.l1_dy_window(p)
        return (
            f"({t.kl1}*{t.nl1} + {hout_l1}*{wout_l1}*{cout_l1}) * {p.dtype_size} = "
            f"{t.l1_bytes(p)} <= {BUFFER_BYTES['L1']}"
        )
    return f"vec_tile_shapes {vec_tile}"


_TS0_ERROR, _TS0_CHECK = next((e.error, e.check) for e in RULES if e.rule == "TS0")


def _as_the_op_reads(call, tile_l1_info, tile_l0_info, vec_tile_shapes):
    """(tiling, vec tile) as the op reads them, through the op's own option normalisation and
    TS0 check, so that explain refuses exactly what the op refuses: a vec tile value that is no
    int is the op's FeError, a tile value that is no int the op's TS0 error, and NumPy integers
    become ints (a uint64 would overflow in the numbers below).

    TS0's other refusals, all-zero tiles ("not set") and no vec tile, are not raised: here
    they are the values asked about, and the report judges them (TS1-TS6, V1)."""
    vec = {} if vec_tile_shapes is None else {"vec_tile_shapes": vec_tile_shapes}
    with _config.options(convbp_tile_shapes=(tile_l1_info, tile_l0_info), **vec):
        message = _TS0_CHECK(call)
        vec_tile = _config.get_vec_tile_shapes()
    # the check leaves call.tiling as given when it refuses a value that is no int
    if message is not None and any(type(v) is not int for v in call.tiling):
        raise _TS0_ERROR("TS0", message)
    return call.tiling, vec_tile


def _nearest_legal(p, t):
    """The legal tiles closest to ``t`` (smallest summed relative change), or None."""

    def around(value, step, lo, extra=()):
        low = max(lo, value // step * step)
        options = {low, low + step, max(lo, low - step), *extra}
        return sorted(v for v in options if v >= 1)

    ml1s = around(
        t.ml1,
        1,
        1,
        (p.win, max(1, t.ml1 // p.win) * p.win, ceil_div(t.ml1, p.win) * p.win, min(t.ml1, p.win)),
    )
    kl1s = around(t.kl1, C0 * p.taps, C0 * p.taps)
    nl1s = around(t.nl1, C0, C0)
    best, best_cost = None, None
    for ml1, kl1, nl1 in itertools.product(ml1s, kl1s, nl1s):
        # L0 values near the given ones, and each clipped to its L1 bound (TS4)
        bounds = (ceil_align(ml1, C0), kl1, nl1)
        l0s = [
            around(v, C0, C0, (max(C0, min(v, b) // C0 * C0),))
            for v, b in zip((t.ml0, t.kl0, t.nl0), bounds)
        ]
        for ml0, kl0, nl0 in itertools.product(*l0s):
            tiling = Tiling(ml1, kl1, nl1, ml0, kl0, nl0)
            if any(rule_message(r, p, tiling) for r in TILE_RULES):
                continue
            cost = sum(abs(a - b) / max(b, 1) for a, b in zip(tiling, t))
            if best_cost is None or cost < best_cost:
                best, best_cost = tiling, cost
    return best


@argument_errors_are_pypto_errors
def explain_convbp_input_tiling(
    grad_output_shape,
    weight_shape,
    input_size,
    dtype,
    strides,
    paddings,
    dilations,
    tile_l1_info,
    tile_l0_info,
    vec_tile_shapes=None,
):
    """Explain how the NPU's tile rules judge a set of conv_backward_input tiles.

    Parameters
    ----------
    grad_output_shape, weight_shape, input_size : sequences of 4 ints
    dtype : pypto.DataType (DT_FP16 or DT_BF16)
    strides, paddings, dilations : as for conv_backward_input
    tile_l1_info : pypto.pypto_impl.ConvBpTileL1Info
    tile_l0_info : pypto.pypto_impl.ConvBpTileL0Info
    vec_tile_shapes : list of int, optional
        Defaults to the vector tile shapes currently set.

    Returns
    -------
    TilingReport
        Each rule TS1-TS6 and V1 in the order the op checks them, with the numbers it compares
        and where its text comes from (an upstream commit, or pypto only: ``sources``), the
        L0A/L0B/L0C/L1 buffer use, the loop counts at each level (upstream warns above 5000 L0
        iterations), and, when a rule fails, the nearest legal tiles. ``print(report)`` shows
        it all.
    """
    if not isinstance(tile_l1_info, ConvBpTileL1Info) or not isinstance(
        tile_l0_info, ConvBpTileL0Info
    ):
        raise FeError(
            TypeError("tile_l1_info / tile_l0_info must be ConvBpTileL1Info / ConvBpTileL0Info")
        )
    # the op's rules T1 ... B1, then its TS0 on these tiles
    call = _shape_only_call(
        grad_output_shape, weight_shape, input_size, dtype, strides, paddings, dilations
    )
    p = _problem_of(call)
    t, vec_tile = _as_the_op_reads(call, tile_l1_info, tile_l0_info, vec_tile_shapes)
    rules, sources = [], []
    for entry in TILE_CHECKS + VEC_CHECKS:  # the op's order: TS3 is checked in two places
        message = check_message(entry, p, t, vec_tile)
        detail = _numbers(entry.rule, p, t, vec_tile)
        rules.append(
            (
                entry.rule,
                message is None,
                entry.what,
                detail if message is None else f"{detail} -- {message}",
            )
        )
        sources.append(entry.source)
    hout_l1, wout_l1, cout_l1 = t.l1_dy_window(p)
    buffers = {
        "L0A": (t.l0a_bytes(p), BUFFER_BYTES["L0A"]),
        "L0B": (t.l0b_bytes(p), BUFFER_BYTES["L0B"]),
        "L0C": (t.l0c_bytes(p), BUFFER_BYTES["L0C"]),
        "L1": (t.l1_bytes(p), BUFFER_BYTES["L1"]),
    }
    rows, cols = t.m_tile_rows_cols(p) if t.ml1 > 0 else (1, 1)
    loops = {
        "L1 N blocks (Cin / tileNL1)": ceil_div(p.cin, max(t.nl1, 1)),
        "L1 M tiles (pixels / tileML1)": ceil_div(p.hin, rows) * ceil_div(p.win, cols),
        "L1 K blocks (Cout*Kh*Kw / tileKL1)": ceil_div(p.gemm_k, max(t.kl1, 1)),
        "L0 iterations (N x M x K at L0)": t.l0_loop_count(p)
        if min(t.ml0, t.kl0, t.nl0) > 0
        else 0,
    }
    warnings = []
    if loops["L0 iterations (N x M x K at L0)"] > MAX_L0_LOOPS:
        warnings.append(
            f"more than {MAX_L0_LOOPS} L0 iterations per image: upstream suggests "
            "larger tiles to cut compilation time"
        )
    report = TilingReport(p, t, rules, buffers, loops, warnings=warnings, sources=sources)
    if not report.legal:
        nearest = _nearest_legal(p, t) if all(v > 0 for v in t) else None
        if nearest is None:
            from .suggest import suggest_convbp_input_tile_shapes

            try:
                report.suggestion = suggest_convbp_input_tile_shapes(
                    grad_output_shape, weight_shape, input_size, dtype, strides, paddings, dilations
                )
            except ConvBpInputError as exc:  # no tiles are legal for this problem: say why
                report.warnings.append(exc.msg.partition(f"{exc.builtin.__name__}: ")[2])
        else:
            report.suggestion = (
                ConvBpTileL1Info(nearest.ml1, nearest.kl1, nearest.nl1),
                ConvBpTileL0Info(nearest.ml0, nearest.kl0, nearest.nl0),
            )
    return report
