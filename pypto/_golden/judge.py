"""One judgement of a dgrad result: the golden, pypto's own result, the metrics, every
standard's verdict and the localisation, as a :class:`CompareResult`.

``pypto.testing.compare`` (a kernel's result, its arguments checked by
:mod:`pypto._golden.arguments`) and the msprobe reader (:mod:`pypto._golden.msprobe`, a dumped
call) both end in :func:`judge_case`; ``pypto.testing`` re-exports what is public here.
"""

import math
from dataclasses import asdict

from .._core import options as _config
from .._core.memory import check_host_memory
from .._core.values import as_int
from .._version import __version__
from ..error import FeError
from . import accuracy as _accuracy
from .bound import ErrorBound
from .case import comparison_bytes, golden_bytes, golden_dgrad, pypto_dgrad
from .grid import to_float32
from .localise import PLOT_UNITS, Localisation

__all__ = ["ALL", "CompareResult", "judge_case", "check_standard", "check_count", "check_top"]

ALL = "all"  # every standard must pass


def check_standard(standard):
    """A PyptoError unless ``standard`` is a standard's id or "all"."""
    # a str first: a list is unhashable, an array answers != elementwise
    if not (isinstance(standard, str) and (standard == ALL or standard in _accuracy.STANDARDS)):
        raise FeError(
            ValueError(
                f"standard must be one of {', '.join(_accuracy.STANDARDS)} or 'all', "
                f"but got {standard!r}"
            )
        )


def check_count(value, name):
    """``value`` as an int >= 0; a PyptoError naming the argument ``name`` otherwise."""
    count = as_int(value)
    if count is None or count < 0:
        kind = TypeError if count is None else ValueError
        raise FeError(kind(f"{name} must be an int >= 0, but got {value!r}"))
    return count


def check_top(top):
    """``top`` (how many worst elements to list) as an int >= 0."""
    return check_count(top, "top")


class CompareResult:
    """What :func:`compare` found: metrics, verdicts, localisation.

    Attributes
    ----------
    case : pypto._golden.case.Case
        The problem, dtype and tiles judged.
    metrics, reference_metrics : pypto._golden.accuracy.Metrics
        The metrics of the result and of pypto's own.
    verdicts : dict
        {standard id: ``pypto._golden.accuracy.Verdict``}, every standard.
    standard : str
        The standard that decides ``passed`` ("all": every one).
    passed : bool
        Whether ``standard`` passes.
    localisation : pypto._golden.localise.Localisation
        Where the failing elements are.
    golden, actual, reference : numpy.ndarray
        The float64 golden, the result, pypto's own result (arrays of the result's own:
        copies of those given to :func:`compare`).
    sum_order : str or None
        The summation order of pypto's own result ("sequential" or "tile"; None when a given
        reference's order was not said).
    """

    def __init__(
        self,
        case,
        golden,
        actual,
        reference,
        metrics,
        reference_metrics,
        verdicts,
        standard,
        localisation,
        sum_order=None,
    ):
        self.case = case
        self.sum_order = sum_order
        self.golden, self.actual, self.reference = golden, actual, reference
        self.metrics, self.reference_metrics = metrics, reference_metrics
        self.verdicts = verdicts
        self.standard = standard
        self.localisation = localisation

    @property
    def passed(self):
        if self.standard == ALL:
            return all(v.passed for v in self.verdicts.values())
        return self.verdicts[self.standard].passed

    @property
    def verdict(self):
        """The deciding Verdict (None for "all")."""
        return None if self.standard == ALL else self.verdicts[self.standard]

    def __bool__(self):
        return self.passed

    def verdict_text(self):
        lines = [
            f"{self.case.describe()}",
            f"  {self.case.describe_tiles()}",
            f"  pypto's own result summed in order {self.sum_order or 'not stated'}",
            f"metrics:  {self.metrics.summary()}",
            f"pypto's:  {self.reference_metrics.summary()}",
            f"ulp distance to the golden rounded to {self.case.dtype_name}: "
            f"{self.metrics.histogram_text()}",
            f"NaN/Inf: {self.metrics.nonfinite_equal} matching, "
            f"{self.metrics.nonfinite_mismatch} mismatched",
        ]
        lines += [str(v) for v in self.verdicts.values()]
        word = "PASS" if self.passed else "FAIL"
        chosen = "every standard" if self.standard == ALL else self.standard
        lines.append(f"verdict ({chosen}): {word}")
        return "\n".join(lines)

    def as_dict(self, top=10):
        """The whole comparison as plain data (``pypto compare --json``): the case and tiles,
        both sides' metrics, every verdict with its thresholds and source, the deciding
        standard and the localisation (``top`` worst elements)."""
        top = check_top(top)
        return {
            "pypto_version": __version__,
            "case": self.case.as_dict(),
            "sum_order": self.sum_order,
            "metrics": _accuracy.json_ready(asdict(self.metrics)),
            "pypto_metrics": _accuracy.json_ready(asdict(self.reference_metrics)),
            "verdicts": {sid: v.as_dict() for sid, v in self.verdicts.items()},
            "standard": self.standard,
            "passed": self.passed,
            "localisation": self.localisation.as_dict(top),
        }

    def report(self, top=10):
        """The verdicts, then where the errors are and the ``top`` worst elements."""
        return self.verdict_text() + "\n" + self.localisation.format(check_top(top))

    def __str__(self):
        return self.report()

    def plot(self, path, units="ulp"):
        """Heatmap of the error (see ``pypto._golden.localise.Localisation.plot``, which checks the
        path before drawing); returns ``path``."""
        if not isinstance(units, str):  # the membership test would compare an array elementwise
            raise FeError(
                TypeError(
                    f"units must be one of {', '.join(PLOT_UNITS)}, but got {type(units).__name__}"
                )
            )
        return self.localisation.plot(path, units)


def judge_case(
    case, dy, w, actual, standard, golden=None, reference=None, reference_sum_order=None
):
    """Judge ``actual`` (dx of ``case``, a native fp16/bf16 array) computed from ``dy`` and
    ``w``: a :class:`CompareResult` deciding by ``standard`` (checked by the caller).

    ``golden`` (float64, the result's to keep) and ``reference`` (pypto's own result in the
    case's dtype, copied), when given, have the case's input_size; when None they are
    computed, the reference in the summation order in force, which the result records.
    The error bound is computed where it can decide (``bound.ErrorBound``); the result keeps
    float32 copies of ``dy`` and ``w`` to make every element's when asked for.
    Raises PyptoMemoryError, before allocating anything, when the host's memory is short.
    """
    # everything this call allocates, before any of it
    check_host_memory(
        comparison_bytes(case) + golden_bytes(case) * (1 if golden is not None else 2),
        case.problem,
        f"the float64 golden, its error bound and the comparison of "
        f"{math.prod(case.input_size)} elements",
    )
    # the result keeps its own copies of actual and reference, so that the caller's arrays
    # changing later (a torch gradient that the next backward adds into) never change what it
    # says was judged
    actual = actual.copy()
    dy32, w32 = to_float32(dy), to_float32(w)  # exact; the golden and the bound both read them
    if golden is None:
        golden = golden_dgrad(case, dy32, w32)
    if reference is None:
        reference = pypto_dgrad(case, dy, w)
        reference_sum_order = _config.get_sum_order(case.dtype)
    else:
        reference = reference.copy()
    grid = _accuracy.golden_grid(golden, case.dtype)  # shared by both results and the bound
    errors = _accuracy.element_errors(actual, golden, case.dtype, grid)
    reference_errors = _accuracy.element_errors(reference, golden, case.dtype, grid)
    metrics = _accuracy.measure(errors, golden, case.dtype, grid)
    reference_metrics = _accuracy.measure(reference_errors, golden, case.dtype, grid)
    verdicts = _accuracy.judge(metrics, reference_metrics, case.dtype)
    bound = ErrorBound(case, dy32, w32, golden, grid)  # only where it can decide
    localisation = Localisation(case, golden, actual, reference, errors, reference_errors, bound)
    return CompareResult(
        case,
        golden,
        actual,
        reference,
        metrics,
        reference_metrics,
        verdicts,
        standard,
        localisation,
        reference_sum_order,
    )
