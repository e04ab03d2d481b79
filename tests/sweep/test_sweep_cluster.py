"""``pypto sweep --scheduler`` on a real Dask LocalCluster (worker processes on loopback, no
dashboard): the same rows as a local run, and the cases of a worker killed mid-run retried.
Skips where dask/distributed is not installed (``pip install "pypto[cluster]"``)."""

import json
import os

import pytest

from pypto import __main__ as cli
from pypto._sweep.results import identity, read_rows
from pypto.sweep import read_cases
from support.sweep_cases import generated_cases, nhwc_msopst_case, write_jsonl

distributed = pytest.importorskip("distributed", reason="dask/distributed not installed")

# the scheduler's HTTP server (no dashboard) asks for port 8787 and takes another when a
# second cluster holds it; it binds to the cluster's loopback host either way
pytestmark = pytest.mark.filterwarnings("ignore:Port 8787 is already in use")
KILLER = "kill-its-worker-once"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two worker processes. A case named KILLER exits its worker process the first time it
    runs (the marker file records that it did); the nanny starts a new worker."""
    marker = tmp_path_factory.mktemp("fault") / "killed"
    saved = os.environ.get("PYPTO_SWEEP_TEST_FAULT")
    os.environ["PYPTO_SWEEP_TEST_FAULT"] = json.dumps(
        {"case": KILLER, "action": "exit", "marker": str(marker)}
    )
    try:  # the workers are spawned now, with the variable
        with distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as local:
            yield local, marker
    finally:
        if saved is None:
            os.environ.pop("PYPTO_SWEEP_TEST_FAULT", None)
        else:
            os.environ["PYPTO_SWEEP_TEST_FAULT"] = saved


def test_a_dask_run_gives_the_rows_of_a_local_run(tmp_path, cluster):
    local, _ = cluster
    path = write_jsonl(tmp_path / "cases.jsonl", generated_cases(100, seed=1))
    here, there = tmp_path / "here", tmp_path / "there"
    assert cli.main(["sweep", path, "--out", str(here), "--jobs", "2"]) == 0
    assert (
        cli.main(["sweep", path, "--out", str(there), "--scheduler", local.scheduler_address]) == 0
    )
    rows = {r["case_id"]: identity(r) for r in read_rows(str(here / "results.jsonl"))}
    assert {r["case_id"]: identity(r) for r in read_rows(str(there / "results.jsonl"))} == rows
    assert {row["status"] for row in rows.values()} == {"pass", "refused"}


def test_the_cases_of_a_killed_worker_are_retried(tmp_path, cluster):
    local, marker = cluster
    cases = generated_cases(30, seed=2)
    cases[7]["name"] = KILLER  # its worker dies mid-run, with other cases queued on it
    path = write_jsonl(tmp_path / "cases.jsonl", cases)
    out = tmp_path / "out"
    assert cli.main(["sweep", path, "--out", str(out), "--scheduler", local.scheduler_address]) == 0
    assert marker.exists()  # the worker did die
    rows = read_rows(str(out / "results.jsonl"))
    names = sorted(row["name"] for row in rows)
    assert names == sorted(case["name"] for case in read_cases(path))  # one row each
    assert {row["status"] for row in rows if row["name"] == KILLER} == {"pass"}


def test_local_n_starts_its_own_cluster(tmp_path):
    path = write_jsonl(tmp_path / "cases.jsonl", generated_cases(8, seed=3))
    out = tmp_path / "out"
    assert cli.main(["sweep", path, "--out", str(out), "--scheduler", "local:2"]) == 0
    assert len(read_rows(str(out / "results.jsonl"))) >= 8


def test_a_dask_run_keeps_what_it_is_told_with_every_kind_of_case(tmp_path, cluster):
    """--keep, an unreadable case and an NHWC msOpST case on the cluster: the rows of a local
    run, and no case folder with --keep rows."""
    local, _ = cluster
    path = write_jsonl(tmp_path / "cases.jsonl", generated_cases(12, seed=4))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"grad_output": [1, 16, 5, 8], "weight": [16, 16, 3], "name": "bad"}\n')
    nhwc = tmp_path / "nhwc.json"
    nhwc.write_text(
        json.dumps([nhwc_msopst_case(n=1, hw=(5, 6), cout=16, stride=1, dtype="float16")])
    )
    files = [path, str(bad), str(nhwc)]
    here, there = tmp_path / "here", tmp_path / "there"
    assert cli.main(["sweep", *files, "--out", str(here), "--jobs", "2"]) == 0
    args = ["--scheduler", local.scheduler_address, "--keep", "rows"]
    assert cli.main(["sweep", *files, "--out", str(there), *args]) == 0
    rows = {r["case_id"]: identity(r) for r in read_rows(str(here / "results.jsonl"))}
    assert {r["case_id"]: identity(r) for r in read_rows(str(there / "results.jsonl"))} == rows
    by_name = {row["name"]: row for row in rows.values()}
    assert by_name["bad"]["status"] == "refused" and by_name["bad"]["rule"] == "unreadable"
    assert by_name["dx_nhwc_case_000_NHWC_float16"]["format"] == "NHWC/HWCN"
    assert by_name["dx_nhwc_case_000_NHWC_float16"]["status"] == "pass"
    assert (here / "cases").is_dir() and not (there / "cases").exists()
