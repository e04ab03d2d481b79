# The dgrad kernel built for the baseline ISA level (flags in setup.py).
include "_dgrad_impl.pxi"
