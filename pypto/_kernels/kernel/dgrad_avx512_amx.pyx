# The dgrad kernel built for the avx512_amx ISA level (flags in setup.py).
include "dgrad.pxi"
