"""run_case, the sweep's unit of work: the golden folder ``pypto golden`` writes (checked
against the independent float64 oracle), deterministic rows, refusals with the op's rule, value
ranges honoured, and kernel outputs judged later (``--judge``, ``--merge``)."""

import json
import os

import ml_dtypes
import numpy as np
import pytest

from pypto import __main__ as cli
from pypto._golden.files import read_case, read_inputs
from pypto._sweep.results import identity, merge
from pypto.sweep import read_cases, run_case
from support.reference import dgrad_reference


def _cases(tmp_path, *cases):
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return read_cases(str(path))


CASE = {
    "grad_output": [2, 32, 5, 7],
    "weight": [32, 24, 3, 3],
    "paddings": [1, 1, 1, 1],
    "strides": [2, 2],
    "dtype": "bf16",
    "name": "layer",
}


def test_run_case_writes_the_golden_folder_and_is_deterministic(tmp_path):
    (case,) = _cases(tmp_path, CASE)
    row = run_case(case, str(tmp_path / "a"))
    again = run_case(case, str(tmp_path / "b"))
    assert identity(row) == identity(again)
    assert row["status"] == "pass" and row["judged"] == "pypto" and row["outside_bound"] == 0
    assert row["case_id"] == case["id"] and row["name"] == "layer"
    assert row["grad_input"] == [2, 24, 9, 13] and row["memory_bytes"] > 0
    folders = [tmp_path / d / "cases" / case["id"] for d in ("a", "b")]
    manifests = [json.loads((f / "manifest.json").read_text()) for f in folders]
    assert manifests[0]["files"] == manifests[1]["files"]  # the same bytes (sha256 each)
    assert manifests[0]["seed"] == row["seed"] == int(case["id"], 16) >> 1
    made, manifest = read_case(str(folders[0]))
    dy, w, golden, reference = read_inputs(str(folders[0]), made, manifest)
    oracle = dgrad_reference(dy, w, (9, 13), (2, 2), (1, 1), (1, 1))
    np.testing.assert_allclose(golden, oracle, rtol=1e-12, atol=1e-12)
    # pypto compare reads the folder as one pypto golden wrote
    actual = str(folders[0] / "output" / "pypto.bin")
    assert cli.main(["compare", str(folders[0]), "--actual", actual]) == 0


@pytest.mark.parametrize(
    "change, rule",
    [
        ({"groups": 2}, "G1"),
        ({"paddings": [1, 0, 1, 1]}, "A4"),
        ({"dtype": "fp32"}, "D1"),
        ({"strides": [64, 1]}, "A1"),
        ({"l1": [16, 100, 16], "l0": [16, 16, 16]}, "TS3"),
        ({"weight": [16, 24, 3, 3]}, "C1"),
    ],
)
def test_a_case_the_op_refuses_is_a_row_with_the_rule(tmp_path, change, rule):
    (case,) = _cases(tmp_path, dict(CASE, **change))
    row = run_case(case, str(tmp_path))
    assert row["status"] == "refused" and row["rule"] == rule, row["reason"]
    assert row["reason"].startswith("ErrCode:")
    assert not os.path.exists(tmp_path / "cases" / case["id"])


def test_value_ranges_and_distributions_are_honoured(tmp_path):
    (case,) = _cases(
        tmp_path,
        dict(CASE, dtype="fp16", dist="uniform", range=[2, 3]),
    )
    row = run_case(case, str(tmp_path))
    folder = tmp_path / "cases" / case["id"]
    dy = np.load(folder / "input" / "grad_output.npy")
    assert row["status"] == "pass" and dy.min() >= 2 and dy.max() <= 3
    (truncated,) = _cases(
        tmp_path, dict(CASE, dtype="bf16", dist="truncated_normal", range=[-1, 0.5])
    )
    run_case(truncated, str(tmp_path))
    w = np.load(tmp_path / "cases" / truncated["id"] / "input" / "weight.npy")
    w = w.view(ml_dtypes.bfloat16).astype(np.float64)
    assert w.min() >= -1 and w.max() <= 0.5 and abs(w.mean() + 0.25) < 0.1


def test_a_kernel_output_written_later_is_judged(tmp_path, capsys):
    good, bad = _cases(tmp_path, CASE, dict(CASE, name="other", dtype="fp16"))
    out = tmp_path / "sweep"
    cases_file = str(tmp_path / "cases.jsonl")
    assert cli.main(["sweep", cases_file, "--out", str(out)]) == 0
    for case, damage in ((good, 0), (bad, 1)):
        folder = out / "cases" / case["id"] / "output"
        result = np.fromfile(folder / "pypto.bin", dtype="<u2")
        result[:8] += damage * 64  # a few elements far off: a kernel bug
        result.tofile(folder / "output.bin")
    # the two-stage flow: the kernel's outputs came back; --judge writes verdicts.jsonl
    capsys.readouterr()
    assert cli.main(["sweep", "--judge", str(out), "--csv", str(tmp_path / "v.csv")]) == 1
    printed = capsys.readouterr().out
    assert "2 judged" in printed
    rows = {row["name"]: row for row in merge([str(out)])}
    assert rows["layer"]["status"] == "pass" and rows["layer"]["judged"] == "output"
    assert rows["other"]["status"] == "fail" and not rows["other"]["verdicts"]["dual-L0"]["passed"]
    assert rows["other"]["pypto_outside_bound"] == 0 and rows["other"]["outside_bound"] > 0
    # run_case itself judges an output it finds in the case's folder
    again = run_case(bad, str(out))
    assert again["judged"] == "output" and again["status"] == "fail"
    assert "dual-L0" in (tmp_path / "v.csv").read_text().splitlines()[0]
