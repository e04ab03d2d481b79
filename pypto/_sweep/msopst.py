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
2 sigma to either end. The tensors' format must be NCHW (pypto's layout; ``data_format`` too:
CANN's default for the attribute is NHWC, so a case without it takes the tensors' format).
"""

import math

from .._core.fileio import parse_json, show
from .schema import DTYPES, CaseFileError, canonical, check_case_count, dist_of, value_range

__all__ = ["read_msopst", "OP"]

OP = "Conv2DBackpropInput"
_INPUTS = ("input_size", "filter", "out_backprop")
_INPUT_CROSS = ("format", "shape", "type", "data_distribute", "value_range")
_OUTPUT_CROSS = ("format", "shape", "type")
_ATTRS = ("strides", "pads", "dilations", "groups", "data_format", "offset_x")
_MSOPST_DISTS = ("uniform", "normal", "truncated_normal")


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


def _nchw_pair(value, name, where, neutral):
    """(H, W) of a 4-value NCHW attribute (N and C must be ``neutral``), or of 2 values."""
    if (
        not isinstance(value, list)
        or len(value) not in (2, 4)
        or not all(type(v) is int for v in value)
    ):
        raise CaseFileError(where, f"attr '{name}' must be 4 ints (NCHW) or 2, not {show(value)}")
    if len(value) == 4:
        if value[:2] != [neutral, neutral]:
            raise CaseFileError(
                where, f"attr '{name}' {value}: N and C must be {neutral} (NCHW order)"
            )
        value = value[2:]
    return value


def _sub_cases(case, where, first_index):
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
    total = max(counts.values())
    outputs = _Combinations(y, _OUTPUT_CROSS, f"{where} output 'y'", False)
    multi = any(
        isinstance(desc.get(k), list) and len(_as_list(desc, k)) > 1
        for desc in (*inputs.values(), y)
        for k in _INPUT_CROSS
    )
    strides = _nchw_pair(attrs.get("strides", [1, 1, 1, 1]), "strides", where, 1)
    dilations = _nchw_pair(attrs.get("dilations", [1, 1, 1, 1]), "dilations", where, 1)
    pads = attrs.get("pads", [0, 0, 0, 0])
    if not isinstance(pads, list) or len(pads) != 4 or not all(type(v) is int for v in pads):
        raise CaseFileError(where, "attr 'pads' must be 4 ints (top, bottom, left, right)")
    groups = attrs.get("groups", 1)
    if type(groups) is not int:
        raise CaseFileError(where, f"attr 'groups' must be an int, not {show(groups)}")
    if attrs.get("offset_x", 0) != 0:
        raise CaseFileError(where, "attr 'offset_x' must be 0 (no quantized inputs)")
    check_case_count(first_index + total, where)
    made = []
    for i in range(total):
        sub = f"{where} sub-case {i}"
        picked = {key: combos[key][i % counts[key]] for key in _INPUTS}
        out = outputs[i] if i < len(outputs) else outputs[i % len(outputs)]
        for key, combo in (("filter", picked["filter"]), ("out_backprop", picked["out_backprop"])):
            _check_format(combo["format"], f"{sub} input '{key}'")
        _check_format(out["format"], f"{sub} output 'y'")
        data_format = attrs.get("data_format", out["format"])
        _check_format(data_format, f"{sub} attr 'data_format'", "attr 'data_format'")
        dtypes = []
        for key, combo in (("out_backprop", picked["out_backprop"]), ("filter", picked["filter"])):
            dtypes.append(_dtype(combo["type"], f"{sub} input '{key}'"))
        dtypes.append(_dtype(out["type"], f"{sub} output 'y'"))
        if len(set(dtypes)) != 1:
            # the op refuses mixed dtypes (D3/D4); pypto's case has one dtype: refuse here
            raise CaseFileError(
                sub, f"field 'type': out_backprop, filter and y must share one type, not {dtypes}"
            )
        input_size = _input_size(inputs["input_size"], out, sub)
        shapes = {}
        for key in ("out_backprop", "filter"):
            shape = picked[key]["shape"]
            if len(shape) != 4 or not all(type(v) is int for v in shape):
                raise CaseFileError(
                    f"{sub} input '{key}'", f"field 'shape' must be 4 ints (NCHW), not {shape}"
                )
            shapes[key] = shape
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
        index = first_index + len(made)
        label = "sub_case_" if multi else "case_"
        made.append(
            canonical(
                shapes["out_backprop"],
                shapes["filter"],
                input_size,
                strides,
                pads,
                dilations,
                groups,
                dtypes[0],
                "suggested",
                drawn,
                None,
                f"{name.replace('/', '_')}_{label}{index:03d}_{out['format']}_{out['type']}",
                sub,
            )
        )
    return made


def _as_list(desc, key):
    value = desc.get(key)
    if key in ("shape", "value_range") and isinstance(value, list) and value:
        return value if isinstance(value[0], list) else [value]
    return value if isinstance(value, list) else [value]


def _check_format(value, where, field="field 'format'"):
    if value != "NCHW":
        raise CaseFileError(
            where,
            f"{field} is {show(value)}: pypto reads NCHW only (transpose NHWC data to NCHW and "
            f"give its shapes in NCHW order)",
        )


def _dtype(value, where):
    if not isinstance(value, str) or value.strip().lower() not in DTYPES:
        raise CaseFileError(
            where,
            f"field 'type' must be float16 or bfloat16 (fp16, bf16; float32 is read and refused "
            f"by the op), not {show(value)}",
        )
    return DTYPES[value.strip().lower()]


def _input_size(desc, y, where):
    """input_size's value (msOpST: ``value``), else y's shape."""
    value = desc.get("value", desc.get("const_value"))
    if value is None:
        value = y["shape"]
    if not isinstance(value, list) or len(value) != 4 or not all(type(v) is int for v in value):
        raise CaseFileError(
            f"{where} input 'input_size'",
            f"field 'value' must be 4 ints (N, C, H, W; default: y's shape), not {show(value)}",
        )
    return value


def read_msopst(path, text):
    """The canonical cases of an msOpST JSON case file (every sub-case)."""
    cases = parse_json(text, path)
    if isinstance(cases, dict):
        cases = [cases]
    if not isinstance(cases, list):
        raise CaseFileError(path, "an msOpST case file is a JSON list of case objects")
    made = []
    for index, case in enumerate(cases):
        where = f"{path} case {index}"
        if not isinstance(case, dict):
            raise CaseFileError(where, "a case must be a JSON object")
        if isinstance(case.get("case_name"), str):
            where += f" ({case['case_name']})"
        made += _sub_cases(case, where, len(made))
    return made
