"""Looking closer at one call of an msprobe dump (issue 45): ``--api`` chooses calls, ``--top``
and ``--plot`` show one call as a golden case shows, ``--extract`` writes it as a golden case
folder that ``pypto compare DIR`` judges alike.

The dump is the new-user note's model (make_dump.py step "wide", level L1), and the note's
corruption: in a copy, conv 1's grad_input gets rows 7-10 of channels 16-31 of image 1 in rows
8-11. What is outside the bound, and the worst elements, are computed here from the independent
float64 oracle (tests/support/reference.py) and the dumped tensors read with torch.load.
"""

import json

import numpy as np
import pytest

from support.msprobe_dumps import cli, copy_step, require_torch_and_msprobe, tensor_file
from support.reference import dgrad_abs_reference, dgrad_reference, ulp

torch = require_torch_and_msprobe()

import pypto  # noqa: E402
import pypto.testing  # noqa: E402

CALL = "Functional.conv2d.1.backward"  # dy [2, 32, 12, 12], w [32, 32, 3, 3], stride 2, pad 1
APIS = [f"Functional.conv2d.{n}.backward" for n in range(3)]
K = 32 * 3 * 3


@pytest.fixture(scope="module")
def bad(dumps, tmp_path_factory):
    """A copy of the wide dump with the note's corruption of CALL's grad_input."""
    dump = copy_step(dumps["wide"], 0, tmp_path_factory.mktemp("bad"))
    path = tensor_file(dump, f"{CALL}.output.0.pt")
    dx = torch.load(path, weights_only=True)
    dx[1, 16:32, 8:12] = dx[1, 16:32, 7:11].clone()
    torch.save(dx, path)
    return dump


def as_numpy(tensor):
    """A bf16 tensor's values as float64 (exactly)."""
    return tensor.float().numpy().astype(np.float64)


@pytest.fixture(scope="module")
def oracle(bad):
    """(dx as dumped, the float64 golden, error / bound per element) of CALL in ``bad``."""
    load = lambda name: torch.load(tensor_file(bad, name), weights_only=True)  # noqa: E731
    dy = as_numpy(load(f"{CALL}.input.0.pt"))
    w = as_numpy(load("Functional.conv2d.1.forward.input.1.pt"))
    dx = as_numpy(load(f"{CALL}.output.0.pt"))
    args = ((24, 24), (2, 2), (1, 1), (1, 1))
    golden = dgrad_reference(dy, w, *args)
    bound = ulp(golden, "bf16") + K * 2.0**-24 * dgrad_abs_reference(dy, w, *args)
    return dx, golden, np.abs(dx - golden) / bound


def test_api_chooses_by_name_glob_or_grad_input_name(dumps):
    for pattern in (CALL, "*conv2d.1*", f"{CALL}.output.0", "Functional.conv2d.[1]*"):
        report = pypto.testing.compare_msprobe(str(dumps["wide"]), api=pattern)
        assert [r["api"] for r in report.rows] == [CALL], pattern
        assert report.result is not None and report.rows[0]["NPU Name"] == f"{CALL}.output.0"
    every = pypto.testing.compare_msprobe(str(dumps["wide"]), api="Functional.*")
    assert [r["api"] for r in every.rows] == APIS and every.result is None
    with pytest.raises(pypto.PyptoError, match="is named 'conv2d'"):
        pypto.testing.compare_msprobe(str(dumps["wide"]), api="conv2d")  # neither exact nor glob


def test_one_call_drilled_down_as_a_golden_case(bad, oracle, tmp_path, capsys):
    dx, golden, over = oracle
    outside = over > 1
    report_json, plot = tmp_path / "r.json", tmp_path / "dx.png"
    code, out, err = cli(
        capsys,
        "--msprobe",
        bad,
        "--api",
        "*conv2d.1*",
        "--top",
        5,
        "--plot",
        plot,
        "--json",
        report_json,
    )
    assert code == 1 and err == ""
    lines = out.splitlines()
    n = int(outside.sum())
    assert n == int(outside[1, 16:32, 8:12].sum()) > 1000  # nothing outside the box
    assert lines[1].startswith(f"FAIL  {CALL} bf16 dy [2, 32, 12, 12]")
    assert lines[1].endswith(
        f"; failing region(s): image 1, channels 16-31, rows 8-11 ({n} of 1536 outside)"
    )
    assert lines[2].startswith(
        "summary: 1 conv2d backward call(s) in 1 dump.json: 0 passed, 1 failed"
    )
    assert lines[3] == f"{CALL}, judged as a golden case:"
    assert f"      region image 1, channels 16-31, rows 8-11: {n} of 1536 outside, max " in out
    # the worst elements: the five largest error / bound, from the oracle
    start = lines.index("worst elements (by error / bound; > 1 is outside):") + 2
    shown = [tuple(int(v) for v in line.split()[:4]) for line in lines[start : start + 5]]
    order = np.argsort(-over, axis=None, kind="stable")[:5]
    assert shown == [tuple(int(i) for i in np.unravel_index(k, over.shape)) for k in order]
    assert lines[start + 5] == f"JSON report: {report_json}"
    assert lines[-1] == f"plot: {plot}" and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    table = json.loads(report_json.read_text())
    chosen = table["chosen_call"]
    assert chosen["api"] == CALL and len(chosen["localisation"]["worst"]) == 5
    for e in chosen["localisation"]["worst"]:
        where = (e["n"], e["c"], e["h"], e["w"])
        assert e["actual"] == dx[where] and e["golden"] == pytest.approx(golden[where], rel=1e-12)
        # pypto's bound takes the ulp at a golden near a binade's edge from the binade above
        assert e["over_bound"] == pytest.approx(over[where], rel=0.01)
    assert chosen["localisation"]["outside_bound"] == n


def test_plot_top_and_extract_need_one_call(dumps, tmp_path, capsys):
    wide, mix = dumps["wide"], dumps["mix"]
    png, case = tmp_path / "x.png", tmp_path / "case"
    names = ", ".join(APIS)
    for args, text in (
        (["--msprobe", wide, "--api", "nope"], "is named 'nope' (exactly or as a glob such as "),
        (["--msprobe", wide, "--api", "nope"], f"its calls: {names}"),
        (["--msprobe", wide, "--plot", png], "--plot is about one call, but 3 are chosen"),
        (["--msprobe", wide, "--top", 3], "pick one with --api NAME"),
        (["--msprobe", wide, "--api", "*conv2d*", "--top", 3], "but 3 are chosen"),
        (["--msprobe", wide, "--extract", "*", "--out", case], "--extract is about one call"),
        (["--msprobe", wide, "--extract", CALL], "--extract NAME needs --out DIR"),
        (["--msprobe", wide, "--out", case], "--out and --force go with --extract NAME"),
        (["--msprobe", wide, "--api", CALL, "--force"], "--out and --force go with --extract"),
        (["--msprobe", wide, "--api", CALL, "--extract", CALL, "--out", case], "not both"),
        (["--msprobe", wide, "--api", " "], "--api is empty"),
        (["--msprobe", wide, "--api", CALL, "--plot", tmp_path], "it is a folder"),
        (["--msprobe", wide, "--csv", tmp_path / "t.csv" / "x"], "not a writable folder"),
        # a mix dump of several steps: the same name in each, one step must be given
        (["--msprobe", mix, "--api", "Functional.conv2d.0.backward", "--top", 2], "but 3 are"),
        (
            ["--msprobe", mix / "step2", "--api", "Functional.conv2d.1.backward", "--top", 2],
            "--top: Functional.conv2d.1.backward is skipped: string padding 'same'",
        ),
        ([tmp_path, "--api", CALL], "--api applies to --msprobe DUMP_DIR, not to a case"),
        ([tmp_path, "--extract", CALL], "--extract applies to --msprobe DUMP_DIR"),
    ):
        code, out, err = cli(capsys, *args)
        assert code == 2 and out == "", (args, out)
        assert len(err.splitlines()) == 1 and err.startswith("error: ") and text in err, err
    assert not case.exists() and not png.exists()
    with pytest.raises(pypto.PyptoError, match="api must be a call's name or a glob"):
        pypto.testing.compare_msprobe(str(wide), api=3)


def test_extract_writes_a_case_that_compare_judges_alike(bad, oracle, tmp_path, capsys):
    dx, golden, over = oracle
    case, msprobe_json, case_json = tmp_path / "case", tmp_path / "m.json", tmp_path / "c.json"
    code, out, err = cli(
        capsys, "--msprobe", bad, "--extract", CALL, "--out", case, "--json", msprobe_json
    )
    assert code == 1 and err == ""
    actual = case / "output" / "output.bin"
    assert f"golden case: {case} ({CALL}; the dumped grad_input is {actual})" in out
    # the files: the dump's tensors, bit for bit; the golden, as the oracle's
    dumped = lambda name: torch.load(tensor_file(bad, name), weights_only=True)  # noqa: E731
    bits = lambda t: t.view(torch.int16).numpy().tobytes()  # noqa: E731
    assert actual.read_bytes() == bits(dumped(f"{CALL}.output.0.pt"))
    assert (case / "input" / "grad_output.bin").read_bytes() == bits(dumped(f"{CALL}.input.0.pt"))
    assert (case / "input" / "weight.bin").read_bytes() == bits(
        dumped("Functional.conv2d.1.forward.input.1.pt")
    )
    written = np.fromfile(case / "output" / "golden.bin", "<f8").reshape(golden.shape)
    np.testing.assert_allclose(written, golden, rtol=1e-12, atol=1e-15)

    code, out, err = cli(
        capsys, case, "--plot", tmp_path / "x.png", "--top", 5, "--json", case_json
    )
    assert code == 1 and err == "", err
    assert "region image 1, channels 16-31, rows 8-11" in out
    row = json.loads(msprobe_json.read_text())["calls"][0]
    judged = json.loads(case_json.read_text())
    assert judged["verdicts"] == row["verdicts"] and judged["passed"] is row["passed"] is False
    assert judged["localisation"]["outside_bound"] == row["outside_bound"] == int((over > 1).sum())
    assert judged["localisation"]["failing_tasks"] == json.loads(
        json.dumps(
            json.loads(msprobe_json.read_text())["chosen_call"]["localisation"]["failing_tasks"]
        )
    )

    # a folder holding a case is replaced only with --force
    code, out, err = cli(capsys, "--msprobe", bad, "--extract", CALL, "--out", case)
    assert code == 2 and out == "" and "already holds a golden case" in err
    code, out, err = cli(capsys, "--msprobe", bad, "--extract", CALL, "--out", case, "--force")
    assert code == 1 and "golden case: " in out
