# The dgrad kernel built for the avx512 ISA level (flags in setup.py).
include "_dgrad_impl.pxi"
