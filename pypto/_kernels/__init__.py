"""The CPU backend, all of it: which kernel build runs on this CPU, with how many threads.

- ``loading``: the feature table (``features``, baseline build), the ISA levels built and
  supported (``levels``, the one table of levels), the lazy, locked load of the chosen level's
  kernel module.
- ``dispatch``: the thread count (fork, address-space limit, start probe), the data laid out
  for the kernel, the op.
- ``amx``: whether bf16 calls in sum_order "tile" may use the AMX tile unit (OS permission,
  self-check in a child process, cached verdict).
- ``kernel/``: the dgrad kernel, compiled once per ISA level; its README is the design doc.

The contract the op uses: ``conv_backward_input_cpu(call, dy, w)``; also ``kernel_info()``,
``openmp_enabled()``, ``release_kernel_buffers()`` and ``measure_peak_gflops()``.
"""

from .dispatch import (
    conv_backward_input_cpu,
    kernel_info,
    measure_peak_gflops,
    openmp_enabled,
    release_kernel_buffers,
)

__all__ = [
    "conv_backward_input_cpu",
    "kernel_info",
    "measure_peak_gflops",
    "openmp_enabled",
    "release_kernel_buffers",
]
