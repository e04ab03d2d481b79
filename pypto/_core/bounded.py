"""Bounded memo tables: the caches of passed calls and of the CPU backend's plans."""

__all__ = ["remember"]


def remember(table, key, value, limit):
    """Store ``table[key] = value``, first forgetting the oldest entry when ``limit`` are held.
    Returns ``value``. Safe against another thread forgetting the same entry at once."""
    if len(table) >= limit:
        try:
            del table[next(iter(table))]
        except (KeyError, StopIteration, RuntimeError):
            pass
    table[key] = value
    return value
