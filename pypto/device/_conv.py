"""conv_backward_input on the NPU: re-layout, device buffers, launches, checks, copy back.

Same contract as ``pypto._cpu.conv_backward_input_cpu``: a validated call and host arrays dy
(NCHW) and w (``[Cout, Cin, Kh, Kw]``) in, the NCHW dx array (fp16 or bf16) out.
"""

import secrets

import numpy as np

from .._dtypes import numpy_dtype
from .._tiling import C0, ceil_div
from . import _runtime
from ._errors import KernelNotRunError
from ._launch_struct import DONE_SLOT_BYTES, SYSTEM_WORKSPACE_BYTES
from ._layout import dy_to_nc1hwc0, nc1hwc0_to_nchw, weight_to_fractal_z
from ._plan import plan_launches
from ._prototypes import LAUNCH_SYMBOL

__all__ = ["conv_backward_input_npu"]

_FLAG_STRIDE = DONE_SLOT_BYTES // 4  # uint32 flags, one per slot


def _check_done(device, done_slots, first, stop, token):
    """Every launch in slots [first, stop) must have left ``token``: a launch wrapper returns 0
    without launching when its device binary did not register, and synchronize then succeeds."""
    flags = device.download(done_slots + first * DONE_SLOT_BYTES, (stop - first) * DONE_SLOT_BYTES)
    missing = [first + i for i, flag in enumerate(flags.view(np.uint32)[::_FLAG_STRIDE])
               if flag != token]
    if missing:
        raise KernelNotRunError(
            LAUNCH_SYMBOL,
            f"launch(es) {missing} synchronized cleanly but left no completion mark. The library's "
            "device binary was probably not registered (built for another SoC or CANN version): "
            "rebuild it with 'python -m pypto._kernels.ascendc.build' on this host")


def conv_backward_input_npu(call, dy, w):
    """dx of a validated call (``pypto._validation.ValidatedCall``) from host arrays dy and w."""
    p = call.problem
    dtype = numpy_dtype(call.dtype)
    plan = plan_launches(call)
    runtime = _runtime.get()
    out = np.zeros((p.n, p.cin, p.hin, p.win), dtype=dtype)
    stripes = [stripe for stripe in plan.stripes if stripe.api is not None]
    if not stripes:  # no dy element reaches dx: all zero
        return out
    dy = np.ascontiguousarray(dy, dtype=dtype)
    w = np.ascontiguousarray(w, dtype=dtype)
    chunks = plan.batch_chunks(p.n)
    n_launches = len(stripes) * len(chunks)
    token = secrets.randbits(32) | 1  # never 0, the value of a zeroed slot
    cin1 = ceil_div(p.cin, C0)

    with runtime.session() as device:
        weight = device.upload(weight_to_fractal_z(w))
        workspace = device.alloc(SYSTEM_WORKSPACE_BYTES + n_launches * DONE_SLOT_BYTES)
        done_slots = workspace + SYSTEM_WORKSPACE_BYTES  # the user workspace starts there
        device.zero(done_slots, n_launches * DONE_SLOT_BYTES)
        slot = 0
        for stripe in stripes:
            cols = stripe.cols
            dy_device = device.upload(dy_to_nc1hwc0(dy, plan.rows, cols))
            dx_shape = (p.n, cin1, p.hin, cols.size, C0)
            dx_bytes = int(np.prod(dx_shape)) * dtype.itemsize
            dx_device = device.alloc(dx_bytes)
            if plan.zero_output:
                device.zero(dx_device, dx_bytes)
            first_slot = slot
            for batch_start, batch_count in chunks:
                device.launch(batch_count * plan.blocks_per_image, dy_device, weight, dx_device,
                              workspace, plan.launch(stripe, batch_start, batch_count, slot, token))
                slot += 1
            device.synchronize()
            _check_done(device, done_slots, first_slot, slot, token)
            dx = device.download(dx_device, dx_bytes).view(dtype).reshape(dx_shape)
            out[..., cols.start:cols.start + cols.size] = nc1hwc0_to_nchw(dx, p.cin)
            device.free(dy_device)
            device.free(dx_device)
    return out
