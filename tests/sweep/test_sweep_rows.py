"""What a sweep's rows and folders hold: the tiles in every table, one problem's tile sets on
the same inputs, ``--keep all|failed|rows``, and the summary's seconds over a resumed folder."""

import csv
import json
import re

import pytest

from pypto import __main__ as cli
from pypto._sweep.results import read_rows
from pypto.sweep import read_cases, run_case

# the new user's reproducer (issue 45 D4.4, F4.5): three tile sets of one problem
ALL_TILES = {
    "grad_output": [1, 16, 8, 8],
    "weight": [16, 16, 3, 3],
    "paddings": [1, 1, 1, 1],
    "tiles": "all",
    "tiles_limit": 3,
}


def _write(path, *lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


TILES = ("l1", "l0", "vec")


def _tiles_text(tiles):
    return ["x".join(str(v) for v in tiles[key]) for key in TILES]


def test_every_table_has_the_tiles(tmp_path, capsys):
    cases = _write(tmp_path / "t.jsonl", ALL_TILES)
    out = tmp_path / "t"
    assert cli.main(["sweep", cases, "--out", str(out), "--csv", str(tmp_path / "t.csv")]) == 0
    rows = read_rows(str(out / "results.jsonl"))
    assert len(rows) == 3 and all(row["tiles"] for row in rows)  # the JSON rows
    with open(tmp_path / "t.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [[line[key] for key in TILES] for line in table] == [
        _tiles_text(row["tiles"]) for row in rows
    ]
    assert len({line["l1"] + line["l0"] for line in table}) == 3  # the rows differ visibly
    assert {line["input_size"] for line in table} == {"1x16x8x8"}  # as grad_output is written
    assert {line["format"] for line in table} == {"NCHW"}
    header = list(table[0])
    assert header.index("l1") == header.index("format") + 1  # beside the case, not at the end
    pytest.importorskip("openpyxl")
    import openpyxl

    capsys.readouterr()
    assert cli.main(["sweep", "--merge", str(out), "--csv", str(tmp_path / "t.xlsx")]) == 0
    sheet = openpyxl.load_workbook(tmp_path / "t.xlsx").active
    cells = [[cell.value for cell in line] for line in sheet.iter_rows()]
    assert cells[0] == header
    by_id = {line["case_id"]: line for line in table}  # merge orders rows by case id
    for line in cells[1:]:
        row = by_id[line[header.index("case_id")]]
        assert [line[header.index(k)] for k in TILES] == [row[k] for k in TILES]


def test_the_tile_sets_of_one_problem_share_their_inputs(tmp_path):
    """Issue 45 F4.5: the data seed comes from the problem without its tiles; the ids (and
    folders) stay one per tile set. A seed the case gives is used as given."""
    cases = read_cases(
        _write(
            tmp_path / "t.jsonl",
            ALL_TILES,
            dict(ALL_TILES, seed=7),
            dict(ALL_TILES, grad_output=[2, 16, 8, 8]),
            # explicit tiles: the same problem, so the same data as its "all" tile sets
            {k: v for k, v in ALL_TILES.items() if k not in ("tiles", "tiles_limit")}
            | {"l1": [16, 144, 16], "l0": [16, 16, 16]},
        )
    )
    assert len(cases) == 10 and len({case["id"] for case in cases}) == 10
    rows = [run_case(case, str(tmp_path / "out")) for case in cases]
    assert all(row["status"] == "pass" for row in rows), [r["reason"] for r in rows]
    seeds = [row["seed"] for row in rows]
    assert len(set(seeds[:3])) == 1 and seeds[3:6] == [7, 7, 7] and seeds[9] == seeds[0]
    assert len(set(seeds[6:9])) == 1 and seeds[6] not in (seeds[0], 7)
    assert len({tuple(row["tiles"]["l1"] + row["tiles"]["l0"]) for row in rows[:3]}) == 3

    def inputs(case):
        folder = tmp_path / "out" / "cases" / case["id"] / "input"
        return [(folder / name).read_bytes() for name in ("grad_output.bin", "weight.bin")]

    first = inputs(cases[0])
    for case in (cases[1], cases[2], cases[9]):
        assert inputs(case) == first  # bitwise
    assert inputs(cases[3]) != first  # another seed, other data


def _broken_pypto(monkeypatch):
    """pypto's own result far off the golden: every row fails (as a pypto bug would)."""
    from pypto._golden import case as golden_case

    real = golden_case.pypto_dgrad

    def broken(made, dy, w):
        result = real(made, dy, w)
        result.reshape(-1)[:4] += 8
        return result

    monkeypatch.setattr(golden_case, "pypto_dgrad", broken)


@pytest.mark.parametrize("keep", ["all", "failed", "rows"])
def test_keep_decides_which_golden_folders_are_written(tmp_path, monkeypatch, capsys, keep):
    lines = [ALL_TILES, dict(ALL_TILES, paddings=[1, 0, 1, 1])]  # 3 tile sets and a refusal
    cases = _write(tmp_path / "t.jsonl", *lines)
    good = tmp_path / "good"
    args = ["--keep", keep] if keep != "all" else []
    assert cli.main(["sweep", cases, "--out", str(good), *args]) == 0
    rows = read_rows(str(good / "results.jsonl"))
    assert sorted(row["status"] for row in rows) == ["pass", "pass", "pass", "refused"]
    folders = (
        sorted(p.name for p in (good / "cases").iterdir()) if (good / "cases").exists() else []
    )
    passed = sorted(row["case_id"] for row in rows if row["status"] == "pass")
    assert folders == (passed if keep == "all" else [])
    _broken_pypto(monkeypatch)
    bad = tmp_path / "bad"
    assert cli.main(["sweep", cases, "--out", str(bad), *args]) == 1
    rows = read_rows(str(bad / "results.jsonl"))
    failed = sorted(row["case_id"] for row in rows if row["status"] == "fail")
    assert len(failed) == 3
    folders = sorted(p.name for p in (bad / "cases").iterdir()) if (bad / "cases").exists() else []
    assert folders == (failed if keep in ("all", "failed") else [])
    capsys.readouterr()
    assert cli.main(["sweep", "--merge", str(bad), "--keep", "rows"]) == 2
    assert "--keep applies to a sweep of CASES" in capsys.readouterr().err


def _summary_seconds(printed):
    """The seconds of the summary `pypto sweep` prints."""
    lines = printed.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["cases", "passed"])
    return float(lines[header + 1].split()[-1])


def test_the_summary_counts_the_time_of_every_run_of_the_folder(tmp_path, monkeypatch, capsys):
    """Issue 45 F4.3: after --resume the summary's seconds cover the first run too."""
    first = {"grad_output": [1, 16, 5, 8], "weight": [16, 16, 3, 3], "name": "slow"}
    cases = tmp_path / "t.jsonl"
    _write(cases, first)
    out = tmp_path / "out"
    monkeypatch.setenv(
        "PYPTO_SWEEP_TEST_FAULT", json.dumps({"case": "slow", "action": "sleep", "seconds": 1.5})
    )
    assert cli.main(["sweep", str(cases), "--out", str(out)]) == 0
    one = _summary_seconds(capsys.readouterr().out)
    assert one >= 1.5
    monkeypatch.delenv("PYPTO_SWEEP_TEST_FAULT")
    _write(cases, first, dict(first, name="quick", seed=3))
    assert cli.main(["sweep", str(cases), "--out", str(out), "--resume"]) == 0
    printed = capsys.readouterr().out
    both = _summary_seconds(printed)
    assert "ran 1 cases (1 skipped" in printed
    rows = read_rows(str(out / "results.jsonl"))
    # each row: its run's start and how long that run had gone on when it was written
    assert len({row["started"] for row in rows}) == 2
    assert rows[0]["elapsed"] >= 1.5 and rows[1]["elapsed"] < 1.0  # the resumed run is quick
    # the summary (one decimal) covers both runs, not only the resumed one
    assert both >= rows[0]["elapsed"] + rows[1]["elapsed"] - 0.05 and both >= one - 0.05
    # a fresh run says nothing of skipped cases
    assert cli.main(["sweep", str(cases), "--out", str(tmp_path / "fresh")]) == 0
    assert re.search(r"^ran 2 cases$", capsys.readouterr().out, re.M)
