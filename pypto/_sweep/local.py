"""Running a sweep on this host: shards, resume, worker processes with per-case timeouts,
results appended as they come, a progress line; or on a Dask cluster (``cluster.py``).

Worker processes are started with the ``spawn`` method, never ``fork`` (the OpenMP thread
pool does not survive a fork, README "Numbers and processes"). Each runs one case at a time;
a case that runs over ``timeout`` seconds is killed with its worker, recorded as a "timeout"
row, and a fresh worker takes the next case. A worker that dies in a case (a crash) gets the
case once more in a fresh worker, then the case is an "error" row. A worker whose parent dies
(``kill -9`` of the sweep) exits at once, silently; the parent's Ctrl-C is the parent's to
handle (the workers ignore SIGINT and stop when told, or are killed).

Every row gets the run's "started" (a UTC time) and "elapsed" (seconds since then when the row
was written), so that the time of a folder's runs adds up after a ``--resume``.
"""

import collections
import datetime
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time

from ..error import FeError
from .results import ResultsFile, read_rows, results_path
from .unit import _empty_row, run_case

__all__ = ["run_sweep", "select_shard", "shard_of", "default_threads", "Progress"]


def shard_of(case, count):
    """The shard (0-based) a case belongs to: its id (a sha256 prefix) modulo the count."""
    return int(case["id"], 16) % count


def select_shard(cases, shard):
    if shard is None:
        return list(cases)
    index, count = shard
    return [case for case in cases if shard_of(case, count) == index]


def default_threads(jobs):
    """pypto threads per worker so that jobs x threads <= the cores pypto would use."""
    from .._core.cpus import default_threads as cores

    return max(1, cores()[0] // max(1, jobs))


class Progress:
    """One line on stderr, rewritten: done/total, rate, ETA."""

    def __init__(self, total, enabled, stream=None):
        self.total, self.enabled = total, enabled
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.done = 0

    def step(self):
        self.done += 1
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        eta = f"{int(left // 60)}m{int(left % 60):02d}s"
        self.stream.write(
            f"\r[{self.done}/{self.total}] {100 * self.done / max(1, self.total):5.1f}% "
            f"{rate:.1f} cases/s ETA {eta}  "
        )
        self.stream.flush()

    def close(self):
        if self.enabled and self.done:
            self.stream.write("\n")
            self.stream.flush()


# --- worker processes --------------------------------------------------------------------------
def _exit_with_parent():
    """End this process, silently, as soon as its parent dies: a thread waits on the parent's
    sentinel (readable when the parent is gone), so even a case that runs for minutes does not
    outlive a killed sweep, nor print a BrokenPipeError when it ends."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch():
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(0)

    threading.Thread(target=watch, name="pypto-sweep-parent-watch", daemon=True).start()


def _worker(conn, out_dir, threads, standard, keep):
    """A worker's loop: (index, case) in, (index, row) out, until None or the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group: the parent's
    _exit_with_parent()
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        index, case = task
        row = run_case(case, out_dir, threads=threads, standard=standard, keep=keep)
        try:
            conn.send((index, row))
        except OSError:  # BrokenPipeError: the parent is gone
            return


class _Pool:
    """``jobs`` spawned worker processes that can be killed one by one."""

    def __init__(self, jobs, out_dir, threads, standard, keep):
        self.context = multiprocessing.get_context("spawn")
        self.args = (out_dir, threads, standard, keep)
        self.workers = [self._start() for _ in range(jobs)]

    def _start(self):
        parent, child = self.context.Pipe()
        process = self.context.Process(
            target=_worker, args=(child, *self.args), name="pypto-sweep-worker", daemon=True
        )
        process.start()
        child.close()
        return {"process": process, "conn": parent, "task": None, "started": None}

    def replace(self, worker):
        self.kill(worker)
        self.workers[self.workers.index(worker)] = self._start()

    @staticmethod
    def kill(worker):
        if worker["process"].is_alive():
            worker["process"].kill()
        worker["process"].join()
        worker["conn"].close()

    def close(self):
        for worker in self.workers:
            try:
                worker["conn"].send(None)
            except OSError:
                pass
        for worker in self.workers:
            worker["process"].join(timeout=5)
            self.kill(worker)


def _run_in_processes(todo, out_dir, jobs, threads, timeout, standard, keep, emit):
    pool = _Pool(jobs, out_dir, threads, standard, keep)
    queue = collections.deque(enumerate(todo))
    deaths = collections.Counter()
    try:
        while True:
            for worker in pool.workers:
                if worker["task"] is None and queue:
                    worker["task"] = queue.popleft()
                    worker["started"] = time.monotonic()
                    worker["conn"].send(worker["task"])
            busy = [w for w in pool.workers if w["task"] is not None]
            if not busy:
                return
            wait = None
            if timeout is not None:
                now = time.monotonic()
                wait = max(0.0, min(w["started"] + timeout - now for w in busy))
            ready = multiprocessing.connection.wait(
                [w["conn"] for w in busy] + [w["process"].sentinel for w in busy], wait
            )
            for worker in busy:
                index, case = worker["task"]
                if worker["conn"] in ready:
                    try:
                        _, row = worker["conn"].recv()
                    except (EOFError, OSError):
                        row = None  # it died while sending: as below
                    if row is not None:
                        worker["task"] = None
                        emit(row)
                        continue
                if worker["conn"] in ready or worker["process"].sentinel in ready:
                    code = worker["process"].exitcode
                    pool.replace(worker)
                    deaths[index] += 1
                    if deaths[index] < 2:
                        queue.appendleft((index, case))  # once more, in a fresh worker
                    else:
                        row = _empty_row(case)
                        row["reason"] = f"its worker process died twice (exit code {code})"
                        emit(row)
                elif timeout is not None and time.monotonic() - worker["started"] >= timeout:
                    pool.replace(worker)
                    row = _empty_row(case)
                    row.update(
                        status="timeout",
                        reason=f"ran over --timeout {timeout:g} s: its worker was killed",
                        seconds=timeout,
                    )
                    emit(row)
    finally:
        pool.close()


def run_sweep(
    cases,
    out_dir,
    *,
    jobs=1,
    threads=None,
    shard=None,
    resume=False,
    timeout=None,
    progress=False,
    scheduler=None,
    standard=None,
    keep="all",
):
    """Run the cases (canonical dicts, see ``read_cases``) of shard ``(index, count)`` (None:
    all), append each row to the results file as it finishes, and return ``(rows, ran)``:
    every row of the selected cases (those found with ``resume``, then the new ones) and how
    many cases ran now. ``scheduler``: a Dask scheduler address, "local:N", or a
    ``distributed.Client``: the cases run there (``cluster.py``). ``keep``: which golden
    folders are written (``run_case``)."""
    from .._golden.calls import json_row

    selected = select_shard(cases, shard)
    path = results_path(out_dir, shard)
    found = read_rows(path)
    if found and not resume:
        raise FeError(
            ValueError(
                f"{path} already holds {len(found)} rows: pass --resume to run only the "
                f"cases without one, or choose another --out"
            )
        )
    wanted = {case["id"] for case in selected}
    done = {row["case_id"]: row for row in found if row["case_id"] in wanted}
    todo = [case for case in selected if case["id"] not in done]
    if threads is None:
        threads = default_threads(jobs if scheduler is None else 1)
    rows = list(done.values())
    meter = Progress(len(todo), progress)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
    clock = time.monotonic()
    with ResultsFile(path) as results:

        def emit(row):
            row = json_row(dict(row, started=started, elapsed=round(time.monotonic() - clock, 6)))
            results.append(row)
            rows.append(row)
            meter.step()

        try:
            if scheduler is not None:
                from .cluster import run_on_cluster

                run_on_cluster(todo, out_dir, scheduler, threads, standard, keep, emit)
            elif jobs == 1 and timeout is None:
                for case in todo:
                    emit(run_case(case, out_dir, threads=threads, standard=standard, keep=keep))
            else:
                _run_in_processes(todo, out_dir, jobs, threads, timeout, standard, keep, emit)
        finally:
            meter.close()
    return rows, len(todo)


def judge_sweep(out_dir, standard=None):
    """Judge every kernel output written into the sweep's case folders (``--judge``): the
    rows (the sweep's row of the case, its judged fields replaced) and how many case folders
    hold no output. The rows replace DIR/verdicts.jsonl (written whole, then renamed)."""
    import json
    import os
    import socket

    from .._core.fileio import atomic_writer
    from .._golden.calls import json_row
    from ..error import PyptoError
    from .results import VERDICTS, merge
    from .unit import _output_path, judge_folder

    folders = os.path.join(out_dir, "cases")
    if not os.path.isdir(folders):
        raise FeError(ValueError(f"--judge {out_dir}: no cases/ folder (is it a sweep's --out?)"))
    known = {row["case_id"]: row for row in merge([out_dir])} if _has_rows(out_dir) else {}
    rows, missing = [], 0
    for name in sorted(os.listdir(folders)):
        folder = os.path.join(folders, name)
        if not os.path.isdir(folder):
            continue
        if _output_path(folder) is None:
            missing += 1
            continue
        start = time.perf_counter()
        row = dict(known.get(name) or _unknown_row(name))
        # a judgement is no sweep run: no started, no elapsed
        row.update(host=socket.gethostname(), pid=os.getpid(), rule=None, reason=None)
        row.update(started=None, elapsed=None)
        try:
            judge_folder(folder, standard, row)
        except PyptoError as exc:
            row.update(status="error", reason=str(exc))
        row["seconds"] = round(time.perf_counter() - start, 6)
        rows.append(json_row(row))
    path = os.path.join(out_dir, VERDICTS)
    try:
        with atomic_writer(path) as f:
            for row in rows:
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
    except OSError as exc:
        raise FeError(OSError(f"cannot write {path}: {exc}")) from None
    return rows, missing


def _unknown_row(case_id):
    """The row of a case folder the sweep's results do not list (every key, values None)."""
    from .._golden.calls import new_row
    from .unit import LEADING, TRAILING

    leading = dict.fromkeys(LEADING)
    leading.update(case_id=case_id, status="error")
    return new_row(leading, dict.fromkeys(TRAILING))


def _has_rows(out_dir):
    import glob
    import os

    return bool(glob.glob(os.path.join(out_dir, "results*.jsonl")))
