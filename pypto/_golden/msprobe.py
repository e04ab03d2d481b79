"""Judge the conv2d backward calls of an msprobe dump (``pypto compare --msprobe DUMP``).

msprobe (``pip install mindstudio-probe``, Huawei's accuracy tool) dumps every API call of a
training step with ``PrecisionDebugger``: a ``dump.json`` per step and rank (or process) folder
and, for task "tensor", one file per tensor argument in ``dump_tensor_data/`` next to it (``.pt``
from PyTorch, ``.npy`` from MindSpore). What this module relies on (checked on msprobe 26.2.0
with torch 2.13, levels L0, L1 and mix):

- ``dump.json`` holds ``task``, ``level``, ``framework``, ``dump_data_dir`` (absolute, at dump
  time; null for task "statistics") and ``data``: {entry name: record}.
- ``Functional.conv2d.<n>.forward`` (also ``Torch.conv2d``, MindSpore's ``Mint.conv2d`` and
  ``MintFunctional.conv2d``): ``input_args`` (positional, in the API's order) and
  ``input_kwargs`` hold input, weight, bias, stride, padding, dilation, groups; a tensor is
  ``{"type": "torch.Tensor", "dtype", "shape", ..., "data_name": "<file>"}``, an int
  ``{"type": "int", "value": 2}``, a tuple a list of those, a str ``{"type": "str", ...}``,
  None null; an argument not passed is absent (the API's default applies).
  ``Functional.conv2d.<n>.backward``: ``input`` = [grad_output], ``output`` = [grad_input,
  grad_weight, grad_bias], null where no gradient was computed. Same ``<n>`` as the forward.
- Module entries (level L0 or mix): ``Module.<name>.Conv2d.forward.<n>`` /
  ``...backward.<n>`` (older msprobe: ``Module.<name>.Conv2d.<n>.forward``): the forward holds
  the module's input and ``parameters`` (weight, bias) but no stride, padding, dilation or
  groups; ``construct.json`` maps each call to its parent, so in a mix dump the
  ``Functional.conv2d`` call inside the module gives them. An L0 dump has none: those Module
  calls are listed as skipped.
- MindSpore's ``Functional.conv2d`` is ``mindspore.ops.conv2d`` (``pad_mode`` before
  ``padding``, padding of 1, 2 or 4 ints); its ``.npy`` files hold bf16 as float32 (read back
  exactly). MindSpore dumps follow msprobe's code, not a dump made here (no MindSpore).

Each call is judged as ``pypto.testing.compare`` judges a kernel's result: the dumped
grad_input against the float64 golden from the dumped grad_output and weight, every standard,
the fp32-accumulation bound and the localisation over the NPU task grid of the suggested tiles
(the dumped result was not made with tiles: the grid only names where the errors are). Calls the
op cannot express are listed as skipped with the reason: groups != 1, padding "same" or
asymmetric, dtypes other than fp16/bf16 or mixed (autocast), no grad_input, any rule the op
refuses. A dump without tensors (task "statistics"), a tensor file that is missing, unreadable or
not what dump.json says is a PyptoError.
"""

import math
import os
import re

import numpy as np

from .._core.fileio import check_npy_bytes, npy_header, open_regular, read_json, show
from .._dtypes import DTYPE_NAMES, numpy_dtype
from .._version import __version__
from ..error import ConvBpInputError, FeError, PyptoMemoryError
from . import calls as _calls
from .judge import judge_case

__all__ = ["MsprobeReport", "judge_dump", "find_dumps", "check_report_path", "CSV_COLUMNS"]

DUMP_JSON = "dump.json"
CONSTRUCT_JSON = "construct.json"
TENSOR_FOLDER = "dump_tensor_data"

# API calls with conv2d's arguments: (prefix).conv2d.<n>.forward|backward
_API = re.compile(
    r"^(?P<api>(?:Functional|Torch|Mint|MintFunctional)\.conv2d)\.(?P<n>\d+)\."
    r"(?P<dir>forward|backward)$"
)
# nn.Conv2d modules, both orders msprobe has used
_MODULE = re.compile(
    r"^(?P<prefix>Module\.(?P<name>.+)\.Conv2d)\.(?:(?P<dir>forward|backward)\."
    r"(?P<n>\d+)|(?P<n2>\d+)\.(?P<dir2>forward|backward))$"
)

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


def _error(text, kind=ValueError):
    return FeError(kind(text))


# --- finding and reading the dump --------------------------------------------------------------
def find_dumps(path):
    """Every dump.json at or below ``path`` (a dump.json itself, or any folder above one),
    sorted; a PyptoError when there is none."""
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise _error(
            f"the msprobe dump is {path!r}: give a folder holding dump.json (the "
            f"dump_path, a step or a rank folder)",
            TypeError if not isinstance(path, (str, os.PathLike)) else ValueError,
        )
    path = os.fspath(path)
    if os.path.lexists(path) and not os.path.isdir(path):  # read (or refused) as a file
        if os.path.basename(path) != DUMP_JSON:
            raise _error(
                f"{path} is not an msprobe dump.json: give the folder holding "
                f"dump.json (the dump_path, a step or a rank folder)"
            )
        return [path]
    if not os.path.isdir(path):
        raise _error(f"the msprobe dump {path} does not exist")
    found = []
    for folder, subfolders, files in os.walk(path):
        subfolders[:] = sorted(d for d in subfolders if d != TENSOR_FOLDER)  # no tensors read
        if DUMP_JSON in files:
            found.append(os.path.join(folder, DUMP_JSON))
    if not found:
        raise _error(
            f"no {DUMP_JSON} in {path} or below: give an msprobe dump folder (the "
            f"dump_path, a step or a rank folder)"
        )
    return sorted(found)


def _read_json(path, what):
    """A regular file's JSON (a FIFO named dump.json would block ``open``), else a
    PyptoError."""
    return read_json(path, what)


def _load_dump(path):
    dump = _read_json(path, "the msprobe dump")
    if not isinstance(dump, dict) or not isinstance(dump.get("data"), dict):
        raise _error(f'{path} is no msprobe dump.json: it has no "data" object of API calls')
    task = dump.get("task")
    if task is not None and task != "tensor":  # older dumps have no header: files tell
        holds = (
            "statistics (Max, Min, Mean, Norm) only" if task == "statistics" else "no tensor files"
        )
        raise _error(
            f"{path} is an msprobe dump of task {task!r}, which holds {holds}: dump "
            f'again with task "tensor" (level "L1" or "mix") to judge its '
            f"conv2d backward calls"
        )
    return dump


def _load_construct(dump_json):
    """{call: parent} from construct.json beside dump.json ({} when there is none)."""
    path = os.path.join(os.path.dirname(dump_json), CONSTRUCT_JSON)
    if not os.path.lexists(path):
        return {}
    construct = _read_json(path, "msprobe's call tree")
    if not isinstance(construct, dict):
        raise _error(f"{path}: msprobe's call tree must be an object of call: parent")
    for child, parent in construct.items():
        if parent is not None and not isinstance(parent, str):
            raise _error(
                f"{path}: the parent of {show(child)} must be a call's name or null, but is "
                f"{show(parent)}"
            )
    return construct


# --- the arguments of a call -------------------------------------------------------------------
class _Skip(Exception):
    """A call the op cannot judge; the message says why."""


MAX_NESTING = 8  # list levels an argument may have (msprobe writes 2 at most: tuples of ints)


def _value(item, depth=0):
    """A recorded argument as Python: ints, floats, bools, strs, lists; tensors as their dict.
    Lists nested deeper than MAX_NESTING are no argument of conv2d: a skip, not a
    RecursionError."""
    if item is None:
        return None
    if isinstance(item, list):
        if depth >= MAX_NESTING:
            raise _Skip(f"an argument nested more than {MAX_NESTING} lists deep")
        return [_value(v, depth + 1) for v in item]
    if isinstance(item, dict):
        kind = item.get("type")
        if "value" in item and kind in ("int", "float", "bool", "str"):
            return item["value"]
        return item
    return item


def _is_tensor(item):
    return isinstance(item, dict) and str(item.get("type", "")).endswith("Tensor")


def _argument(record, names, name):
    """The argument ``name`` of a forward record: positional by the API's order, else keyword,
    else the API's default."""
    args = _field(record, "input_args", list)
    kwargs = _field(record, "input_kwargs", dict)
    index = names.index(name)
    if index < len(args):
        return _value(args[index])
    if name in kwargs:
        return _value(kwargs[name])
    return _DEFAULTS.get(name)


class _Malformed(Exception):
    """A record of dump.json whose shape msprobe never writes; the message says what."""


def _field(record, key, kind):
    """``record[key]`` when it is a ``kind`` (list or dict), an empty one when absent or null;
    _Malformed otherwise."""
    value = record.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise _Malformed(
            f'"{key}" must be {"a list" if kind is list else "an object"}, but is {show(value)}'
        )
    return value


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
    raise _Skip(f"{what} {value!r} is not an int or a pair of ints")


def _paddings(value, pad_mode=None):
    """[top, bottom, left, right] from torch's padding (int, (ph, pw), "valid") or MindSpore's
    (pad_mode, padding of 1, 2 or 4 ints)."""
    if pad_mode is not None and pad_mode != "pad":
        if pad_mode == "valid":
            return [0, 0, 0, 0]
        raise _Skip(
            f"pad_mode {pad_mode!r}: only 'pad' and 'valid' are judged (the dump does "
            f"not record the padding 'same' chose)"
        )
    if isinstance(value, str):
        if value == "valid":  # torch: no padding
            return [0, 0, 0, 0]
        raise _Skip(
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
            raise _Skip(f"asymmetric padding {value} (top, bottom, left, right): not judged")
        return list(value)
    ph, pw = _pair(value, "padding")
    return [ph, ph, pw, pw]


def _conv_params(record, api, framework):
    """(strides, paddings, dilations, groups) of a conv2d forward record."""
    names = (
        _MINDSPORE_OPS_ARGS
        if (framework == "mindspore" and api == "Functional.conv2d")
        else _TORCH_ARGS
    )
    pad_mode = _argument(record, names, "pad_mode") if "pad_mode" in names else None
    strides = _pair(_argument(record, names, "stride"), "stride")
    paddings = _paddings(_argument(record, names, "padding"), pad_mode)
    dilations = _pair(_argument(record, names, "dilation"), "dilation")
    groups = _argument(record, names, "groups")
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise _Skip(f"groups {groups!r} is not an int")
    return strides, paddings, dilations, groups


def _dtype_name(tensor):
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


def _shape(tensor):
    shape = tensor.get("shape")
    if not (
        isinstance(shape, list)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in shape)
    ):
        raise _error(f"a tensor record holds no valid shape: {show(tensor, 200)}")
    return shape


# --- the calls ---------------------------------------------------------------------------------
class _Call:
    """One conv2d backward entry: its tensors' records and conv parameters, or why not."""

    def __init__(self, dump_json, label, api, forward, order):
        self.dump_json, self.label, self.api, self.forward, self.order = (
            dump_json,
            label,
            api,
            forward,
            order,
        )
        self.parameters_from = None
        self.skip = None
        self.dtype = None
        self.tensors = {}  # name -> record: grad_output, weight, grad_input
        self.params = None  # (strides, paddings, dilations, groups)
        self.files = {}  # name -> path, once the call is to be judged
        self.case = None

    def shape(self, name):
        record = self.tensors.get(name)
        return _shape(record) if record is not None else None


def _module_key(match):
    direction = match.group("dir") or match.group("dir2")
    index = match.group("n") or match.group("n2")
    return match.group("prefix"), direction, index


def _calls_of(dump_json, dump, label):
    """Every conv2d backward call of one dump.json, with its parameters or a skip reason."""
    data = dump["data"]
    framework = dump.get("framework")
    order = {name: i for i, name in enumerate(data)}
    construct = _load_construct(dump_json)
    children = {}
    for child, parent in construct.items():
        children.setdefault(parent, []).append(child)
    modules = {}  # (prefix, index) -> {direction: name}
    for name in data:
        m = _MODULE.match(name)
        if m:
            prefix, direction, index = _module_key(m)
            modules.setdefault((prefix, index), {})[direction] = name
    calls = []
    for name in data:
        try:
            call = _call_of(dump_json, data, name, label, framework, order, modules, children)
        except _Malformed as why:
            raise _error(f"{dump_json}: {name}: {why} (not a record msprobe writes)") from None
        if call is not None:
            calls.append(call)
    calls.sort(key=lambda c: c.order)
    return calls


def _call_of(dump_json, data, name, label, framework, order, modules, children):
    """The _Call of the entry ``name`` when it is a conv2d backward, else None."""
    m = _API.match(name)
    if m and m.group("dir") == "backward":
        forward = f"{m.group('api')}.{m.group('n')}.forward"
        call = _Call(
            dump_json,
            label,
            name,
            forward if forward in data else None,
            order.get(forward, len(data) + order[name]),
        )
        _api_call(call, data, m.group("api"), framework)
        return call
    m = _MODULE.match(name)
    if m and _module_key(m)[1] == "backward":
        prefix, _, index = _module_key(m)
        forward = modules.get((prefix, index), {}).get("forward")
        call = _Call(dump_json, label, name, forward, order.get(forward, len(data) + order[name]))
        _module_call(call, data, framework, children)
        return call
    return None


def _record(data, name):
    """The entry ``name`` of dump.json's data: an object, else _Malformed."""
    record = data[name]
    if not isinstance(record, dict):
        raise _Malformed(f"the entry {name} must be an object, but is {show(record)}")
    return record


def _backward_tensors(call, record):
    inputs = _field(record, "input" if "input" in record else "input_args", list)
    outputs = _field(record, "output", list)
    grad_output = inputs[0] if inputs else None
    grad_input = outputs[0] if outputs else None
    if not _is_tensor(grad_output):
        raise _Skip("the backward entry holds no grad_output tensor (input.0)")
    if not _is_tensor(grad_input):
        raise _Skip("no grad_input (output.0 is null): the conv's input did not require grad")
    call.tensors["grad_output"], call.tensors["grad_input"] = grad_output, grad_input


def _check_dtypes(call):
    names = {k: _dtype_name(v) for k, v in call.tensors.items()}
    kinds = set(names.values())
    if len(kinds) != 1:
        raise _Skip("mixed dtypes (autocast?): " + ", ".join(f"{k} {v}" for k, v in names.items()))
    kind = kinds.pop()
    call.dtype = kind
    if kind not in DTYPE_NAMES:
        raise _Skip(f"dtype {kind}: pypto's conv_backward_input takes fp16 and bf16 only")


def _api_call(call, data, api, framework):
    try:
        if call.forward is None:
            raise _Skip(
                f"no {api}.*.forward entry for it in the dump (scope, list or "
                f"data_mode left it out): weight, stride and padding are unknown"
            )
        forward = _record(data, call.forward)
        names = (
            _MINDSPORE_OPS_ARGS
            if (framework == "mindspore" and api == "Functional.conv2d")
            else _TORCH_ARGS
        )
        weight = _argument(forward, names, "weight")
        if not _is_tensor(weight):
            raise _Skip("the forward entry holds no weight tensor")
        call.tensors["weight"] = weight
        _backward_tensors(call, _record(data, call.api))
        call.params = _conv_params(forward, api, framework)
        _finish(call)
    except _Skip as why:
        call.skip = str(why)


def _module_call(call, data, framework, children):
    try:
        if call.forward is None:
            raise _Skip("no forward entry of this module call in the dump: its weight is unknown")
        forward = _record(data, call.forward)
        convs = [
            c
            for c in children.get(call.forward, ())
            if _API.match(c) and _API.match(c).group("dir") == "forward" and c in data
        ]
        if not convs:
            raise _Skip(
                "a Module entry records no stride, padding, dilation or groups, and "
                "the dump holds no conv2d call inside it (level L0): dump with level "
                '"mix" to judge Module entries'
            )
        if len(convs) > 1:
            raise _Skip(
                f"the module made {len(convs)} conv2d calls ({', '.join(convs)}): "
                f"which one its gradient belongs to is not known"
            )
        inner = _record(data, convs[0])
        api = _API.match(convs[0]).group("api")
        call.parameters_from = convs[0]
        names = (
            _MINDSPORE_OPS_ARGS
            if (framework == "mindspore" and api == "Functional.conv2d")
            else _TORCH_ARGS
        )
        weight = _field(forward, "parameters", dict).get("weight") or _argument(
            inner, names, "weight"
        )
        if not _is_tensor(weight):
            raise _Skip("neither the module nor its conv2d call holds a weight tensor")
        call.tensors["weight"] = weight
        _backward_tensors(call, _record(data, call.api))
        module_input = _value((_field(forward, "input_args", list) or [None])[0])
        conv_input = _argument(inner, names, "input")
        if (
            _is_tensor(module_input)
            and _is_tensor(conv_input)
            and _shape(module_input) != _shape(conv_input)
        ):
            raise _Skip(
                f"the module pads its input {_shape(module_input)} to "
                f"{_shape(conv_input)} before conv2d (padding_mode): its grad_input "
                f"is no conv2d dgrad"
            )
        call.params = _conv_params(inner, api, framework)
        _finish(call)
    except _Skip as why:
        call.skip = str(why)


def _finish(call):
    """dtype and groups checks, then the op's own rules on the shapes (no data needed)."""
    from .case import make_case

    _check_dtypes(call)
    strides, paddings, dilations, groups = call.params
    if groups != 1:
        raise _Skip(f"groups {groups}: pypto's conv_backward_input has no groups")
    try:
        call.case = make_case(
            call.shape("grad_output"),
            call.shape("weight"),
            call.shape("grad_input"),
            call.dtype,
            strides,
            paddings,
            dilations,
        )
    except ConvBpInputError as exc:
        raise _Skip(f"the op refuses it: {exc}") from None


# --- the tensor files --------------------------------------------------------------------------
def _tensor_path(call, record, dump):
    name = record.get("data_name")
    if not isinstance(name, str) or not name:
        raise _error(
            f"{call.dump_json}: {call.api} has a tensor without a file (no "
            f'"data_name"): was the dump made with task "tensor"?'
        )
    if name != os.path.basename(name) or name in (".", ".."):
        raise _error(
            f"{call.dump_json}: {call.api} names the tensor file {name!r}, which is "
            f"not a plain file name"
        )
    folder = os.path.join(os.path.dirname(call.dump_json), TENSOR_FOLDER)
    there = dump.get("dump_data_dir")
    if not os.path.isdir(folder) and isinstance(there, str) and os.path.isdir(there):
        folder = there  # dump.json alone, its tensors where msprobe wrote them
    return os.path.join(folder, name)


def _read_tensor(path, record, dtype_name, what):
    """The fp16/bf16 array a tensor file holds, checked against its record in dump.json."""
    shape = _shape(record)
    np_dtype = numpy_dtype(DTYPE_NAMES[dtype_name])
    if path.endswith(".pt"):
        array = _read_pt(path, record, dtype_name, what, np_dtype)
    elif path.endswith(".npy"):
        array = _read_npy(path, record, shape, dtype_name, what, np_dtype)
    else:
        raise _error(f"{path} ({what}): unknown tensor file type (msprobe writes .pt and .npy)")
    if list(array.shape) != list(shape):
        raise _error(
            f"{path} ({what}) has shape {list(array.shape)}, but dump.json says {list(shape)}"
        )
    return np.ascontiguousarray(array)


def _read_pt(path, record, dtype_name, what, np_dtype):
    """A .pt tensor file's data. The file is mapped, not read: a storage its pickle claims
    beyond the file's bytes fails to map instead of being allocated; the data is then copied
    (its size bounded by the file's), so nothing stays mapped."""
    try:
        import torch
    except ImportError:
        raise _error(
            f"reading {path} needs PyTorch (torch.load), which is not installed: pip install torch",
            RuntimeError,
        ) from None
    open_regular(path, what).close()  # a FIFO or a device is refused, not read
    try:
        value = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # pickle, zip and torch errors alike
        raise _error(f"cannot read {what} from {path}: {type(exc).__name__}: {exc}") from None
    if not isinstance(value, torch.Tensor):
        raise _error(f"{path} ({what}) holds a {type(value).__name__}, not a tensor")
    found = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(value.dtype, str(value.dtype))
    if found != dtype_name:
        raise _error(
            f"{path} ({what}) holds {value.dtype} data, but dump.json says {record.get('dtype')}"
        )
    value = value.detach().contiguous()
    bits = value.view(torch.int16) if value.dtype == torch.bfloat16 else value
    return bits.numpy().view(np_dtype).copy()


def _read_npy(path, record, shape, dtype_name, what, np_dtype):
    """A .npy tensor file's data, its header checked against the record and the file's size
    first: a header claiming 10^12 elements is refused, not allocated."""
    with open_regular(path, what) as f:
        found_shape, fortran, dt, offset, held = npy_header(f, path)
        if dt != np_dtype and not (dt.kind == "f" and not dt.hasobject):
            raise _error(
                f"{path} ({what}) holds {dt} data, but dump.json says {record.get('dtype')}"
            )
        if list(found_shape) != list(shape):
            raise _error(
                f"{path} ({what}) has shape {list(found_shape)}, but dump.json says {list(shape)}"
            )
        check_npy_bytes(path, found_shape, dt, held)
        count = math.prod(found_shape)
        try:
            f.seek(offset)
            array = np.fromfile(f, dtype=dt, count=count)
        except (OSError, ValueError) as exc:
            raise _error(f"cannot read {what} from {path}: {exc}") from None
    if array.size != count:
        raise _error(f"cannot read {what} from {path}: {array.size} of {count} elements")
    array = array.reshape(found_shape, order="F" if fortran else "C")
    if dt == np_dtype:
        return array
    # MindSpore writes bf16 as float32: exactly, or not at all
    converted = array.astype(np_dtype)
    if not np.array_equal(converted.astype(array.dtype), array, equal_nan=True):
        raise _error(
            f"{path} ({what}) holds {array.dtype} values that are not all {dtype_name} "
            f"values, but dump.json says {record.get('dtype')}"
        )
    return converted


# --- the report --------------------------------------------------------------------------------
_LEADING = ("dump", "api", "status")  # the CSV's columns before _calls.CALL_COLUMNS
CSV_COLUMNS = _LEADING + _calls.CALL_COLUMNS


def _row(call, standard):
    names = ("strides", "paddings", "dilations", "groups")
    params = dict(zip(names, call.params)) if call.params else {}  # new_row: None
    shapes = {}
    for name in ("grad_output", "weight", "grad_input"):
        try:
            shapes[name] = call.shape(name)
        except FeError:
            shapes[name] = None
    dtype = call.dtype
    if dtype is None and call.tensors:  # skipped before the dtype check
        kinds = sorted({_dtype_name(t) for t in call.tensors.values()})
        dtype = kinds[0] if len(kinds) == 1 else "mixed (" + ", ".join(kinds) + ")"
    leading = {
        "dump": call.label,
        "api": call.api,
        "forward": call.forward,
        "parameters_from": call.parameters_from,
        "status": "skipped",
    }
    return _calls.new_row(
        leading, reason=call.skip, dtype=dtype, **shapes, **params, standard=standard
    )


class MsprobeReport:
    """The table of an msprobe dump's conv2d backward calls (:func:`judge_dump`).

    Attributes
    ----------
    path : the dump folder given
    dumps : the dump.json files read
    standard : the standard that decides each call's verdict ("all": every one)
    rows : one dict per call (JSON-ready; ``pypto._golden.calls``): ``dump`` (the folder of its
        dump.json, relative to ``path``), ``api``, ``forward``, ``parameters_from`` (Module
        calls), ``status`` ("pass", "fail" or "skipped"), ``reason`` (why skipped), ``dtype``,
        the shapes ``grad_output``, ``weight``, ``grad_input``, ``strides``, ``paddings``,
        ``dilations``, ``groups``, ``standard``, ``passed`` (None when skipped), ``verdicts``
        ({standard: verdict with numbers, thresholds, detail, source}), ``max_ulp``,
        ``outside_bound`` (elements outside the fp32-accumulation bound), ``elements``,
        ``failing_tasks`` ([{image, channel_block, channels, m_tile, rows, outside, elements,
        max_ulp, where}]) and ``tiles`` (the suggested tiles the localisation uses: ``l1``,
        ``l0``, ``vec`` and ``grid`` with ``rows_per_m_tile``, ``m_tiles``,
        ``channels_per_block``, ``channel_blocks``, ``text``).
    passed : no judged call fails (True also when none was judged: see ``judged``)
    """

    def __init__(self, path, dumps, standard, rows):
        self.path, self.dumps, self.standard, self.rows = path, dumps, standard, rows

    @property
    def judged(self):
        return _calls.counts(self.rows)["judged"]

    @property
    def failed(self):
        return _calls.counts(self.rows)["failed"]

    @property
    def skipped(self):
        return _calls.counts(self.rows)["skipped"]

    @property
    def passed(self):
        return self.failed == 0

    def __bool__(self):
        return self.passed

    def summary(self):
        word = "PASS" if self.passed else "FAIL"
        if self.judged == 0:
            word = "nothing judged"
        chosen = "every standard" if self.standard == "all" else self.standard
        return (
            f"summary: {len(self.rows)} conv2d backward call(s) in {len(self.dumps)} "
            f"{DUMP_JSON}: {self.judged - self.failed} passed, {self.failed} failed, "
            f"{self.skipped} skipped ({chosen}); verdict {word}"
        )

    def line(self, row):
        where = f"{row['dump']}: " if len(self.dumps) > 1 else ""
        head = {"pass": "PASS", "fail": "FAIL", "skipped": "SKIP"}[row["status"]]
        text = f"{head:<5} {where}{row['api']}"
        if row["status"] == "skipped":
            shapes = ""
            if row["grad_output"] and row["weight"] and row["grad_input"]:
                shapes = (
                    f" {row['dtype']} dy {row['grad_output']} w {row['weight']} -> "
                    f"dx {row['grad_input']}"
                )
            return f"{text}{shapes}: {row['reason']}"
        text += (
            f" {row['dtype']} dy {row['grad_output']} w {row['weight']} -> dx "
            f"{row['grad_input']}, strides {row['strides']}, paddings {row['paddings']}, "
            f"dilations {row['dilations']}: max {_calls.number(row['max_ulp'])} ulp, "
            f"{row['outside_bound']} of {row['elements']} outside the bound; "
        )
        failing = _calls.failing_standards(row)
        text += ("fails " + ", ".join(failing)) if failing else "every standard passes"
        tasks = row["failing_tasks"]
        if tasks:
            shown = "; ".join(
                f"{t['where']} ({t['outside']} of {t['elements']})" for t in tasks[:3]
            )
            more = f"; and {len(tasks) - 3} more" if len(tasks) > 3 else ""
            text += f"; failing task(s): {shown}{more}"
        return text

    def text(self):
        """One line per call, then the summary."""
        return "\n".join([self.line(r) for r in self.rows] + [self.summary()])

    def __str__(self):
        return self.text()

    def as_dict(self):
        """The whole table as plain data (``pypto compare --msprobe ... --json``)."""
        return {
            "pypto_version": __version__,
            "msprobe_dump": str(self.path),
            "dump_files": [str(p) for p in self.dumps],
            "standard": self.standard,
            "passed": self.passed,
            "summary": _calls.counts(self.rows),
            "calls": self.rows,
        }

    def write_json(self, path):
        _calls.write_json(path, self.as_dict())

    def csv_columns(self):
        return _calls.csv_columns(self.rows, _LEADING)

    def write_csv(self, path):
        """One row per call: the columns of CSV_COLUMNS, then each standard's verdict and its
        numbers in words."""
        _calls.write_csv(path, self.rows, _LEADING, int_list=_calls.bracketed)


def check_report_path(path, what):
    """A PyptoError unless ``path`` can be written (before any work)."""
    if not isinstance(path, str) or not path.strip():
        raise _error(f"the {what} report path is {path!r}: give a file name")
    if os.path.isdir(path):
        raise _error(f"cannot write the {what} report {path}: it is a folder", OSError)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise _error(
            f"cannot write the {what} report {path}: {folder} is not a writable folder", OSError
        )


# --- the whole dump ----------------------------------------------------------------------------
MAX_LISTED = 5  # missing files named in the error before "and N more"


def judge_dump(path, standard):
    """:class:`MsprobeReport` of every conv2d backward call in the dump.json files at or below
    ``path``. Raises a PyptoError, before judging anything, for a dump without tensors, a
    missing tensor file or a dump without any conv2d backward call."""
    dumps = find_dumps(path)
    path = os.fspath(path)
    root = path if os.path.isdir(path) else os.path.dirname(path)
    calls, loaded = [], {}
    for dump_json in dumps:
        dump = _load_dump(dump_json)
        loaded[dump_json] = dump
        label = os.path.relpath(os.path.dirname(dump_json), root).replace(os.sep, "/")
        calls += _calls_of(dump_json, dump, label)
    if not calls:
        raise _error(
            f"no conv2d backward call in {path} ({len(dumps)} {DUMP_JSON} read): "
            f"msprobe records one as Functional.conv2d.<n>.backward (level L1 or mix) "
            f"or Module.<name>.Conv2d.backward.<n> (level L0 or mix); was a backward "
            f"pass dumped?"
        )
    # every file the judged calls need, before any work
    missing = []
    for call in calls:
        if call.skip is not None:
            continue
        for name in ("grad_output", "weight", "grad_input"):
            file = _tensor_path(call, call.tensors[name], loaded[call.dump_json])
            call.files[name] = file
            if not os.path.exists(file):  # a FIFO or a device is refused when read
                missing.append(f"{file} ({call.api} {name})")
    if missing:
        more = f" and {len(missing) - MAX_LISTED} more" if len(missing) > MAX_LISTED else ""
        raise _error(
            f"{len(missing)} tensor file(s) that dump.json names are missing: "
            f"{', '.join(missing[:MAX_LISTED])}{more}"
        )
    rows = []
    for call in calls:
        row = _row(call, standard)
        rows.append(row)
        if call.skip is not None:
            continue
        arrays = {
            name: _read_tensor(
                call.files[name], call.tensors[name], call.dtype, f"{call.api} {name}"
            )
            for name in ("grad_output", "weight", "grad_input")
        }
        try:
            result = judge_case(
                call.case, arrays["grad_output"], arrays["weight"], arrays["grad_input"], standard
            )
        except PyptoMemoryError as exc:
            row["reason"] = f"too large for this host's memory: {exc}"
            continue
        row.update(_calls.json_row(_calls.judged(result)))
    return MsprobeReport(path, dumps, standard, rows)
