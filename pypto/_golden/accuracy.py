"""Accuracy metrics of a dgrad result against its float64 golden, and CANN's verdicts on them.

The metrics (CANN's operator accuracy standards, against a golden computed at higher precision):
relative error ``|a - g| / (|g| + 1e-7)``, its maximum (MARE) and mean (MERE), RMSE, the largest
absolute error, the error in ulps of the output dtype at the golden (``|a - g| / ulp(g)``), a
histogram of the distance in representable values between ``a`` and the golden rounded once to
the output dtype, and the shares of elements with relative error below 0.001 and 0.01.

Non-finite values: a NaN where the golden rounded to the output dtype is NaN, or an Inf of the
same sign, counts as equal (error 0); any other non-finite mismatch is counted apart and fails
every standard. The metrics above cover the elements where both sides are finite.

The standards (``STANDARDS``, thresholds as CANN publishes them; each verdict names its version):

- ``single-2026-04``: single benchmark (community), 2026-04: MERE < T and MARE < 10 T,
  T = 2^-10 (fp16), 2^-7 (bf16).
- ``single-2026-07``: single benchmark, 2026-07: an element passes when
  |a - g| <= atol + rtol |g| (atol = rtol = 2^-9 fp16, 2^-6 bf16); the case passes when at least
  99% of the elements pass and the largest absolute error is within 0.1 (fp16) / 1.0 (bf16).
- ``dual-L0`` / ``dual-L1`` / ``dual-L2``: dual benchmark (commercial): the MARE, MERE and RMSE
  of the result over the elements with |g| >= a small-value limit (2^-11 fp16, 2^-8 bf16),
  divided by the same metrics of a second same-precision implementation (pypto's own result),
  at most 10 / 2 / 2 (L0), 5 / 1.5 / 1.5 (L1), 2 / 1.2 / 1.2 (L2). Small values are judged
  apart: an error is |a - g| > 2^-16, and the result may have at most twice the second
  implementation's count. A ratio whose denominator is 0 is 0 when its numerator is 0 too, else
  infinite.
- ``msprobe``: msprobe's "double thousandths": the share of elements with relative error below
  0.001 must exceed 0.999; for fp16/bf16 failing the 0.01 form (share below 0.01 > 0.99) is an
  error, failing the 0.001 form only a warning.

``SOURCES`` says where each standard's thresholds come from and whether they were checked
against a published copy; every verdict carries its source (``Verdict.source``, the JSON report).
"""

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .._dtypes import DataType, dtype_name
from .elementwise import judge_pass
from .grid import (
    GRID_LIMITS,
    GoldenGrid,
    golden_grid,
    grid_round,
    ordinal,
    pattern_values,
    to_float64,
    ulp_at,
    ulp_distance,
)

__all__ = [
    "STANDARDS",
    "SOURCES",
    "DEFAULT_STANDARD",
    "Metrics",
    "Verdict",
    "measure",
    "judge",
    "grid_round",
    "ulp_at",
    "ulp_distance",
    "GoldenGrid",
    "golden_grid",
    "element_errors",
    "ElementErrors",
    "json_ready",
]

EPS = 1e-7  # the relative error's guard against a zero golden
ULP_BINS = (
    (0, 0, "0"),
    (1, 1, "1"),
    (2, 2, "2"),
    (3, 4, "3-4"),
    (5, 16, "5-16"),
    (17, 256, "17-256"),
    (257, None, ">256"),
)


# --- element errors and the metrics ------------------------------------------------------------
ABOVE_KEPT = 1 << 13  # elements more than one ulp off that ElementErrors lists (bound.DIRECT_MAX)


class ElementErrors:
    """Per-element errors of one result against the golden, from the judgement's one pass
    (``elementwise.judge_pass``): ``sums``, the pass's sums and counts (``measure`` reads
    them), and ``row_max_abs`` / ``row_max_ulp``, the largest of each dx row (N, C, H). The
    arrays of every element are made when first asked for: ``abs`` = |a - g| (0 where
    non-finite values match, inf on a mismatch) and ``ulp`` = abs / ulp(g) by the pass again;
    ``rel`` (abs / (|g| + 1e-7)), ``distance`` (representable values between a and the golden
    rounded once; -1 where not compared), ``finite`` (both sides finite: the elements the
    metrics cover) and ``mismatch`` (a non-finite side, and not equal) from the grid's
    definitions. ``above``: (flat index, abs, ulp) of the elements more than one ulp off, when
    they are at most ABOVE_KEPT (else None): what the error bound's test needs."""

    def __init__(self, actual, golden, grid):
        self._actual, self._golden, self._grid = actual, golden, grid
        self.sums, self.row_max_abs, self.row_max_ulp, self.above = self._pass(write=False)

    def _pass(self, write):
        """Run the pass: (sums, row maxima of abs, of ulp, above[, abs, ulp] when ``write``)."""
        dtype, shape = self._grid.dtype, np.shape(self._golden)
        values = np.ascontiguousarray(self._golden, dtype=np.float64).reshape(-1)
        bits = np.ascontiguousarray(self._actual).view(np.uint16).reshape(-1)
        if bits.size != values.size:
            raise ValueError(f"shapes differ: {np.shape(self._actual)} and {shape}")
        row = shape[-1] if shape and shape[-1] else 1  # a dx row: the last axis
        rows = shape[:-1] if shape and shape[-1] else (values.size,)
        row_abs, row_ulp = np.empty(rows), np.empty(rows)
        out = (np.empty(shape), np.empty(shape)) if write else ()
        per_distance = np.zeros(_LAST_BOUND + 1, dtype=np.int64)
        above = np.empty(ABOVE_KEPT, np.int64), np.empty(ABOVE_KEPT), np.empty(ABOVE_KEPT)
        mantissa, emin, emax = GRID_LIMITS[dtype]
        sums = judge_pass(
            values,
            bits,
            pattern_values(dtype),
            mantissa,
            emin,
            emax,
            SINGLE_2026_07[dtype][0],
            DUAL_SMALL[dtype],
            DUAL_SMALL_ERROR,
            per_distance,
            row,
            row_abs.reshape(-1),
            row_ulp.reshape(-1),
            *above,
            *(o.reshape(-1) for o in out),
        )
        sums["per_distance"] = per_distance
        count = sums["above_1ulp"]
        above = tuple(a[:count] for a in above) if count <= ABOVE_KEPT else None
        return (sums, row_abs, row_ulp, above, *out)

    @cached_property
    def _arrays(self):
        return self._pass(write=True)[4:]

    @property
    def abs(self):
        return self._arrays[0]

    @property
    def ulp(self):
        return self._arrays[1]

    @cached_property
    def finite(self):
        return np.isfinite(to_float64(self._actual)) & self._grid.rounded_finite

    @cached_property
    def mismatch(self):
        if not self.sums["mismatches"]:
            return np.zeros(np.shape(self._golden), dtype=bool)
        return self.abs == np.inf

    @cached_property
    def rel(self):
        return self.abs / (self._grid.magnitude + EPS)

    @cached_property
    def distance(self):
        actual = ordinal(np.ascontiguousarray(self._actual).view(np.uint16))
        return np.where(self.finite, np.abs(actual - self._grid.ordinal), -1)


def element_errors(actual, golden, dtype, grid=None):
    """:class:`ElementErrors` of ``actual`` (fp16/bf16 array) against ``golden`` (float64);
    ``grid``: its :class:`GoldenGrid`, when the caller judges more than one result."""
    if grid is None:
        grid = golden_grid(golden, dtype)
    return ElementErrors(actual, golden, grid)


@dataclass
class Metrics:
    """The accuracy metrics of one result against the golden (see the module's text)."""

    elements: int
    compared: int  # both sides finite
    nonfinite_equal: int
    nonfinite_mismatch: int
    mare: float
    mere: float
    rmse: float
    max_abs: float
    max_ulp: float
    ulp_histogram: dict  # label -> count, over the compared elements
    share_rel_below_1e3: float  # over all elements (matching non-finite pass, mismatches fail)
    share_rel_below_1e2: float
    share_within_2026_07: float  # |a-g| <= atol + rtol |g|
    large: dict = field(default_factory=dict)  # MARE/MERE/RMSE over |g| >= the small limit
    small_values: int = 0  # elements with |g| < the small limit
    small_errors: int = 0  # of those, |a-g| > 2^-16

    def summary(self):
        return (
            f"MARE {self.mare:.3g}, MERE {self.mere:.3g}, RMSE {self.rmse:.3g}, max abs "
            f"{self.max_abs:.3g}, max {self.max_ulp:.3g} ulp"
        )

    def histogram_text(self):
        total = max(self.compared, 1)
        return ", ".join(
            f"{label}: {n} ({100 * n / total:.2f}%)" if n else f"{label}: 0"
            for label, n in self.ulp_histogram.items()
        )


# distances past the last bound share its bin; the bins are consecutive runs of distances, so a
# count per distance (0 ... _LAST_BOUND) summed from each bin's first distance is the histogram
_LAST_BOUND = ULP_BINS[-2][1] + 1
_BIN_STARTS = np.array([lo for lo, _, _ in ULP_BINS], dtype=np.intp)


def _mean(total, count):
    return total / count if count else 0.0


def measure(errors, golden, dtype, grid=None):
    """:class:`Metrics` from :func:`element_errors`' result (its pass's sums; ``golden``,
    ``dtype`` and ``grid`` are those it was made with)."""
    s = errors.sums
    total = int(np.size(golden))
    compared, large = s["compared"], s["large"]
    counts = np.add.reduceat(s["per_distance"], _BIN_STARTS)
    share = max(total, 1)
    return Metrics(
        elements=total,
        compared=compared,
        nonfinite_equal=total - compared - s["mismatches"],
        nonfinite_mismatch=s["mismatches"],
        mare=s["max_rel"],
        mere=_mean(s["sum_rel"], compared),
        rmse=float(np.sqrt(_mean(s["sum_sq"], compared))),
        max_abs=s["max_abs"],
        max_ulp=s["max_ulp"],
        ulp_histogram={label: int(n) for (_, _, label), n in zip(ULP_BINS, counts)},
        share_rel_below_1e3=s["below_1e3"] / share,
        share_rel_below_1e2=s["below_1e2"] / share,
        share_within_2026_07=s["within"] / share,
        large={
            "mare": s["large_max_rel"],
            "mere": _mean(s["large_sum_rel"], large),
            "rmse": float(np.sqrt(_mean(s["large_sum_sq"], large))),
        },
        small_values=s["small_values"],
        small_errors=s["small_errors"],
    )


# --- the standards -----------------------------------------------------------------------------
SINGLE_2026_04 = {DataType.DT_FP16: 2.0**-10, DataType.DT_BF16: 2.0**-7}
SINGLE_2026_07 = {DataType.DT_FP16: (2.0**-9, 0.1), DataType.DT_BF16: (2.0**-6, 1.0)}
SINGLE_2026_07_SHARE = 0.99
DUAL_SMALL = {DataType.DT_FP16: 2.0**-11, DataType.DT_BF16: 2.0**-8}
DUAL_SMALL_ERROR = 2.0**-16
DUAL_SMALL_FACTOR = 2
DUAL_LEVELS = {"L0": (10.0, 2.0, 2.0), "L1": (5.0, 1.5, 1.5), "L2": (2.0, 1.2, 1.2)}
MSPROBE = ((1e-3, 0.999), (1e-2, 0.99))


def _pow2(v):
    """2^-k for powers of two (thresholds read as CANN writes them), else the number."""
    e = np.log2(v)
    return f"2^{int(e)}" if e == int(e) else f"{v:g}"


@dataclass
class Verdict:
    """One standard's verdict: which standard and version, pass or fail, numbers, thresholds."""

    standard: str  # the id, e.g. "dual-L0"
    name: str  # e.g. "dual-benchmark (commercial)"
    version: str  # e.g. "L0", "2026-04"
    passed: bool
    numbers: dict
    thresholds: dict
    detail: str  # the numbers against the thresholds, in words
    warning: str = None
    source: str = ""  # where the thresholds come from (SOURCES)

    def __str__(self):
        word = "PASS" if self.passed else "FAIL"
        if self.passed and self.warning:
            word = "PASS (warning)"
        text = f"{word:<14} {self.standard:<15} {self.name} {self.version}: {self.detail}"
        if self.warning:
            text += f"; warning: {self.warning}"
        return text

    def __bool__(self):
        return self.passed

    def as_dict(self):
        """JSON-ready: every field; infinite ratios as the string "inf"."""
        return {
            "standard": self.standard,
            "name": self.name,
            "version": self.version,
            "source": self.source,
            "passed": self.passed,
            "warning": self.warning,
            "detail": self.detail,
            "numbers": json_ready(self.numbers),
            "thresholds": json_ready(self.thresholds),
        }


def json_ready(v):
    """v for JSON, which has no inf or nan: those as the strings "inf", "-inf", "nan", also
    inside (nested) dicts."""
    if isinstance(v, dict):
        return {k: json_ready(x) for k, x in v.items()}
    return v if not isinstance(v, float) or np.isfinite(v) else str(v)


def _mismatch_note(m):
    if m.nonfinite_mismatch:
        return f"; {m.nonfinite_mismatch} NaN/Inf mismatch(es) with the golden: fails"
    return ""


def _single_2026_04(m, ref, dtype):
    t = SINGLE_2026_04[dtype]
    passed = m.mere < t and m.mare < 10 * t and not m.nonfinite_mismatch
    detail = (
        f"MERE {m.mere:.3g} {'<' if m.mere < t else '>='} {t:.3g} (T = {_pow2(t)}), "
        f"MARE {m.mare:.3g} {'<' if m.mare < 10 * t else '>='} {10 * t:.3g} (10 T)"
        + _mismatch_note(m)
    )
    return (
        passed,
        {"mere": m.mere, "mare": m.mare, "nonfinite_mismatch": m.nonfinite_mismatch},
        {"mere_below": t, "mare_below": 10 * t},
        detail,
        None,
    )


def _single_2026_07(m, ref, dtype):
    tol, hard = SINGLE_2026_07[dtype]
    share = m.share_within_2026_07
    passed = share >= SINGLE_2026_07_SHARE and m.max_abs <= hard and not m.nonfinite_mismatch
    detail = (
        f"{100 * share:.2f}% of elements within {_pow2(tol)} + {_pow2(tol)} |g| "
        f"(need >= {100 * SINGLE_2026_07_SHARE:g}%), max abs error {m.max_abs:.3g} "
        f"{'<=' if m.max_abs <= hard else '>'} {hard:g}" + _mismatch_note(m)
    )
    return (
        passed,
        {"share_within": share, "max_abs": m.max_abs, "nonfinite_mismatch": m.nonfinite_mismatch},
        {"atol": tol, "rtol": tol, "share_at_least": SINGLE_2026_07_SHARE, "max_abs": hard},
        detail,
        None,
    )


def _ratio(a, b):
    if b == 0:
        return 0.0 if a == 0 else float("inf")
    return a / b


def _dual(level):
    def judge_level(m, ref, dtype):
        limits = DUAL_LEVELS[level]
        ratios = {k: _ratio(m.large[k], ref.large[k]) for k in ("mare", "mere", "rmse")}
        ok = all(ratios[k] <= lim for k, lim in zip(("mare", "mere", "rmse"), limits))
        allowed = DUAL_SMALL_FACTOR * ref.small_errors
        small_ok = m.small_errors <= allowed
        passed = ok and small_ok and not m.nonfinite_mismatch
        parts = ", ".join(
            f"{k.upper()} {ratios[k]:.3g} {'<=' if ratios[k] <= lim else '>'} {lim:g}"
            for k, lim in zip(("mare", "mere", "rmse"), limits)
        )
        detail = (
            f"ratios to pypto's {dtype_name(dtype)} result: {parts}; small values "
            f"(|g| < {_pow2(DUAL_SMALL[dtype])}, {m.small_values}): {m.small_errors} "
            f"errors > {_pow2(DUAL_SMALL_ERROR)} vs pypto's {ref.small_errors} "
            f"(at most {allowed})" + _mismatch_note(m)
        )
        numbers = {f"{k}_ratio": v for k, v in ratios.items()}
        numbers.update(
            {
                "small_errors": m.small_errors,
                "reference_small_errors": ref.small_errors,
                "nonfinite_mismatch": m.nonfinite_mismatch,
                **{f"{k}": v for k, v in m.large.items()},
                **{f"reference_{k}": v for k, v in ref.large.items()},
            }
        )
        thresholds = {
            "mare_ratio": limits[0],
            "mere_ratio": limits[1],
            "rmse_ratio": limits[2],
            "small_limit": DUAL_SMALL[dtype],
            "small_error": DUAL_SMALL_ERROR,
            "small_errors_at_most": allowed,
        }
        return passed, numbers, thresholds, detail, None

    return judge_level


def _msprobe(m, ref, dtype):
    (r3, s3), (r2, s2) = MSPROBE
    a3, a2 = m.share_rel_below_1e3, m.share_rel_below_1e2
    passed = a2 > s2 and not m.nonfinite_mismatch
    warning = None
    if a3 <= s3:
        warning = (
            f"{100 * a3:.2f}% below {r3:g} (double thousandths want > {100 * s3:g}%); "
            f"for {dtype_name(dtype)} only the {r2:g} form is an error"
        )
    detail = (
        f"{100 * a2:.3f}% of elements with relative error < {r2:g} "
        f"(need > {100 * s2:g}%), {100 * a3:.3f}% < {r3:g} (want > {100 * s3:g}%)"
        + _mismatch_note(m)
    )
    return (
        passed,
        {
            "share_below_0.01": a2,
            "share_below_0.001": a3,
            "nonfinite_mismatch": m.nonfinite_mismatch,
        },
        {"share_below_0.01_above": s2, "share_below_0.001_above": s3},
        detail,
        warning,
    )


# id: (name, version, judge(metrics, reference metrics, dtype))
STANDARDS = {
    "single-2026-04": ("single-benchmark (community)", "2026-04", _single_2026_04),
    "single-2026-07": ("single-benchmark (community)", "2026-07", _single_2026_07),
    "dual-L0": ("dual-benchmark (commercial)", "L0", _dual("L0")),
    "dual-L1": ("dual-benchmark (commercial)", "L1", _dual("L1")),
    "dual-L2": ("dual-benchmark (commercial)", "L2", _dual("L2")),
    "msprobe": ("msprobe double thousandths", "(fp16/bf16 rule)", _msprobe),
}
# Where each standard's thresholds come from, and how far they were checked (in the JSON report
# and docs/golden.md). The dual standard carries levels, not dates, in its published form.
_CHECKED = (
    "thresholds cross-checked 2026-12 against the cannbot ops-precision-standard "
    "skill (gitcode W4termy/cannbot, ops/ops-precision-standard)"
)
SOURCES = {
    "single-2026-04": "CANN community operator accuracy standard, threshold form (MERE < T, "
    f"MARE < 10 T), 2026-04 revision; {_CHECKED}, reference/"
    "quantization_community.md",
    "single-2026-07": "CANN community operator accuracy standard, 2026-07 revision (element "
    "atol/rtol rule, 99% share, max-abs limit), as summarised in pypto issue "
    "12; not cross-checked with a published copy",
    **{
        f"dual-{level}": "CANN commercial operator accuracy standard, floating-point compute, "
        f"dual benchmark, level {level} (ratios) and the small-value rule; "
        f"{_CHECKED}, reference/float_compute.md and scripts/"
        "small_value_check.py"
        for level in DUAL_LEVELS
    },
    "msprobe": "msprobe (mindstudio-probe) accuracy comparison, the double-thousandths rule "
    "for fp16/bf16, as summarised in pypto issue 12; not cross-checked with a "
    "published copy",
}
DEFAULT_STANDARD = "dual-L0"


def judge(metrics, reference_metrics, dtype):
    """{standard id: Verdict} for every standard."""
    verdicts = {}
    for sid, (name, version, rule) in STANDARDS.items():
        passed, numbers, thresholds, detail, warning = rule(metrics, reference_metrics, dtype)
        verdicts[sid] = Verdict(
            sid, name, version, bool(passed), numbers, thresholds, detail, warning, SOURCES[sid]
        )
    return verdicts
