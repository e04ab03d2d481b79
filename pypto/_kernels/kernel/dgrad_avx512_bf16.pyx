# The dgrad kernel built for the avx512_bf16 ISA level (flags in setup.py).
include "dgrad.pxi"
