"""Every rule of conv_backward_input (specification section 4), in one ordered table.

``validate_conv_backward_input`` runs the checks of ``RULES`` in table order and raises the
first violation as a :class:`~pypto.error.ConvBpInputError` whose ``rule`` is the rule id
(T1, R1, D1-D4, S1, S2, A1-A4, G1, C1, O1, B1, TS0-TS6, V1) and whose text names the parameter,
the offending value and the allowed range. Nothing is computed before all rules pass.

Upstream conformance (issue 29). Where upstream PyPTO has the check, the order is upstream's
newest (``convbp_operation_impl.cpp`` @ f121cb47, after its Python checks in
``python/pypto/op/convbp.py``) and the text is upstream's, from the commit each entry's
``source`` names. That order splits some rules: R1, C1, A3 and TS3 each have more than one
entry, at the places upstream checks them. The rules upstream lacks (the user's page requires
them) keep the places they had; their ``source`` is ``PYPTO_ONLY``. Where pypto's text, kind or
order still differs from upstream's, the entry's ``note`` says how and why; ``ERROR_KINDS_NOTE``
covers the error codes of all of them. ``SOURCE`` and ``NOTES`` give the same per rule id.

This module is a table (one entry per rule, its check beside it), which is why it is long: the
order of the entries is the order of the checks, and reading it top to bottom is reading the
specification's section 4.
"""

from dataclasses import dataclass

import numpy as np

from .._dtypes import DataType, dtype_size, from_numpy_dtype, numpy_dtype
from ..error import (
    ConvBpInputError,
    ConvBpRuntimeError,
    ConvBpTypeError,
    ConvBpValueError,
    PyptoRtError,
)
from . import options as _config
from .bounded import remember
from .shapes import MAX_DIM, clipped_bounds, forward_out_size
from .tiling import BUFFER_BYTES, C0, ConvProblem, Tiling, ceil_align
from .values import as_int

__all__ = ["RULES", "SOURCE", "NOTES", "validate_conv_backward_input", "ValidatedCall"]

SUPPORTED_DTYPES = (DataType.DT_BF16, DataType.DT_FP16)
_SUPPORTED_TEXT = "[bf16, fp16]"
MAX_KERNEL = 255
MAX_PADDING = 255
MAX_STRIDE_DILATION = 63
MAX_LOAD3D_K = 65535
MIN_VEC_RANK, MAX_VEC_RANK = 4, 5
DYNAMIC_DIM = -1  # how a Tensor marks a dimension unknown until run time

# --- where each text comes from -------------------------------------------------------------------
# Upstream: hicann/pypto, framework/src/interface/operation/convbp_operation_impl.cpp (the C++
# checks) and python/pypto/op/convbp.py (the Python checks, 8815cf8f, its only version). The C++
# file's versions: 8815cf8f (op added), eee4ab52 (L1 formula, tileML1 wording), 39efcdf6,
# c1fab847 (message wording), af796792 (tileKL1 check, tileKL0 bound), f121cb47 (check order).
UPSTREAM_ORDER = "f121cb47"
PYPTO_ONLY = "pypto only (the user's page)"
_PY = "upstream 8815cf8f (python/pypto/op/convbp.py)"

ERROR_KINDS_NOTE = (
    "Every refusal is a PyptoError 'ErrCode: F0000x, <Kind>: <text>' (specification section 2):"
    " T1 F00001 TypeError, TS0 F00003 RuntimeError, every other rule F00002 ValueError. Kept,"
    " not upstream's: its C++ checks raise 'CHECK FAILED: ErrCode: F0000{2|8}! Enum: ...' (its"
    " buffer ASSERTs FC6101), which reach Python as a bare RuntimeError outside pypto.function,"
    " and its Python rank check is F00003 RuntimeError. pypto keeps one format and one kind per"
    " rule, so that `except ValueError` catches every refused value and every message reads"
    " alike."
)


@dataclass(frozen=True)
class Check:
    """One entry of the table: a rule's check, at the place upstream checks it."""

    rule: str  # the rule id of the specification (the error's ``.rule``)
    error: type  # the ConvBpInputError subclass raised
    check: object  # check(call) -> None when the call passes, else the message text
    what: str  # what it checks, in a few words (explain's report)
    source: str  # where the text comes from: "upstream <commit>" or PYPTO_ONLY
    note: str = ""  # where pypto's text, kind or order differs from upstream's, and why


@dataclass(frozen=True)
class ValidatedCall:
    """What the rules established: the problem, its tiles and the vector tile. Frozen: one
    object serves every call with the same arguments (``validate_conv_backward_input``'s
    cache)."""

    problem: ConvProblem
    tiling: Tiling
    vec_tile: tuple
    dtype: DataType


class _Call:
    """The arguments as the rules see them; later rules read what earlier ones normalized."""

    def __init__(
        self, grad_output, input_size, weight, out_dtype, strides, paddings, dilations, groups
    ):
        self.grad_output, self.weight = grad_output, weight
        self.input_size, self.out_dtype = input_size, out_dtype
        self.strides, self.paddings, self.dilations, self.groups = (
            strides,
            paddings,
            dilations,
            groups,
        )


RULES = []


def _rule(rule_id, what, source, note="", error=ConvBpValueError):
    """Append a check to the table; it returns None when the call passes, else the text."""

    def register(check):
        RULES.append(Check(rule_id, error, check, what, source, note))
        return check

    return register


def _int_list(value):
    """A list of ints from a list/tuple of int-likes, or None."""
    if not isinstance(value, (list, tuple)):
        return None
    ints = list(value)
    for v in ints:
        if type(v) is not int:
            break
    else:
        return ints  # all plain ints: the common case, without a per-item call
    ints = [as_int(v) for v in value]
    return None if any(v is None for v in ints) else ints


def _type_error(name, expected, value):
    # upstream's text: the expected type's and the value's class names
    return f"Argument '{name}' must be of type {expected}, but got {type(value).__name__}."


# --- T1: argument types (upstream's Python checks) ------------------------------------------------
_LISTS = ("input_size", "strides", "paddings", "dilations")


@_rule(
    "T1",
    "argument types",
    f"{_PY}, input_size and the list items {PYPTO_ONLY}",
    "upstream's checks in its order (grad_output, weight, out_dtype, strides, paddings,"
    " dilations, groups), input_size's where it stood; the items of the lists last (upstream"
    " leaves them to pybind's conversion, whose text names no argument). NumPy integers count"
    " as ints; None is refused (upstream skips its type check for None).",
    ConvBpTypeError,
)
def _check_types(c):
    from ..tensor import Tensor

    for name in ("grad_output", "weight"):
        value = getattr(c, name)
        if not isinstance(value, Tensor):
            return _type_error(name, "Tensor", value)
    # read each shape once: later rules use these lists (a Tensor's .shape builds a copy)
    c.dy_shape, c.w_shape = c.grad_output.shape, c.weight.shape
    if not isinstance(c.out_dtype, DataType):
        return _type_error("out_dtype", "DataType", c.out_dtype)
    for name in _LISTS:
        value = getattr(c, name)
        if not isinstance(value, (list, tuple)):
            return _type_error(name, "list", value)
    groups = as_int(c.groups)
    if groups is None:
        return _type_error("groups", "int", c.groups)
    c.groups = groups
    for name in _LISTS:
        value = getattr(c, name)
        ints = _int_list(value)
        if ints is None:
            bad = next(v for v in value if as_int(v) is None)
            return (
                f"Argument '{name}' must be a list of ints, but it holds {bad!r} "
                f"of type {type(bad).__name__}."
            )
        setattr(c, name, ints)
    return None


# --- R1: ranks (upstream's Python rank check), then the 2-D-only rule ----------------------------
@_rule(
    "R1",
    "grad_output and weight ranks",
    _PY,
    "upstream raises it as F00003 RuntimeError; pypto keeps R1 an F00002 ValueError like its"
    " other rank refusals (see ERROR_KINDS_NOTE)",
)
def _check_tensor_ranks(c):
    g, w = len(c.dy_shape), len(c.w_shape)
    if g != w or g not in (3, 4, 5):
        return (
            "Tensor dimension mismatch. Expect grad_output_dim == weight_dim and both in "
            f"[3, 4, 5], got grad_output_dim: {g}, weight_dim: {w}."
        )
    return None


@_rule(
    "R1",
    "2-D convolution only",
    PYPTO_ONLY,
    "upstream also runs 1-D (3-D tensors) and 3-D (5-D tensors) convolutions; the user's page"
    " supports 4-D NCHW only",
)
def _check_2d_only(c):
    g = len(c.dy_shape)
    if g != 4:
        return (
            f"Input illegal grad_output dim:{g}, which must be 4 "
            "(only 2-D convolution in NCHW is supported)."
        )
    return None


# --- D1-D4: data types (upstream's Python checks) -------------------------------------------------
_FP32_NOTE = (
    "the list is what the user's page allows; upstream's reads [bf16, fp16, fp32]: fp32 is"
    f" refused ({PYPTO_ONLY})"
)


@_rule("D1", "grad_output dtype", _PY, _FP32_NOTE)
def _check_grad_dtype(c):
    if c.grad_output.dtype not in SUPPORTED_DTYPES:
        return (
            f"Input tensor data type must in {_SUPPORTED_TEXT},but Input tensor got "
            f"{c.grad_output.dtype}"
        )
    return None


@_rule("D2", "weight dtype", _PY, _FP32_NOTE)
def _check_weight_dtype(c):
    if c.weight.dtype not in SUPPORTED_DTYPES:
        return (
            f"Weight tensor data type must in {_SUPPORTED_TEXT},but Weight tensor got "
            f"{c.weight.dtype}"
        )
    return None


@_rule("D3", "same dtype", _PY)
def _check_same_dtype(c):
    if c.grad_output.dtype != c.weight.dtype:
        return (
            f"grad_output and weight data types must be consistent, but got grad_output: "
            f"{c.grad_output.dtype}, weight: {c.weight.dtype}"
        )
    return None


@_rule("D4", "out_dtype", _PY)
def _check_out_dtype(c):
    if c.out_dtype != c.grad_output.dtype:
        return (
            f"Output data type must be consistent with grad_output, but got out_dtype: "
            f"{c.out_dtype}, grad_output: {c.grad_output.dtype}"
        )
    return None


# --- R1: the lengths of input_size and the attribute lists (upstream's first C++ checks) ---------
@_rule(
    "R1",
    "input_size and attribute lengths",
    "upstream 8815cf8f",
    "upstream's text: the first message prints the weight's rank, also when input_size is the"
    " list of the wrong length",
)
def _check_list_lengths(c):
    dim = len(c.dy_shape)  # 4, and the weight's too (the R1 checks above)
    if len(c.input_size) != dim:
        return (
            f"Input illegal weight or input dim:{len(c.w_shape)}, which must be equal to "
            "grad_output dim."
        )
    if len(c.strides) != dim - 2 or len(c.dilations) != dim - 2 or len(c.paddings) != (dim - 2) * 2:
        return (
            f"Input illegal dilations size:{len(c.dilations)}, strides size:{len(c.strides)}, "
            f"paddings size:{len(c.paddings)}, which must correspond to grad_output dim:{dim}."
        )
    return None


# --- S1: every dimension in [1, 1000000] ----------------------------------------------------------
def _range_text(i, name, lo, hi, v):
    """Upstream's range message (c1fab847 wording)."""
    return (
        f"The value of the {i}-th dimension of {name} must be in the range [{lo},{hi}]. "
        f"Current value: {v}."
    )


@_rule(
    "S1",
    "dimensions in [1, 1000000]",
    "upstream c1fab847",
    "pypto adds ' (dynamic shapes are not supported)' after upstream's text for a -1 dimension",
)
def _check_dim_ranges(c):
    for name, shape in (
        ("grad_output", c.dy_shape),
        ("weight", c.w_shape),
        ("input", c.input_size),
    ):
        for i, v in enumerate(shape):
            if not 1 <= v <= MAX_DIM:
                hint = " (dynamic shapes are not supported)" if v == DYNAMIC_DIM else ""
                return _range_text(i, name, 1, MAX_DIM, v) + hint
    return None


# --- upstream's attribute checks (f121cb47 order): padding below the dilated kernel, groups,
# --- Cout, the padding / dilation / stride ranges, the kernel limits ----------------------------
@_rule(
    "A3",
    "padding below the dilated kernel",
    "upstream c1fab847 (W before H, as since 8815cf8f)",
    "an axis whose dilation is below 1 is left to A2: its 'weight value after dilation' is then"
    " 1 or less, and the dilation is what to fix (upstream checks the padding first all the"
    " same)",
)
def _check_padding_below_kernel(c):
    for axis, name in ((1, "W"), (0, "H")):
        before, after = c.paddings[2 * axis : 2 * axis + 2]
        kernel, dilation = c.w_shape[2 + axis], c.dilations[axis]
        if dilation < 1:
            continue
        extent = (kernel - 1) * dilation + 1
        if before >= extent or after >= extent:
            return (
                f"The value of the {name} dimension of weight must be > padding. Current weight "
                f"value after dilation: {extent}, padding value: {before} and {after}."
            )
    return None


@_rule(
    "G1",
    "groups == 1",
    f"upstream 8815cf8f (its groups range text), the bound [1,1] {PYPTO_ONLY}",
    "upstream's range is [1,65535], then Cout % groups == 0; the user's page allows groups = 1"
    " only",
)
def _check_groups(c):
    if c.groups != 1:
        return f"Invalid groups:{c.groups}, expected range [1,1] (only groups=1 is supported)."
    return None


@_rule("C1", "Cout of grad_output and weight", "upstream 8815cf8f")
def _check_cout(c):
    cout, w_cout = c.dy_shape[1], c.w_shape[0]
    if cout != w_cout:
        return f"Cout of gradOutput ({cout}) is not equal to Cout of weight ({w_cout})."
    return None


def _check_each(name, values, lo, hi, first_index):
    """Upstream's range check of an attribute list; upstream pads 2-D lists to 3-D first
    (strides, dilations [1, h, w]; paddings [0, 0, top, bottom, left, right]), so its indices
    start at ``first_index``."""
    for i, v in enumerate(values):
        if not lo <= v <= hi:
            return _range_text(first_index + i, name, lo, hi, v)
    return None


_INDEX_NOTE = "indices count as upstream's do, in the list padded to 3-D"


@_rule(
    "A3",
    "paddings in [0, 255]",
    "upstream c1fab847",
    f"{_INDEX_NOTE} ([0, 0, top, bottom, left, right]: top is the 2-th)",
)
def _check_padding_range(c):
    return _check_each("paddings", c.paddings, 0, MAX_PADDING, 2)


@_rule("A4", "symmetric padding", PYPTO_ONLY, "upstream runs asymmetric padding")
def _check_symmetric_padding(c):
    top, bottom, left, right = c.paddings
    if top != bottom or left != right:
        return (
            f"Only symmetric padding is supported: paddings [top, bottom, left, right] needs "
            f"top == bottom and left == right, but got {c.paddings}."
        )
    return None


@_rule("A2", "dilations in [1, 63]", "upstream c1fab847", f"{_INDEX_NOTE} ([1, h, w])")
def _check_dilations(c):
    return _check_each("dilations", c.dilations, 1, MAX_STRIDE_DILATION, 1)


@_rule("A1", "strides in [1, 63]", "upstream c1fab847", f"{_INDEX_NOTE} ([1, h, w])")
def _check_strides(c):
    return _check_each("strides", c.strides, 1, MAX_STRIDE_DILATION, 1)


@_rule("S2", "kernel size (Load3D)", "upstream c1fab847")
def _check_kernel_size(c):
    kh, kw = c.w_shape[2:]
    if kh > MAX_KERNEL or kw > MAX_KERNEL:
        return (
            f"Weight shapes do not satisfy Load3D's limits: kh={kh}, kw={kw}, which must "
            f"be <= {MAX_KERNEL}."
        )
    k0 = 32 // dtype_size(c.grad_output.dtype)  # 16 for fp16 and bf16, as upstream's
    if kh * kw * k0 > MAX_LOAD3D_K:
        return (
            f"Weight shapes do not satisfy Load3D's limits: kh*kw*k0={kh * kw * k0}"
            f"(k0 = {k0}, mmad K block size), which must be <={MAX_LOAD3D_K}."
        )
    return None


# --- upstream's output-shape checks (f121cb47 order): n, W, H ----------------------------------
@_rule(
    "C1",
    "Cin and batch of input_size",
    f"upstream 8815cf8f (n), {PYPTO_ONLY} (Cin)",
    "pypto adds to upstream's n text the value input_size[0] must take; upstream takes Cin"
    " from the weight and never compares input_size[1]",
)
def _check_cin_and_batch(c):
    n, w_cin = c.dy_shape[0], c.w_shape[1]
    if c.input_size[1] != w_cin:
        return (
            f"Input illegal cin size:{c.input_size[1]}. input_size[1] must equal Cin of "
            f"weight (weight.shape[1] = {w_cin})."
        )
    if c.input_size[0] != n:
        return (
            f"Input illegal n size:{c.input_size[0]}. input_size[0] must equal the batch of "
            f"grad_output (grad_output.shape[0] = {n})."
        )
    return None


def _axis_params(c, axis):
    """(size_out, kernel, stride, pad_before, pad_after, dilation) of spatial axis 0 (H) or
    1 (W)."""
    return (
        c.dy_shape[2 + axis],
        c.w_shape[2 + axis],
        c.strides[axis],
        c.paddings[2 * axis],
        c.paddings[2 * axis + 1],
        c.dilations[axis],
    )


@_rule(
    "O1",
    "input_size within the valid range",
    "upstream 8815cf8f (W before H)",
    "pypto adds the valid range to upstream's text (the specification asks for it) and divides"
    " with floor, as the specification's section 3 does; upstream's C++ truncates toward zero,"
    " which accepts up to stride - 1 sizes below HinMin when Hout is 1",
)
def _check_input_size_range(c):
    for axis, name in ((1, "win"), (0, "hin")):
        params = _axis_params(c, axis)
        size_in = c.input_size[2 + axis]
        if forward_out_size(size_in, *params[1:]) != params[0]:
            lo, hi = clipped_bounds(*params)
            valid = f"[{lo}, {hi}]" if lo <= hi else "empty: no input size gives this output"
            return (
                f"Input illegal {name} size:{size_in}. input_size[{2 + axis}] must be in "
                f"{valid} for grad_output {'height' if axis == 0 else 'width'} {params[0]}, "
                f"kernel {params[1]}, stride {params[2]}, paddings {params[3]}+{params[4]}, "
                f"dilation {params[5]}."
            )
    return None


@_rule(
    "B1",
    "static shapes, no bias",
    PYPTO_ONLY,
    "there is no bias argument, and S1 already refuses -1; this re-checks that the shapes the"
    " kernel sees are plain ints",
)
def _check_static(c):
    for name, shape in (("grad_output", c.dy_shape), ("weight", c.w_shape)):
        if any(type(v) is not int for v in shape):
            return f"Dynamic shape is not supported: {name} has shape {shape}."
    return None


# --- TS0-TS6, V1: tiles ---------------------------------------------------------------------------
_UNSET_TILE_NOTE = (
    "upstream has no such check: zero tiles pass its L1 checks and reach its CeilDiv guard, an"
    " internal assert ('Param(b) must not be zero.') a user cannot act on"
)


@_rule(
    "TS0",
    "tiles and vector tiles set",
    PYPTO_ONLY,
    f"{_UNSET_TILE_NOTE}; upstream reads the vector tile only in a later graph pass",
    ConvBpRuntimeError,
)
def _check_tiles_set(c):
    tile = _config._get("convbp_tile_shapes")  # read, not copied: nothing here mutates it
    c.tiling = Tiling.from_infos(tile.tileL1Info, tile.tileL0Info)
    # the records are plain mutable objects: anything may sit in a field, so check the values
    # are ints before asking whether they are all zero (the "never set" default)
    if any(type(v) is not int for v in c.tiling):
        values = [as_int(v) for v in c.tiling]
        for name, raw, value in zip(Tiling.UPSTREAM_NAMES, c.tiling, values):
            if value is None:
                return f"Invalid {name}:{raw!r}, a tile size must be an int."
        c.tiling = Tiling(*values)
    if not any(c.tiling):
        return (
            "Tile shapes are not set: call pypto.set_convbp_input_tile_shapes(tile_l1_info, "
            "tile_l0_info) before pypto.conv_backward_input."
        )
    c.vec_tile = _config._get("vec_tile_shapes")
    if not c.vec_tile:
        return (
            "Vector tile shapes are not set: call pypto.set_vec_tile_shapes(...) (4 or 5 "
            "ints, e.g. 16, 16, 16, 16) before pypto.conv_backward_input."
        )
    c.problem = _problem_of(c)
    return None


def _problem_of(c):
    n, cout, hout, wout = c.dy_shape
    _, cin, hin, win = c.input_size
    kh, kw = c.w_shape[2:]
    return ConvProblem(
        n,
        cin,
        cout,
        hin,
        win,
        hout,
        wout,
        kh,
        kw,
        *c.strides,
        *c.paddings,
        *c.dilations,
        dtype_size(c.grad_output.dtype),
    )


def _positive(name, value):
    return None if value >= 1 else f"Invalid {name}:{value}, expected range [1,+inf)."


# upstream's L1 checks (f121cb47 order): tileNL1 % 16, tileKL1 % 16, tileML1, tileKL1 % 16*Kh*Kw
_POSITIVE_NOTE = (
    "the size >= 1 check is pypto's: upstream lets 0 through to a later L0 range error or to its"
    " CeilDiv assert, neither about the L1 tile"
)


@_rule(
    "TS2",
    "tileNL1 a positive multiple of 16",
    f"upstream 8815cf8f, tileNL1 >= 1 {PYPTO_ONLY}",
    _POSITIVE_NOTE,
)
def _check_tile_n_l1(c):
    t = c.tiling
    message = _positive("tileNL1", t.nl1)
    if message:
        return message
    if t.nl1 % C0:
        return f"Invalid tileNL1:{t.nl1}, requires {C0}-element alignment."
    return None


@_rule(
    "TS3",
    "tileKL1 a positive multiple of 16",
    f"upstream 8815cf8f, tileKL1 >= 1 {PYPTO_ONLY}",
    _POSITIVE_NOTE,
)
def _check_tile_k_l1_block(c):
    t = c.tiling
    message = _positive("tileKL1", t.kl1)
    if message:
        return message
    if t.kl1 % C0:
        return f"Invalid tileKL1:{t.kl1}, requires {C0}-element alignment."
    return None


@_rule(
    "TS1",
    "tileML1 <= Win or a multiple of Win",
    f"upstream eee4ab52, tileML1 >= 1 {PYPTO_ONLY}",
    _POSITIVE_NOTE,
)
def _check_tile_m_l1(c):
    t, win = c.tiling, c.problem.win
    message = _positive("tileML1", t.ml1)
    if message:
        return message
    if not (t.ml1 <= win or t.ml1 % win == 0):
        return f"tileML1({t.ml1}) should be less than win({win}) or be divisible by win"
    return None


@_rule("TS3", "tileKL1 a multiple of 16*Kh*Kw", "upstream af796792")
def _check_tile_k_l1_taps(c):
    t = c.tiling
    if t.kl1 % (C0 * c.problem.taps):
        return f"tileKL1({t.kl1}) should be divisible by Cout0 * Hk * Wk"
    return None


@_rule(
    "TS4",
    "L0 tiles multiples of 16, within the L1 tiles",
    "upstream 8815cf8f (tileKL0's bound: af796792)",
    "an L0 tile of 0 is upstream's CeilDiv assert ('Param(b) must not be zero.'), an internal"
    " assert; pypto reports its range",
)
def _check_tile_l0(c):
    t = c.tiling
    for name, value, upper in (
        ("tileML0", t.ml0, ceil_align(t.ml1, C0)),
        ("tileKL0", t.kl0, t.kl1),
        ("tileNL0", t.nl0, t.nl1),
    ):
        if not 1 <= value <= upper:
            return f"Invalid {name}:{value}, expected range [1,{upper}]."
    for name, value in (("tileML0", t.ml0), ("tileKL0", t.kl0), ("tileNL0", t.nl0)):
        if value % C0:
            return f"Invalid {name}:{value}, requires {C0}-element alignment."
    return None


@_rule(
    "TS5",
    "L0A, L0B, L0C buffers",
    "upstream 8815cf8f",
    "pypto adds the bytes used after upstream's text",
)
def _check_l0_buffers(c):
    t, p = c.tiling, c.problem
    size = p.dtype_size
    if t.l0a_bytes(p) > BUFFER_BYTES["L0A"]:
        return (
            f"Shape does not satisfy L0A load constraints, tileML0({t.ml0}) × tileKL0({t.kl0}) "
            f"× dtypesize ≤ L0A Size({BUFFER_BYTES['L0A']}). (dtypesize {size}: "
            f"{t.l0a_bytes(p)} bytes)"
        )
    if t.l0b_bytes(p) > BUFFER_BYTES["L0B"]:
        return (
            f"Shape does not satisfy L0B load constraints, tileKL0({t.kl0}) × tileNL0({t.nl0}) "
            f"× dtypesize ≤ L0B Size({BUFFER_BYTES['L0B']}). (dtypesize {size}: "
            f"{t.l0b_bytes(p)} bytes)"
        )
    if t.l0c_bytes(p) > BUFFER_BYTES["L0C"]:
        return (
            f"Shape does not satisfy L0C load constraints, tileML0({t.ml0}) × tileNL0({t.nl0}) "
            f"× dtypesize ≤ L0C Size({BUFFER_BYTES['L0C']}). (fp32 accumulator: "
            f"{t.l0c_bytes(p)} bytes)"
        )
    return None


@_rule(
    "TS6",
    "L1 buffer (MinL1LoadSize)",
    "upstream 8815cf8f (the formula: eee4ab52)",
)
def _check_l1_buffer(c):
    used = c.tiling.l1_bytes(c.problem)
    if used > BUFFER_BYTES["L1"]:
        return (
            f"MinL1LoadSize > L1size, current MinL1LoadSize: {used}, L1size: {BUFFER_BYTES['L1']}."
        )
    return None


@_rule(
    "V1",
    "vec tile: 4 or 5 positive ints, last a multiple of 16",
    f"{PYPTO_ONLY}, the last-dimension text upstream's InferTensorFormat pass",
    "upstream checks only the last dimension's 32-byte alignment, later, in a graph pass;"
    " the user's page requires the vector tile before the call",
)
def _check_vec_tile(c):
    vec = c.vec_tile
    if not MIN_VEC_RANK <= len(vec) <= MAX_VEC_RANK:
        return (
            f"Invalid vec_tile_shapes:{vec}, expected {MIN_VEC_RANK} or {MAX_VEC_RANK} "
            "values (one per dimension of NCHW, or NCDHW with D = 1)."
        )
    for i, v in enumerate(vec):
        if v < 1:
            return (
                f"The value of the {i}-th dimension of vec_tile_shapes must be in the range "
                f"[1,+inf). Current value: {v}."
            )
    if vec[-1] % C0:
        return (
            f"The last dimension of `tile_shape` should be 32-byte aligned. vec_tile_shapes"
            f"[-1] = {vec[-1]} is not a multiple of {C0}."
        )
    return None


# Calls that passed every rule, by everything the rules read (``_call_key``): a training loop
# repeats a few problems, and running the table again costs more than a small call's compute.
_PASSED = {}
_PASSED_MAX = 256  # problems remembered; the oldest is forgotten first


try:
    # compiled (callkey.pyx): every small call builds the key, and Python took longer than the
    # kernel's fixed cost to do it
    from .callkey import call_key as _call_key
except ImportError:  # the unbuilt source tree: no cache, every call judged by the whole table
    _call_key = None


def validate_conv_backward_input(
    grad_output, input_size, weight, out_dtype, strides, paddings, dilations, groups=1
):
    """Run every rule in order; return a :class:`ValidatedCall` or raise the first violation.

    A call whose arguments and tiles equal those of a call that passed before returns that
    call's result without running the table again (``_call_key`` says what "equal" covers);
    a refused call is never remembered, so it is judged again, in full, every time.
    """
    key = (
        _call_key(grad_output, input_size, weight, out_dtype, strides, paddings, dilations, groups)
        if _call_key is not None
        else None
    )
    passed = _PASSED.get(key) if key is not None else None
    if passed is not None:
        return passed
    call = _Call(grad_output, input_size, weight, out_dtype, strides, paddings, dilations, groups)
    for entry in RULES:
        message = entry.check(call)
        if message is not None:
            raise entry.error(entry.rule, message)
    passed = ValidatedCall(call.problem, call.tiling, tuple(call.vec_tile), call.grad_output.dtype)
    if key is not None:
        remember(_PASSED, key, passed, _PASSED_MAX)
    return passed


TILE_RULES = ("TS1", "TS2", "TS3", "TS4", "TS5", "TS6")
# the tile checks (TS1-TS6) in the order the op runs them: upstream's, TS3 in two places
TILE_CHECKS = tuple(entry for entry in RULES if entry.rule in TILE_RULES)
VEC_CHECKS = tuple(entry for entry in RULES if entry.rule == "V1")


# the rule ids in the specification's order
RULE_IDS = tuple(
    "T1 R1 D1 D2 D3 D4 S1 S2 A1 A2 A3 A4 G1 C1 O1 B1 TS0 TS1 TS2 TS3 TS4 TS5 TS6 V1".split()
)


def _rule_sources():
    """Per rule id (the specification's order): where its text comes from and how it differs
    from upstream's; a rule checked in several places names each place's own."""
    sources, notes = {}, {}
    for rule in RULE_IDS:
        entries = [e for e in RULES if e.rule == rule]
        several = len(entries) > 1
        sources[rule] = "; ".join(f"{e.what}: {e.source}" if several else e.source for e in entries)
        notes[rule] = "; ".join(e.note for e in entries if e.note)
    return sources, notes


# SOURCE[rule]: the upstream commit(s) its text comes from, or PYPTO_ONLY; NOTES[rule]: how and
# why pypto still differs from upstream there ("" where it does not)
SOURCE, NOTES = _rule_sources()


def check_message(entry, problem, tiling, vec_tile=None):
    """The message of one tile-table entry (TS1-TS6, V1) for ``problem`` and ``tiling``, or
    None: the same check the op runs, outside a call."""
    call = _Call(None, None, None, None, None, None, None, None)
    call.problem, call.tiling, call.vec_tile = problem, tiling, vec_tile
    return entry.check(call)


def rule_message(rule_id, problem, tiling, vec_tile=None):
    """The message of one tile rule (TS1-TS6, V1) for ``problem`` and ``tiling``, or None.

    The same checks the op runs (all of the rule's entries, in table order), outside a call:
    for the tile suggestion and explanation.
    """
    for entry in _CHECKS[rule_id]:
        message = check_message(entry, problem, tiling, vec_tile)
        if message is not None:
            return message
    return None


def tile_violation(problem, tiling):
    """The first tile rule (TS1-TS6) that ``tiling`` breaks on ``problem``, in the op's order,
    as (rule, message). None when the tiles are legal.
    """
    for entry in TILE_CHECKS:
        message = check_message(entry, problem, tiling)
        if message is not None:
            return entry.rule, message
    return None


def _shape_only_call(
    grad_output_shape, weight_shape, input_size, dtype, strides, paddings, dilations, skip=()
):
    """The op's own rules before the tiles (T1 ... B1, less ``skip``), run on shape-only
    tensors: the helpers below refuse exactly what the op refuses, with the same rule ids."""
    from ..tensor import Tensor

    shapes = []
    for name, value in (("grad_output_shape", grad_output_shape), ("weight_shape", weight_shape)):
        ints = _int_list(value)
        if ints is None:
            raise ConvBpTypeError(
                "T1", f"Argument '{name}' must be a list or tuple of ints, but got {value!r}."
            )
        shapes.append(ints)
    if not isinstance(dtype, DataType):
        raise ConvBpTypeError(
            "T1", f"Argument 'dtype' must be a pypto.DataType, but got {dtype!r}."
        )
    call = _Call(
        Tensor(shapes[0], dtype),
        input_size,
        Tensor(shapes[1], dtype),
        dtype,
        strides,
        paddings,
        dilations,
        1,
    )
    for entry in RULES:
        if entry.rule == "TS0":
            break
        if entry.rule in skip:
            continue
        message = entry.check(call)
        if message is not None:
            raise entry.error(entry.rule, message)
    return call


def problem_from_shapes(
    grad_output_shape, weight_shape, input_size, dtype, strides, paddings, dilations
):
    """The ConvProblem of shape-only arguments (for tile suggestion and explanation), after the
    op's rules T1 ... B1."""
    return _problem_of(
        _shape_only_call(
            grad_output_shape, weight_shape, input_size, dtype, strides, paddings, dilations
        )
    )


def size_range_args(grad_output_shape, weight_shape, strides, paddings, dilations):
    """(dy shape, weight shape, strides, paddings, dilations) for the input-size range, after
    every rule of the op that does not need the input size (O1 is what the range answers; the
    batch and channels of the input size are taken from dy and the weight)."""
    dy = _int_list(grad_output_shape)
    w = _int_list(weight_shape)
    # an input size that passes S1 and C1 whenever dy and the weight do (their own faults are
    # reported first, under their own names)
    placeholder = [dy[0] if dy else 1, w[1] if w and len(w) > 1 else 1, 1, 1]
    # fp16 and bf16 are judged alike by every rule here (both are 2 bytes)
    c = _shape_only_call(
        grad_output_shape,
        weight_shape,
        placeholder,
        DataType.DT_FP16,
        strides,
        paddings,
        dilations,
        skip=("O1",),
    )
    return c.dy_shape, c.w_shape, c.strides, c.paddings, c.dilations


_CHECKS = {}  # rule id -> its entries, in table order
for _entry in RULES:
    _CHECKS.setdefault(_entry.rule, []).append(_entry)
del _entry

__all__ += [
    "size_range_args",
    "problem_from_shapes",
    "rule_message",
    "tile_violation",
    "check_message",
    "Check",
    "TILE_CHECKS",
    "VEC_CHECKS",
    "PYPTO_ONLY",
    "UPSTREAM_ORDER",
    "ERROR_KINDS_NOTE",
    "RULE_IDS",
    "ConvBpInputError",
]


def check_host_arrays(problem, dy, w, dtype):
    """(dy, w) as plain ndarrays whose buffers hold the validated shapes and dtype.

    Both backends read and write by the buffers' own dimensions, so these are taken from the
    buffer (``np.asarray`` drops an ndarray subclass, whose ``.shape`` or ``.dtype`` attribute
    could say something else), never from attributes a subclass can override.
    """
    p = problem
    native = numpy_dtype(dtype)  # the common case, checked first: one identity test
    dy_shape, w_shape = (p.n, p.cout, p.hout, p.wout), (p.cout, p.cin, p.kh, p.kw)
    if (
        type(dy) is np.ndarray
        and type(w) is np.ndarray
        and dy.dtype is native
        and w.dtype is native
        and dy.shape == dy_shape
        and w.shape == w_shape
    ):
        return dy, w  # every small call: what the loop below accepts, without the loop
    arrays = []
    for name, array, want in (("grad_output", dy, dy_shape), ("weight", w, w_shape)):
        if type(array) is not np.ndarray:
            if isinstance(array, np.ma.MaskedArray):
                raise PyptoRtError(
                    TypeError(
                        f"{name} is a masked array: its mask would be ignored; "
                        "pass .filled(...) or .data"
                    )
                )
            array = np.asarray(array)  # a base-class view of the same buffer
        if array.shape != want:
            raise PyptoRtError(
                RuntimeError(
                    f"{name} data has shape {list(array.shape)}, but the "
                    f"validated call needs {list(want)}"
                )
            )
        # any byte order, but the validated type and width
        if array.dtype is not native and from_numpy_dtype(array.dtype) != dtype:
            raise PyptoRtError(
                RuntimeError(
                    f"{name} data has dtype {array.dtype}, but the validated call needs {dtype}"
                )
            )
        arrays.append(array)
    return tuple(arrays)
