"""A call's run plan: validated by the op's rules on shape-only tensors (nothing is
computed), and the tiles it runs with (the caller's, else the suggested ones, cached per
problem); ``check_call`` is the public face."""

import functools

import torch

from .._convbp import conv_backward_input as _pypto_dgrad
from .._core import options as _config
from .._core.options import get_vec_tile_shapes, options
from .._core.suggest import suggest_convbp_input_tile_shapes
from .._dtypes import DataType
from ..error import ConvBpInputError, FeError, PyptoError
from ..tensor import Tensor
from ._convert import _datatype, _list, _tuple

VEC_TILE = [16, 16, 16, 16]  # the vector tiles used when the caller set none


def _hashable(*args):
    try:
        hash(args)
    except TypeError:
        return None
    return args


@functools.lru_cache(maxsize=4096)
def _suggested(dy_shape, w_shape, input_size, dtype, strides, paddings, dilations):
    l1, l0 = suggest_convbp_input_tile_shapes(
        list(dy_shape),
        list(w_shape),
        list(input_size),
        dtype,
        list(strides),
        list(paddings),
        list(dilations),
    )
    return l1.as_tuple(), l0.as_tuple()  # plain tuples: the cache hands out nothing mutable


def _tiles_set():
    tile = _config._get("convbp_tile_shapes")  # read, not copied: nothing here mutates it
    return any(tile.tileL1Info.as_tuple()) or any(tile.tileL0Info.as_tuple())


# what an fp32 call is told on top of the op's rule: the way in from PyTorch
AUTOCAST_HINT = (
    " (PyTorch: run an fp32 model under torch.autocast(device_type, dtype=torch.bfloat16 or "
    "torch.float16), which casts each convolution's inputs for pypto as it does for nn.Conv2d; "
    "or convert the model with .to(torch.bfloat16))"
)


def _run_plan(
    dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, groups, w_dtype=None
):
    """(l1, l0, vec): the tiles this call runs with, after validating it by the op's rules on
    shape-only tensors (nothing is computed). l1, l0: the suggested tiles as tuples, or None
    where the caller's are set; vec: True where the caller set no vector tiles (VEC_TILE
    serves). Raises the op's PyptoError (an fp32 one names autocast as the way in). Run it in
    the scope ``_scope_of(*plan)``.

    dtype: grad_output's DataType or torch dtype; w_dtype: the weight's, when it differs."""
    dtype, w_dtype = (_datatype(d) if isinstance(d, torch.dtype) else d for d in (dtype, w_dtype))
    try:
        return _checked_plan(
            dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, groups, w_dtype
        )
    except ConvBpInputError as broken:
        if broken.rule in ("D1", "D2", "D3") and DataType.DT_FP32 in (dtype, w_dtype):
            raise type(broken)(broken.rule, broken.msg + AUTOCAST_HINT) from None
        raise


def _checked_plan(
    dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, groups, w_dtype
):
    if w_dtype is not None and w_dtype != dtype:  # the op's D1-D3 say which and why
        _validate(
            dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, groups, w_dtype
        )
    vec = not get_vec_tile_shapes()
    l1 = l0 = None
    if not _tiles_set():
        key = _hashable(
            _tuple(dy_shape),
            _tuple(w_shape),
            _tuple(input_size),
            dtype,
            _tuple(strides),
            _tuple(paddings),
            _tuple(dilations),
        )
        try:
            l1, l0 = (
                _suggested(*key)
                if key is not None
                else _suggested.__wrapped__(
                    dy_shape, w_shape, input_size, dtype, strides, paddings, dilations
                )
            )
        except PyptoError as no_tiles:
            # the arguments break a rule (the op names the first, in its order, groups
            # included), or no tiles fit the problem (the suggestion's error)
            try:
                _validate(
                    dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, groups
                )
            except ConvBpInputError as broken:
                if broken.rule != "TS0":  # TS0: the arguments are fine, the tiles are unset
                    raise broken from None
            raise no_tiles from None
    with _scope_of(l1, l0, vec):
        _validate(dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, groups)
    return l1, l0, vec


@functools.lru_cache(maxsize=4096)
def _scope_of(l1, l0, vec):
    """The ``pypto.options`` scope of a run plan (``_run_plan``), made once per distinct plan:
    making one checks and copies its tiles (several microseconds of a small call)."""
    return options(**_plan_values(l1, l0, vec))


def _plan_values(l1, l0, vec):
    """A run plan's options as a new dict: what check_call returns and _scope_of sets."""
    from ..pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info

    values = {}
    if vec:
        values["vec_tile_shapes"] = list(VEC_TILE)
    if l1 is not None:
        values["convbp_tile_shapes"] = (ConvBpTileL1Info(*l1), ConvBpTileL0Info(*l0))
    return values


def _validate(
    dy_shape, w_shape, input_size, dtype, strides, paddings, dilations, groups, w_dtype=None
):
    """Every rule of the op, in its order, on shape-only tensors: nothing is computed."""
    _pypto_dgrad(
        Tensor(list(dy_shape), dtype),
        _list(input_size),
        Tensor(list(w_shape), dtype if w_dtype is None else w_dtype),
        dtype,
        _list(strides),
        _list(paddings),
        _list(dilations),
        groups=groups,
    )


def _tensor_plan(grad_output, input_size, weight, strides, paddings, dilations, groups):
    """``_run_plan`` of a call on torch tensors, by grad_output's and weight's shapes and
    dtypes. Raises the op's FeError (TypeError) where either is not a torch.Tensor, else the op's
    PyptoError as _run_plan does."""
    for name, value in (("grad_output", grad_output), ("weight", weight)):
        if not isinstance(value, torch.Tensor):
            raise FeError(
                TypeError(f"{name} must be a torch.Tensor, but got {type(value).__name__}")
            )
    return _run_plan(
        list(grad_output.shape),
        list(weight.shape),
        input_size,
        grad_output.dtype,
        strides,
        paddings,
        dilations,
        groups,
        weight.dtype,
    )


def check_call(
    grad_output_shape,
    weight_shape,
    input_size,
    dtype,
    strides,
    paddings,
    dilations,
    groups=1,
    weight_dtype=None,
):
    """Validate a dgrad by the op's rules without computing it; return the options (tiles,
    vector tiles) it would run with (empty where the caller's are in effect).

    ``dtype`` (and ``weight_dtype`` when it differs) is a torch dtype or a pypto DataType;
    strides, paddings (pypto's [top, bottom, left, right]) and dilations as for
    ``pypto.conv_backward_input``. Raises the op's PyptoError (``.rule`` names the broken
    rule)."""
    return _plan_values(
        *_run_plan(
            list(grad_output_shape),
            list(weight_shape),
            input_size,
            dtype,
            strides,
            paddings,
            dilations,
            groups,
            weight_dtype,
        )
    )
