"""pypto.frontend.jit: run a kernel function written in upstream's style, eagerly on the host.

Parameters annotated ``x: pypto.Tensor(shape, dtype)`` accept pypto Tensors, NumPy arrays or
CPU torch tensors (wrapped without copying); shapes and dtypes are checked against the
annotation. The body runs in its own configuration scope, so tiles set inside do not leak, and
``out.move(result)`` writes results into the caller's arrays in place.
"""

import functools
import inspect

import numpy as np

from .._core import options as _config
from ..error import FeError
from ..tensor import Tensor, from_numpy, from_torch

__all__ = ["jit", "JitFunction"]


def _as_tensor(value, name):
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        return from_numpy(value, name)
    if type(value).__module__.startswith("torch"):
        return from_torch(value, name)
    return value


def _check_annotation(name, tensor, annotation):
    want = annotation.shape
    if len(want) != tensor.dim or any(w not in (-1, g) for w, g in zip(want, tensor.shape)):
        raise FeError(
            ValueError(
                f"argument '{name}' has shape {tensor.shape}, but the kernel declares {want}"
            )
        )
    if tensor.dtype != annotation.dtype:
        raise FeError(
            ValueError(
                f"argument '{name}' has dtype {tensor.dtype}, but the kernel "
                f"declares {annotation.dtype}"
            )
        )


class JitFunction:
    """A kernel function wrapped by :func:`jit`; calling it runs the body eagerly."""

    def __init__(self, func, options):
        functools.update_wrapper(self, func)
        self.func = func
        self.options = options
        try:
            self.signature = inspect.signature(func, eval_str=True)
        except (NameError, TypeError):
            self.signature = inspect.signature(func)

    def __call__(self, *args, **kwargs):
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise FeError(exc) from None
        bound.apply_defaults()
        for name, value in bound.arguments.items():
            annotation = self.signature.parameters[name].annotation
            if isinstance(annotation, Tensor):
                value = _as_tensor(value, name)
                if not isinstance(value, Tensor):
                    raise FeError(
                        TypeError(
                            f"argument '{name}' must be a tensor (pypto.Tensor, "
                            f"numpy.ndarray or torch.Tensor), got {type(value).__name__}"
                        )
                    )
                _check_annotation(name, value, annotation)
                bound.arguments[name] = value
        with _config._scope():
            return self.func(*bound.args, **bound.kwargs)


def jit(
    func=None,
    *,
    host_options=None,
    codegen_options=None,
    pass_options=None,
    runtime_options=None,
    verify_options=None,
    debug_options=None,
    new_ir=True,
    create_new_logical_tensor=False,
):
    """Decorator for kernel functions, bare (``@jit``) or with upstream's options (``@jit(...)``).

    The options are accepted for compatibility and kept on the wrapper (``.options``); on the
    CPU they change nothing.
    """
    options = dict(
        host_options=host_options,
        codegen_options=codegen_options,
        pass_options=pass_options,
        runtime_options=runtime_options,
        verify_options=verify_options,
        debug_options=debug_options,
        new_ir=new_ir,
        create_new_logical_tensor=create_new_logical_tensor,
    )
    if func is None:
        return lambda f: JitFunction(f, options)
    return JitFunction(func, options)
