"""What msprobe writes in dump.json, read one record at a time: the file and folder names,
conv2d's argument orders and defaults, a recorded value as Python, the conv parameters of a
forward record, a tensor record's dtype and shape.

A call the op cannot judge raises :class:`Skip` (the call is listed with the reason); a record
msprobe never writes raises :class:`Malformed` (the whole dump is refused).
"""

from ..._core.fileio import show
from ...error import FeError

__all__ = [
    "DUMP_JSON",
    "CONSTRUCT_JSON",
    "TENSOR_FOLDER",
    "CALL_TENSORS",
    "MAX_NESTING",
    "Skip",
    "Malformed",
    "dump_error",
    "field",
    "value_of",
    "is_tensor",
    "argument_names",
    "argument",
    "conv_params",
    "dtype_name",
    "tensor_shape",
]

DUMP_JSON = "dump.json"
CONSTRUCT_JSON = "construct.json"
TENSOR_FOLDER = "dump_tensor_data"
CALL_TENSORS = ("grad_output", "weight", "grad_input")  # what judging a call reads

MAX_NESTING = 8  # list levels an argument may have (msprobe writes 2 at most: tuples of ints)

_TORCH_ARGS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_MINDSPORE_OPS_ARGS = (
    "input",
    "weight",
    "bias",
    "stride",
    "pad_mode",
    "padding",
    "dilation",
    "groups",
)
_DEFAULTS = {"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "pad_mode": "valid"}


def dump_error(text, kind=ValueError):
    """The PyptoError about a dump that cannot be read as a whole."""
    return FeError(kind(text))


class Skip(Exception):
    """A call the op cannot judge; the message says why."""


class Malformed(Exception):
    """A record of dump.json whose shape msprobe never writes; the message says what."""


def field(record, key, kind):
    """``record[key]`` when it is a ``kind`` (list or dict), an empty one when absent or null;
    Malformed otherwise."""
    value = record.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise Malformed(
            f'"{key}" must be {"a list" if kind is list else "an object"}, but is {show(value)}'
        )
    return value


def value_of(item, depth=0):
    """A recorded argument as Python: ints, floats, bools, strs, lists; tensors as their dict.
    Lists nested deeper than MAX_NESTING are no argument of conv2d: a skip, not a
    RecursionError."""
    if item is None:
        return None
    if isinstance(item, list):
        if depth >= MAX_NESTING:
            raise Skip(f"an argument nested more than {MAX_NESTING} lists deep")
        return [value_of(v, depth + 1) for v in item]
    if isinstance(item, dict):
        kind = item.get("type")
        if "value" in item and kind in ("int", "float", "bool", "str"):
            return item["value"]
        return item
    return item


def is_tensor(item):
    return isinstance(item, dict) and str(item.get("type", "")).endswith("Tensor")


def argument_names(api, framework):
    """conv2d's positional arguments in ``api``'s order: MindSpore's ``Functional.conv2d`` is
    ``mindspore.ops.conv2d`` (``pad_mode`` before ``padding``), every other one torch's."""
    if framework == "mindspore" and api == "Functional.conv2d":
        return _MINDSPORE_OPS_ARGS
    return _TORCH_ARGS


def argument(record, names, name):
    """The argument ``name`` of a forward record: positional by the API's order ``names``,
    else keyword, else the API's default."""
    args = field(record, "input_args", list)
    kwargs = field(record, "input_kwargs", dict)
    index = names.index(name)
    if index < len(args):
        return value_of(args[index])
    if name in kwargs:
        return value_of(kwargs[name])
    return _DEFAULTS.get(name)


def _pair(value, what):
    """An int or 1-2 ints -> [a, b]."""
    if isinstance(value, bool):
        value = None
    if isinstance(value, int):
        return [value, value]
    if (
        isinstance(value, list)
        and len(value) in (1, 2)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return list(value) * (2 // len(value))
    raise Skip(f"{what} {value!r} is not an int or a pair of ints")


def _paddings(value, pad_mode=None):
    """[top, bottom, left, right] from torch's padding (int, (ph, pw), "valid") or MindSpore's
    (pad_mode, padding of 1, 2 or 4 ints)."""
    if pad_mode is not None and pad_mode != "pad":
        if pad_mode == "valid":
            return [0, 0, 0, 0]
        raise Skip(
            f"pad_mode {pad_mode!r}: only 'pad' and 'valid' are judged (the dump does "
            f"not record the padding 'same' chose)"
        )
    if isinstance(value, str):
        if value == "valid":  # torch: no padding
            return [0, 0, 0, 0]
        raise Skip(
            f"string padding {value!r}: the dump does not record the padding it chose "
            f"(possibly asymmetric); only numeric padding and 'valid' are judged"
        )
    if (
        isinstance(value, list)
        and len(value) == 4
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        top, bottom, left, right = value
        if top != bottom or left != right:
            raise Skip(f"asymmetric padding {value} (top, bottom, left, right): not judged")
        return list(value)
    ph, pw = _pair(value, "padding")
    return [ph, ph, pw, pw]


def conv_params(record, api, framework):
    """(strides, paddings, dilations, groups) of a conv2d forward record."""
    names = argument_names(api, framework)
    pad_mode = argument(record, names, "pad_mode") if "pad_mode" in names else None
    strides = _pair(argument(record, names, "stride"), "stride")
    paddings = _paddings(argument(record, names, "padding"), pad_mode)
    dilations = _pair(argument(record, names, "dilation"), "dilation")
    groups = argument(record, names, "groups")
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise Skip(f"groups {groups!r} is not an int")
    return strides, paddings, dilations, groups


def dtype_name(tensor):
    """ "fp16" / "bf16" for a tensor record's dtype, else the dtype as recorded."""
    raw = tensor.get("dtype")
    if not isinstance(raw, str):
        return show(raw)
    name = raw.lower()
    for prefix in ("torch.", "mindspore.", "numpy."):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return {
        "float16": "fp16",
        "half": "fp16",
        "fp16": "fp16",
        "bfloat16": "bf16",
        "bf16": "bf16",
        "float32": "fp32",
        "float": "fp32",
        "float64": "fp64",
        "double": "fp64",
    }.get(name, raw)


def tensor_shape(tensor):
    """A tensor record's shape (a list of ints); a PyptoError when it holds none."""
    shape = tensor.get("shape")
    if not (
        isinstance(shape, list)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in shape)
    ):
        raise dump_error(f"a tensor record holds no valid shape: {show(tensor, 200)}")
    return shape
