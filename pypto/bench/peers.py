"""The torch and NumPy peers' setting: torch imported after its CPU kernels are capped to pypto's
level, and the notes the header prints on what torch and NumPy's BLAS run on this machine.
"""

import os
import platform
import sys

# torch's CPU kernels (oneDNN, MKL) pick their own ISA: with pypto forced to a lower level
# (PYPTO_CPU_ISA), cap them to the same one, or the comparison is of two different machines.
_TORCH_ISA_CAPS = {
    "avx2": ("AVX2", "AVX2"),
    "avx512": ("AVX512_CORE", "AVX512"),
    "baseline": ("SSE41", "SSE4_2"),
}


def _cap_torch_to_level(level):
    """Set ONEDNN_MAX_CPU_ISA / MKL_ENABLE_INSTRUCTIONS for a forced level (before torch is
    imported; a caller's own settings win); returns what was done, or None."""
    # the caps are x86 ISA names; on AArch64 there is one level and nothing to cap
    if (
        level not in _TORCH_ISA_CAPS
        or not os.environ.get("PYPTO_CPU_ISA")
        or platform.machine() not in ("x86_64", "AMD64")
    ):
        return None
    if "torch" in sys.modules:
        return f"torch was imported before the benchmark: not capped to pypto's level {level}"
    onednn, mkl = _TORCH_ISA_CAPS[level]
    os.environ.setdefault("ONEDNN_MAX_CPU_ISA", onednn)
    os.environ.setdefault("MKL_ENABLE_INSTRUCTIONS", mkl)
    return (
        f"torch capped to pypto's level {level}: ONEDNN_MAX_CPU_ISA="
        f"{os.environ['ONEDNN_MAX_CPU_ISA']}, MKL_ENABLE_INSTRUCTIONS="
        f"{os.environ['MKL_ENABLE_INSTRUCTIONS']}"
    )


def _torch_note(info):
    """What torch's oneDNN may run here, set before torch's import: capped to pypto's forced
    level, or where it has AMX; None otherwise."""
    capped = _cap_torch_to_level(info["isa"])
    if capped or "amx_bf16" not in info["cpu_features"]:
        return capped
    return (
        "torch multiplies bf16 on this CPU's AMX tiles in their own order; pypto does so in "
        "sum_order 'tile' (the bf16 default, the same order on every CPU) "
        + (
            "(its rows: 'pypto' in the order in force, 'pypto tile' or 'pypto sequential' in "
            "the other)"
            if info["amx"]
            else "(not on this level: emulated)"
        )
    )


def _numpy_blas_note():
    """What the NumPy peer's BLAS runs: numpy is imported before the benchmark starts, so its
    OpenBLAS kernel can only be capped from the environment (OPENBLAS_CORETYPE)."""
    core = os.environ.get("OPENBLAS_CORETYPE")
    if core:
        return f"numpy's OpenBLAS: OPENBLAS_CORETYPE={core}"
    return (
        "numpy's OpenBLAS: not capped (its best kernel for this CPU; start with "
        "OPENBLAS_CORETYPE=Haswell to hold it to AVX2)"
    )


def _import_torch(info, with_torch):
    """(torch or None, the note on what torch runs here or None). The note comes first: it caps
    torch's CPU kernels, which only takes effect before torch is imported."""
    if not with_torch:
        return None, None
    note = _torch_note(info)
    try:
        import torch
    except ImportError:
        print("torch not installed: PyTorch peers skipped")
        return None, note
    return torch, note
