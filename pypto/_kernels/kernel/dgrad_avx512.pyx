# The dgrad kernel built for the avx512 ISA level (flags in setup.py).
include "dgrad.pxi"
