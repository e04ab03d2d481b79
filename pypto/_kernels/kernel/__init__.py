"""The per-level dgrad kernel modules (see README.md here); loaded only by
pypto._kernels.dispatch, after the CPU check."""
