# The dgrad kernel built for the avx2 ISA level (flags in setup.py).
include "dgrad.pxi"
