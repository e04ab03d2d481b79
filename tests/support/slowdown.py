"""How much slower than a native run this machine runs the suite.

Under CPU emulation (QEMU user mode: .ci/cross_aarch64 runs the whole suite on emulated AArch64)
everything takes 20-50 times longer, so subprocess time limits and the latency bounds of the
tests are multiplied by PYPTO_TEST_TIME_SCALE (default 1: native bounds unchanged)."""

import os

TIME_SCALE = float(os.environ.get("PYPTO_TEST_TIME_SCALE", "1"))
if not TIME_SCALE >= 1:
    raise ValueError(f"PYPTO_TEST_TIME_SCALE must be a number >= 1, got {TIME_SCALE}")


def limit(seconds):
    """A native time limit scaled to this machine's slowdown."""
    return seconds * TIME_SCALE
