"""Tile-shape records under upstream's module name ``pypto.pypto_impl``.

Upstream these are pybind11 classes: plain mutable records, no validation, positional order
M, K, N, zeros by default. The op validates them (rules TS0-TS6) when it runs, not here.
"""

from ._dtypes import DataType, TileOpFormat  # noqa: F401  (upstream exposes both here too)

__all__ = ["ConvBpTileL1Info", "ConvBpTileL0Info", "ConvBpTile", "DataType", "TileOpFormat"]


class _TileInfo:
    __slots__ = ()
    _fields = ()

    def __init__(self, *args, **kwargs):
        if len(args) > len(self._fields):
            raise TypeError(
                f"{type(self).__name__}() takes at most {len(self._fields)} "
                f"positional arguments ({len(args)} given)"
            )
        values = dict(zip(self._fields, args))
        for key, value in kwargs.items():
            if key not in self._fields:
                raise TypeError(
                    f"{type(self).__name__}() got an unexpected keyword argument '{key}'"
                )
            if key in values:
                raise TypeError(f"{type(self).__name__}() got multiple values for argument '{key}'")
            values[key] = value
        for field in self._fields:
            setattr(self, field, values.get(field, 0))

    def __copy__(self):
        # copy.copy's generic path (__reduce_ex__) took 2 us of every options scope
        other = type(self).__new__(type(self))
        for field in self._fields:
            setattr(other, field, getattr(self, field))
        if hasattr(self, "__dict__"):  # a subclass's own attributes
            other.__dict__.update(self.__dict__)
        return other

    def as_tuple(self):
        """The three values in field order (M, K, N)."""
        return tuple(getattr(self, f) for f in self._fields)

    def _body(self):
        return "{" + ", ".join(f"{f}: {getattr(self, f)}" for f in self._fields) + "}"

    def __repr__(self):
        return f"{type(self).__name__}{self._body()}"


class ConvBpTileL1Info(_TileInfo):
    """L1 tile of the dgrad GEMM: ``ConvBpTileL1Info(tileML1, tileKL1, tileNL1)``.

    tileML1 output pixels (within one Win row, or whole rows), tileKL1 = a block of Cout channels
    times Kh*Kw taps, tileNL1 input channels.
    """

    __slots__ = ("tileML1", "tileKL1", "tileNL1")
    _fields = __slots__


class ConvBpTileL0Info(_TileInfo):
    """L0 tile (the block multiplied at once): ``ConvBpTileL0Info(tileML0, tileKL0, tileNL0)``."""

    __slots__ = ("tileML0", "tileKL0", "tileNL0")
    _fields = __slots__


class ConvBpTile:
    """An L1 and an L0 tile together, as upstream's configuration stores them."""

    __slots__ = ("tileL1Info", "tileL0Info")

    def __init__(self, tileL1Info=None, tileL0Info=None):
        self.tileL1Info = ConvBpTileL1Info() if tileL1Info is None else tileL1Info
        self.tileL0Info = ConvBpTileL0Info() if tileL0Info is None else tileL0Info

    def valid(self):
        """Upstream's check: all six values > 0 and each L1 value >= the matching L0 value."""
        l1, l0 = self.tileL1Info.as_tuple(), self.tileL0Info.as_tuple()
        return all(v > 0 for v in l1 + l0) and all(a >= b for a, b in zip(l1, l0))

    def ToString(self):
        return (
            f"ConvBpTile: {{tileL1Info: {self.tileL1Info._body()}, "
            f"tileL0Info: {self.tileL0Info._body()}}};"
        )

    __repr__ = __str__ = ToString
