"""pypto.config.ConvBpTile: upstream's Python wrapper around the tile record, snake_case names
too."""

from . import pypto_impl

__all__ = ["ConvBpTile"]


class ConvBpTile:
    """``ConvBpTile(tile_l1_info, tile_l0_info)``; ``impl()`` gives the ``pypto_impl`` record."""

    def __init__(self, tile_l1_info=None, tile_l0_info=None):
        self._impl = pypto_impl.ConvBpTile(tile_l1_info, tile_l0_info)

    def impl(self):
        return self._impl

    @property
    def tile_l1_info(self):
        return self._impl.tileL1Info

    @property
    def tile_l0_info(self):
        return self._impl.tileL0Info

    def __getattr__(self, name):
        # only reached for names the wrapper lacks; private and special names are not forwarded,
        # so copy and pickle (which probe them before _impl exists) see a plain AttributeError
        if name.startswith("_"):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        return getattr(self._impl, name)

    def __reduce__(self):
        return type(self), (self._impl.tileL1Info, self._impl.tileL0Info)

    def __repr__(self):
        return repr(self._impl)

    __str__ = __repr__
