"""Sources of pypto's AscendC dgrad kernel for Atlas A2/A3 (built by ``build.py`` with CANN).

At run time only ``build.py``'s names are imported (the kernel's name, its launch symbol, the
toolkit roots: one definition, stdlib only); ``pypto._npu`` loads the built library with ctypes.
"""
