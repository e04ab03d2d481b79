"""Judge a dgrad result (an NPU kernel's, say) against pypto's float64 golden.

>>> result = pypto.testing.compare(npu_dx, dy, w, input_size, strides, paddings, dilations)
>>> print(result)              # metrics, one verdict line per standard, where the errors are
>>> result.passed              # the chosen standard's verdict (default "dual-L0")
>>> result.plot("dx.png")      # heatmap per channel block, M tile boundaries drawn
>>> pypto.testing.assert_dgrad_close(npu_dx, dy, w, ...)   # AssertionError with the verdicts

The golden is dx in float64 from the fp16/bf16 inputs (``pypto._golden.case``); the second benchmark
of the dual standard is pypto's own same-precision CPU result with the same tiles; the standards
and their thresholds are ``pypto._golden.accuracy.STANDARDS``; the localisation is
``pypto._golden.localise``. Every bad argument raises a PyptoError before anything is computed.
"""

import math
from dataclasses import asdict

import numpy as np

from ._core import options as _config
from ._core.memory import check_host_memory
from ._core.values import as_int
from ._dtypes import DataType, dtype_name, from_numpy_dtype, numpy_dtype, parse_dtype_name
from ._golden import accuracy as _accuracy
from ._golden.case import (
    comparison_bytes,
    error_bound,
    golden_bytes,
    golden_dgrad,
    make_case,
    pypto_dgrad,
)
from ._golden.localise import PLOT_UNITS, Localisation
from ._version import __version__
from .error import FeError, argument_errors_are_pypto_errors
from .pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info

__all__ = [
    "compare",
    "assert_dgrad_close",
    "compare_msprobe",
    "CompareResult",
    "STANDARDS",
    "DEFAULT_STANDARD",
    "ALL",
]

STANDARDS = tuple(_accuracy.STANDARDS)
DEFAULT_STANDARD = _accuracy.DEFAULT_STANDARD
ALL = "all"  # every standard must pass


class CompareResult:
    """What :func:`compare` found: metrics, verdicts, localisation.

    Attributes
    ----------
    case : the problem, dtype and tiles judged
    metrics, reference_metrics : ``pypto._golden.accuracy.Metrics`` of the result and of pypto's own
    verdicts : {standard id: ``pypto._golden.accuracy.Verdict``}, every standard
    standard : the standard that decides ``passed`` ("all": every one)
    passed : bool
    localisation : ``pypto._golden.localise.Localisation``
    golden, actual, reference : the float64 golden, the result, pypto's own result (arrays of
        the result's own: copies of those given to :func:`compare`)
    sum_order : the summation order of pypto's own result ("sequential" or "tile"; None when a
        given reference's order was not said)
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
        top = _top(top)
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
        return self.verdict_text() + "\n" + self.localisation.format(_top(top))

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


def _top(top):
    """``top`` (how many worst elements to list) as an int >= 0."""
    return _count(top, "top")


def _count(value, name):
    """``value`` as an int >= 0; a PyptoError naming the argument ``name`` otherwise."""
    count = as_int(value)
    if count is None or count < 0:
        kind = TypeError if count is None else ValueError
        raise FeError(kind(f"{name} must be an int >= 0, but got {value!r}"))
    return count


def _host_array(value, name):
    """The NumPy array of an array, a pypto Tensor or a torch tensor (no copy where it can)."""
    from .tensor import Tensor

    if isinstance(value, Tensor):
        if not value.has_data:
            raise FeError(ValueError(f"{name} is a shape-only pypto.Tensor: pass data"))
        value = value.numpy()
    elif type(value).__module__.startswith("torch"):
        from .tensor import from_torch

        value = from_torch(value).numpy()
    if not isinstance(value, np.ndarray):
        raise FeError(
            TypeError(
                f"{name} must be a NumPy array (float16 or bfloat16), a pypto "
                f"Tensor or a torch tensor, but got {type(value).__name__}"
            )
        )
    return value


def _array(value, name, dtype):
    """A NumPy array of ``dtype`` (fp16/bf16) from an array, a pypto Tensor or a torch tensor;
    uint16 arrays are taken as bf16 bit patterns when the dtype is bf16."""
    value = _host_array(value, name)
    found = from_numpy_dtype(value.dtype)
    if dtype == DataType.DT_BF16 and value.dtype.kind == "u" and value.dtype.itemsize == 2:
        value = np.ascontiguousarray(value).astype("=u2", copy=False).view(numpy_dtype(dtype))
        found = dtype
    if found != dtype:
        want = "float16" if dtype == DataType.DT_FP16 else "bfloat16 (or uint16 bit patterns)"
        raise FeError(
            TypeError(
                f"{name} holds {value.dtype} data; the case is {dtype_name(dtype)}: expected {want}"
            )
        )
    return np.ascontiguousarray(value.astype(value.dtype.newbyteorder("="), copy=False))


def _parse_dtype(dtype):
    if not (dtype is None or isinstance(dtype, (str, DataType))):
        # parse_dtype compares by ==, which an array or a tensor answers elementwise
        raise FeError(
            TypeError(
                f"dtype must be 'fp16', 'bf16', pypto.DT_FP16 or pypto.DT_BF16, "
                f"but got {type(dtype).__name__}"
            )
        )
    return parse_dtype_name(dtype)


def _infer_dtype(grad_output, dtype):
    """``dtype``, or else that of ``grad_output`` (a NumPy array: a pypto or torch tensor's data,
    so torch.float16 / torch.bfloat16 tell; uint16 and int16 bits do not)."""
    if dtype is not None:
        return dtype
    found = from_numpy_dtype(grad_output.dtype)
    if found in (DataType.DT_FP16, DataType.DT_BF16):
        return found
    raise FeError(
        TypeError(
            f"cannot tell fp16 from bf16 by grad_output's dtype ({found}): "
            "pass float16 / bfloat16 arrays or tensors, or dtype='fp16' / "
            "'bf16'"
        )
    )


@argument_errors_are_pypto_errors
def compare(
    actual,
    grad_output,
    weight,
    input_size,
    strides,
    paddings,
    dilations,
    *,
    dtype=None,
    tiles=None,
    standard=DEFAULT_STANDARD,
    golden=None,
    reference=None,
    reference_sum_order=None,
):
    """Judge ``actual`` (dx, [N, Cin, Hin, Win]) by CANN's accuracy standards.

    Parameters
    ----------
    actual : fp16/bf16 array (or pypto / torch tensor), the result to judge
    grad_output, weight : the fp16/bf16 inputs it was computed from
    input_size, strides, paddings, dilations : as for ``pypto.conv_backward_input``
    dtype : "fp16" / "bf16" / DataType; default: grad_output's dtype (float16 or bfloat16, NumPy
        or torch; needed for bf16 as uint16 bits)
    tiles : (l1, l0) or (l1, l0, vec): ConvBpTileL1Info / L0Info or (M, K, N) triples, the tiles
        the kernel ran with; they place the M tiles and channel blocks of the localisation and
        drive pypto's own result. Default: the suggested tiles.
    standard : one of ``STANDARDS`` or "all": which verdict decides ``passed``
    reference_sum_order : the summation order ``reference`` was computed in ("sequential",
        "tile"), recorded in the result; without a reference pypto computes its own in the
        order in force (``pypto.get_sum_order``) and records that
    golden, reference : the float64 golden and pypto's own result, when already computed
        (``pypto golden`` wrote them); computed when None.

    Returns
    -------
    CompareResult
    """
    _check_standard(standard)
    dtype = _parse_dtype(dtype)
    dy = _host_array(grad_output, "grad_output")
    dtype = _infer_dtype(dy, dtype)
    dy = _array(dy, "grad_output", dtype)
    w = _array(weight, "weight", dtype)
    a = _array(actual, "actual", dtype)
    case = make_case(
        list(dy.shape),
        list(w.shape),
        input_size,
        dtype,
        strides,
        paddings,
        dilations,
        _int_tiles(tiles),
    )
    if list(a.shape) != list(case.input_size):
        raise FeError(
            ValueError(
                f"actual has shape {list(a.shape)}, but input_size is {list(case.input_size)}"
            )
        )
    out_elements = math.prod(case.input_size)
    if golden is not None:
        try:
            golden = np.asarray(golden)
        except (TypeError, ValueError, OverflowError) as exc:  # ragged, or no numbers
            raise FeError(
                ValueError(f"golden must be a float array of shape {list(case.input_size)}: {exc}")
            ) from None
        if golden.shape != tuple(case.input_size) or golden.dtype.kind != "f":
            raise FeError(
                ValueError(
                    f"golden must be a float array of shape "
                    f"{list(case.input_size)}, but got {golden.dtype} "
                    f"{list(golden.shape)}"
                )
            )
        golden = golden.astype(np.float64)  # a copy: the result keeps it
    if reference is not None:
        reference = _array(reference, "reference (pypto's result)", dtype)
        if list(reference.shape) != list(case.input_size):
            raise FeError(
                ValueError(
                    f"reference has shape {list(reference.shape)}, but "
                    f"input_size is {list(case.input_size)}"
                )
            )
    # everything this call allocates, before any of it
    check_host_memory(
        comparison_bytes(case) + golden_bytes(case) * (1 if golden is not None else 2),
        case.problem,
        f"the float64 golden, its error bound and the comparison of {out_elements} elements",
    )
    # the result keeps actual, golden and reference: its own copies of what was given, so that
    # the caller's arrays changing later (a torch gradient that the next backward adds into)
    # never change what the result says was judged
    a = a.copy()
    if golden is None:
        golden = golden_dgrad(case, dy, w)
    if reference is None:
        reference = pypto_dgrad(case, dy, w)
        reference_sum_order = _config.get_sum_order(case.dtype)
    else:
        reference = reference.copy()
    return _judge(case, dy, w, a, golden, reference, standard, reference_sum_order)


def _int_tiles(tiles):
    """``tiles`` with every value an int, as the op takes them (TS0: ints or NumPy integers;
    the vec tile as its vec_tile_shapes option): make_case's int() would read 16.5 as 16, a
    record holding a str reaches the rules, an inf is an OverflowError. Shapes that are no
    (l1, l0[, vec]) are left to make_case, which says what it takes."""
    if not isinstance(tiles, (list, tuple)) or len(tiles) not in (2, 3):
        return tiles
    checked = []
    for name, info_type, tile in zip(
        ("tiles[0] (L1)", "tiles[1] (L0)"), (ConvBpTileL1Info, ConvBpTileL0Info), tiles
    ):
        values = tile.as_tuple() if isinstance(tile, info_type) else tile
        if isinstance(values, (list, tuple)):
            ints = [as_int(v) for v in values]
            if None in ints:
                raise FeError(TypeError(f"{name} must hold ints (M, K, N), but got {tile!r}"))
            tile = ints
        checked.append(tile)
    if len(tiles) == 3:  # None: make_case's default vec tile
        checked.append(
            None if tiles[2] is None else _config._normalize("vec_tile_shapes", tiles[2])
        )  # the op's check
    return tuple(checked)


def _check_standard(standard):
    # a str first: a list is unhashable, an array answers != elementwise
    if not (isinstance(standard, str) and (standard == ALL or standard in _accuracy.STANDARDS)):
        raise FeError(
            ValueError(
                f"standard must be one of {', '.join(STANDARDS)} or 'all', but got {standard!r}"
            )
        )


def _judge(case, dy, w, actual, golden, reference, standard, sum_order=None):
    errors = _accuracy.element_errors(actual, golden, case.dtype)
    reference_errors = _accuracy.element_errors(reference, golden, case.dtype)
    metrics = _accuracy.measure(errors, golden, case.dtype)
    reference_metrics = _accuracy.measure(reference_errors, golden, case.dtype)
    verdicts = _accuracy.judge(metrics, reference_metrics, case.dtype)
    bound = error_bound(case, dy, w, golden)
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
        sum_order,
    )


@argument_errors_are_pypto_errors
def assert_dgrad_close(
    actual,
    grad_output,
    weight,
    input_size,
    strides,
    paddings,
    dilations,
    *,
    dtype=None,
    tiles=None,
    standard=DEFAULT_STANDARD,
    golden=None,
    reference=None,
    top=5,
):
    """:func:`compare`, raising AssertionError with the verdicts and the localisation when the
    chosen standard fails; returns the CompareResult when it passes."""
    top = _top(top)  # before the comparison, not after it
    result = compare(
        actual,
        grad_output,
        weight,
        input_size,
        strides,
        paddings,
        dilations,
        dtype=dtype,
        tiles=tiles,
        standard=standard,
        golden=golden,
        reference=reference,
    )
    if not result.passed:
        raise AssertionError(
            "dgrad result fails "
            + ("a standard" if standard == ALL else f"the {standard} standard")
            + ":\n"
            + result.report(top)
        )
    return result


@argument_errors_are_pypto_errors
def compare_msprobe(path, standard=DEFAULT_STANDARD):
    """Judge every conv2d backward call of an msprobe dump (``pypto compare --msprobe``).

    >>> report = pypto.testing.compare_msprobe("dump/step0", standard="dual-L0")
    >>> report.passed                  # no judged call fails the standard
    >>> report.rows[0]["api"], report.rows[0]["status"], report.rows[0]["failing_tasks"]
    >>> print(report)                  # one line per call, then the summary

    Parameters
    ----------
    path : an msprobe dump made with task "tensor" (level L1 or mix): a folder holding
        dump.json (a step or rank folder) or any folder above it (every dump.json below is
        read), or a dump.json
    standard : one of ``STANDARDS`` or "all": what decides each call's verdict

    Returns
    -------
    ``pypto._golden.msprobe.MsprobeReport``: ``rows`` (one JSON-ready dict per call: api,
    shapes, dtype, conv parameters, status "pass" / "fail" / "skipped" and the reason, every
    standard's verdict with its numbers, max ulp, elements outside the fp32-accumulation bound,
    failing tasks), ``passed``, ``judged`` / ``failed`` / ``skipped`` counts, ``as_dict()``,
    ``write_json(path)``, ``write_csv(path)``. Each call is judged as :func:`compare` judges
    a result: grad_input against the float64 golden of the dumped grad_output and weight.

    Raises a PyptoError for a dump without tensors (task "statistics"), a missing or unreadable
    tensor file, or a dump without any conv2d backward call.
    """
    from ._golden.msprobe import judge_dump

    _check_standard(standard)
    return judge_dump(path, standard)
