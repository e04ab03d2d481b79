"""msprobe dumps judged by `pypto compare --msprobe` and pypto.testing.compare_msprobe (issue 26).

The dumps are real: msprobe's PrecisionDebugger on CPU torch (make_dump.py, one process per
config), task "tensor" at level mix (Functional.conv2d and Module.*.Conv2d entries), one step
each of a small bf16 CNN, the same CNN in fp16 and conv2d called with other arguments; a task
"statistics" dump; a level L0 dump. Skipped when torch or msprobe (pip install
mindstudio-probe) cannot be imported.
"""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from support.msprobe_dumps import cli, copy_step, dump_json, require_torch_and_msprobe, tensor_file

torch = require_torch_and_msprobe()

import pypto  # noqa: E402
import pypto.testing  # noqa: E402
from pypto._golden.msprobe_metrics import COLUMNS  # noqa: E402
from support.cpuinfo import cpuinfo_flags  # noqa: E402

# the judged rows of the CNN's step: a mix dump's Module entries are the same calls (judged once)
CNN = [f"Functional.conv2d.{n}.backward" for n in range(4)]  # the last: groups 4
MODULES = ["0", "2", "4", "6"]  # the nn.Sequential's names of the four convs


@pytest.fixture(scope="module")
def mix_report(dumps):
    """Every call of the mix dump (its three steps), standard dual-L0."""
    return pypto.testing.compare_msprobe(str(dumps["mix"]))


def step_rows(report, step):
    return {r["api"]: r for r in report.rows if r["dump"].startswith(f"step{step}/")}


def test_reads_every_dump_json_below_the_folder(mix_report, dumps):
    assert len(mix_report.dumps) == 3
    labels = sorted({r["dump"].split("/")[0] for r in mix_report.rows})
    assert labels == ["step0", "step1", "step2"]
    # a step folder (or a dump.json) gives the same rows, labelled from there
    step2 = [
        dict(r, dump="step2/" + r["dump"])
        for r in pypto.testing.compare_msprobe(str(dumps["mix"] / "step2")).rows
    ]
    assert step2 == [r for r in mix_report.rows if r["dump"].startswith("step2/")]
    single = pypto.testing.compare_msprobe(str(dump_json(dumps["mix"] / "step2")))
    assert [r["dump"] for r in single.rows] == ["."] * 4
    json.dumps(mix_report.as_dict(), allow_nan=False)  # JSON-ready


def test_bf16_cnn_made_by_torch_passes(mix_report):
    rows = step_rows(mix_report, 0)
    assert list(rows) == CNN
    for api in CNN[:3]:
        row = rows[api]
        assert row["status"] == "pass" and row["passed"] is True, row
        assert row["dtype"] == "bf16" and row["outside_bound"] == 0
        assert all(v["passed"] for v in row["verdicts"].values()), row["verdicts"]
        assert row["failing_tasks"] == []
    first, dilated, one = (rows[f"Functional.conv2d.{n}.backward"] for n in range(3))
    assert (first["grad_output"], first["weight"], first["grad_input"]) == (
        [2, 16, 32, 32],
        [16, 3, 3, 3],
        [2, 3, 64, 64],
    )
    assert (first["strides"], first["paddings"], first["dilations"]) == (
        [2, 2],
        [1, 1, 1, 1],
        [1, 1],
    )
    assert (dilated["strides"], dilated["paddings"], dilated["dilations"]) == (
        [1, 1],
        [2, 2, 2, 2],
        [2, 2],
    )
    assert one["weight"] == [32, 16, 1, 1] and one["paddings"] == [0, 0, 0, 0]
    # each conv once: the Module entry of a mix dump is the same call, judged as the
    # Functional one, whose row names the module
    assert [rows[api]["module"] for api in CNN] == MODULES
    same = [s for s in mix_report.same if s["dump"].startswith("step0/")]
    assert [(s["api"], s["same_as"]) for s in same] == [
        (f"Module.{m}.Conv2d.backward.0", api) for m, api in zip(MODULES, CNN)
    ]
    assert rows[CNN[3]]["status"] == "skipped" and rows[CNN[3]]["passed"] is None
    assert rows[CNN[3]]["reason"] == "groups 4: pypto's conv_backward_input has no groups"


def test_fp16_cnn_made_by_torchs_native_cpu_path(mix_report, dumps):
    """Pinned (torch 2.13.0+cpu): on CPUs without AVX512-FP16 its fp16 CPU dgrad is ATen's own,
    which does not accumulate in fp32. Even these small 3x3 layers (K = 27 and 144) fail
    dual-L0 with thousands of elements outside the fp32-accumulation bound (hundreds of ulps);
    the 1x1 layer (K = 32, a GEMM) stays within the bound and passes dual-L0 (it fails
    single-2026-04, the rule's near-zero limit). With AVX512-FP16 (Sapphire Rapids and later)
    torch runs oneDNN's fp16 convolutions, which accumulate in fp32: every layer is within the
    bound and passes."""
    rows = step_rows(mix_report, 1)
    assert list(rows) == CNN
    if "avx512_fp16" in (cpuinfo_flags()[1] or ()):  # oneDNN's fp16: within the bound
        for api in CNN[:3]:
            row = rows[api]
            assert row["dtype"] == "fp16" and row["outside_bound"] == 0, row
            assert row["verdicts"]["dual-L0"]["passed"], row["verdicts"]
    else:
        for api in CNN[:2]:  # the two 3x3 layers
            row = rows[api]
            assert row["dtype"] == "fp16" and row["status"] == "fail", row
            assert not row["verdicts"]["dual-L0"]["passed"]
            assert row["outside_bound"] > 0.02 * row["elements"] and row["max_ulp"] > 16
            assert row["failing_tasks"]
        for api in CNN[2:3]:  # the 1x1
            row = rows[api]
            assert row["status"] == "pass" and row["outside_bound"] == 0, row
            assert all(row["verdicts"][s]["passed"] for s in ("dual-L0", "dual-L1", "dual-L2"))
        assert not mix_report.passed
    assert rows[CNN[3]]["status"] == "skipped"

    # the dump is read right: torch's own fp32 dgrad of the dumped fp16 inputs, rounded to
    # fp16, passes where torch's fp16 path fails
    data = dump_json(dumps["mix"] / "step1").parent / "dump_tensor_data"
    dy = torch.load(data / "Functional.conv2d.0.backward.input.0.pt", weights_only=True)
    w = torch.load(data / "Functional.conv2d.0.forward.input.1.pt", weights_only=True)
    dx = torch.ops.aten.convolution_backward(
        dy.float(),
        torch.zeros(2, 3, 64, 64),
        w.float(),
        None,
        [2, 2],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        1,
        [True, False, False],
    )[0].half()
    check = pypto.testing.compare(dx, dy, w, [2, 3, 64, 64], [2, 2], [1, 1, 1, 1], [1, 1])
    assert check.passed and check.localisation.outside_count == 0


def test_other_conv2d_arguments(mix_report):
    rows = step_rows(mix_report, 2)
    assert list(rows) == [f"Functional.conv2d.{n}.backward" for n in range(4)]
    valid, same, fp32, no_grad = rows.values()
    # stride (2, 1) as a keyword, padding "valid" (no padding): judged
    assert valid["status"] == "pass" and valid["strides"] == [2, 1]
    assert valid["paddings"] == [0, 0, 0, 0] and valid["grad_output"] == [1, 16, 3, 6]
    assert same["status"] == "skipped" and same["reason"].startswith("string padding 'same'")
    assert fp32["status"] == "skipped" and fp32["dtype"] == "fp32"
    assert fp32["reason"] == "dtype fp32: pypto's conv_backward_input takes fp16 and bf16 only"
    assert no_grad["status"] == "skipped" and "did not require grad" in no_grad["reason"]


def test_a_corrupted_task_fails_exactly_that_call_and_task(mix_report, dumps, tmp_path, capsys):
    dump = copy_step(dumps["mix"], 0, tmp_path)
    clean = step_rows(mix_report, 0)["Functional.conv2d.0.backward"]
    grid = clean["tiles"]["grid"]
    assert grid["m_tiles"] >= 3, grid  # a grid worth localising in
    rows, channels = grid["rows_per_m_tile"], min(3, grid["channels_per_block"])
    image, tile = 1, 2
    lo, hi = tile * rows, (tile + 1) * rows
    path = tensor_file(dump, "Functional.conv2d.0.backward.output.0.pt")
    dx = torch.load(path, weights_only=True)
    dx[image, :channels, lo:hi, :] += 1.0  # one task's rows, every channel of block 0
    torch.save(dx, path)

    report_json, report_csv = tmp_path / "r.json", tmp_path / "r.csv"
    code, out, err = cli(capsys, "--msprobe", dump, "--json", report_json, "--csv", report_csv)
    assert code == 1 and err == ""
    lines = out.splitlines()
    fails = [line for line in lines if line.startswith("FAIL")]
    assert len(fails) == 1 and fails[0].startswith("FAIL  Functional.conv2d.0.backward bf16")
    elements = channels * rows * 64
    where = f"image {image}, channels 0-{channels - 1}, M tile {tile} (rows {lo}-{hi - 1})"
    region = f"image {image}, channels 0-{channels - 1}, rows {lo}-{hi - 1}"
    assert fails[0].endswith(f"; failing region(s): {region} ({elements} of {elements} outside)"), (
        fails[0]
    )
    # the Module entry has its own files, no longer the same bits: judged on its own, it passes
    assert any(line.startswith("PASS  Module.0.Conv2d.backward.0 (module 0)") for line in lines)
    assert lines[-3] == (
        "summary: 5 conv2d backward call(s) in 1 dump.json (and 3 Module entries of the same "
        "call(s), judged once as their Functional one): 3 passed, 1 failed, 1 skipped "
        "(dual-L0); verdict FAIL"
    )

    table = json.loads(report_json.read_text())
    assert table["passed"] is False
    assert table["summary"] == {"calls": 5, "judged": 4, "passed": 3, "failed": 1, "skipped": 1}
    (row,) = [r for r in table["calls"] if r["status"] == "fail"]
    assert row["api"] == "Functional.conv2d.0.backward"
    assert [
        {k: t[k] for k in ("image", "channel_block", "m_tile", "outside", "elements", "where")}
        for t in row["failing_tasks"]
    ] == [
        {
            "image": image,
            "channel_block": 0,
            "m_tile": tile,
            "outside": elements,
            "elements": elements,
            "where": where,
        }
    ]
    assert [r["where"] for r in row["failing_tasks"][0]["regions"]] == [region]
    assert row["outside_bound"] == elements and not row["verdicts"]["dual-L0"]["passed"]

    with open(report_csv, newline="") as f:
        records = list(csv.DictReader(f))
    assert [r["api"] for r in records] == [CNN[0], "Module.0.Conv2d.backward.0", *CNN[1:]]
    failed = [r for r in records if r["status"] == "fail"]
    assert len(failed) == 1 and failed[0]["api"] == "Functional.conv2d.0.backward"
    assert failed[0]["failing_tasks"].startswith(f"{where}: {elements} of {elements} outside")
    assert failed[0]["dual-L0"] == "FAIL" and failed[0]["passed"] == "false"


def test_json_and_csv_hold_the_whole_table(mix_report, dumps, tmp_path, capsys):
    report_json, report_csv = tmp_path / "r.json", tmp_path / "r.csv"
    step = dumps["mix"] / "step2"
    code, out, err = cli(
        capsys, "--msprobe", step, "--json", report_json, "--csv", report_csv, "--standard", "all"
    )
    assert code == 0 and err == ""
    assert out.splitlines()[-2:] == [f"JSON report: {report_json}", f"CSV table: {report_csv}"]
    table = json.loads(report_json.read_text())
    assert table["standard"] == "all" and table["passed"] is True
    assert table["dump_files"] == [str(dump_json(step))]
    assert table["summary"] == {"calls": 4, "judged": 1, "passed": 1, "failed": 0, "skipped": 3}
    python = pypto.testing.compare_msprobe(str(step), standard="all")
    assert table["calls"] == json.loads(json.dumps(python.rows))  # the same table
    judged, same = table["calls"][:2]
    keys = {
        "dump",
        "api",
        "NPU Name",
        "module",
        "forward",
        "parameters_from",
        "status",
        "reason",
        "dtype",
        "grad_output",
        "weight",
        "grad_input",
        "strides",
        "paddings",
        "dilations",
        "groups",
        "standard",
        "passed",
        "verdicts",
        "max_ulp",
        "outside_bound",
        "elements",
        "failing_tasks",
        *COLUMNS,  # msprobe's: their names are pinned in test_msprobe_metrics.py
        "tiles",
    }
    assert set(judged) == keys and set(same) == keys
    assert judged["NPU Name"] == "Functional.conv2d.0.backward.output.0"
    assert 0.9999 < judged["Cosine"] <= 1 and 0 < judged["MaxAbsErr"] < 0.01
    assert same["Cosine"] is None  # skipped: nothing computed
    assert set(judged["verdicts"]) == set(pypto.testing.STANDARDS)
    msprobe = judged["verdicts"]["msprobe"]
    assert {"passed", "detail", "numbers", "thresholds", "source", "warning"} <= set(msprobe)
    assert judged["max_ulp"] <= 1 and judged["elements"] == 1024
    assert same["verdicts"] == {} and same["passed"] is None and same["max_ulp"] is None

    with open(report_csv, newline="") as f:
        header, *records = list(csv.reader(f))
    assert header[:26] == [
        "dump",
        "api",
        "NPU Name",
        "module",
        "status",
        "reason",
        "dtype",
        "grad_output",
        "weight",
        "grad_input",
        "strides",
        "paddings",
        "dilations",
        "groups",
        "standard",
        "passed",
        "max_ulp",
        "outside_bound",
        "elements",
        "failing_tasks",
        *COLUMNS,  # msprobe's: their names are pinned in test_msprobe_metrics.py
    ]
    assert header[26:] == [c for s in pypto.testing.STANDARDS for c in (s, f"{s} detail")]
    assert len(records) == 4
    first = dict(zip(header, records[0]))
    assert first["status"] == "pass" and first["strides"] == "[2,1]"
    assert first["dual-L0"] == "pass" and "ratios to pypto's bf16 result" in first["dual-L0 detail"]
    skipped = dict(zip(header, records[2]))
    assert skipped["status"] == "skipped" and skipped["reason"].startswith("dtype fp32")
    assert skipped["dual-L0"] == "" and skipped["passed"] == ""


def test_a_statistics_dump_is_one_error_line(dumps, capsys):
    code, out, err = cli(capsys, "--msprobe", dumps["stats"])
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert str(dump_json(dumps["stats"])) in err
    assert "task 'statistics', which holds statistics (Max, Min, Mean, Norm) only" in err
    with pytest.raises(pypto.PyptoError, match='task "tensor"'):
        pypto.testing.compare_msprobe(str(dumps["stats"]))


def test_a_missing_tensor_file_is_one_error_line(dumps, tmp_path, capsys):
    dump = copy_step(dumps["mix"], 0, tmp_path)
    missing = tensor_file(dump, "Functional.conv2d.1.forward.input.1.pt")
    missing.unlink()
    code, out, err = cli(capsys, "--msprobe", dump)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    assert (
        "1 tensor file(s) that dump.json names are missing: "
        f"{missing} (Functional.conv2d.1.backward weight)"
    ) in err


def test_a_level_L0_dump_lists_its_Module_calls_as_skipped(dumps, capsys):
    code, out, err = cli(capsys, "--msprobe", dumps["l0"])
    assert code == 0
    assert err == "warning: no call was judged (every one is skipped, reasons above)\n"
    lines = out.splitlines()[1:-1]
    assert [line.split()[1] for line in lines] == [f"Module.{m}.Conv2d.backward.0" for m in MODULES]
    assert [line.split()[3].rstrip("):") for line in lines] == MODULES  # "(module 0):"
    assert all('dump with level "mix" to judge Module entries' in line for line in lines)
    assert out.splitlines()[-1].endswith("verdict nothing judged")


def test_npy_tensors_as_mindspore_writes_them(mix_report, dumps, tmp_path):
    """MindSpore dumps .npy, bf16 as float32: read back exactly, judged the same."""
    dump = copy_step(dumps["mix"], 2, tmp_path)
    path = dump_json(dump)
    data = json.loads(path.read_text())
    for entry in ("Functional.conv2d.0.forward", "Functional.conv2d.0.backward"):
        for record in (
            data["data"][entry].get("input_args", [])
            + data["data"][entry].get("input", [])
            + data["data"][entry]["output"]
        ):
            if isinstance(record, dict) and "data_name" in record:
                pt = path.parent / "dump_tensor_data" / record["data_name"]
                np.save(pt.with_suffix(".npy"), torch.load(pt, weights_only=True).float().numpy())
                pt.unlink()
                record["data_name"] = pt.with_suffix(".npy").name
    path.write_text(json.dumps(data))
    (row, *_) = pypto.testing.compare_msprobe(str(dump)).rows
    clean = step_rows(mix_report, 2)["Functional.conv2d.0.backward"]
    assert row["status"] == "pass"
    assert row["verdicts"] == clean["verdicts"] and row["max_ulp"] == clean["max_ulp"]


def test_module_names_of_older_msprobe(mix_report, dumps, tmp_path):
    """Module.<name>.Conv2d.<n>.forward / .backward (the order before msprobe 26) reads alike."""
    dump = copy_step(dumps["mix"], 0, tmp_path)
    renamed = {}
    for name in ("dump.json", "construct.json"):
        path = dump_json(dump).parent / name
        text = path.read_text()
        for kind in ("forward", "backward"):
            for layer in (0, 2, 4, 6):
                old = f"Module.{layer}.Conv2d.{kind}.0"
                renamed[f"Module.{layer}.Conv2d.0.{kind}"] = old
                text = text.replace(f'"{old}"', f'"Module.{layer}.Conv2d.0.{kind}"')
        path.write_text(text)
    # the Module entries alone (--api), judged on their own
    rows = {r["api"]: r for r in pypto.testing.compare_msprobe(str(dump), api="Module.*").rows}
    clean = pypto.testing.compare_msprobe(str(dumps["mix"] / "step0"), api="Module.*").rows
    clean = {r["api"]: r for r in clean}
    modules = list(rows)
    assert modules == [f"Module.{layer}.Conv2d.0.backward" for layer in (0, 2, 4, 6)]
    for api in modules:
        before = clean[renamed[api]]
        assert rows[api]["module"] == before["module"] == api.split(".")[1]
        assert (rows[api]["status"], rows[api]["reason"], rows[api]["verdicts"]) == (
            before["status"],
            before["reason"],
            before["verdicts"],
        )
    # with every call: the same calls as their Functional ones
    same = pypto.testing.compare_msprobe(str(dump)).same
    assert [s["api"] for s in same] == modules


def test_asymmetric_padding_is_skipped(dumps, tmp_path):
    dump = copy_step(dumps["mix"], 2, tmp_path)
    path = dump_json(dump)
    data = json.loads(path.read_text())
    data["data"]["Functional.conv2d.0.forward"]["input_kwargs"]["padding"] = [
        {"type": "int", "value": v} for v in (1, 2, 1, 1)
    ]
    path.write_text(json.dumps(data))
    row = pypto.testing.compare_msprobe(str(dump)).rows[0]
    assert row["status"] == "skipped"
    assert row["reason"] == "asymmetric padding [1, 2, 1, 1] (top, bottom, left, right): not judged"


def test_bad_arguments_are_one_error_line(dumps, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    step = dumps["mix"] / "step2"
    for args, text in (
        (["--msprobe", empty], f"no dump.json in {empty} or below"),
        (["--msprobe", tmp_path / "nowhere"], "does not exist"),
        ([empty, "--msprobe", step], "DIR applies to a golden case, not to --msprobe"),
        (["--msprobe", step, "--dtype", "bf16"], "--dtype applies to a golden case"),
        (["--csv", tmp_path / "t.csv", empty], "--csv writes the --msprobe table"),
        ([], "compare needs DIR (a folder written by `pypto golden`) or --msprobe"),
        (["--msprobe", step, "--csv", tmp_path], "it is a folder"),
    ):
        code, out, err = cli(capsys, *args)
        assert code == 2 and out == "", args
        assert len(err.splitlines()) == 1 and err.startswith("error: ") and text in err, err
    with pytest.raises(pypto.PyptoError, match="standard must be one of"):
        pypto.testing.compare_msprobe(str(step), standard="dual-L9")


def test_the_command_line_exit_code(dumps, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "pypto", "compare", "--msprobe", str(dumps["mix"] / "step2")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(
        f"pypto {pypto.__version__}: conv2d backward calls in the msprobe dump"
    )
    assert lines[1].startswith(
        "PASS  Functional.conv2d.0.backward bf16 dy [1, 16, 3, 6] w "
        "[16, 16, 3, 3] -> dx [1, 16, 8, 8], strides [2, 1], paddings "
        "[0, 0, 0, 0], dilations [1, 1]: max "
    )
    assert lines[1].endswith("0 of 1024 outside the bound; every standard passes")
    assert lines[-1] == (
        "summary: 4 conv2d backward call(s) in 1 dump.json: 1 passed, 0 "
        "failed, 3 skipped (dual-L0); verdict PASS"
    )


# --- issue 42: malformed dumps, lying tensor headers, FIFOs -------------------------------------
F0, B0 = "Functional.conv2d.0.forward", "Functional.conv2d.0.backward"


def _edit_dump(dumps, tmp_path, change):
    dump = copy_step(dumps["mix"], 2, tmp_path)
    path = dump_json(dump)
    data = json.loads(path.read_text())
    change(data["data"])
    path.write_text(json.dumps(data))
    return dump


def _set(entry, key, value):
    def change(data):
        if key is None:
            data[entry] = value
        else:
            data[entry][key] = value

    return change


@pytest.mark.parametrize(
    "change, text",
    [
        (_set(F0, None, [1, 2]), f"the entry {F0} must be an object, but is [1, 2]"),
        (_set(B0, None, "x"), "must be an object, but is 'x'"),
        (_set(B0, "output", {"0": None}), '"output" must be a list'),
        (_set(B0, "input", 7), '"input" must be a list'),
        (_set(F0, "input_kwargs", [1]), '"input_kwargs" must be an object'),
        (_set(F0, "input_args", "weight"), '"input_args" must be a list'),
    ],
)
def test_records_of_another_shape_are_one_error_line(dumps, tmp_path, capsys, change, text):
    """#6: a record msprobe never writes is a usage error (exit 2), not a traceback (exit 1,
    which reads as a failing call)."""
    code, out, err = cli(capsys, "--msprobe", _edit_dump(dumps, tmp_path, change))
    assert code == 2 and out == "", err
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and text in err, err
    assert "not a record msprobe writes" in err


def test_deep_json_and_a_bad_call_tree_are_one_error_line(dumps, tmp_path, capsys):
    dump = copy_step(dumps["mix"], 2, tmp_path)
    construct = dump_json(dump).parent / "construct.json"
    construct.write_text('{"Functional.conv2d.0.forward": ["Module.0.Conv2d.forward.0"]}')
    code, _, err = cli(capsys, "--msprobe", dump)
    assert code == 2 and "construct.json: the parent of" in err and "must be a call" in err
    dump_json(dump).write_text('{"data": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, _, err = cli(capsys, "--msprobe", dump)
    assert code == 2 and len(err.splitlines()) == 1 and "JSON nested too deep" in err, err


def test_an_argument_nested_deeply_skips_its_call(dumps, tmp_path):
    nested = json.loads("[" * 400 + "2" + "]" * 400)
    dump = _edit_dump(dumps, tmp_path, lambda data: data[F0]["input_kwargs"].update(stride=nested))
    rows = {r["api"]: r for r in pypto.testing.compare_msprobe(str(dump)).rows}
    assert rows[B0]["status"] == "skipped"
    assert "nested more than 8 lists deep" in rows[B0]["reason"]


def _npy_named(dump, record_of, write):
    """Point the record ``record_of(data)`` at a .npy file written by ``write(path)``."""
    path = dump_json(dump)
    data = json.loads(path.read_text())
    record = record_of(data["data"])
    target = path.parent / "dump_tensor_data" / "lying.npy"
    write(target)
    record["data_name"] = target.name
    path.write_text(json.dumps(data))
    return record


def _header_only(shape, data=b""):
    def write(path):
        with open(path, "wb") as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": shape}
            )
            f.write(data)

    return write


def test_a_npy_header_is_checked_before_its_claim_is_allocated(dumps, tmp_path, capsys):
    """#7: a 200-byte .npy claiming 10^12 elements is refused from its header; one with the
    right shape but too few bytes is refused from its size."""
    dump = copy_step(dumps["mix"], 2, tmp_path)
    dy = _npy_named(dump, lambda d: d[B0]["input"][0], _header_only((10**12,), b"\0" * 100))
    code, _, err = cli(capsys, "--msprobe", dump)
    assert code == 2 and f"has shape [1000000000000], but dump.json says {dy['shape']}" in err
    _npy_named(dump, lambda d: d[B0]["input"][0], _header_only(tuple(dy["shape"]), b"\0" * 100))
    code, _, err = cli(capsys, "--msprobe", dump)
    assert code == 2 and "holds 100 bytes after its header" in err and "(truncated?)" in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifos_named_like_dump_files_are_refused_without_blocking(dumps, tmp_path):
    """#8: a FIFO named dump.json (or a tensor file) is refused at once: open() of a FIFO
    would block until someone writes it."""
    dump = copy_step(dumps["mix"], 2, tmp_path)
    grad_output = json.loads(dump_json(dump).read_text())["data"][B0]["input"][0]
    pt = tensor_file(dump, grad_output["data_name"])
    other = dump / "rank9"
    other.mkdir()
    os.mkfifo(other / "dump.json")
    command = [sys.executable, "-m", "pypto", "compare", "--msprobe"]
    for text in ("rank9/dump.json: it is a FIFO", None):
        if text is None:  # the tensor file as a FIFO, the dump.json back to normal
            (other / "dump.json").unlink()
            other.rmdir()
            pt.unlink()
            os.mkfifo(pt)
            text = f"{pt.name}: it is a FIFO"
        run = subprocess.run(
            [*command, str(dump)], capture_output=True, text=True, cwd=tmp_path, timeout=120
        )
        assert run.returncode == 2 and text in run.stderr, run.stderr
        assert "Traceback" not in run.stderr
