#!/usr/bin/env bash
# Run the CPU kernels under AddressSanitizer at every ISA level this CPU has, on shapes that
# cover every kernel branch (tools/asan_shapes.py). valgrind cannot decode AVX-512, so ASan it is.
# Usage: bash tools/asan_check.sh      (builds into a throw-away venv under /tmp)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)/asan
python3 -m venv "$venv"
"$venv/bin/pip" install -q numpy ml_dtypes cython setuptools wheel
CFLAGS="-fsanitize=address -fno-omit-frame-pointer -g" LDFLAGS="-fsanitize=address" \
    "$venv/bin/pip" install -q --no-build-isolation .
levels=$("$venv/bin/python" -c "from pypto._kernels.dispatch import kernel_info; print(' '.join(kernel_info()['cpu_levels']))")
cd /tmp  # import the installed package, not the source folder
for isa in $levels; do
    PYPTO_CPU_ISA=$isa LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \
        "$venv/bin/python" "$OLDPWD/tools/asan_shapes.py"
done
