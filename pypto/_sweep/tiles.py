"""Legal tiles of a problem, a bounded number of them: what a case's ``"tiles": "all"`` means.

pypto/_core has the suggestion (one set of tiles) and the explanation (the nearest legal ones
around a given set), but no enumerator. This one walks a small grid of candidate values per
tile dimension (powers of two in 16-element steps, the rows of Win, the K blocks of
16 * Kh * Kw) in a fixed order and keeps what the op's own tile rules (TS1-TS6, via
``tile_violation``) accept: the same problem always gives the same list.
"""

import itertools

from .._core.rules import tile_violation
from .._core.tiling import C0, Tiling, ceil_align

__all__ = ["legal_tilings", "DEFAULT_LIMIT"]

DEFAULT_LIMIT = 8  # tile sets per case when the case file gives no "tiles_limit"
_STEPS = (16, 32, 64, 128, 256)


def _m_l1_values(p):
    """tileML1: at most Win (multiples of 16, or Win itself), or whole rows of Win (TS1)."""
    values = [v for v in _STEPS if v <= p.win] or [p.win]
    values += [p.win * rows for rows in (1, 2, 4, 8) if p.win * rows <= p.hin * p.win]
    return sorted(set(values))


def legal_tilings(problem, limit=DEFAULT_LIMIT):
    """Up to ``limit`` legal Tilings of ``problem``, largest L1 blocks first, in a fixed
    order (deterministic: shards and workers expand a case file alike)."""
    p = problem
    k_block = C0 * p.taps
    cout_blocks = ceil_align(p.cout, C0) // C0
    n_max = ceil_align(p.cin, C0)
    found = []
    for ml1, blocks, nl1 in itertools.product(
        sorted(_m_l1_values(p), reverse=True),
        [b for b in (8, 4, 2, 1) if b <= cout_blocks] or [1],
        [v for v in (128, 64, 32, 16) if v <= n_max] or [C0],
    ):
        kl1 = k_block * blocks
        for ml0, kl0, nl0 in itertools.product(
            [v for v in (128, 64, 32, 16) if v <= ceil_align(ml1, C0)],
            [v for v in (128, 64, 32, 16) if v <= kl1],
            [v for v in (128, 64, 32, 16) if v <= nl1],
        ):
            tiling = Tiling(ml1, kl1, nl1, ml0, kl0, nl0)
            if tile_violation(p, tiling) is None:
                found.append(tiling)
                break  # one L0 choice per L1 choice: spread the few sets over L1 shapes
        if len(found) >= limit:
            break
    return found
