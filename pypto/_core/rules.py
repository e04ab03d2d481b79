"""Every rule of conv_backward_input (specification section 4), in one ordered table.

``validate_conv_backward_input`` runs the rules in the order of ``RULES`` (T1, R1, D1-D4, S1,
S2, A1-A4, G1, C1, O1, B1, TS0-TS6, V1) and raises the first violation as a
:class:`~pypto.error.ConvBpInputError` whose ``rule`` is the rule id and whose text names the
parameter, the offending value and the allowed range. Where upstream PyPTO has the same check,
the text is upstream's. Nothing is computed before all rules pass.
"""

from dataclasses import dataclass

import numpy as np

from .._dtypes import DataType, dtype_size, from_numpy_dtype
from ..error import (
    ConvBpInputError,
    ConvBpRuntimeError,
    ConvBpTypeError,
    ConvBpValueError,
    PyptoRtError,
)
from . import options as _config
from .shapes import MAX_DIM, clipped_bounds, forward_out_size
from .tiling import BUFFER_BYTES, C0, ConvProblem, Tiling, ceil_align
from .values import as_int

__all__ = ["RULES", "validate_conv_backward_input", "ValidatedCall"]

SUPPORTED_DTYPES = (DataType.DT_BF16, DataType.DT_FP16)
_SUPPORTED_TEXT = "[bf16, fp16]"
MAX_KERNEL = 255
MAX_PADDING = 255
MAX_STRIDE_DILATION = 63
MAX_LOAD3D_K = 65535
MIN_VEC_RANK, MAX_VEC_RANK = 4, 5
DYNAMIC_DIM = -1  # how a Tensor marks a dimension unknown until run time


@dataclass
class ValidatedCall:
    """What the rules established: the problem, its tiles and the vector tile."""

    problem: ConvProblem
    tiling: Tiling
    vec_tile: list
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


def _rule(rule_id, error=ConvBpValueError):
    """Register a check; it returns None when the call passes, else the message text."""

    def register(check):
        RULES.append((rule_id, error, check))
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


# --- T1: argument types ---------------------------------------------------------------------------
@_rule("T1", ConvBpTypeError)
def _check_types(c):
    from ..tensor import Tensor

    for name in ("grad_output", "weight"):
        value = getattr(c, name)
        if not isinstance(value, Tensor):
            return f"Argument '{name}' must be of type Tensor, but got {type(value)}."
    # read each shape once: later rules use these lists (a Tensor's .shape builds a copy)
    c.dy_shape, c.w_shape = c.grad_output.shape, c.weight.shape
    if not isinstance(c.out_dtype, DataType):
        return f"Argument 'out_dtype' must be of type DataType, but got {type(c.out_dtype)}."
    for name in ("input_size", "strides", "paddings", "dilations"):
        value = getattr(c, name)
        if not isinstance(value, (list, tuple)):
            return f"Argument '{name}' must be of type list, but got {type(value)}."
        ints = _int_list(value)
        if ints is None:
            bad = next(v for v in value if as_int(v) is None)
            return (
                f"Argument '{name}' must be a list of ints, but it holds {bad!r} "
                f"of type {type(bad).__name__}."
            )
        setattr(c, name, ints)
    groups = as_int(c.groups)
    if groups is None:
        return f"Argument 'groups' must be of type int, but got {type(c.groups)}."
    c.groups = groups
    return None


# --- R1: ranks ------------------------------------------------------------------------------------
@_rule("R1")
def _check_ranks(c):
    for name, length in (
        ("grad_output", len(c.dy_shape)),
        ("weight", len(c.w_shape)),
        ("input_size", len(c.input_size)),
    ):
        if length != 4:
            return (
                f"Input illegal {name} dim:{length}, which must be 4 "
                "(only 2-D convolution in NCHW is supported)."
            )
    for name, want in (("strides", 2), ("paddings", 4), ("dilations", 2)):
        got = len(getattr(c, name))
        if got != want:
            return (
                f"Input illegal {name} size:{got}, which must be {want} for a 2-D convolution "
                f"({'[top, bottom, left, right]' if want == 4 else '[h, w]'})."
            )
    return None


# --- D1-D4: data types ----------------------------------------------------------------------------
@_rule("D1")
def _check_grad_dtype(c):
    if c.grad_output.dtype not in SUPPORTED_DTYPES:
        return (
            f"Input tensor data type must in {_SUPPORTED_TEXT},but Input tensor got "
            f"{c.grad_output.dtype}"
        )
    return None


@_rule("D2")
def _check_weight_dtype(c):
    if c.weight.dtype not in SUPPORTED_DTYPES:
        return (
            f"Weight tensor data type must in {_SUPPORTED_TEXT},but Weight tensor got "
            f"{c.weight.dtype}"
        )
    return None


@_rule("D3")
def _check_same_dtype(c):
    if c.grad_output.dtype != c.weight.dtype:
        return (
            f"grad_output and weight data types must be consistent, but got grad_output: "
            f"{c.grad_output.dtype}, weight: {c.weight.dtype}"
        )
    return None


@_rule("D4")
def _check_out_dtype(c):
    if c.out_dtype != c.grad_output.dtype:
        return (
            f"Output data type must be consistent with grad_output, but got out_dtype: "
            f"{c.out_dtype}, grad_output: {c.grad_output.dtype}"
        )
    return None


# --- S1, S2: shapes -------------------------------------------------------------------------------
@_rule("S1")
def _check_dim_ranges(c):
    for name, shape in (
        ("grad_output", c.dy_shape),
        ("weight", c.w_shape),
        ("input_size", c.input_size),
    ):
        for i, v in enumerate(shape):
            if not 1 <= v <= MAX_DIM:
                hint = " (dynamic shapes are not supported)" if v == DYNAMIC_DIM else ""
                return (
                    f"The value of the {i}-th dimension of {name} must be in the range "
                    f"[1,{MAX_DIM}]. Current value:{v}.{hint}"
                )
    return None


@_rule("S2")
def _check_kernel_size(c):
    kh, kw = c.w_shape[2:]
    if kh > MAX_KERNEL or kw > MAX_KERNEL:
        return (
            f"Weight shapes do not satisfy Load3D's limits: kh={kh}, kw={kw}, which must "
            f"<= {MAX_KERNEL}."
        )
    k0 = 32 // dtype_size(c.grad_output.dtype)
    if kh * kw * k0 > MAX_LOAD3D_K:
        return (
            f"Weight shapes do not satisfy Load3D's limits: kh*kw*k0={kh * kw * k0}"
            f"(k0 = {k0}, mmad K block size), which must <={MAX_LOAD3D_K}."
        )
    return None


# --- A1-A4, G1: attributes ------------------------------------------------------------------------
def _check_each(name, values, lo, hi):
    for i, v in enumerate(values):
        if not lo <= v <= hi:
            return (
                f"The value of the {i}-th dimension of {name} must be in the range "
                f"[{lo},{hi}]. Current value:{v}."
            )
    return None


@_rule("A1")
def _check_strides(c):
    return _check_each("strides", c.strides, 1, MAX_STRIDE_DILATION)


@_rule("A2")
def _check_dilations(c):
    return _check_each("dilations", c.dilations, 1, MAX_STRIDE_DILATION)


@_rule("A3")
def _check_paddings(c):
    message = _check_each("paddings", c.paddings, 0, MAX_PADDING)
    if message:
        return message
    for axis, (before, after), kernel, dilation in (
        ("H", c.paddings[0:2], c.w_shape[2], c.dilations[0]),
        ("W", c.paddings[2:4], c.w_shape[3], c.dilations[1]),
    ):
        extent = (kernel - 1) * dilation + 1
        if before >= extent or after >= extent:
            return (
                f"The value of the {axis} dimension of weight must be > padding.Current weight "
                f"value after dilation :{extent},padding value:{before} and {after}."
            )
    return None


@_rule("A4")
def _check_symmetric_padding(c):
    top, bottom, left, right = c.paddings
    if top != bottom or left != right:
        return (
            f"Only symmetric padding is supported: paddings [top, bottom, left, right] needs "
            f"top == bottom and left == right, but got {c.paddings}."
        )
    return None


@_rule("G1")
def _check_groups(c):
    if c.groups != 1:
        return f"Invalid groups:{c.groups}, expected range [1,1] (only groups=1 is supported)."
    return None


# --- C1, O1, B1: consistency of the shapes --------------------------------------------------------
@_rule("C1")
def _check_channels(c):
    n, cout = c.dy_shape[:2]
    w_cout, w_cin = c.w_shape[:2]
    if cout != w_cout:
        return f"Cout of gradOutput ({cout}) is not equal to Cout of weight ({w_cout})."
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


@_rule("O1")
def _check_input_size_range(c):
    for axis, name in ((0, "hin"), (1, "win")):
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


@_rule("B1")
def _check_static(c):
    # Bias is not an argument at all and S1 already refuses dynamic (-1) dimensions; this
    # re-checks that the shapes the kernel will see are plain ints.
    for name, shape in (("grad_output", c.dy_shape), ("weight", c.w_shape)):
        if any(type(v) is not int for v in shape):
            return f"Dynamic shape is not supported: {name} has shape {shape}."
    return None


# --- TS0-TS6, V1: tiles ---------------------------------------------------------------------------
@_rule("TS0", ConvBpRuntimeError)
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


@_rule("TS1")
def _check_tile_m_l1(c):
    t, win = c.tiling, c.problem.win
    message = _positive("tileML1", t.ml1)
    if message:
        return message
    if not (t.ml1 <= win or t.ml1 % win == 0):
        return f"tileML1({t.ml1}) should be less than win({win}) or be divisible by win"
    return None


@_rule("TS2")
def _check_tile_n_l1(c):
    t = c.tiling
    message = _positive("tileNL1", t.nl1)
    if message:
        return message
    if t.nl1 % C0:
        return f"Invalid tileNL1:{t.nl1}, requires {C0}-element alignment."
    return None


@_rule("TS3")
def _check_tile_k_l1(c):
    t, taps = c.tiling, c.problem.taps
    message = _positive("tileKL1", t.kl1)
    if message:
        return message
    if t.kl1 % (C0 * taps):
        return (
            f"Invalid tileKL1:{t.kl1}, requires {C0 * taps}-element alignment "
            f"(16 * Kh * Kw = 16 * {c.problem.kh} * {c.problem.kw})."
        )
    return None


@_rule("TS4")
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


@_rule("TS5")
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


@_rule("TS6")
def _check_l1_buffer(c):
    used = c.tiling.l1_bytes(c.problem)
    if used > BUFFER_BYTES["L1"]:
        return (
            f"MinL1LoadSize > L1size, current MinL1LoadSize: {used}, L1size: {BUFFER_BYTES['L1']}."
        )
    return None


@_rule("V1")
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
                f"[1,+inf). Current value:{v}."
            )
    if vec[-1] % C0:
        return (
            f"The last dimension of `tile_shape` should be 32-byte aligned. vec_tile_shapes"
            f"[-1] = {vec[-1]} is not a multiple of {C0}."
        )
    return None


def validate_conv_backward_input(
    grad_output, input_size, weight, out_dtype, strides, paddings, dilations, groups=1
):
    """Run every rule in order; return a :class:`ValidatedCall` or raise the first violation."""
    call = _Call(grad_output, input_size, weight, out_dtype, strides, paddings, dilations, groups)
    for rule_id, error, check in RULES:
        message = check(call)
        if message is not None:
            raise error(rule_id, message)
    return ValidatedCall(call.problem, call.tiling, call.vec_tile, call.grad_output.dtype)


TILE_RULES = ("TS1", "TS2", "TS3", "TS4", "TS5", "TS6")


def rule_message(rule_id, problem, tiling, vec_tile=None):
    """The message of one tile rule (TS1-TS6, V1) for ``problem`` and ``tiling``, or None.

    The same check the op runs, outside a call: for the tile suggestion and explanation.
    """
    call = _Call(None, None, None, None, None, None, None, None)
    call.problem, call.tiling, call.vec_tile = problem, tiling, vec_tile
    return _CHECKS[rule_id](call)


def tile_violation(problem, tiling):
    """The first tile rule (TS1-TS6) that ``tiling`` breaks on ``problem``, as (rule, message).

    None when the tiles are legal.
    """
    for rule_id in TILE_RULES:
        message = rule_message(rule_id, problem, tiling)
        if message is not None:
            return rule_id, message
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
    for rule_id, error, check in RULES:
        if rule_id == "TS0":
            break
        if rule_id in skip:
            continue
        message = check(call)
        if message is not None:
            raise error(rule_id, message)
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


_CHECKS = {rule_id: check for rule_id, _, check in RULES}

__all__ += [
    "size_range_args",
    "problem_from_shapes",
    "rule_message",
    "tile_violation",
    "ConvBpInputError",
]


def check_host_arrays(problem, dy, w, dtype):
    """(dy, w) as plain ndarrays whose buffers hold the validated shapes and dtype.

    Both backends read and write by the buffers' own dimensions, so these are taken from the
    buffer (``np.asarray`` drops an ndarray subclass, whose ``.shape`` or ``.dtype`` attribute
    could say something else), never from attributes a subclass can override.
    """
    p = problem
    arrays = []
    for name, array, want in (
        ("grad_output", dy, (p.n, p.cout, p.hout, p.wout)),
        ("weight", w, (p.cout, p.cin, p.kh, p.kw)),
    ):
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
        if from_numpy_dtype(array.dtype) != dtype:
            raise PyptoRtError(
                RuntimeError(
                    f"{name} data has dtype {array.dtype}, but the validated call needs {dtype}"
                )
            )
        arrays.append(array)
    return tuple(arrays)
