"""The fp32-accumulation error bound of one judgement, computed only where it can decide.

``case.error_bound`` is, per dx element, one ulp of the output dtype at the golden plus
(1 + 2^-p) K 2^-24 sum|dy w|: a GEMM of |w| and |dy| as large as the golden's own. An element
is *outside* the bound when its error exceeds it, so an element off by at most the ulp term
never is, and a correct kernel leaves only a handful of elements above that (none in most
calls). :class:`ErrorBound` decides ``outside`` from the bound at those elements alone,
summed straight from the definition in float64 (``case._dx_at``, no GEMM), and computes every
element's bound (``full``) only when many elements need it or when asked (the localisation's
``over_bound``, the worst elements, the heatmap).
"""

import numpy as np

from .case import _dx_at, accumulation_share, error_bound

__all__ = ["ErrorBound", "DIRECT_SHARE"]

# above this share of the elements (or DIRECT_MAX of them), the bound at the elements above the
# ulp term comes from the whole GEMM: summing each one directly costs K products, as the GEMM
# does per element, without its speed (measured on one image of ResNet-18's 3x3 layers: 1% of
# the elements summed directly took 1.5x the whole float32 GEMM and its checks)
DIRECT_SHARE = 0.005
DIRECT_MAX = 1 << 13


class ErrorBound:
    """``case.error_bound`` of one judgement, made where asked. ``dy`` and ``w``: the inputs
    as the bound's owner's own copies (the exact float32 ones of ``grid.to_float32``: they
    are kept, for :meth:`full`, as long as this object)."""

    def __init__(self, case, dy, w, golden, grid, rounding_ulps=1.0):
        self.case, self.rounding_ulps = case, rounding_ulps
        self._dy, self._w, self._golden, self._grid = dy, w, golden, grid
        self._full = None
        self.direct = None  # elements whose bound outside() summed directly; None: full()

    def full(self):
        """Every element's bound (``case.error_bound``), computed once."""
        if self._full is None:
            self._full = error_bound(
                self.case, self._dy, self._w, self._golden, self.rounding_ulps, self._grid
            )
        return self._full

    def at(self, flat):
        """The bound at the flat indices ``flat`` (float64): read from :meth:`full` when that
        is made, else the sum|dy w| of each summed directly in float64."""
        if self._full is not None:
            return self._full.reshape(-1)[flat]
        positions = np.stack(np.unravel_index(flat, self._golden.shape), axis=1)
        _, magnitude = _dx_at(self.case, self._dy, self._w, positions)
        spacing = self._grid.ulp_of(flat)
        with np.errstate(invalid="ignore"):
            return magnitude * accumulation_share(self.case) + self.rounding_ulps * spacing

    def outside(self, errors):
        """Where ``errors`` (``accuracy.ElementErrors``) lie outside the bound: a NaN/Inf
        mismatch, or an error above the bound, which only an error above the ulp term can be."""
        if not errors.sums["mismatches"] and self.rounding_ulps >= 1 and errors.above is not None:
            # the pass listed every element more than one ulp off: no array of every element
            flat, errors_at, ulps = errors.above
            keep = ulps > self.rounding_ulps
            flat, errors_at = flat[keep], errors_at[keep]
            outside = np.zeros(np.shape(self._golden), dtype=bool)
        else:
            outside = errors.mismatch.copy()
            # errors.ulp is abs / ulp(g), ulp a power of two: the same test as abs > r ulp(g)
            with np.errstate(invalid="ignore"):
                above = errors.ulp > self.rounding_ulps
            above &= ~errors.mismatch
            flat = np.flatnonzero(above)
            errors_at = errors.abs.reshape(-1)[flat]
        if flat.size > min(DIRECT_MAX, DIRECT_SHARE * outside.size):
            self.full()
        else:
            self.direct = int(flat.size)
        if flat.size:
            with np.errstate(invalid="ignore"):
                outside.reshape(-1)[flat] = errors_at > self.at(flat)
        return outside
