"""Where a judged call of ``pypto.torch.crosscheck`` spends its time, stage by stage.

One ResNet-18 (``pypto.bench.crosscheck``'s) bf16 step, batch 8, 224x224, torch on 2 threads,
runs once to warm up and then ``--steps`` times inside the mode with every call judged; the
stages of ``pypto._golden.judge.judge_case`` (the golden, the error bound, the metrics, ...)
and of the row are wrapped with timers, and their milliseconds per judged call are printed,
largest first. The stages are looked up by name, so the script also times older trees
(``PYTHONPATH=OLD_TREE python tools/crosscheck_stages.py``, the old tree's error bound as one
stage).

    python tools/crosscheck_stages.py [--images K] [--steps 3]
"""

import argparse
import collections
import functools
import time


def _timed(totals, owner, name, label):
    """Replace ``owner.name`` by a wrapper adding its seconds to ``totals[label]``; False when
    ``owner`` has no such attribute."""
    inner = getattr(owner, name, None)
    if inner is None:
        return False

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            totals[label] += time.perf_counter() - start

    setattr(owner, name, wrapper)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=None, help="crosscheck's images=")
    parser.add_argument("--steps", type=int, default=3, help="judged steps (default 3)")
    args = parser.parse_args(argv)

    import torch

    import pypto.torch as pt
    import pypto.torch._crosscheck as xcheck
    from pypto._golden import accuracy, calls, judge
    from pypto.bench.crosscheck import resnet18

    totals = collections.defaultdict(float)
    _timed(totals, judge, "golden_dgrad", "the float64 golden (GEMM + col2im)")
    if not _timed(totals, judge, "error_bound", "the error bound"):
        from pypto._golden import bound

        _timed(totals, bound.ErrorBound, "outside", "the error bound")
        _timed(totals, bound.ErrorBound, "full", "the error bound")
    _timed(totals, judge, "pypto_dgrad", "pypto's own result")
    _timed(totals, accuracy, "golden_grid", "the golden's grid")
    _timed(totals, accuracy, "element_errors", "element errors of both results")
    _timed(totals, accuracy, "measure", "metrics of both results")
    _timed(totals, judge, "Localisation", "localisation")
    _timed(totals, calls, "msprobe_metrics", "msprobe's columns (the row)")
    _timed(totals, xcheck.crosscheck, "_judge", "a judged call, all of it")

    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = resnet18(torch).to(torch.bfloat16)
    x = torch.randn(8, 3, 224, 224).to(torch.bfloat16)
    labels = torch.randint(0, 1000, (8,))
    extra = {} if args.images is None else {"images": args.images}
    mode = pt.crosscheck(model=model, keep_failures=0, **extra)

    def step():
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x).float(), labels).backward()

    with mode:
        step()
    totals.clear()
    for _ in range(args.steps):
        with mode:
            step()
    judged = sum(r["seconds"] is not None for r in mode.rows[-20 * args.steps :])
    whole = totals["a judged call, all of it"]
    print(
        f"images={args.images or 'all'}: {judged / args.steps:.0f} judged calls a step; "
        f"ms per judged call (mean over {judged} calls):"
    )
    for label, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"  {label:<38} {seconds / judged * 1e3:7.1f}  ({100 * seconds / whole:3.0f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
