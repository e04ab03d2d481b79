"""conv_backward_input on the NPU: re-layout, device buffers, launches, checks, copy back.

Same contract as ``pypto._kernels.dispatch.conv_backward_input_cpu``: a validated call and host
arrays dy (NCHW) and w (``[Cout, Cin, Kh, Kw]``) in, the NCHW dx array (fp16 or bf16) out.
"""

import secrets

import numpy as np

from .._core.memory import check_host_memory
from .._core.nonfinite import non_finite_mask, with_real_taps_only
from .._core.rules import check_host_arrays
from .._core.tiling import C0, ceil_div
from .._dtypes import numpy_dtype
from . import runtime as _runtime
from .errors import KernelNotRunError
from .launch_struct import DONE_SLOT_BYTES
from .layout import dy_to_nc1hwc0, nc1hwc0_to_nchw, weight_to_fractal_z
from .plan import plan_launches
from .prototypes import LAUNCH_SYMBOL

__all__ = ["conv_backward_input_npu"]

_FLAG_STRIDE = DONE_SLOT_BYTES // 4  # uint32 flags, one per slot


def _check_done(device, done_slots, first, stop, token):
    """Every launch in slots [first, stop) must have left ``token``: a launch wrapper returns 0
    without launching when its device binary did not register, and synchronize then succeeds."""
    flags = device.download(done_slots + first * DONE_SLOT_BYTES, (stop - first) * DONE_SLOT_BYTES)
    missing = [
        first + i for i, flag in enumerate(flags.view(np.uint32)[::_FLAG_STRIDE]) if flag != token
    ]
    if missing:
        raise KernelNotRunError(
            LAUNCH_SYMBOL,
            f"launch(es) {missing} synchronized cleanly but left no completion mark. The library's "
            "device binary was probably not registered (built for another SoC or CANN version): "
            "rebuild it with 'python -m pypto._npu.kernel.build' on this host",
        )


def _run_piece(device, buffers, planned, dy, w, out, first_slot, token):
    """Launch one sub-problem and write its dx into ``out`` (a view of the call's dx)."""
    p, plan = planned.problem, planned.launches
    weight, dy_device, dx_device, workspace = buffers
    dtype = dy.dtype
    device.copy_in(weight, weight_to_fractal_z(w))
    chunks = plan.batch_chunks(p.n)
    slot = first_slot
    for stripe in planned.runs:
        cols = stripe.cols
        device.copy_in(dy_device, dy_to_nc1hwc0(dy, plan.rows, cols))
        dx_shape = (p.n, ceil_div(p.cin, C0), p.hin, cols.size, C0)
        dx_bytes = int(np.prod(dx_shape)) * dtype.itemsize
        if plan.zero_output:
            device.zero(dx_device, dx_bytes)
        stripe_slot = slot
        for batch_start, batch_count in chunks:
            device.launch(
                batch_count * plan.blocks_per_image,
                dy_device,
                weight,
                dx_device,
                workspace,
                plan.launch(stripe, batch_start, batch_count, slot, token),
            )
            slot += 1
        device.synchronize()
        _check_done(device, workspace, stripe_slot, slot, token)
        dx = device.download(dx_device, dx_bytes).view(dtype).reshape(dx_shape)
        out[..., cols.start : cols.start + cols.size] = nc1hwc0_to_nchw(dx, p.cin)
    return slot


def conv_backward_input_npu(call, dy, w):
    """dx of a validated call (``pypto._core.rules.ValidatedCall``) from host arrays dy and w.

    Four device buffers per call (weight, dy window, dx stripe, workspace), each allocated once
    at its largest size and reused by every sub-problem and stripe.
    """
    p = call.problem
    dy, w = check_host_arrays(p, dy, w, call.dtype)
    dtype = numpy_dtype(call.dtype)
    plan = plan_launches(call)
    copies = sum(
        a.size * p.dtype_size for a in (dy, w) if not (a.dtype == dtype and a.flags.c_contiguous)
    )
    check_host_memory(
        plan.host_bytes(p) + copies,
        p,  # before any copy or allocation
        "dy, weight and dx in the NPU's layouts, and input copies",
    )
    non_finite = non_finite_mask(w, call.dtype)
    if non_finite is not None:
        return with_real_taps_only(conv_backward_input_npu, call, dy, w, non_finite)
    runtime = _runtime.get()
    out = np.zeros((p.n, p.cin, p.hin, p.win), dtype=dtype)
    pieces = [planned for planned in plan.pieces if planned.runs]
    if not pieces:  # no dy element reaches dx: all zero
        return out
    dy = np.ascontiguousarray(dy, dtype=dtype)
    w = np.ascontiguousarray(w, dtype=dtype)
    n_launches = plan.launch_count
    token = secrets.randbits(32) | 1  # never 0, the value of a zeroed slot
    weight_bytes, dy_bytes, dx_bytes = plan.buffer_bytes()

    def on_device(device):  # runs on the runtime's device thread
        weight = device.alloc(weight_bytes)
        workspace = device.alloc(n_launches * DONE_SLOT_BYTES)  # the done slots, nothing else
        buffers = (weight, device.alloc(dy_bytes), device.alloc(dx_bytes), workspace)
        device.zero(workspace, n_launches * DONE_SLOT_BYTES)
        slot = 0
        for planned in pieces:
            piece = planned.piece
            slot = _run_piece(
                device,
                buffers,
                planned,
                piece.dy(dy),
                piece.weight(w),
                out[piece.dx_index()],
                slot,
                token,
            )

    runtime.call(on_device)
    return out
