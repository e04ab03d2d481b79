#!/usr/bin/env bash
# Run the CPU kernels under AddressSanitizer at every ISA level this CPU has, on shapes that
# cover every kernel branch (tools/asan_shapes.py). valgrind cannot decode AVX-512, so ASan it is.
# Usage: bash tools/asan_check.sh      (builds into a throw-away venv under /tmp)
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
venv=$tmp/asan
# Built from a copy of the working tree (tracked and untracked files, not the ignored ones): pip
# builds in the source's ./build, and a later in-place build of the checkout would copy the
# ASan-linked modules found there into pypto/ (an import then aborts: "ASan runtime does not
# come first").
mkdir "$tmp/src"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$tmp/src"
python3 -m venv "$venv"
"$venv/bin/pip" install -q numpy ml_dtypes cython setuptools wheel
CFLAGS="-fsanitize=address -fno-omit-frame-pointer -g" LDFLAGS="-fsanitize=address" \
    "$venv/bin/pip" install -q --no-build-isolation "$tmp/src"
levels=$("$venv/bin/python" -c "from pypto._kernels.dispatch import kernel_info; print(' '.join(kernel_info()['cpu_levels']))")
cd /tmp  # import the installed package, not the source folder
for isa in $levels; do
    PYPTO_CPU_ISA=$isa LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \
        "$venv/bin/python" "$OLDPWD/tools/asan_shapes.py"
done
# The tile unit's path (pypto_tile_run_amx, its pack and frames) where the CPU has AVX-512: the
# avx512_amx level built on the software tile unit (tests/support/amx_emulated.py), with ASan,
# on the self-check's problems and two more, teams of 1 to 3.
if [[ " $levels " == *" avx512 "* ]]; then
    mkdir "$tmp/amx"
    LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \
        "$venv/bin/python" - "$OLDPWD/tests" "$tmp/amx" <<'PY'
import sys

sys.path.insert(0, sys.argv[1])
import numpy as np

from pypto._kernels import amx
from support import amx_emulated

unit = amx_emulated.build(sys.argv[2], ("-fsanitize=address", "-fno-omit-frame-pointer", "-g"))
problems = amx.SELF_CHECK_PROBLEMS + (
    ("waves of images", (8, 64, 14, 14), (64, 40, 3, 3), (14, 14), (1, 1, 1, 1, 1, 1), "wide"),
    ("stride 2, odd", (2, 48, 5, 5), (48, 20, 3, 3), (9, 9), (2, 2, 1, 1, 1, 1), "wide"),
)
for seed, (name, dy_shape, w_shape, hw, attrs, data) in enumerate(problems):
    dy, w = amx._problem_arrays(dy_shape, w_shape, data, seed)
    for threads in (1, 2, 3):
        out = np.empty((dy_shape[0], w_shape[1]) + hw, np.uint16)
        path = unit.dgrad_tile(dy, w, out, attrs, threads, True, 0)
        assert path == "tile+amx", (name, path)
print("ok avx512_amx (the software tile unit)")
PY
fi
