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

from ._golden import accuracy as _accuracy
from ._golden.arguments import compare_arguments
from ._golden.judge import ALL, CompareResult, check_standard, check_top, judge_case
from .error import argument_errors_are_pypto_errors

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
    check_standard(standard)
    case, dy, w, actual, golden, reference = compare_arguments(
        actual,
        grad_output,
        weight,
        input_size,
        strides,
        paddings,
        dilations,
        dtype,
        tiles,
        golden,
        reference,
    )
    return judge_case(case, dy, w, actual, standard, golden, reference, reference_sum_order)


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
    top = check_top(top)  # before the comparison, not after it
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
def compare_msprobe(path, standard=DEFAULT_STANDARD, api=None):
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
    api : None (every call), or the calls whose api name (``Functional.conv2d.1.backward``)
        or msprobe's name of their grad_input (``...backward.output.0``) is this or matches
        it as a shell glob (``"*conv2d.1*"``)

    Returns
    -------
    ``pypto._golden.msprobe.MsprobeReport``: ``rows`` (one JSON-ready dict per call: api,
    shapes, dtype, conv parameters, status "pass" / "fail" / "skipped" and the reason, every
    standard's verdict with its numbers, max ulp, elements outside the fp32-accumulation bound,
    failing tasks and their regions, msprobe's accuracy columns against the golden),
    ``passed``, ``judged`` / ``failed`` / ``skipped`` counts, ``same`` (Module entries of a
    mix dump judged once, as their Functional call), ``result`` (the CompareResult when one
    call was chosen: ``result.plot(path)``), ``as_dict()``, ``write_json(path)``,
    ``write_csv(path)``. Each call is judged as :func:`compare` judges a result: grad_input
    against the float64 golden of the dumped grad_output and weight.

    Raises a PyptoError for a dump without tensors (task "statistics"), a missing or unreadable
    tensor file, a dump without any conv2d backward call, or none that ``api`` names.
    """
    from ._golden.msprobe import judge_dump  # the dump reader is loaded only when used

    check_standard(standard)
    return judge_dump(path, standard, api)
