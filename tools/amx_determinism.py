"""The tile order on the AMX unit under pressure: calls with more threads than CPUs, for as long
as asked, each result compared bitwise with the emulation's (a hypervisor that loses tile state
across a preemption would show here). Run it beside a competing process (the test suite):

    python tools/amx_determinism.py 600        # seconds; exit 1 if any result differs

2026-12-06, the Sapphire Rapids-class KVM guest (2 vCPUs), beside CI's test run: 102,280 calls
at 8 and 3 threads in 180 s, 0 differing.
"""

import sys
import time

import ml_dtypes
import numpy as np

from pypto._kernels import features
from pypto._kernels.dispatch import load_level

assert features.request_amx_permission() == 0
k = load_level("avx512_amx")
rng = np.random.default_rng(0)
shapes = [
    (4, 64, 128, 28, 28, 3),
    (2, 256, 256, 14, 14, 3),
    (8, 128, 512, 7, 7, 1),
    (1, 96, 160, 17, 17, 3),
]
cases = []
for n, cin, cout, h, w_, kk in shapes:
    dy = rng.standard_normal((n, cout, h, w_)).astype(ml_dtypes.bfloat16).view(np.uint16)
    w = (rng.standard_normal((cout, cin, kk, kk)) * 0.05).astype(ml_dtypes.bfloat16).view(np.uint16)
    out = np.empty((n, cin, h, w_), np.uint16)
    attrs = (1, 1, kk // 2, kk // 2, 1, 1)
    assert k.dgrad_tile(dy, w, out, attrs, 1, False, 0) == "tile+emulated"
    cases.append((dy, w, attrs, out.copy()))
seconds = float(sys.argv[1])
calls = bad = 0
end = time.time() + seconds
while time.time() < end:
    for dy, w, attrs, ref in cases:
        for threads in (8, 3):
            out = np.empty_like(ref)
            assert k.dgrad_tile(dy, w, out, attrs, threads, True, 0) == "tile+amx"
            calls += 1
            bad += not np.array_equal(out, ref)
print(
    f"{calls} AMX calls at 8 and 3 threads in {seconds:.0f} s, each against the emulation's "
    f"bits: {bad} differ"
)
sys.exit(1 if bad else 0)
