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
