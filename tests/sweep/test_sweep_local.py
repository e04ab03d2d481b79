"""``pypto sweep`` on this host: one process, spawned workers and shards give identical rows;
an interrupted sweep resumes without recomputing; timeouts and dying workers become rows;
merge, tables and argument errors. (The 1,000-case version of the first test is
``.ci/sweep_proof``.)"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pypto import __main__ as cli
from pypto._sweep.results import identity, merge, read_rows
from pypto.sweep import read_cases
from support.slowdown import limit
from support.sweep_cases import generated_cases, write_jsonl

COUNT = 120


@pytest.fixture(scope="module")
def cases_file(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("cases") / "cases.jsonl", generated_cases(COUNT))


def _rows(path):
    return {row["case_id"]: identity(row) for row in read_rows(path)}


def test_one_process_workers_and_shards_give_identical_rows(tmp_path, cases_file, capsys):
    cases = read_cases(cases_file)
    assert len(cases) > COUNT  # "all" tiles expand
    one = tmp_path / "one"
    assert cli.main(["sweep", cases_file, "--out", str(one)]) == 0
    rows = _rows(one / "results.jsonl")
    assert sorted(rows) == sorted(c["id"] for c in cases)
    statuses = {row["status"] for row in rows.values()}
    assert statuses == {"pass", "refused"}
    assert {row["dtype"] for row in rows.values()} >= {"fp16", "bf16"}
    jobs = tmp_path / "jobs"
    assert cli.main(["sweep", cases_file, "--out", str(jobs), "--jobs", "2"]) == 0
    assert _rows(jobs / "results.jsonl") == rows
    shards = tmp_path / "shards"
    for index in range(3):
        assert cli.main(["sweep", cases_file, "--out", str(shards), "--shard", f"{index}/3"]) == 0
    parts = [_rows(shards / f"results.shard-{i}-of-3.jsonl") for i in range(3)]
    assert sum(len(p) for p in parts) == len(rows)
    assert {k: v for p in parts for k, v in p.items()} == rows
    merged = merge([str(shards)])
    assert {row["case_id"]: identity(row) for row in merged} == rows
    capsys.readouterr()
    table = tmp_path / "all.csv"
    assert cli.main(["sweep", "--merge", str(shards), "--csv", str(table)]) == 0
    assert len(table.read_text().splitlines()) == len(rows) + 1
    assert "refused by rule:" in capsys.readouterr().out


def test_an_interrupted_sweep_resumes_without_recomputing(tmp_path, cases_file, capsys):
    out = tmp_path / "out"
    results = out / "results.jsonl"
    fault = {"case": "case-90", "action": "sleep", "seconds": 600}  # it hangs there
    process = subprocess.Popen(
        [sys.executable, "-m", "pypto", "sweep", cases_file, "--out", str(out)],
        env=dict(os.environ, PYPTO_SWEEP_TEST_FAULT=json.dumps(fault)),
        cwd=tmp_path,  # not the checkout's root, whose unbuilt pypto -m would import
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + limit(60)
    try:
        while len(read_rows(str(results))) < 40 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # no chance to tidy up
        process.wait()
    before = read_rows(str(results))
    assert len(before) >= 40
    with open(results, "a") as f:
        f.write('{"case_id": "torn')  # a row cut off by the kill
    capsys.readouterr()
    assert cli.main(["sweep", cases_file, "--out", str(out), "--resume"]) == 0
    total = len(read_cases(cases_file))
    printed = capsys.readouterr().out
    # only the cases without a row ran
    assert f"ran {total - len(before)} cases ({len(before)} skipped" in printed, printed
    after = read_rows(str(results))
    assert len(after) == total and len({row["case_id"] for row in after}) == total
    assert after[: len(before)] == before
    assert "torn" not in results.read_text()


def _children(pid):
    """The processes whose parent is ``pid`` (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _running(pid):
    """Whether ``pid`` still runs (a zombie nobody reaped has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds the workers in /proc")
def test_workers_exit_quietly_when_the_sweep_is_killed(tmp_path, cases_file):
    """Issue 45 F4.2: after kill -9 of the sweep, its workers exit within seconds (even one in
    the middle of a long case) and print nothing (no BrokenPipeError traceback)."""
    # a worker hangs in case-42 (one case: no "all" tiles), the other goes on past it
    fault = {"case": "case-42", "action": "sleep", "seconds": 600}
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "pypto", "sweep", cases_file, "--out", "out", "--jobs", "2"],
            env=dict(os.environ, PYPTO_SWEEP_TEST_FAULT=json.dumps(fault)),
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + limit(60)
        rows = workers = []
        while (len(rows) < 60 or len(workers) < 2) and time.monotonic() < deadline:
            time.sleep(0.2)
            rows = read_rows(str(tmp_path / "out" / "results.jsonl"))
            workers = _children(process.pid)
        assert len(rows) >= 60 and len(workers) >= 2, (len(rows), workers)
        assert "case-42" not in {row["name"] for row in rows}
        os.kill(process.pid, signal.SIGKILL)  # the sweep only: its workers are left
        process.wait()
        deadline = time.monotonic() + limit(5)
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if _running(pid)]
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # whatever is left of the group
    text = stderr.read_text()
    assert "Traceback" not in text and "Error" not in text, text


def test_a_case_over_the_timeout_is_killed_and_the_sweep_goes_on(tmp_path, monkeypatch):
    cases = generated_cases(6)
    path = write_jsonl(tmp_path / "few.jsonl", cases)
    marker = tmp_path / "died-once"
    monkeypatch.setenv(
        "PYPTO_SWEEP_TEST_FAULT", json.dumps({"case": "case-2", "action": "sleep", "seconds": 60})
    )
    out = tmp_path / "out"
    start = time.monotonic()
    assert cli.main(["sweep", path, "--out", str(out), "--timeout", "2", "--jobs", "2"]) == 1
    assert time.monotonic() - start < limit(40)
    rows = {row["name"]: row for row in read_rows(str(out / "results.jsonl"))}
    assert rows["case-2"]["status"] == "timeout" and "--timeout 2 s" in rows["case-2"]["reason"]
    assert all(row["status"] in ("pass", "refused") for n, row in rows.items() if n != "case-2")
    # a worker that dies in a case: the case runs once more in a fresh worker
    monkeypatch.setenv(
        "PYPTO_SWEEP_TEST_FAULT",
        json.dumps({"case": "case-4", "action": "exit", "marker": str(marker)}),
    )
    again = tmp_path / "again"
    assert cli.main(["sweep", path, "--out", str(again), "--timeout", "30"]) == 0
    assert marker.exists()
    assert {r["name"]: r["status"] for r in read_rows(str(again / "results.jsonl"))}["case-4"] == (
        "pass"
    )


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--shard", "3/3"], "shards are numbered 0 to N-1"),
        (["--shard", "1-3"], "expected I/N"),
        (["--jobs", "0"], "expected an int >= 1"),
        (["--timeout", "0"], "expected seconds > 0"),
        (["--scheduler", "local:0"], "N >= 1"),
        (["--scheduler", "local:2", "--timeout", "5"], "--timeout needs local worker"),
        (["--csv", "x.txt"], ".csv or .xlsx"),
        (["--merge", "."], "sweep takes one of CASES"),
    ],
)
def test_bad_arguments_exit_2(tmp_path, cases_file, capsys, args, fragment):
    try:
        code = cli.main(["sweep", cases_file, "--out", str(tmp_path / "o"), *args])
    except SystemExit as exc:  # argparse's own usage error
        code = exc.code
    assert code == 2 and fragment in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_existing_rows_need_resume_and_xlsx_needs_openpyxl(tmp_path, capsys, monkeypatch):
    path = write_jsonl(tmp_path / "few.jsonl", generated_cases(3))
    out = str(tmp_path / "out")
    assert cli.main(["sweep", path, "--out", out]) == 0
    capsys.readouterr()
    assert cli.main(["sweep", path, "--out", out]) == 2
    assert "pass --resume" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "openpyxl", None)  # not installed
    assert cli.main(["sweep", "--merge", out, "--csv", str(tmp_path / "t.xlsx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "needs openpyxl" in err


def test_result_rows_of_another_shape_are_one_error_line(tmp_path, capsys):
    """Issue 42 #9: --merge, --resume, --judge and read_rows check every row they read (its
    keys, and the types merge, summary and the table use): one error line naming the file,
    line and key, never a KeyError or TypeError."""
    path = write_jsonl(tmp_path / "few.jsonl", generated_cases(2))
    out = tmp_path / "out"
    assert cli.main(["sweep", path, "--out", str(out)]) == 0
    capsys.readouterr()
    results = out / "results.jsonl"
    good = [json.loads(line) for line in results.read_text().splitlines()]
    assert cli.main(["sweep", "--merge", str(out), "--csv", str(tmp_path / "t.csv")]) == 0
    capsys.readouterr()
    edits = [
        ({"case_id": "x"}, "not a result row (no 'name')"),
        (dict(good[0], case_id=["x"]), "'case_id' must be a non-empty string"),
        (dict(good[0], status="weird"), "'status' must be one of pass"),
        (dict(good[0], verdicts=[]), "'verdicts' must be an object of verdicts"),
        (dict(good[0], verdicts={"dual-L0": {"passed": "yes"}}), "'verdicts' must be"),
        (dict(good[0], failing_tasks=[1]), "'failing_tasks' must be a list of tasks"),
        (dict(good[0], rule={"id": 1}), "'rule' must be a rule id or null"),
        (dict(good[0], strides=2), "'strides' must be a list or null"),
        ([good[0]], "not a result row (a list)"),
    ]
    for row, text in edits:
        results.write_text(json.dumps(good[1]) + "\n" + json.dumps(row) + "\n")
        for args in (
            ["--merge", str(out), "--csv", str(tmp_path / "t.csv")],
            [path, "--out", str(out), "--resume"],
        ):
            code = cli.main(["sweep", *args])
            err = capsys.readouterr().err
            assert code == 2 and err.count("\n") == 1, (row, args, err)
            assert f"{results}:2: " in err and text in err, err
    results.write_text(json.dumps(good[0]) + "\n" + "[" * 50_000 + "]" * 50_000 + "\n")
    assert cli.main(["sweep", "--merge", str(out)]) == 2
    assert "results.jsonl:2: not a result row: JSON nested too deep" in capsys.readouterr().err
    results.unlink()
    os.mkfifo(results)
    assert cli.main(["sweep", "--merge", str(out)]) == 2
    assert "it is a FIFO, not a regular file" in capsys.readouterr().err


def test_tables_and_verdicts_are_written_whole_through_a_fresh_temporary(tmp_path, capsys):
    """A table or verdicts.jsonl replaces its file whole; a link planted at the temporary
    names a predictable writer would use is never followed."""
    path = write_jsonl(tmp_path / "few.jsonl", generated_cases(2))
    out = tmp_path / "out"
    assert cli.main(["sweep", path, "--out", str(out)]) == 0
    victim = tmp_path / "victim"
    victim.write_text("precious")
    for name in ("verdicts.jsonl.tmp", f".verdicts.jsonl.{os.getpid()}.tmp", "t.csv.tmp"):
        os.symlink(victim, out / name)
    table = out / "t.csv"
    assert cli.main(["sweep", "--merge", str(out), "--csv", str(table)]) == 0
    assert cli.main(["sweep", "--judge", str(out)]) == 0
    assert victim.read_text() == "precious" and table.read_text().startswith("case_id,")
    assert not (out / "verdicts.jsonl").is_symlink()
    leftovers = {p.name for p in out.iterdir()} - {
        "cases",
        "results.jsonl",
        "t.csv",
        "verdicts.jsonl",
        "verdicts.jsonl.tmp",
        f".verdicts.jsonl.{os.getpid()}.tmp",
        "t.csv.tmp",
    }
    assert leftovers == set(), leftovers
