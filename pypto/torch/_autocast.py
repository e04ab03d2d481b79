"""torch's autocast policy for pypto's convolutions.

torch puts ``conv2d`` on autocast's lower-precision list for every device type: inside
``torch.autocast(device_type, dtype=...)`` its floating-point inputs (not float64) are cast to
the autocast dtype, it computes in that dtype, and the casts' own backward lands fp32 gradients
in fp32 parameters. pypto's convolutions follow the same policy, with the dtype in effect at the
call (bf16 or fp16; an autocast dtype pypto has no kernel for is refused by the op's rule D1):

- the operator ``pypto::conv_backward_input`` has an autocast kernel for each device type
  autocast supports here, so eager calls and ``torch.compile``'s tracing cast alike;
- ``conv2d`` / ``Conv2d`` and ``conv2d_input`` cast at their entry, before the op's rules are
  checked in Python, so that the backward runs on the tensors the forward saw.
"""

import torch

__all__ = ["autocast_dtype", "cast_for_autocast", "register_autocast_kernels"]


def autocast_dtype(device_type):
    """The dtype autocast casts convolutions to on ``device_type`` now, or None when autocast
    is off there (or the device type has none)."""
    try:
        if not torch.amp.is_autocast_available(device_type):
            return None
        if not torch.is_autocast_enabled(device_type):
            return None
        return torch.get_autocast_dtype(device_type)
    except (RuntimeError, ValueError):  # a device type torch knows no autocast state for
        return None


def _cast(value, device_type, dtype):
    """``value`` cast as autocast casts an op's input: floating-point tensors of that device
    type, float64 excepted; everything else (ints, lists, None) unchanged."""
    if (
        isinstance(value, torch.Tensor)
        and value.is_floating_point()
        and value.dtype not in (torch.float64, dtype)
        and value.device.type == device_type
    ):
        return value.to(dtype)
    return value


def cast_for_autocast(device_type, *values):
    """``values`` as the autocast in effect on ``device_type`` casts them (unchanged when it is
    off)."""
    dtype = autocast_dtype(device_type)
    if dtype is None:
        return values
    return tuple(_cast(value, device_type, dtype) for value in values)


def _device_types():
    """The device types whose autocast the operator follows: cpu, cuda, xpu where this torch
    has them, and the PrivateUse1 backend (torch_npu's ``npu``) when one is registered."""
    names = ["cpu", "cuda", "xpu", torch._C._get_privateuse1_backend_name()]
    found = []
    for name in dict.fromkeys(names):
        try:
            if torch.amp.is_autocast_available(name):
                found.append(name)
        except (RuntimeError, ValueError):
            pass
    return found


def register_autocast_kernels(library, name, overload):
    """Give the operator ``name`` of ``library`` (a ``torch.library.Library`` of the op's
    namespace) an autocast kernel per device type: cast the tensors, then run ``overload``
    with that autocast key excluded (the cast inputs are not cast again)."""
    for device_type in _device_types():
        key_name = "Autocast" + torch._C._dispatch_key_for_device(device_type)
        key = getattr(torch._C.DispatchKey, key_name, None)
        if key is None:
            continue

        def kernel(_keyset, *args, _device_type=device_type, _key=key):
            args = cast_for_autocast(_device_type, *args)  # before the guard: it turns it off
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_key)):
                return overload(*args)

        library.impl(name, kernel, key_name, with_keyset=True)
