"""Pairing each conv2d backward entry of a dump.json with its forward: the tensors to judge
(grad_output, weight, grad_input), the conv parameters and the golden case, or the reason the
call is skipped.

An API call's backward (``Functional.conv2d.<n>.backward``) pairs with the forward of the same
``<n>``; a Module call's (``Module.<name>.Conv2d.backward.<n>``) with its module's forward, its
parameters from the one conv2d call construct.json places inside that forward.
"""

import re

from ..._core.fileio import show
from ..._dtypes import DTYPE_NAMES
from ...error import ConvBpInputError
from ..case import make_case
from .discover import load_construct
from .records import (
    Malformed,
    Skip,
    argument,
    argument_names,
    conv_params,
    dtype_name,
    dump_error,
    field,
    is_tensor,
    tensor_shape,
    value_of,
)

__all__ = ["Call", "calls_of", "same_calls", "is_api_call"]

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


class Call:
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
        self.module = None  # the nn.Module's name ("layer3.1.conv2") of a Module entry

    @property
    def npu_name(self):
        """msprobe's name of the dumped grad_input (its compare CSV's "NPU Name"), or None."""
        return f"{self.api}.output.0" if "grad_input" in self.tensors else None

    def shape(self, name):
        record = self.tensors.get(name)
        return tensor_shape(record) if record is not None else None


def _module_key(match):
    direction = match.group("dir") or match.group("dir2")
    index = match.group("n") or match.group("n2")
    return match.group("prefix"), direction, index


def calls_of(dump_json, dump, label):
    """Every conv2d backward call of one dump.json (``dump``, read), in the order of their
    forwards, each with its parameters or a skip reason; ``label`` names the dump in the
    table. A record msprobe never writes is a PyptoError."""
    data = dump["data"]
    framework = dump.get("framework")
    order = {name: i for i, name in enumerate(data)}
    construct = load_construct(dump_json)
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
        except Malformed as why:
            raise dump_error(f"{dump_json}: {name}: {why} (not a record msprobe writes)") from None
        if call is not None:
            calls.append(call)
    calls.sort(key=lambda c: c.order)
    return calls


def _call_of(dump_json, data, name, label, framework, order, modules, children):
    """The Call of the entry ``name`` when it is a conv2d backward, else None."""
    m = _API.match(name)
    if m and m.group("dir") == "backward":
        forward = f"{m.group('api')}.{m.group('n')}.forward"
        call = Call(
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
        call = Call(dump_json, label, name, forward, order.get(forward, len(data) + order[name]))
        call.module = m.group("name")
        _module_call(call, data, framework, children)
        return call
    return None


def is_api_call(call):
    """Whether ``call`` is an API entry (``Functional.conv2d...``), not a Module one."""
    return _API.match(call.api) is not None


def same_calls(calls):
    """[(Module call, API call)]: each Module entry of ``calls`` whose parameters come from the
    one conv2d call inside it (``parameters_from``, level mix) when that call's backward is in
    ``calls`` too, from the same dump.json, and both are judged or both skipped: one call
    that msprobe recorded twice."""
    api_calls = {(c.dump_json, c.forward): c for c in calls if is_api_call(c)}
    found = []
    for call in calls:
        inner = api_calls.get((call.dump_json, call.parameters_from))
        if call.parameters_from is not None and inner is not None:
            if (inner.skip is None) == (call.skip is None):
                found.append((call, inner))
    return found


def _record(data, name):
    """The entry ``name`` of dump.json's data: an object, else Malformed."""
    record = data[name]
    if not isinstance(record, dict):
        raise Malformed(f"the entry {name} must be an object, but is {show(record)}")
    return record


def _backward_tensors(call, record):
    inputs = field(record, "input" if "input" in record else "input_args", list)
    outputs = field(record, "output", list)
    grad_output = inputs[0] if inputs else None
    grad_input = outputs[0] if outputs else None
    if not is_tensor(grad_output):
        raise Skip("the backward entry holds no grad_output tensor (input.0)")
    if not is_tensor(grad_input):
        raise Skip("no grad_input (output.0 is null): the conv's input did not require grad")
    call.tensors["grad_output"], call.tensors["grad_input"] = grad_output, grad_input


def _check_dtypes(call):
    names = {k: dtype_name(v) for k, v in call.tensors.items()}
    kinds = set(names.values())
    if len(kinds) != 1:
        raise Skip("mixed dtypes (autocast?): " + ", ".join(f"{k} {v}" for k, v in names.items()))
    kind = kinds.pop()
    call.dtype = kind
    if kind not in DTYPE_NAMES:  # the op's dtypes, spelled as dtype_name does
        raise Skip(f"dtype {kind}: pypto's conv_backward_input takes fp16 and bf16 only")


def _api_call(call, data, api, framework):
    try:
        if call.forward is None:
            raise Skip(
                f"no {api}.*.forward entry for it in the dump (scope, list or "
                f"data_mode left it out): weight, stride and padding are unknown"
            )
        forward = _record(data, call.forward)
        weight = argument(forward, argument_names(api, framework), "weight")
        if not is_tensor(weight):
            raise Skip("the forward entry holds no weight tensor")
        call.tensors["weight"] = weight
        _backward_tensors(call, _record(data, call.api))
        call.params = conv_params(forward, api, framework)
        _finish(call)
    except Skip as why:
        call.skip = str(why)


def _module_call(call, data, framework, children):
    try:
        if call.forward is None:
            raise Skip("no forward entry of this module call in the dump: its weight is unknown")
        forward = _record(data, call.forward)
        convs = [
            c
            for c in children.get(call.forward, ())
            if _API.match(c) and _API.match(c).group("dir") == "forward" and c in data
        ]
        if not convs:
            raise Skip(
                "a Module entry records no stride, padding, dilation or groups, and "
                "the dump holds no conv2d call inside it (level L0): dump with level "
                '"mix" to judge Module entries'
            )
        if len(convs) > 1:
            raise Skip(
                f"the module made {len(convs)} conv2d calls ({', '.join(convs)}): "
                f"which one its gradient belongs to is not known"
            )
        inner = _record(data, convs[0])
        api = _API.match(convs[0]).group("api")
        call.parameters_from = convs[0]
        names = argument_names(api, framework)
        weight = field(forward, "parameters", dict).get("weight") or argument(
            inner, names, "weight"
        )
        if not is_tensor(weight):
            raise Skip("neither the module nor its conv2d call holds a weight tensor")
        call.tensors["weight"] = weight
        _backward_tensors(call, _record(data, call.api))
        module_input = value_of((field(forward, "input_args", list) or [None])[0])
        conv_input = argument(inner, names, "input")
        if (
            is_tensor(module_input)
            and is_tensor(conv_input)
            and tensor_shape(module_input) != tensor_shape(conv_input)
        ):
            raise Skip(
                f"the module pads its input {tensor_shape(module_input)} to "
                f"{tensor_shape(conv_input)} before conv2d (padding_mode): its grad_input "
                f"is no conv2d dgrad"
            )
        call.params = conv_params(inner, api, framework)
        _finish(call)
    except Skip as why:
        call.skip = str(why)


def _finish(call):
    """dtype and groups checks, then the op's own rules on the shapes (no data needed)."""
    _check_dtypes(call)
    strides, paddings, dilations, groups = call.params
    if groups != 1:
        raise Skip(f"groups {groups}: pypto's conv_backward_input has no groups")
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
        raise Skip(f"the op refuses it: {exc}") from None
