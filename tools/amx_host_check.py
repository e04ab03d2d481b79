"""What only a CPU with AMX can measure of bf16's sum_order "tile" (issue 43), in one run:

    python tools/amx_host_check.py --out amx-check            # on the AMX host, 15-20 min
    python tools/amx_host_check.py --out /tmp/x --dry-run     # any x86-64 host, ~1 min

Run it from a source checkout (the tools and tests it runs) with pypto installed from it
(``pip install -e ".[test]"``) and torch, nothing else running. Each step runs in a child
process from OUT (a tile unit that faults ends that step, not the run) and logs to
OUT/<step>.txt; OUT/summary.md has the verdicts and the numbers to quote. Exit status 0 only
if every step that ran passed (a dry run's speed verdicts, marked so, do not count).

1. info: the built-in bf16 examples (the first bf16 call asks the OS's permission and runs the
   self-check in a child), then ``python -m pypto info``: the tile unit passed its self-check
2. tests: tests/cpu/test_sum_order.py (the unit's own tests and the self-check's problem set)
3. probe: tools/amx_order_probe.c on the unit: the SDM's model in every row, 16 of 16 edge cases
4. determinism: tools/amx_determinism.py 60: unit calls under preemption, 0 differ
5. digests: tools/cross_cpu.py at ``baseline`` and at ``avx512_amx``: every case bitwise equal
6. networks: the bench's four networks, tile (the unit) and sequential beside torch, 2 threads:
   the target is >= 1.1x torch's faster path on each (aim 1.5x)
7. cases: the bench's cases b..j, tile, 2 threads, 9 rounds: geometric mean >= 1.1x torch

``--dry-run`` checks the run itself where there is no unit: the probe on pypto's software tile
unit (-DPYPTO_AMX_EMULATED), digests at ``avx512`` (or ``avx2``) against ``baseline``, one
network and two cases at one round; its speed verdicts are not the targets' measurement.
"""

import argparse
import importlib.util
import json
import math
import os
import pathlib
import platform
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
NETWORK_TARGET = 1.1  # torch's time / pypto's, each network (issue 43)
CASES_TARGET = 1.1  # the same, geometric mean of b..j


def _run(out, step, argv, env=None, timeout=1800):
    """Run ``argv`` from the checkout, its output (both streams) into OUT/<step>.txt."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            argv, cwd=out, env={**os.environ, **(env or {})}, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
        text, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as stopped:
        text, code = f"{stopped.stdout or ''}{stopped.stderr or ''}\ntimed out", -1
    (out / f"{step}.txt").write_text(f"$ {' '.join(map(str, argv))}\n{text}")
    return code, text, time.monotonic() - started


def _cpu():
    """The CPU's name, family, model and microcode, as /proc/cpuinfo gives them."""
    fields = {}
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor()
    return "{} (family {}, model {}, microcode {}), {} CPU(s)".format(
        fields.get("model name", "?"), fields.get("cpu family", "?"), fields.get("model", "?"),
        fields.get("microcode", "?"), os.cpu_count(),
    )  # fmt: skip


def probe_verdict(text):
    """Whether the probe's output shows the SDM model in every row of both tables, on the bulk
    results and on 16 of 16 edge cases (tests/cpu/test_sum_order.py reads it the same way)."""
    rows = [line.split() for line in text.splitlines() if line.split()[:1] in
            (["1"], ["2"], ["4"], ["16"])]  # fmt: skip
    ok = len(rows) == 8 and all(row[-1] == "1.0000" for row in rows)
    ok = ok and "sdm matches 1.000000" in text and "edge cases: 16 of 16 the same" in text
    rate = [line.strip() for line in text.splitlines() if line.startswith("full tiles")]
    return ok, (rate[0] if rate else "no timing")


def network_ratios(report):
    """Per network of a bench --json report: (torch's faster path / pypto, pypto / its
    sequential order or None, the sum order pypto ran), whole passes (layers x count)."""
    ratios = {}
    for net in dict.fromkeys(row["network"] for row in report["rows"]):
        rows = [row for row in report["rows"] if row["network"] == net]
        pypto = sum(row["pypto_ms"] * row["count"] for row in rows)
        torch = sum(row["torch_best_ms"] * row["count"] for row in rows)
        seq = [row.get("pypto_sequential_ms") for row in rows]
        seq = sum(s * row["count"] for s, row in zip(seq, rows)) if None not in seq else None
        ratios[net] = (torch / pypto, pypto / seq if seq else None, rows[0]["sum_order"])
    return ratios


def cases_geomean(report):
    """The geometric mean of torch's best time / pypto's over a bench --json report's cases,
    and each case's ratio."""
    ratios = {row["case"]: row["ratio"] for row in report["rows"] if row["peer"] == "torch best"}
    if not ratios:
        return None, ratios
    return math.exp(sum(map(math.log, ratios.values())) / len(ratios)), ratios


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="a folder for the logs and summary.md")
    parser.add_argument("--dry-run", action="store_true", help="no AMX here: check the run")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    out = pathlib.Path(args.out).resolve()  # the children run from it
    out.mkdir(parents=True, exist_ok=True)
    py, dry, threads = sys.executable, args.dry_run, str(args.threads)
    results = []  # (step, verdict, detail)

    def record(step, ok, detail, target=False):
        verdict = "skipped" if ok is None else "pass" if ok else "FAIL"
        if dry and target:  # one network, two cases, one or three rounds: not the target's
            verdict = f"{verdict} (dry run)"
        results.append((step, verdict, detail))
        print(f"[amx-check] {step}: {verdict}: {detail}", flush=True)

    from pypto._kernels.dispatch import BUILT_LEVELS, CPU_LEVELS  # the installed pypto's

    runnable = [level for level in CPU_LEVELS if level in BUILT_LEVELS]
    if importlib.util.find_spec("torch") is None:
        print("amx_host_check: the speed targets are against torch: pip install torch",
              file=sys.stderr)  # fmt: skip
        return 2
    if "avx512_amx" not in runnable and not dry:
        print(f"amx_host_check: this CPU or build cannot run avx512_amx (runnable: {runnable});"
              " --dry-run checks the run without it", file=sys.stderr)  # fmt: skip
        return 2

    code, text, _ = _run(out, "1-examples", [py, "-m", "pypto", "--dtype", "bf16"])
    if code == 0:
        code, text, _ = _run(out, "1-info", [py, "-m", "pypto", "info"])
    unit = [line for line in text.splitlines() if line.startswith("bf16 sum order")]
    served = dry or "self-check cached: passed" in text or "AMX tiles: " in text
    record("info", code == 0 and served, unit[0] if unit else text.strip()[-200:])

    code, text, took = _run(out, "2-tests", [py, "-m", "pytest", "-q", "-rs",
                                             ROOT / "tests/cpu/test_sum_order.py"])  # fmt: skip
    tail = [line for line in text.splitlines() if " passed" in line or " failed" in line]
    record("tests", code == 0, f"{tail[-1] if tail else 'no summary'} ({took:.0f} s)")

    exe = out / "amx_order_probe"
    flags = ["-DPYPTO_AMX_EMULATED"] if dry else ["-mamx-tile", "-mamx-bf16"]
    cc = os.environ.get("CC", "gcc").split()
    code, text, _ = _run(out, "3-probe-build", cc + ["-O2", "-ffp-contract=off", *flags,
                         ROOT / "tools/amx_order_probe.c", "-o", str(exe), "-lm"])  # fmt: skip
    if code != 0:
        record("probe", False, f"{' '.join(cc)} failed (3-probe-build.txt)")
    else:
        code, text, _ = _run(out, "3-probe", [str(exe)], timeout=600)
        ok, rate = probe_verdict(text)
        record("probe", code == 0 and ok, "the software unit" if dry else rate)

    if dry:
        record("determinism", None, "needs the tile unit")
    else:
        code, text, _ = _run(out, "4-determinism", [py, ROOT / "tools/amx_determinism.py",
                                                    "60"])  # fmt: skip
        record("determinism", code == 0 and " 0 differ" in text, text.strip()[-160:])

    other = "avx512_amx" if not dry else "avx512" if "avx512" in runnable else "avx2"
    digests = []
    for level in ("baseline", other):
        path = out / f"5-digests-{level}.json"
        code, text, _ = _run(out, f"5-digests-{level}", [py, ROOT / "tools/cross_cpu.py", "run",
                             "--out", path, "--expect-level", level, "--label", level],
                             env={"PYPTO_CPU_ISA": level})  # fmt: skip
        digests.append(path if code == 0 else None)
    if None in digests:
        record("digests", False, "a run failed (5-digests-*.txt)")
    else:
        code, text, _ = _run(out, "5-digests", [py, ROOT / "tools/cross_cpu.py", "compare",
                                                *map(str, digests)])  # fmt: skip
        record("digests", code == 0, f"baseline vs {other}: {text.strip().splitlines()[-1]}")

    report = out / "6-networks.json"
    nets = ["--networks", "resnet50", "--rounds", "1", "--budget", "0"] if dry else ["--networks"]
    code, text, took = _run(out, "6-networks", [py, "-m", "pypto.bench", *nets, "--dtypes",
                            "bf16", "--threads", threads, "--orders", "tile,sequential",
                            "--json", str(report)], timeout=3600)  # fmt: skip
    if code != 0 or not report.exists():
        record("networks", False, "the bench failed (6-networks.txt)")
    else:
        bench = json.loads(report.read_text())
        ratios = network_ratios(bench)
        on_unit = bool(bench["kernel"].get("amx")) or dry
        ok = on_unit and all(r[0] >= NETWORK_TARGET for r in ratios.values())
        record("networks", ok, f"tile ({bench['kernel'].get('tile_unit')}) vs torch: " + ", ".join(
            f"{net} {r[0]:.2f}x (tile / sequential {r[1] or 0:.3f})" for net, r in ratios.items()
        ) + f" ({took:.0f} s)", target=True)  # fmt: skip

    report = out / "7-cases.json"
    cases = ["--cases", "b,h", "--rounds", "3"] if dry else [
        "--cases", "b,c,d,e,f,g,h,i,j", "--rounds", "9"]  # fmt: skip
    code, text, took = _run(out, "7-cases", [py, "-m", "pypto.bench", *cases, "--dtypes", "bf16",
                            "--threads", threads, "--orders", "tile", "--json", str(report)],
                            timeout=3600)  # fmt: skip
    if code != 0 or not report.exists():
        record("cases", False, "the bench failed (7-cases.txt)")
    else:
        geomean, ratios = cases_geomean(json.loads(report.read_text()))
        record(
            "cases",
            geomean is not None and geomean >= CASES_TARGET,
            f"geometric mean {geomean or 0:.2f}x torch: "
            + ", ".join(f"{c} {r:.2f}" for c, r in ratios.items())
            + f" ({took:.0f} s)",
            target=True,
        )

    lines = [f"# AMX host check{' (dry run: no tile unit)' if dry else ''}", "",
             f"{_cpu()}; Python {platform.python_version()}; threads {threads}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             "| step | verdict | detail |", "|---|---|---|"]  # fmt: skip
    lines += [f"| {step} | {verdict} | {detail} |" for step, verdict, detail in results]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print(f"[amx-check] summary: {out / 'summary.md'}")
    return 1 if any(verdict == "FAIL" for _, verdict, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
