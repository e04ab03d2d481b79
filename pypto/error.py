"""Errors raised by pypto, with upstream PyPTO's names, codes and message format.

Every error for bad use is a :class:`PyptoError`. Its text is upstream's
``"ErrCode: F00002, ValueError: <text>"``: the code is ``0xF00000 | ExternalError`` and the
middle word is the kind of problem (TypeError, ValueError, RuntimeError).

Validation errors (:class:`ConvBpInputError`'s subclasses :class:`ConvBpTypeError`,
:class:`ConvBpValueError` and :class:`ConvBpRuntimeError`) also carry ``rule``, the constraint id
of the specification (``"T1"`` ... ``"V1"``) that the call broke, and derive from the builtin
``TypeError`` / ``ValueError`` / ``RuntimeError`` so plain ``except ValueError`` works as well.
"""

import functools
import inspect

__all__ = [
    "PyptoError",
    "PyptoGeneralError",
    "FeError",
    "PyptoRtError",
    "PyptoMemoryError",
    "PassError",
    "VerifyError",
    "ConvBpInputError",
    "ConvBpTypeError",
    "ConvBpValueError",
    "ConvBpRuntimeError",
    "ERROR_CODES",
]

#: Upstream's ExternalError codes (0xF00000 plus a low number), one for each kind of error.
ERROR_CODES = {
    "TypeError": 0xF00001,
    "ValueError": 0xF00002,
    "RuntimeError": 0xF00003,
    "NameError": 0xF00004,
    "NotImplementedError": 0xF00005,
    "KeyError": 0xF00006,
    "IndexError": 0xF00008,
}
UNKNOWN_CODE = 0xF0FFFF


class PyptoError(Exception):
    """Base of every error pypto raises for bad use.

    Parameters
    ----------
    err_code : int
        Upstream error code, e.g. ``0xF00002``.
    msg : str or Exception
        The message, or an exception whose type name and text form the message.
    """

    def __init__(self, err_code, msg):
        self.err_code = err_code
        if isinstance(msg, BaseException):
            text = str(msg)
            # A message that already carries a code (re-raised upstream style) is kept as is.
            if "ErrCode" not in text:
                text = f"ErrCode: {err_code:X}, {type(msg).__name__}: {text}"
        else:
            text = str(msg)
        self.msg = text
        super().__init__(text)


class PyptoGeneralError(PyptoError):
    """A PyptoError whose code follows from the wrapped exception's type."""

    def __init__(self, msg):
        code = (
            ERROR_CODES.get(type(msg).__name__, UNKNOWN_CODE)
            if isinstance(msg, BaseException)
            else UNKNOWN_CODE
        )
        super().__init__(code, msg)


class FeError(PyptoGeneralError):
    """Front-end error: bad arguments or bad use of the Python API."""


class PyptoRtError(PyptoGeneralError):
    """Runtime error (kernel or device)."""


class PyptoMemoryError(PyptoRtError, MemoryError):
    """A call would need more memory than the limit allows (checked before allocating)."""

    def __init__(self, text):
        PyptoError.__init__(self, ERROR_CODES["RuntimeError"], MemoryError(text))


class PassError(PyptoGeneralError):
    """Compiler-pass error (kept for upstream compatibility)."""


class VerifyError(PyptoGeneralError):
    """Verification error (kept for upstream compatibility)."""


class ConvBpInputError(FeError):
    """conv_backward_input refused its arguments; ``rule`` names the broken constraint."""

    builtin = ValueError

    def __init__(self, rule, text):
        self.rule = rule
        super().__init__(self.builtin(text))


class ConvBpTypeError(ConvBpInputError, TypeError):
    """Rule T1 (argument types) was broken: an argument of the wrong type; also a
    ``TypeError``."""

    builtin = TypeError


class ConvBpValueError(ConvBpInputError, ValueError):
    """A rule about values was broken (a rank, dtype, size, range or tile); also a
    ``ValueError``."""

    builtin = ValueError


class ConvBpRuntimeError(ConvBpInputError, RuntimeError):
    """The call is well formed but cannot run yet (e.g. tile shapes were never set)."""

    builtin = RuntimeError


def argument_errors_are_pypto_errors(func):
    """A public function called with missing, extra or misnamed arguments raises a PyptoError
    (an FeError of TypeError) like every other bad use, not Python's bare TypeError. Costs
    nothing on a good call: the signature is checked only once a TypeError came out."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def checked(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except TypeError as exc:
            if isinstance(exc, PyptoError):
                raise
            try:
                signature.bind(*args, **kwargs)
            except TypeError as wrong:
                raise FeError(TypeError(f"{func.__name__}{signature}: {wrong}")) from None
            raise

    return checked
