"""msprobe's accuracy columns in pypto's tables (issue 45): the ``--msprobe`` table (CSV, xlsx,
JSON) and the cross-check's carry Cosine, EucDist, MaxAbsErr, MaxRelativeErr, One Thousandth
Err Ratio and Five Thousandths Err Ratio against pypto's float64 golden, and the ``--msprobe``
CSV joins msprobe's own compare CSV on its key, ``NPU Name``.

msprobe compares a dump with a second dump; pypto compares a dump with its golden. So the join
test runs ``msprobe compare`` on the new-user note's pair (a corrupted copy of a dump against
the dump), joins the two CSVs on NPU Name, and checks that pypto's definitions, applied to the
very pair msprobe compared, give msprobe's numbers. pypto's own numbers are checked against the
definitions written out here on the independent float64 oracle (tests/support/reference.py).
"""

import csv
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from support.msprobe_dumps import cli, copy_step, require_torch_and_msprobe, tensor_file
from support.reference import dgrad_reference

torch = require_torch_and_msprobe()

from pypto._golden.msprobe_metrics import COLUMNS, msprobe_metrics  # noqa: E402

COS, EUC, ABS, REL, ONE, FIVE = COLUMNS
APIS = [f"Functional.conv2d.{n}.backward" for n in range(3)]
CALL = APIS[1]


@pytest.fixture(scope="module")
def pair(dumps, tmp_path_factory):
    """(good, bad): two copies of the wide dump's step, bad with the note's corruption."""
    root = tmp_path_factory.mktemp("pair")
    good = copy_step(dumps["wide"], 0, root, "good")
    bad = copy_step(dumps["wide"], 0, root, "bad")
    path = tensor_file(bad, f"{CALL}.output.0.pt")
    dx = torch.load(path, weights_only=True)
    dx[1, 16:32, 8:12] = dx[1, 16:32, 7:11].clone()
    torch.save(dx, path)
    return good, bad


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def as_msprobe_reads(path):
    """A dumped tensor as msprobe's compare reads it: bf16 as float32."""
    return torch.load(path, weights_only=True).float().numpy()


def number(text):
    return text if text in ("Nan", "N/A", "unsupported") else float(text)


def test_pyptos_csv_joins_msprobes_compare_csv(pair, tmp_path, capsys):
    good, bad = pair
    out = tmp_path / "msprobe"
    run = subprocess.run(
        [sys.executable, "-m", "msprobe.msprobe", "compare", "-tp", bad, "-gp", good, "-o", out],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (theirs_csv,) = out.glob("*.csv")
    theirs = {r["NPU Name"]: r for r in read_csv(theirs_csv)}
    assert set(COLUMNS) <= set(next(iter(theirs.values())))  # the same column names

    ours_csv = tmp_path / "pypto.csv"
    code, _, err = cli(capsys, "--msprobe", bad, "--csv", ours_csv)
    assert code == 1 and err == ""
    ours = read_csv(ours_csv)
    joined = [(row, theirs[row["NPU Name"]]) for row in ours if row["NPU Name"] in theirs]
    assert [row["api"] for row, _ in joined] == APIS  # every call's grad_input row joins
    data = tensor_file(bad, "x").parent
    for row, their in joined:
        name = their["NPU Name"]
        assert name == f"{row['api']}.output.0" and their["Bench Name"] == name
        # pypto's definitions on the pair msprobe compared give msprobe's numbers
        npu = as_msprobe_reads(data / f"{name}.pt")
        bench = as_msprobe_reads(tensor_file(good, f"{name}.pt"))
        mine = msprobe_metrics(npu, bench)
        for column in COLUMNS:
            assert mine[column] == pytest.approx(number(their[column]), rel=1e-12), column
    # the corrupted call: msprobe sees it (Cosine 0.95) and still writes "pass"
    row, their = joined[1]
    assert float(their[COS]) < 0.96 and their["Result"] == "pass"
    assert row["status"] == "fail" and float(row[COS]) < 0.96


def plain(npu, golden):
    """msprobe's columns written out for finite data and a golden without zeros."""
    a, g = npu.ravel().astype(np.float64), golden.ravel()
    cosine = round(math.fsum(a * g) / math.sqrt(math.fsum(a * a) * math.fsum(g * g)), 12)
    relative = np.abs(a - g) / np.abs(g)
    return {
        COS: round(cosine, 6) if cosine > 0.9999 else cosine,
        EUC: math.sqrt(math.fsum((a - g) ** 2)),
        ABS: round(float(np.max(np.abs(a - g))), 12),
        REL: round(float(relative.max()), 12),
        ONE: float(np.mean(relative < 0.001)),
        FIVE: float(np.mean(relative < 0.005)),
    }


def check_against_the_oracle(got, npu, golden):
    want = plain(npu, golden)
    assert got[COS] == pytest.approx(want[COS], abs=2e-12)
    assert got[EUC] == pytest.approx(want[EUC], rel=1e-9)
    assert got[ABS] == pytest.approx(want[ABS], rel=1e-9)
    # a golden near 0 moves the relative error: the oracle's sums differ in the last bits
    assert got[REL] == pytest.approx(want[REL], rel=1e-6)
    for column in (ONE, FIVE):  # an element on the threshold may fall either side
        assert got[column] == pytest.approx(want[column], abs=3 / npu.size)


def test_the_columns_are_msprobes_definitions_against_the_golden(pair, tmp_path, capsys):
    _, bad = pair
    paths = {ext: tmp_path / f"t.{ext}" for ext in ("csv", "xlsx", "json")}
    code, _, err = cli(
        capsys, "--msprobe", bad, "--api", CALL, "--csv", paths["csv"], "--json", paths["json"]
    )
    assert code == 1 and err == ""
    (row,) = read_csv(paths["csv"])
    (entry,) = json.loads(paths["json"].read_text())["calls"]
    load = lambda name: torch.load(tensor_file(bad, name), weights_only=True)  # noqa: E731
    dy = load(f"{CALL}.input.0.pt").double().numpy()
    w = load("Functional.conv2d.1.forward.input.1.pt").double().numpy()
    npu = load(f"{CALL}.output.0.pt").float().numpy()
    golden = dgrad_reference(dy, w, (24, 24), (2, 2), (1, 1), (1, 1))
    assert np.all(golden != 0)  # plain() divides by it
    check_against_the_oracle({c: float(row[c]) for c in COLUMNS}, npu, golden)
    assert {c: entry[c] for c in COLUMNS} == {c: float(row[c]) for c in COLUMNS}

    # the xlsx: the CSV's header and cells, numbers as numbers
    openpyxl = pytest.importorskip("openpyxl")
    code, _, _ = cli(capsys, "--msprobe", bad, "--api", CALL, "--csv", paths["xlsx"])
    assert code == 1
    sheet = openpyxl.load_workbook(paths["xlsx"]).active
    header, cells = [c.value for c in sheet[1]], [c.value for c in sheet[2]]
    assert header == list(row) and sheet.max_row == 2
    xlsx = dict(zip(header, cells))
    for column in COLUMNS:  # openpyxl writes a float with 16 significant digits
        assert xlsx[column] == pytest.approx(float(row[column]), rel=1e-15)
    assert xlsx["NPU Name"] == f"{CALL}.output.0" and xlsx["elements"] == 36864


def test_the_crosscheck_table_carries_the_columns(tmp_path):
    import pypto.torch as pt

    rng = np.random.default_rng(0)
    x = torch.tensor(rng.standard_normal((2, 16, 10, 10)), dtype=torch.bfloat16, requires_grad=True)
    w = torch.tensor(rng.standard_normal((32, 16, 3, 3)) * 0.1, dtype=torch.bfloat16)
    g = torch.tensor(rng.standard_normal((2, 32, 10, 10)), dtype=torch.bfloat16)
    with pt.crosscheck(report=tmp_path / "x.csv") as xc:
        (torch.nn.functional.conv2d(x, w, padding=1).float() * g.float()).sum().backward()
    (row,) = xc.rows
    assert row["status"] == "pass"
    dy = g.double().numpy()  # the gradient of the sum, as bf16: exactly g
    golden = dgrad_reference(dy, w.double().numpy(), (10, 10), (1, 1), (1, 1), (1, 1))
    check_against_the_oracle(row, x.grad.float().numpy(), golden)
    (line,) = read_csv(tmp_path / "x.csv")
    assert {"call", "module", "status", *COLUMNS} <= set(line)
    assert {c: float(line[c]) for c in COLUMNS} == {c: row[c] for c in COLUMNS}
    xc.write(str(tmp_path / "x.json"))
    (entry,) = json.loads((tmp_path / "x.json").read_text())["rows"]
    assert {c: entry[c] for c in COLUMNS} == {c: row[c] for c in COLUMNS}
