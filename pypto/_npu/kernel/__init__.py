"""Sources of pypto's AscendC dgrad kernel for Atlas A2/A3 (built by ``build.py`` with CANN).

Nothing here is imported at run time: ``pypto.device`` loads the built library with ctypes.
"""
