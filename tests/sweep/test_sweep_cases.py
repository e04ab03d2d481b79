"""Sweep case files: pypto's JSONL and CSV, msOpST JSON, "all" legal tiles; a case pypto
cannot read is a refused row (rule "unreadable") naming the file, line and field, while the
file's other cases run; a file that is no case file is refused whole (one ``error:`` line;
exit code 2; nothing run).
"""

import json

import pytest

from pypto import __main__ as cli
from pypto._core.rules import problem_from_shapes, tile_violation
from pypto._core.tiling import Tiling
from pypto._dtypes import DTYPE_NAMES
from pypto._sweep.cases import read_case_file
from pypto.error import PyptoError
from pypto.sweep import read_cases, run_case
from support.sweep_cases import nhwc_msopst_case


def _jsonl(tmp_path, *lines, name="cases.jsonl"):
    path = tmp_path / name
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    )
    return str(path)


def test_jsonl_and_csv_give_the_same_cases(tmp_path):
    jsonl = _jsonl(
        tmp_path,
        {"grad_output": [1, 16, 5, 8], "weight": [16, 16, 3, 3], "paddings": [1, 1, 1, 1]},
        "# a comment, then a blank line",
        "",
        {
            "N": 2,
            "Cin": 8,
            "H": 7,
            "W": 9,
            "Cout": 16,
            "kh": 3,
            "kw": 3,
            "strides": [2, 2],
            "dtype": "bfloat16",
            "dist": "normal",
            "range": [0, 2],
            "seed": 5,
            "name": "b",
        },
        {
            "grad_output": [1, 16, 5, 8],
            "weight": [16, 16, 3, 3],
            "l1": [16, 144, 16],
            "l0": [16, 16, 16],
        },
    )
    csv = tmp_path / "cases.csv"
    csv.write_text(
        "grad_output,weight,paddings,N,Cin,H,W,Cout,kh,kw,strides,dtype,dist,range,seed,name,"
        "l1,l0\n"
        '"1,16,5,8",1x16x5x8,"[1,1,1,1]",,,,,,,,,,,,,,,\n'.replace("1x16x5x8", "16x16x3x3")
        + ',,,2,8,7,9,16,3,3,"2,2",bf16,normal,"0,2",5,b,,\n'
        + '"1 16 5 8","16,16,3,3",,,,,,,,,,,,,,,"16,144,16","16,16,16"\n'
    )
    from_jsonl, from_csv = read_cases(jsonl), read_cases(str(csv))
    assert [c["id"] for c in from_jsonl] == [c["id"] for c in from_csv]
    second = from_jsonl[1]
    # N,Cin,H,W,Cout,kh,kw: grad_output is the forward output of the 7x9 input
    assert second["grad_output"] == [2, 16, 3, 4] and second["input_size"] == [2, 8, 7, 9]
    assert second["dtype"] == "bf16" and second["seed"] == 5
    assert second["inputs"]["weight"] == {"dist": "normal", "range": [0, 2]}
    assert from_jsonl[2]["tiles"] == {
        "l1": [16, 144, 16],
        "l0": [16, 16, 16],
        "vec": [16, 16, 16, 16],
    }
    assert from_jsonl[0]["source"].endswith("cases.jsonl:1")


def test_case_id_is_stable_and_names_do_not_change_it(tmp_path):
    case = {"grad_output": [1, 16, 5, 8], "weight": [16, 16, 3, 3], "paddings": [1, 1, 1, 1]}
    first = read_cases(_jsonl(tmp_path, case, name="a.jsonl"))[0]
    second = read_cases(_jsonl(tmp_path, dict(case, name="x"), name="b.jsonl"))[0]
    # pinned: a sha256 prefix of the canonical JSON; a change moves every case folder
    assert first["id"] == second["id"] == "124adaa6695107b8"
    found, duplicates = read_case_file(_jsonl(tmp_path, case, dict(case, name="again")))
    assert len(found) == 1 and duplicates == 1


def test_all_tiles_expands_to_legal_distinct_tiles(tmp_path):
    cases = read_cases(
        _jsonl(
            tmp_path,
            {
                "grad_output": [1, 32, 9, 20],
                "weight": [32, 24, 3, 3],
                "paddings": [1, 1, 1, 1],
                "tiles": "all",
                "tiles_limit": 5,
            },
            # refused by the op (asymmetric padding): one case, a row with the rule later
            {
                "grad_output": [1, 16, 5, 8],
                "weight": [16, 16, 3, 3],
                "paddings": [1, 0, 1, 1],
                "tiles": "all",
            },
        )
    )
    assert len(cases) == 6
    problem = problem_from_shapes(
        [1, 32, 9, 20],
        [32, 24, 3, 3],
        [1, 24, 9, 20],
        DTYPE_NAMES["fp16"],
        [1, 1],
        [1, 1, 1, 1],
        [1, 1],
    )
    tilings = {tuple(c["tiles"]["l1"] + c["tiles"]["l0"]) for c in cases[:5]}
    assert len(tilings) == 5
    for tiling in tilings:
        assert tile_violation(problem, Tiling(*tiling)) is None
    assert cases[5]["tiles"] == "suggested"


def _sweep_beside_a_good_file(tmp_path, name, text):
    """``pypto sweep good.jsonl NAME`` (NAME holding ``text``): (exit code, NAME, --out)."""
    good = _jsonl(
        tmp_path, {"grad_output": [1, 16, 5, 8], "weight": [16, 16, 3, 3]}, name="good.jsonl"
    )
    bad = tmp_path / name
    bad.write_text(text)
    out = tmp_path / "out"
    return cli.main(["sweep", good, str(bad), "--out", str(out)]), bad, out


# the cases pypto cannot read: a refused row each, naming the line and the field
UNREADABLE_LINES = [
    (
        "cases.jsonl",
        '{"grad_output": [1,16,5,8], "weight": [16,16,3,3], "strides": [1,"a"]}\n',
        ["cases.jsonl:1", "field 'strides'"],
    ),
    (
        "cases.jsonl",
        '{"grad_output": [1,16,5,8], "weight": [16,16,3]}\n',
        ["cases.jsonl:1", "field 'weight'", "4 ints"],
    ),
    (
        "cases.jsonl",
        '{"grad_output": [1,16,5,8], "weight": [16,16,3,3], "stride": [1,1]}\n',
        ["cases.jsonl:1", "unknown field 'stride'"],
    ),
    (
        "cases.jsonl",
        '{"grad_output": [1,16,5,8], "weight": [16,16,3,3], "dtype": "int8"}\n',
        ["cases.jsonl:1", "field 'dtype'"],
    ),
    (
        "cases.jsonl",
        '{"N": 1, "Cin": 16, "H": 5, "W": 8, "Cout": 16, "kh": 3}\n',
        ["cases.jsonl:1", "field 'kw' is missing"],
    ),
    (
        "cases.jsonl",
        '{"grad_output": [1,16,5,8], "weight": [16,16,3,3], "range": [3, 1]}\n',
        ["cases.jsonl:1", "field 'range'", "lo <= hi"],
    ),
    ("cases.jsonl", "[1, 2]\n", ["cases.jsonl:1", "a line must be a JSON object, not list"]),
    (
        "cases.csv",
        'grad_output,weight,dist\n"1,16,5,8","16,16,3,3",gauss\n',
        ["cases.csv:2", "field 'dist'"],
    ),
    (
        "cases.csv",
        "grad_output,weight\n1,16,5,8,16,16,3,3\n",
        ["cases.csv:2", "8 cells, but the header has 2"],
    ),
    # issue 42 #9: grad_output cannot be derived with a stride of 0
    (
        "cases.jsonl",
        '{"N": 1, "Cin": 8, "H": 6, "W": 6, "Cout": 8, "kh": 3, "kw": 3, "strides": [1, 0]}\n',
        ["cases.jsonl:1", "field 'strides' [1, 0]", "only with strides >= 1"],
    ),
    (
        "cases.csv",
        'N,Cin,H,W,Cout,kh,kw,strides\n1,8,6,6,8,3,3,"0,2"\n',
        ["cases.csv:2", "field 'strides' [0, 2]"],
    ),
]


@pytest.mark.parametrize("name, text, fragments", UNREADABLE_LINES)
def test_a_case_pypto_cannot_read_is_a_refused_row_and_the_others_run(
    tmp_path, capsys, name, text, fragments
):
    """Issue 45 #6: one bad case never stops a sweep."""
    code, bad, out = _sweep_beside_a_good_file(tmp_path, name, text)
    captured = capsys.readouterr()
    assert code == 0, captured.err  # a refused row is expected, as the op's refusals are
    assert "warning: 1 of the cases cannot be read: refused rows (rule unreadable)" in captured.err
    assert "refused by rule: unreadable 1" in captured.out
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [row["status"] for row in rows] == ["pass", "refused"]
    refused = rows[1]
    assert refused["rule"] == "unreadable" and refused["source"].startswith(str(bad))
    for fragment in fragments:
        assert fragment in refused["reason"]
    assert refused["grad_output"] is None and refused["seed"] is None
    # nothing was run for it: only the good case has a folder
    assert [p.name for p in (out / "cases").iterdir()] == [rows[0]["case_id"]]


# files that are no case files: refused whole, before any case runs
BAD_FILES = [
    (
        "cases.jsonl",
        '{"grad_output": [1,16,5,8], "weight": [16,16,3,3]}\n{"grad_output": \n',
        ["cases.jsonl:2", "not JSON"],
    ),
    ("cases.csv", "grad_output,wieght\n", ["cases.csv:1", "unknown column 'wieght'"]),
    ("cases.txt", "", ["cases.txt", ".jsonl or .csv"]),
    (
        "cases.jsonl",
        '{"name": ' + "[" * 50_000 + "]" * 50_000 + "}\n",
        ["cases.jsonl:1", "too deep"],
    ),
    ("cases.json", "[" * 50_000 + "]" * 50_000, ["cases.json", "JSON nested too deep"]),
    ("cases.json", '{"op": ', ["cases.json", "not JSON"]),
    ("cases.json", "3", ["cases.json", "a JSON list of case objects"]),
]


@pytest.mark.parametrize("name, text, fragments", BAD_FILES)
def test_bad_case_file_is_one_error_line_before_any_case_runs(
    tmp_path, capsys, name, text, fragments
):
    code, _, out = _sweep_beside_a_good_file(tmp_path, name, text)  # the good one first
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: "), err
    for fragment in fragments:
        assert fragment in err
    assert not out.exists()


MSOPST = [
    {
        "case_name": "dx_3x3",
        "op": "Conv2DBackpropInput",
        "input_desc": [
            {
                "name": "input_size",
                "format": "ND",
                "type": "int32",
                "shape": [4],
                "value": [2, 16, 6, 8],
            },
            {
                "name": "filter",
                "format": "NCHW",
                "type": ["float16", "bf16"],
                "shape": [16, 16, 3, 3],
                "data_distribute": "uniform",
                "value_range": [[2.0, 3.0]],
            },
            {
                "name": "out_backprop",
                "format": ["NCHW"],
                "type": ["fp16", "bfloat16"],
                "shape": [[2, 16, 3, 4]],
                "data_distribute": ["normal"],
                "value_range": [[0.5, 0.25]],
            },
        ],
        "output_desc": [
            {"name": "y", "format": "NCHW", "type": ["float16", "bfloat16"], "shape": [2, 16, 6, 8]}
        ],
        "attr": [
            {"name": "strides", "type": "list_int", "value": [1, 1, 2, 2]},
            {"name": "pads", "type": "list_int", "value": [1, 1, 1, 1]},
            {"name": "dilations", "type": "list_int", "value": [1, 1, 1, 1]},
            {"name": "groups", "type": "int", "value": 1},
            {"name": "data_format", "type": "str", "value": "NCHW"},
        ],
    },
    {
        # no names: CANN's order; value_range and data_distribute by msOpST's defaults
        "case_name": "dx_1x1",
        "op": "Conv2DBackpropInput",
        "input_desc": [
            {"format": "ND", "type": "int32", "shape": [4]},
            {"format": "NCHW", "type": "float16", "shape": [[32, 16, 1, 1], [32, 16, 1, 1]]},
            {"format": "NCHW", "type": "float16", "shape": [[1, 32, 4, 4], [1, 32, 4, 4]]},
        ],
        "output_desc": [{"format": "NCHW", "type": "float16", "shape": [1, 16, 4, 4]}],
        "attr": [
            {"name": "strides", "type": "list_int", "value": [1, 1, 1, 1]},
            {"name": "pads", "type": "list_int", "value": [0, 0, 0, 0]},
        ],
    },
]


def test_msopst_case_file_is_read_as_msopst_combines_it(tmp_path):
    path = tmp_path / "conv2d_backprop_input.json"
    path.write_text(json.dumps(MSOPST))
    cases = read_cases(str(path))
    # case 0: filter 2 types x out_backprop 2 types, each its own product (msOpST's "cross"),
    # sub-case i takes the i-th of each: 2 sub-cases, fp16 then bf16 (y's types alike)
    # case 1: 2 shapes each (the same twice): 2 sub-cases, one id (a duplicate dropped)
    assert [c["name"] for c in cases] == [
        "dx_3x3_sub_case_000_NCHW_float16",
        "dx_3x3_sub_case_001_NCHW_bfloat16",
        "dx_1x1_sub_case_002_NCHW_float16",
    ]
    fp16, bf16, one = cases
    assert fp16["dtype"] == "fp16" and bf16["dtype"] == "bf16"
    assert fp16["grad_output"] == [2, 16, 3, 4] and fp16["weight"] == [16, 16, 3, 3]
    assert fp16["input_size"] == [2, 16, 6, 8]
    assert fp16["strides"] == [2, 2] and fp16["paddings"] == [1, 1, 1, 1]
    assert fp16["dilations"] == [1, 1] and fp16["groups"] == 1
    assert fp16["inputs"] == {
        "grad_output": {"dist": "normal", "range": [0.5, 0.25]},
        "weight": {"dist": "uniform", "range": [2.0, 3.0]},
    }
    # input_size without a value: y's shape; msOpST's default range [0.1, 1.0]
    assert one["input_size"] == [1, 16, 4, 4] and one["weight"] == [32, 16, 1, 1]
    assert one["inputs"]["weight"] == {"dist": "uniform", "range": [0.1, 1.0]}


@pytest.mark.parametrize(
    "edit, fragments",
    [
        (
            lambda c: c["input_desc"][1].update(format="FRACTAL_Z"),
            ["case 0 (dx_3x3) sub-case 0 input 'filter'", "field 'format' is 'FRACTAL_Z'"],
        ),
        (
            lambda c: c["attr"][4].update(value="NHWC"),
            ["out_backprop is NCHW but data_format is NHWC"],
        ),
        (lambda c: c["attr"][4].update(value="HWCN"), ["attr 'data_format'", "NCHW or NHWC"]),
        (
            lambda c: c["input_desc"][2].update(type="int8"),
            ["input 'out_backprop'", "float16 or bfloat16"],
        ),
        (lambda c: c.update(op="Conv2D"), ["case 0 (dx_3x3)", "field 'op'"]),
        (
            lambda c: c["input_desc"][2].update(type=["float16", "bf16", "fp16"]),
            ["field 'input_desc'", "filter has 2", "out_backprop has 3"],
        ),
        (
            lambda c: c["attr"].append({"name": "padding", "type": "str", "value": "SAME"}),
            ["attr' name 'padding'"],
        ),
        (
            lambda c: c["input_desc"][1].update(data_distribute="beta"),
            ["input 'filter'", "field 'data_distribute'"],
        ),
        (
            lambda c: c["attr"][0].update(value=[1, 2, 2, 2]),
            ["attr 'strides' [1, 2, 2, 2]: N and C must be 1 (NCHW order)"],
        ),
        (
            lambda c: c["input_desc"][1].update(ori_format=["NCHW"], ori_shape=[[16, 3, 3, 16]]),
            ["field 'ori_shape' [16, 3, 3, 16] (NCHW) is not field 'shape'"],
        ),
    ],
)
def test_msopst_faults_are_refused_rows_naming_the_case_and_field(tmp_path, edit, fragments):
    """A case or sub-case pypto cannot read is an unreadable case (a refused row); the file's
    other cases are read as ever."""
    case = json.loads(json.dumps(MSOPST[0]))
    edit(case)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([case, MSOPST[1]]))
    cases = read_cases(str(path))
    unread = [c for c in cases if c.get("unreadable") is not None]
    assert unread
    for fragment in fragments:
        assert fragment in unread[0]["unreadable"], unread[0]["unreadable"]
    assert cases[-1]["name"].startswith("dx_1x1_") and cases[-1].get("unreadable") is None
    for case in unread:  # each refused with its reason, nothing run
        row = run_case(case, str(tmp_path / "out"))
        assert row["status"] == "refused" and row["rule"] == "unreadable"
        assert row["reason"] == case["unreadable"] and row["format"] is None
    assert not (tmp_path / "out").exists()


def test_a_new_users_msopst_file_with_an_nhwc_case_runs_every_case(tmp_path, capsys):
    """Issue 45 D4.1: an NHWC case (HWCN filter) beside NCHW ones made the whole file fail
    (exit 2); now every case runs, the NHWC one in its own format."""
    nhwc = nhwc_msopst_case(n=1, hw=(4, 4), k=1, stride=1, pad=0, dtype="float16")
    path = tmp_path / "conv2d_backprop_input.json"
    path.write_text(json.dumps([MSOPST[0], nhwc, MSOPST[1]]))
    out = tmp_path / "out"
    assert cli.main(["sweep", str(path), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["name"], r["status"], r["format"]) for r in rows] == [
        ("dx_3x3_sub_case_000_NCHW_float16", "pass", "NCHW"),
        ("dx_3x3_sub_case_001_NCHW_bfloat16", "pass", "NCHW"),
        ("dx_nhwc_case_002_NHWC_float16", "pass", "NHWC/HWCN"),
        ("dx_1x1_sub_case_003_NCHW_float16", "pass", "NCHW"),
    ]
    # the row's shapes are NCHW, whatever the files' layout
    assert rows[2]["grad_output"] == [1, 32, 4, 4] and rows[2]["weight"] == [32, 16, 1, 1]
    assert rows[2]["grad_input"] == [1, 16, 4, 4]


def _crossed_msopst(values):
    """One msOpST case whose filter and out_backprop list ``values`` entries in each of
    format, type, shape, data_distribute and value_range: values**5 sub-cases."""

    def tensor(name, shape):
        return {
            "name": name,
            "format": ["NCHW"] * values,
            "type": ["float16"] * values,
            "shape": [shape] * values,
            "data_distribute": ["uniform"] * values,
            "value_range": [[0.1, 1.0]] * values,
        }

    case = json.loads(json.dumps(MSOPST[1]))
    case["input_desc"][1:] = [
        tensor("filter", [32, 16, 1, 1]),
        tensor("out_backprop", [1, 32, 4, 4]),
    ]
    return case


def test_a_cross_product_beyond_the_limit_is_refused_before_it_is_built(tmp_path, monkeypatch):
    """Issue 42 #10: 16^5 sub-cases of a 3 KB file are counted, not built (this took minutes
    and gigabytes); the limit is PYPTO_SWEEP_MAX_CASES, and the message says so."""
    path = tmp_path / "boom.json"
    path.write_text(json.dumps([_crossed_msopst(16)]))
    with pytest.raises(PyptoError, match=r"expands to 1048576 cases or more, above the limit of"):
        read_cases(str(path))
    monkeypatch.setenv("PYPTO_SWEEP_MAX_CASES", "40")
    path.write_text(json.dumps([_crossed_msopst(2)]))  # 32 sub-cases, one distinct
    assert len(read_cases(str(path))) == 1
    path.write_text(json.dumps([_crossed_msopst(2), _crossed_msopst(2)]))  # 64 over the file
    with pytest.raises(PyptoError, match="case 1 .* expands to 64 cases or more.*PYPTO_SWEEP_MAX"):
        read_cases(str(path))
    # pypto's own format: counted line by line ("all" tiles expand a line)
    line = {"grad_output": [1, 16, 5, 8], "weight": [16, 16, 3, 3], "tiles": "all"}
    jsonl = _jsonl(tmp_path, *[dict(line, seed=i) for i in range(8)])
    monkeypatch.setenv("PYPTO_SWEEP_MAX_CASES", "10")
    with pytest.raises(PyptoError, match=r"cases.jsonl:\d: the case file expands to"):
        read_cases(jsonl)
    monkeypatch.setenv("PYPTO_SWEEP_MAX_CASES", "zero")
    with pytest.raises(PyptoError, match="PYPTO_SWEEP_MAX_CASES='zero': expected an int >= 1"):
        read_cases(jsonl)


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs here")
def test_a_case_file_that_is_a_fifo_is_refused_without_blocking(tmp_path, capsys):
    import os

    fifo = tmp_path / "cases.jsonl"
    os.mkfifo(fifo)
    code = cli.main(["sweep", str(fifo), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "it is a FIFO, not a regular file" in err, err
