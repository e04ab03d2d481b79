"""The CPU backend, all of it: which kernel build runs on this CPU, with how many threads.

- ``dispatch``: the feature table (``features``, baseline build), the ISA levels built and
  supported (``levels``, the one table of levels), the lazy, locked load of the chosen level's
  kernel module, the thread count (fork, address-space limit, start probe), the op.
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
