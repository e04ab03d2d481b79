"""The default thread count: physical cores in the affinity mask, capped by the cgroup CPU quota
(issue 27, item 6). Fake /sys and /proc trees stand in for machines this one is not."""

import pytest

from pypto._core import cpus


def _tree(tmp_path, siblings, cgroup, files=()):
    """A /sys and /proc with ``siblings`` ({cpu: "0,2"}), /proc/self/cgroup text ``cgroup``
    and more files ({path under the root: text})."""
    sys_root, proc_root = tmp_path / "sys", tmp_path / "proc"
    for cpu, text in siblings.items():
        topology = sys_root / f"devices/system/cpu/cpu{cpu}/topology"
        topology.mkdir(parents=True)
        (topology / "thread_siblings_list").write_text(text + "\n")
    (proc_root / "self").mkdir(parents=True)
    (proc_root / "self/cgroup").write_text(cgroup)
    for path, text in dict(files).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return str(sys_root), str(proc_root)


SMT_8 = {c: f"{c % 4},{c % 4 + 4}" for c in range(8)}  # 4 cores, 2 threads each


@pytest.mark.parametrize(
    "siblings, cgroup, files, affinity, want, why",
    [
        # SMT: 8 CPUs, 4 cores
        (SMT_8, "0::/\n", {"sys/fs/cgroup/cpu.max": "max 100000\n"}, range(8), 4, "physical core"),
        # no SMT, no quota
        ({c: str(c) for c in range(4)}, "0::/\n", {}, range(4), 4, "affinity mask"),
        # affinity to 2 CPUs of one core: 1 core
        (SMT_8, "0::/\n", {}, [1, 5], 1, "physical core"),
        # a --cpus=2 container (v2, the container's own cgroup seen as /)
        (SMT_8, "0::/\n", {"sys/fs/cgroup/cpu.max": "200000 100000\n"}, range(8), 2, "cgroup"),
        # v2, a fractional quota in a nested cgroup below a looser parent
        (
            SMT_8,
            "0::/a/b\n",
            {
                "sys/fs/cgroup/a/cpu.max": "300000 100000\n",
                "sys/fs/cgroup/a/b/cpu.max": "150000 100000\n",
            },
            range(8),
            2,
            "1.5 CPUs",
        ),
        # v1, cpu,cpuacct
        (
            SMT_8,
            "4:memory:/x\n2:cpu,cpuacct:/docker/1\n",
            {
                "sys/fs/cgroup/cpu,cpuacct/docker/1/cpu.cfs_quota_us": "100000\n",
                "sys/fs/cgroup/cpu,cpuacct/docker/1/cpu.cfs_period_us": "100000\n",
            },
            range(8),
            1,
            "cgroup",
        ),
        # v1, no quota (-1)
        (
            SMT_8,
            "2:cpu,cpuacct:/\n",
            {
                "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
                "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            },
            range(8),
            4,
            "physical core",
        ),
        # no topology to read: the affinity mask
        ({}, "", {}, range(3), 3, "affinity mask"),
    ],
)
def test_default_threads(tmp_path, monkeypatch, siblings, cgroup, files, affinity, want, why):
    sys_root, proc_root = _tree(tmp_path, siblings, cgroup, files)
    monkeypatch.setattr(cpus, "SYS_ROOT", sys_root)
    monkeypatch.setattr(cpus, "PROC_ROOT", proc_root)
    monkeypatch.setattr(cpus.os, "sched_getaffinity", lambda pid: set(affinity))
    cpus.default_threads.cache_clear()
    try:
        count, reason = cpus.default_threads()
    finally:
        cpus.default_threads.cache_clear()
    assert count == want and why in reason, (count, reason)


def test_threads_set_or_from_the_environment_win(monkeypatch):
    import pypto

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert pypto.get_num_threads() == 3
    pypto.set_num_threads(5)
    assert pypto.get_num_threads() == 5
