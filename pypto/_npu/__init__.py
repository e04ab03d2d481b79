"""pypto's Atlas A2/A3 NPU backend: an AscendC dgrad kernel driven through AscendCL and ctypes.
Its public face is ``pypto.device``.

Modules: ``discovery`` (where things are), ``prototypes`` (the C prototype table), ``acl``
(loading and binding), ``runtime`` (bring-up on pypto's device thread, buffers, teardown),
``launch_struct`` (ctypes mirror of the kernel's tiling header), ``plan`` (user tiles ->
AscendC launches), ``decompose`` (exact rewrites of what one launch cannot hold), ``layout``
(NCHW <-> NC1HWC0 / FRACTAL_Z), ``run`` (the op), ``trust`` (the self-check ``auto`` needs),
``errors``, ``elf``. The device side lives in ``kernel/``: the AscendC source, the tiling header
both sides share, CMake and ``build.py``.
"""
