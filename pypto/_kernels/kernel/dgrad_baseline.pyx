# The dgrad kernel built for the baseline ISA level (flags in setup.py).
include "dgrad.pxi"
