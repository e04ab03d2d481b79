"""What counts as an int in pypto's arguments: the one rule every parser applies."""

import operator

__all__ = ["as_int"]


def as_int(value):
    """The int a value stands for (ints and NumPy integers), or None (bools, floats, strings and
    everything else). Each caller keeps its own message for None."""
    if type(value) is int:  # the common case, first: this runs on every call
        return value
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None
