"""msOpST cases in NHWC with an HWCN (or CHWN) filter: read by transposing, their golden written
in their own layout (the manifest records each file's), judged back by ``pypto compare`` and
``--judge`` in that layout; manifests written before layouts still read as NCHW."""

import json
import shutil

import numpy as np
import pytest

from pypto import __main__ as cli
from pypto._golden.files import read_case
from pypto.sweep import read_cases, run_case
from support.reference import dgrad_reference
from support.sweep_cases import nhwc_msopst_case

# N=2, Cin=16, 7x9 input; Cout=32, 3x3 kernel, stride 2, padding 1: a 4x5 output
NHWC_CASE = nhwc_msopst_case()


def _read(tmp_path, *cases):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(list(cases)))
    return read_cases(str(path))


def _raw(folder, stem, dtype, shape):
    """A .bin of the folder as the kernel reads it: raw data, the shape of its layout."""
    data = np.fromfile(folder / f"{stem}.bin", dtype=dtype).reshape(shape)
    return data.view(np.dtype("bfloat16")) if dtype == "<u2" else data


def test_an_nhwc_case_is_read_in_nchw_and_written_in_nhwc(tmp_path, capsys):
    import ml_dtypes  # noqa: F401 - registers the "bfloat16" NumPy dtype

    (case,) = _read(tmp_path, NHWC_CASE)
    # the case in pypto's NCHW: the shapes transposed, strides read in NHWC order
    assert case["grad_output"] == [2, 32, 4, 5] and case["weight"] == [32, 16, 3, 3]
    assert case["input_size"] == [2, 16, 7, 9] and case["strides"] == [2, 2]
    assert case["layouts"] == {"grad_output": "NHWC", "weight": "HWCN", "grad_input": "NHWC"}
    row = run_case(case, str(tmp_path / "out"))
    assert row["status"] == "pass" and row["format"] == "NHWC/HWCN", row.get("reason")
    assert row["grad_input"] == [2, 16, 7, 9]  # the row's shapes are NCHW
    folder = tmp_path / "out" / "cases" / case["id"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format"] == "pypto-golden/2"
    assert {name: (e["layout"], e["shape"]) for name, e in manifest["files"].items()} == {
        "grad_output": ("NHWC", [2, 4, 5, 32]),
        "weight": ("HWCN", [3, 3, 16, 32]),
        "golden": ("NHWC", [2, 7, 9, 16]),
        "pypto": ("NHWC", [2, 7, 9, 16]),
        "actual": ("NHWC", [2, 7, 9, 16]),
    }
    # independently: the files as the case describes them, transposed by hand, against the
    # float64 oracle of tests/support
    dy = _raw(folder / "input", "grad_output", "<u2", (2, 4, 5, 32)).astype(np.float64)
    w = _raw(folder / "input", "weight", "<u2", (3, 3, 16, 32)).astype(np.float64)
    golden = _raw(folder / "output", "golden", "<f8", (2, 7, 9, 16))
    oracle = dgrad_reference(
        dy.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), (7, 9), (2, 2), (1, 1), (1, 1)
    )
    np.testing.assert_allclose(golden, oracle.transpose(0, 2, 3, 1), rtol=1e-12, atol=1e-12)
    # the .npy twins are the same tensors in the same layout
    assert np.load(folder / "input" / "weight.npy").shape == (3, 3, 16, 32)
    # pypto compare and --judge read the kernel's dx in the case's layout: pypto's own
    # result (NHWC) passes; the same values written in NCHW order fail
    output = folder / "output" / "output.bin"
    shutil.copy(folder / "output" / "pypto.bin", output)
    capsys.readouterr()
    assert cli.main(["compare", str(folder)]) == 0
    assert cli.main(["sweep", "--judge", str(tmp_path / "out")]) == 0
    nhwc = np.fromfile(output, dtype="<u2").reshape(2, 7, 9, 16)
    np.ascontiguousarray(nhwc.transpose(0, 3, 1, 2)).tofile(output)
    assert cli.main(["compare", str(folder)]) == 1
    assert cli.main(["sweep", "--judge", str(tmp_path / "out")]) == 1


def test_every_layout_of_one_problem_draws_the_same_data(tmp_path):
    """The seed comes from the problem, not its layout: the NCHW twin of an NHWC case has the
    same inputs (its files hold them transposed)."""
    (nhwc,) = _read(tmp_path, NHWC_CASE)
    twin = json.loads(json.dumps(NHWC_CASE))
    twin["input_desc"][0]["value"] = [2, 16, 7, 9]
    twin["input_desc"][1].update(format="NCHW", shape=[32, 16, 3, 3])
    twin["input_desc"][2].update(format="NCHW", shape=[2, 32, 4, 5])
    twin["output_desc"][0].update(format="NCHW", shape=[2, 16, 7, 9])
    twin["attr"][0]["value"] = [1, 1, 2, 2]
    twin["attr"][4]["value"] = "NCHW"
    (nchw,) = _read(tmp_path, twin)
    assert nchw["id"] != nhwc["id"] and nchw["layouts"] is None
    rows = [run_case(case, str(tmp_path / "out")) for case in (nhwc, nchw)]
    assert rows[0]["seed"] == rows[1]["seed"] and rows[1]["format"] == "NCHW"
    folders = [tmp_path / "out" / "cases" / case["id"] / "input" for case in (nhwc, nchw)]
    dy = [np.fromfile(f / "grad_output.bin", dtype="<u2") for f in folders]
    np.testing.assert_array_equal(
        dy[0].reshape(2, 4, 5, 32).transpose(0, 3, 1, 2), dy[1].reshape(2, 32, 4, 5)
    )
    w = [np.fromfile(f / "weight.bin", dtype="<u2") for f in folders]
    np.testing.assert_array_equal(
        w[0].reshape(3, 3, 16, 32).transpose(3, 2, 0, 1), w[1].reshape(32, 16, 3, 3)
    )


@pytest.mark.parametrize(
    "edit, expect",
    [
        # a CHWN filter: (Cin, Kh, Kw, Cout)
        (
            lambda c: c["input_desc"][1].update(format="CHWN", shape=[16, 3, 3, 32]),
            {"weight": [32, 16, 3, 3], "format": "NHWC/CHWN"},
        ),
        # an NHWC filter: (Cout, Kh, Kw, Cin); the format is then NHWC throughout
        (
            lambda c: c["input_desc"][1].update(format="NHWC", shape=[32, 3, 3, 16]),
            {"weight": [32, 16, 3, 3], "format": "NHWC"},
        ),
        # ND takes ori_format and ori_shape (paired with format and shape, as msOpST pairs them)
        (
            lambda c: c["input_desc"][2].update(
                format=["ND"], ori_format=["NHWC"], shape=[[40, 32]], ori_shape=[[2, 4, 5, 32]]
            ),
            {"grad_output": [2, 32, 4, 5], "format": "NHWC/HWCN"},
        ),
        # no input_size value: y's shape, in data_format's order; 2-value strides are (H, W)
        (
            lambda c: (c["input_desc"][0].pop("value"), c["attr"][0].update(value=[2, 2])),
            {"input_size": [2, 16, 7, 9], "strides": [2, 2]},
        ),
        # no data_format: y's format
        (lambda c: c["attr"].pop(4), {"format": "NHWC/HWCN"}),
    ],
)
def test_msopst_layout_fields(tmp_path, edit, expect):
    case = json.loads(json.dumps(NHWC_CASE))
    edit(case)
    (read,) = _read(tmp_path, case)
    assert read.get("unreadable") is None, read.get("unreadable")
    row = run_case(read, str(tmp_path / "out"))
    assert row["status"] == "pass", row.get("reason")
    for key, value in expect.items():
        assert (row[key] if key != "strides" else read[key]) == value, key


def test_a_manifest_without_layouts_reads_as_nchw(tmp_path, capsys):
    """Case folders written before layouts have no "layout" in their entries: NCHW."""
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps({"grad_output": [1, 16, 5, 8], "weight": [16, 8, 3, 3]}) + "\n")
    (case,) = read_cases(str(path))
    assert run_case(case, str(tmp_path / "out"))["format"] == "NCHW"
    folder = tmp_path / "out" / "cases" / case["id"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format"] == "pypto-golden/1"  # NCHW files: the format of old
    for entry in manifest["files"].values():
        assert entry.pop("layout") == "NCHW"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    shutil.copy(folder / "output" / "pypto.bin", folder / "output" / "output.bin")
    assert cli.main(["compare", str(folder)]) == 0
    # a layout pypto does not know is one error line naming the entry
    manifest["files"]["weight"]["layout"] = "NWHC"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert cli.main(["compare", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "files 'weight' 'layout' must be one of NCHW, NHWC, HWCN, CHWN" in err, err
    with pytest.raises(Exception, match="'layout' must be one of"):
        read_case(str(folder))


def test_pyptos_own_case_files_take_a_format(tmp_path, capsys):
    """A JSONL or CSV case's ``format`` (as a row's format column writes it) sets the layout of
    its files; the shapes stay NCHW, NCHW keeps the id a case without the field has, every
    layout of the problem draws the same data, and a format pypto does not write is a refused
    row while the file's other cases run."""
    import ml_dtypes  # noqa: F401 - registers the "bfloat16" NumPy dtype

    base = {"N": 2, "Cin": 16, "H": 7, "W": 9, "Cout": 32, "kh": 3, "kw": 3}
    base.update(strides=[2, 2], paddings=[1, 1, 1, 1], dtype="bf16")
    lines = [base, dict(base, format="NCHW"), dict(base, format="nhwc")]
    lines += [dict(base, format="NHWC/HWCN"), dict(base, format="NC1HWC0")]
    lines += [dict(base, format="HWCN"), dict(base, format=4)]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    cases = read_cases(str(path))
    # "NCHW" is the case without the field: one id, read once
    assert len(cases) == len(lines) - 1
    plain, nhwc, hwcn, *bad = cases
    assert plain["layouts"] is None and plain["source"].endswith(":1")
    assert nhwc["layouts"] == {"grad_output": "NHWC", "weight": "NHWC", "grad_input": "NHWC"}
    assert hwcn["layouts"] == {"grad_output": "NHWC", "weight": "HWCN", "grad_input": "NHWC"}
    assert nhwc["grad_output"] == plain["grad_output"] == [2, 32, 4, 5]
    assert len({plain["id"], nhwc["id"], hwcn["id"]}) == 3
    assert all(c["unreadable"] and "field 'format'" in c["unreadable"] for c in bad)
    rows = [run_case(case, str(tmp_path / "out")) for case in (plain, nhwc, hwcn)]
    assert [r["format"] for r in rows] == ["NCHW", "NHWC", "NHWC/HWCN"]
    assert len({r["seed"] for r in rows}) == 1 and all(r["status"] == "pass" for r in rows)
    folder = tmp_path / "out" / "cases" / hwcn["id"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["files"]["weight"]["shape"] == [3, 3, 16, 32]  # HWCN
    assert manifest["files"]["golden"]["layout"] == "NHWC"
    w = [
        np.fromfile(tmp_path / "out" / "cases" / c["id"] / "input" / "weight.bin", "<u2")
        for c in (plain, hwcn)
    ]
    np.testing.assert_array_equal(
        w[0].reshape(32, 16, 3, 3).transpose(2, 3, 1, 0), w[1].reshape(3, 3, 16, 32)
    )
    # the same through CSV, the format in a column
    csv_path = tmp_path / "cases.csv"
    csv_path.write_text("N,Cin,H,W,Cout,kh,kw,dtype,format\n2,16,7,9,32,3,3,bf16,NHWC/HWCN\n")
    (from_csv,) = read_cases(str(csv_path))
    assert from_csv["layouts"] == hwcn["layouts"]
