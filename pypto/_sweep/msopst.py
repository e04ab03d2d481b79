"""msOpST case files for ``Conv2DBackpropInput`` (CANN's operator system-test tool).

A file is a JSON list of case objects: ``case_name``, ``op: "Conv2DBackpropInput"``,
``input_desc`` (input_size, filter, out_backprop, by ``name`` or in that order), ``output_desc``
(y), ``attr`` ({name, type, value}: strides, pads, dilations, groups, data_format, offset_x).
Sub-cases are made as msOpST's ``SubCaseDesignCross`` makes them: each tensor's list-valued
fields are combined orthogonally (``itertools.product``) in msOpST's order (inputs: format,
shape, type, data_distribute, value_range; outputs: format, shape, type); every input must then
have the same number of combinations, and sub-case i takes the i-th of each input and of y
(y's i modulo its count when it has fewer). Unlike msOpST, an input with one combination
(input_size, whose value is all that is read) serves every sub-case. Attributes are not
combined (one value each), as in msOpST. Sub-cases are named as msOpST names them:
``<case_name>_case_<i>_<format>_<type>`` (``_sub_case_`` when a field held several values), i
counting on through the file.

msOpST's defaults: ``data_distribute`` uniform, ``value_range`` [0.1, 1.0]. Its "normal" takes
the range as [mean, standard deviation] (it adds 1e-4 to the deviation); pypto does the same.
``truncated_normal`` (not in msOpST's list; TensorFlow's): mean at the middle of the range,
2 sigma to either end.

Formats: out_backprop and y in ``data_format`` (NCHW or NHWC; CANN's default for the attribute
is NHWC, so a case without it takes y's format), the filter in NCHW, NHWC, HWCN or CHWN; a
tensor whose format is ND takes its ``ori_format`` and ``ori_shape``. Given with both ori
fields, msOpST pairs format with ori_format and shape with ori_shape before it combines them;
so does pypto. ``input_size``'s value and 4-value strides and dilations are in data_format's
order. The case becomes NCHW shapes with the layouts its files are written in
(``canonical(layouts=...)``). A case or sub-case pypto cannot read becomes an unreadable case
(a refused row) and the others go on; too many sub-cases refuse the file whole.
"""

import math

from .._core.fileio import parse_json, show
from .._golden.files.dims import LAYOUTS, shape_from
from .schema import (
    DTYPES,
    CaseCountError,
    CaseFileError,
    canonical,
    check_case_count,
    dist_of,
    unreadable,
    value_range,
)

__all__ = ["read_msopst", "OP"]

OP = "Conv2DBackpropInput"
_INPUTS = ("input_size", "filter", "out_backprop")
_INPUT_CROSS = ("format", "shape", "type", "data_distribute", "value_range")
_OUTPUT_CROSS = ("format", "shape", "type")
_ATTRS = ("strides", "pads", "dilations", "groups", "data_format", "offset_x")
_MSOPST_DISTS = ("uniform", "normal", "truncated_normal")
_DATA_FORMATS = ("NCHW", "NHWC")


def _str_list(desc, key, where, default=None):
    value = desc.get(key, default)
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise CaseFileError(where, f"field '{key}' must be a string or a list of strings")
    return value


def _list_list(desc, key, where, default=None):
    """A list of lists (msOpST's check_list_list): [1, 2] is one entry, [[1, 2], [3]] two."""
    value = desc.get(key, default)
    if not isinstance(value, list) or not value:
        raise CaseFileError(where, f"field '{key}' must be a non-empty list, but is {show(value)}")
    if not isinstance(value[0], list):
        value = [value]
    if not all(isinstance(v, list) for v in value):
        raise CaseFileError(where, f"field '{key}' mixes lists and numbers: {show(value)}")
    return value


class _Combinations:
    """A tensor's combinations in msOpST's order (``itertools.product`` of its list-valued
    fields, the last key varying fastest), made one at a time: a case whose fields list 16
    values each has 16^5 of them, counted before any is built."""

    def __init__(self, desc, keys, where, is_input):
        values = {
            "format": _str_list(desc, "format", where + " field 'format'"),
            "type": _str_list(desc, "type", where + " field 'type'"),
            "shape": _list_list(desc, "shape", where),
        }
        # msOpST's combine_ori_field_to_cross: with both ori fields, format[i] goes with
        # ori_format[i] and shape[i] with ori_shape[i]; else there is no ori field
        ori = {"format": [None] * len(values["format"]), "shape": [None] * len(values["shape"])}
        if desc.get("ori_format") is not None and desc.get("ori_shape") is not None:
            ori = {
                "format": _str_list(desc, "ori_format", where + " field 'ori_format'"),
                "shape": _list_list(desc, "ori_shape", where),
            }
        for key in ("format", "shape"):
            if len(ori[key]) != len(values[key]):
                raise CaseFileError(
                    where, f"field 'ori_{key}' must list as many entries as field '{key}'"
                )
            values[key] = list(zip(values[key], ori[key]))
        if is_input:
            values["data_distribute"] = _str_list(desc, "data_distribute", where, "uniform")
            values["value_range"] = _list_list(desc, "value_range", where, [[0.1, 1.0]])
        self.keys, self.values = keys, [values[k] for k in keys]
        self.count = math.prod(len(v) for v in self.values)

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        picked = []
        for options in reversed(self.values):
            index, digit = divmod(index, len(options))
            picked.append(options[digit])
        return dict(zip(self.keys, reversed(picked)))


def _tensors(case, key, names, where):
    descs = case.get(key)
    if not isinstance(descs, list) or len(descs) != len(names):
        raise CaseFileError(
            where, f"field '{key}' must list {len(names)} tensors ({', '.join(names)})"
        )
    by_name = {}
    for index, desc in enumerate(descs):
        if not isinstance(desc, dict):
            raise CaseFileError(where, f"field '{key}'[{index}] must be an object")
        name = desc.get("name", names[index])
        if name == "x" and key == "output_desc":
            name = "y"
        if name not in names or name in by_name:
            raise CaseFileError(
                where,
                f"field '{key}'[{index}] name {show(name)}: expected one each of "
                f"{', '.join(names)}",
            )
        by_name[name] = desc
    return by_name


def _attrs(case, where):
    attrs = {}
    given = case.get("attr", [])
    if not isinstance(given, list):
        raise CaseFileError(where, "field 'attr' must be a list of {name, type, value}")
    for index, attr in enumerate(given):
        if not isinstance(attr, dict) or not {"name", "value"} <= set(attr):
            raise CaseFileError(where, f"field 'attr'[{index}] must be {{name, type, value}}")
        name = attr["name"]
        if name not in _ATTRS:
            raise CaseFileError(
                where,
                f"field 'attr' name {show(name)}: {OP} takes {', '.join(_ATTRS)}",
            )
        attrs[name] = attr["value"]
    return attrs


def _hw_pair(value, name, where, data_format):
    """(H, W) of a 4-value attribute in ``data_format``'s order (N and C must be 1), or of 2
    values."""
    if (
        not isinstance(value, list)
        or len(value) not in (2, 4)
        or not all(type(v) is int for v in value)
    ):
        raise CaseFileError(
            where, f"attr '{name}' must be 4 ints ({data_format}) or 2, not {show(value)}"
        )
    if len(value) == 2:
        return value
    n, c, h, w = shape_from(value, data_format)
    if (n, c) != (1, 1):
        raise CaseFileError(
            where, f"attr '{name}' {value}: N and C must be 1 ({data_format} order)"
        )
    return [h, w]


def _layout(combo, where):
    """(layout, shape in that layout) of one combination of a tensor: its format, or, for ND,
    its ori_format; ori_shape, when given, must be the same tensor."""
    (form, ori_form), (shape, ori_shape) = combo["format"], combo["shape"]
    if form == "ND" and ori_form is not None:
        form, shape, ori_form = ori_form, ori_shape, None
    if form not in LAYOUTS:
        raise CaseFileError(
            where,
            f"field 'format' is {show(form)}: pypto reads {', '.join(LAYOUTS)} (or ND with an "
            f"ori_format of those); an NPU-private format is the kernel's business",
        )
    if len(shape) != 4 or not all(type(v) is int for v in shape):
        raise CaseFileError(where, f"field 'shape' must be 4 ints ({form}), not {show(shape)}")
    if ori_form in LAYOUTS and shape_from(ori_shape, ori_form) != shape_from(shape, form):
        raise CaseFileError(
            where,
            f"field 'ori_shape' {show(ori_shape)} ({ori_form}) is not field 'shape' "
            f"{show(shape)} ({form}) in another order",
        )
    return form, shape


def _check_case(case, where):
    """The case's own fields (not its sub-cases'): its name, tensors, attributes, combinations."""
    if case.get("op") != OP:
        raise CaseFileError(where, f"field 'op' must be {OP!r}, but is {show(case.get('op'))}")
    name = case.get("case_name")
    if not isinstance(name, str) or not name:
        raise CaseFileError(where, "field 'case_name' must be a non-empty string")
    inputs = _tensors(case, "input_desc", _INPUTS, where)
    (y,) = _tensors(case, "output_desc", ("y",), where).values()
    attrs = _attrs(case, where)
    combos = {
        key: _Combinations(inputs[key], _INPUT_CROSS, f"{where} input '{key}'", True)
        for key in _INPUTS
    }
    counts = {key: len(value) for key, value in combos.items()}
    # msOpST requires equal counts; pypto also lets a tensor with one combination (input_size,
    # say, whose type and shape never vary) serve every sub-case
    many = {count for count in counts.values() if count != 1}
    if len(many) > 1:
        raise CaseFileError(
            where,
            "field 'input_desc': every input must have as many combinations of its list-valued "
            "fields (msOpST's rule; or one), but "
            + ", ".join(f"{key} has {count}" for key, count in counts.items()),
        )
    pads = attrs.get("pads", [0, 0, 0, 0])
    if not isinstance(pads, list) or len(pads) != 4 or not all(type(v) is int for v in pads):
        raise CaseFileError(where, "attr 'pads' must be 4 ints (top, bottom, left, right)")
    if type(attrs.get("groups", 1)) is not int:
        raise CaseFileError(where, f"attr 'groups' must be an int, not {show(attrs['groups'])}")
    if attrs.get("offset_x", 0) != 0:
        raise CaseFileError(where, "attr 'offset_x' must be 0 (no quantized inputs)")
    multi = any(
        isinstance(desc.get(k), list) and len(_as_list(desc, k)) > 1
        for desc in (*inputs.values(), y)
        for k in _INPUT_CROSS
    )
    outputs = _Combinations(y, _OUTPUT_CROSS, f"{where} output 'y'", False)
    return name, inputs, attrs, combos, counts, outputs, multi


def _sub_cases(case, where, first_index):
    """Every sub-case of an msOpST case: a canonical case, or an unreadable one."""
    name, inputs, attrs, combos, counts, outputs, multi = _check_case(case, where)
    total = max(counts.values())
    check_case_count(first_index + total, where)
    made = []
    for i in range(total):
        picked = {key: combos[key][i % counts[key]] for key in _INPUTS}
        out = outputs[i] if i < len(outputs) else outputs[i % len(outputs)]
        index = first_index + i
        label = "sub_case_" if multi else "case_"
        sub_name = f"{name.replace('/', '_')}_{label}{index:03d}_{out['format'][0]}_{out['type']}"
        sub = f"{where} sub-case {i}"
        try:
            made.append(_sub_case(inputs, attrs, picked, out, sub, sub_name))
        except CaseFileError as exc:
            made.append(unreadable({"case": case, "sub_case": i}, exc, sub_name, sub))
    return made


def _sub_case(inputs, attrs, picked, out, sub, sub_name):
    """One sub-case (the combinations ``picked`` of the inputs and ``out`` of y) as a
    canonical case in NCHW, with its layouts."""
    layouts, shapes = {}, {}
    for key, role in (("out_backprop", "grad_output"), ("filter", "weight")):
        layouts[role], shapes[role] = _layout(picked[key], f"{sub} input '{key}'")
    y_layout, y_shape = _layout(out, f"{sub} output 'y'")
    data_format = attrs.get("data_format", y_layout)
    if data_format not in _DATA_FORMATS:
        raise CaseFileError(
            f"{sub} attr 'data_format'",
            f"is {show(data_format)}: {OP} takes {' or '.join(_DATA_FORMATS)}",
        )
    for key, layout in (("out_backprop", layouts["grad_output"]), ("y", y_layout)):
        if layout != data_format:
            raise CaseFileError(
                sub,
                f"{key} is {layout} but data_format is {data_format}: {OP} takes out_backprop "
                f"and y in data_format",
            )
    layouts["grad_input"] = data_format
    dtypes = []
    for key, combo in (("out_backprop", picked["out_backprop"]), ("filter", picked["filter"])):
        dtypes.append(_dtype(combo["type"], f"{sub} input '{key}'"))
    dtypes.append(_dtype(out["type"], f"{sub} output 'y'"))
    if len(set(dtypes)) != 1:
        # the op refuses mixed dtypes (D3/D4); pypto's case has one dtype: refuse here
        raise CaseFileError(
            sub, f"field 'type': out_backprop, filter and y must share one type, not {dtypes}"
        )
    input_size = _input_size(inputs["input_size"], y_shape, data_format, sub)
    drawn = {}
    for key, role in (("out_backprop", "grad_output"), ("filter", "weight")):
        where_key = f"{sub} input '{key}'"
        dist = dist_of(picked[key]["data_distribute"], where_key, "data_distribute")
        if dist not in _MSOPST_DISTS:
            raise CaseFileError(
                where_key,
                f"field 'data_distribute' must be one of {', '.join(_MSOPST_DISTS)}",
            )
        drawn[role] = {
            "dist": dist,
            "range": value_range(
                picked[key]["value_range"], where_key, "value_range", dist != "normal"
            ),
        }
    return canonical(
        shape_from(shapes["grad_output"], layouts["grad_output"]),
        shape_from(shapes["weight"], layouts["weight"]),
        input_size,
        _hw_pair(attrs.get("strides", [1, 1, 1, 1]), "strides", sub, data_format),
        attrs.get("pads", [0, 0, 0, 0]),
        _hw_pair(attrs.get("dilations", [1, 1, 1, 1]), "dilations", sub, data_format),
        attrs.get("groups", 1),
        dtypes[0],
        "suggested",
        drawn,
        None,
        sub_name,
        sub,
        layouts,
    )


def _as_list(desc, key):
    value = desc.get(key)
    if key in ("shape", "value_range") and isinstance(value, list) and value:
        return value if isinstance(value[0], list) else [value]
    return value if isinstance(value, list) else [value]


def _dtype(value, where):
    if not isinstance(value, str) or value.strip().lower() not in DTYPES:
        raise CaseFileError(
            where,
            f"field 'type' must be float16 or bfloat16 (fp16, bf16; float32 is read and refused "
            f"by the op), not {show(value)}",
        )
    return DTYPES[value.strip().lower()]


def _input_size(desc, y_shape, data_format, where):
    """input_size's value (msOpST: ``value``; in data_format's order), else y's shape, in
    NCHW."""
    value = desc.get("value", desc.get("const_value"))
    if value is None:
        return shape_from(y_shape, data_format)
    if not isinstance(value, list) or len(value) != 4 or not all(type(v) is int for v in value):
        raise CaseFileError(
            f"{where} input 'input_size'",
            f"field 'value' must be 4 ints ({data_format}; default: y's shape), not {show(value)}",
        )
    return shape_from(value, data_format)


def read_msopst(path, text):
    """The canonical cases of an msOpST JSON case file (every sub-case)."""
    cases = parse_json(text, path)
    if isinstance(cases, dict):
        cases = [cases]
    if not isinstance(cases, list):
        raise CaseFileError(path, "an msOpST case file is a JSON list of case objects")
    made, sub_cases = [], 0  # sub-cases count through the file, as msOpST numbers them
    for index, case in enumerate(cases):
        where = f"{path} case {index}"
        name = case.get("case_name") if isinstance(case, dict) else None
        if isinstance(name, str):
            where += f" ({name})"
        try:
            if not isinstance(case, dict):
                raise CaseFileError(where, "a case must be a JSON object")
            found = _sub_cases(case, where, sub_cases)
            sub_cases += len(found)
            made += found
        except CaseCountError:
            raise
        except CaseFileError as exc:
            made.append(unreadable({"case": case}, exc, name, where))
        check_case_count(len(made), where)
    return made
