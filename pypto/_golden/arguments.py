"""The arguments of ``pypto.testing.compare`` as :func:`pypto._golden.judge.judge_case` takes
them: NumPy arrays of the case's dtype from arrays, pypto Tensors or torch tensors, the dtype,
the tiles, a given golden or reference. Every bad argument is a PyptoError, raised before
anything is computed."""

import numpy as np

from .._core import options as _config
from .._core.values import as_int
from .._dtypes import DataType, dtype_name, from_numpy_dtype, numpy_dtype, parse_dtype_name
from ..error import FeError
from ..pypto_impl import ConvBpTileL0Info, ConvBpTileL1Info
from .case import make_case

__all__ = ["compare_arguments"]


def _host_array(value, name):
    """The NumPy array of an array, a pypto Tensor or a torch tensor (no copy where it can)."""
    from ..tensor import Tensor

    if isinstance(value, Tensor):
        if not value.has_data:
            raise FeError(ValueError(f"{name} is a shape-only pypto.Tensor: pass data"))
        value = value.numpy()
    elif type(value).__module__.startswith("torch"):
        from ..tensor import from_torch

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


def _given_golden(golden, case):
    """A given golden as a float64 array of the case's input_size (a copy: the result keeps
    it)."""
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
    return golden.astype(np.float64)


def _given_reference(reference, case):
    """A given pypto result as an array of the case's dtype and input_size."""
    reference = _array(reference, "reference (pypto's result)", case.dtype)
    if list(reference.shape) != list(case.input_size):
        raise FeError(
            ValueError(
                f"reference has shape {list(reference.shape)}, but "
                f"input_size is {list(case.input_size)}"
            )
        )
    return reference


def compare_arguments(
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
):
    """``(case, dy, w, actual, golden, reference)`` from ``pypto.testing.compare``'s arguments
    (but ``standard``): the case by the op's rules and the tiles, the arrays native and
    contiguous in its dtype, golden and reference None where not given. Checks every argument
    before anything is computed; a PyptoError names the first bad one."""
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
    if golden is not None:
        golden = _given_golden(golden, case)
    if reference is not None:
        reference = _given_reference(reference, case)
    return case, dy, w, a, golden, reference
