"""How many threads a call uses by default: the physical cores this process may run on.

Three limits, the tightest wins: the affinity mask (``taskset``, a cpuset), one thread per
physical core (SMT siblings share one core's FMA units, so a second thread on a core adds no
FLOPs to a compute-bound kernel), and the CPU quota of the process's cgroup (a ``--cpus=2``
container on a 64-core host: two threads' worth of time, whatever the core count). Read once.
"""

import functools
import math
import os

__all__ = ["default_threads"]

# Roots of the two file systems read; tests point them at fake trees.
SYS_ROOT = "/sys"
PROC_ROOT = "/proc"


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _cpu_list(text):
    """CPU numbers of a list like "0-3,8,10-11"."""
    cpus = set()
    for part in (text or "").split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _affinity():
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


def _physical_cores(cpus):
    """How many distinct cores the CPUs belong to (SMT siblings counted once); None when the
    topology cannot be read."""
    cores = set()
    for cpu in cpus:
        siblings = _cpu_list(
            _read(f"{SYS_ROOT}/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        )
        if not siblings:
            return None
        cores.add(min(siblings))
    return len(cores)


def _cgroup_quota():
    """(CPUs' worth of time, where it was read) of the tightest cgroup CPU quota on the path of
    this process's cgroup (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us), or None."""
    best = None
    for line in (_read(f"{PROC_ROOT}/self/cgroup") or "").splitlines():
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":  # v2
            mount, read = f"{SYS_ROOT}/fs/cgroup", _quota_v2
        elif "cpu" in controllers.split(","):  # v1, mounted as cpu or cpu,cpuacct
            mount = next(
                (
                    f"{SYS_ROOT}/fs/cgroup/{name}"
                    for name in (controllers, "cpu,cpuacct", "cpu")
                    if os.path.isdir(f"{SYS_ROOT}/fs/cgroup/{name}")
                ),
                None,
            )
            read = _quota_v1
            if mount is None:
                continue
        else:
            continue
        # the process's own cgroup and every parent up to the mount (a container sees its own
        # as "/")
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):
            folder = "/".join([mount] + parts[:depth])
            quota = read(folder)
            if quota is not None and (best is None or quota < best[0]):
                best = (quota, folder)
    return best


def _quota_v2(folder):
    fields = (_read(f"{folder}/cpu.max") or "").split()
    if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit() and int(fields[1]) > 0:
        return int(fields[0]) / int(fields[1])
    return None  # "max": no quota


def _quota_v1(folder):
    quota, period = _read(f"{folder}/cpu.cfs_quota_us"), _read(f"{folder}/cpu.cfs_period_us")
    try:
        quota, period = int(quota), int(period)
    except (TypeError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None  # -1: no quota


@functools.lru_cache(maxsize=1)
def default_threads():
    """(threads, why): the default thread count and the limit that set it."""
    cpus = _affinity()
    count, why = len(cpus), f"{len(cpus)} CPU(s) in the affinity mask"
    cores = _physical_cores(cpus)
    if cores is not None and cores < count:
        count, why = (
            cores,
            f"{cores} physical core(s) among the {len(cpus)} CPUs in the affinity mask",
        )
    quota = _cgroup_quota()
    if quota is not None and math.ceil(quota[0]) < count:
        count = max(1, math.ceil(quota[0]))
        why = f"the cgroup CPU quota ({quota[0]:g} CPUs, {quota[1]})"
    return max(1, count), why
