"""Where a dgrad result is wrong, in the terms of the NPU kernel: image, channel block, M tile,
and inside a failing task the 16-channel blocks and row bands that hold the errors.

The NPU launch plan cuts dx of one image into tasks (``pypto/_core/tiling.py``, ``task_grid``):
tileNL1 input channels (at most Cin rounded up to 16) by tileML1 pixels of whole image rows
(``tileML1 // Win`` rows when tileML1 >= Win, else one row; taller when one image would need
more than 65535 tasks). A fault in one task's tiling, halo or tail shows as errors confined to
one (image, channel block, M tile) box; this module counts them per image, per block, per tile
and per task, lists the worst elements, and names the *regions* inside each failing task: its
runs of 16-channel blocks (C0, the channels of one fractal of the NC1HWC0 layout the kernel
moves) that hold elements outside the bound, each with its bands of consecutive rows that do.
A task with more than MAX_REGIONS of them is named by one box around them all. The picture is
``pypto._golden.heatmap``.

An element is *outside the bound* when it is off the golden by more than any fp32-accumulating
kernel with one final rounding can be: one ulp of the output dtype plus K * 2^-24 * sum|dy * w|
(``pypto._golden.case.error_bound``), or when it is a NaN/Inf mismatch. A correct kernel, in any
summation order, has no element outside it. Only an element off by more than the ulp term can
be, so the bound is computed at those elements alone (``pypto._golden.bound.ErrorBound``) and
at every element only for ``over_bound``, the worst elements and the heatmap.
"""

from dataclasses import dataclass

import numpy as np

from .._core.tiling import C0, task_grid
from .accuracy import json_ready
from .heatmap import PLOT_UNITS, check_plot_path, draw, plotting_available

__all__ = [
    "Localisation",
    "Region",
    "task_grid",
    "PLOT_UNITS",
    "check_plot_path",
    "plotting_available",
]

MAX_ROWS = 16  # rows per table section before only the worst are shown
MAX_REGIONS = 4  # regions named in one task before one box around them replaces them


def _span(word, lo, hi):
    return f"{word}s {lo}-{hi}" if hi > lo else f"{word} {lo}"


def _runs(flags):
    """[(first, last)] of the runs of True in a 1-D bool array."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], flags.astype(np.int8), [0]))))
    return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2])]


@dataclass(frozen=True)
class Region:
    """Elements outside the bound inside one failing task: a run of 16-channel blocks by a band
    of consecutive rows, every column (channels and rows as (first, last), inclusive)."""

    image: int
    channels: tuple
    rows: tuple
    outside: int
    elements: int
    max_ulp: float
    channel_block: int  # the task's
    m_tile: int

    @property
    def where(self):
        return f"image {self.image}, {_span('channel', *self.channels)}, {_span('row', *self.rows)}"

    def as_dict(self):
        return {
            "image": self.image,
            "channels": list(self.channels),
            "rows": list(self.rows),
            "outside": self.outside,
            "elements": self.elements,
            "max_ulp": json_ready(self.max_ulp),
            "where": self.where,
        }


@dataclass
class WorstElement:
    """One element: where, the three values, and how far off."""

    n: int
    c: int
    h: int
    w: int
    golden: float
    actual: float
    pypto: float
    abs_error: float
    ulps: float
    over_bound: float  # |a - g| / bound; > 1 is outside
    block: int  # channel block index
    tile: int  # M tile index


def _reduce(per_row, op, c_starts, h_starts):
    """(N, C, H) of each dx row's -> (N, channel blocks, M tiles) with ``op`` (np.add or
    np.maximum)."""
    return op.reduceat(op.reduceat(per_row, c_starts, axis=1), h_starts, axis=2)


class Localisation:
    """Errors of a result by image, channel block, M tile and task; the worst elements.

    The arrays' image axis counts from 0 (``failing_tasks`` and ``task_regions`` speak of
    those positions); what the text, the regions, the worst elements and ``as_dict`` call an
    image is :meth:`image_id` of it: the same number, or the caller's own image index when the
    judged arrays are a sample of a larger batch (:meth:`name_images`)."""

    def __init__(self, case, golden, actual, reference, errors, reference_errors, bound):
        self.case = case
        self.images = None  # the caller's index of each judged image (None: 0, 1, ...)
        p = case.problem
        self.rows_per_tile, self.channels_per_block, self.m_tiles, self.channel_blocks = task_grid(
            p, case.tiling
        )
        self._golden, self._actual, self._reference = golden, actual, reference
        self._errors, self._reference_errors = errors, reference_errors
        # bound: every element's (an array), or a bound.ErrorBound, which decides outside from
        # the few elements above the ulp term and makes every element's only for over_bound
        self._bound, self._over = bound, None
        self._regions = None  # regions(), computed when first asked for
        if isinstance(bound, np.ndarray):
            outside = self.over_bound > 1.0
        else:
            outside = bound.outside(errors)
        self.outside = outside
        self.outside_count = int(np.count_nonzero(outside))
        c_starts = np.arange(0, p.cin, self.channels_per_block)
        h_starts = np.arange(0, p.hin, self.rows_per_tile)
        self.channel_starts = c_starts
        # per task (image, channel block, M tile), from each dx row's (the judgement's pass)
        if self.outside_count:
            per_row = np.count_nonzero(outside, axis=3)
        else:
            per_row = np.zeros(outside.shape[:3], dtype=np.int64)
        self.task_outside = _reduce(per_row, np.add, c_starts, h_starts)
        self.task_max_ulp = _reduce(errors.row_max_ulp, np.maximum, c_starts, h_starts)
        self.task_reference_max_ulp = _reduce(
            reference_errors.row_max_ulp, np.maximum, c_starts, h_starts
        )
        self.task_max_abs = _reduce(errors.row_max_abs, np.maximum, c_starts, h_starts)
        block_sizes = np.diff(np.append(c_starts, p.cin))
        tile_rows = np.diff(np.append(h_starts, p.hin))
        self.task_elements = (
            np.ones(p.n, np.int64)[:, None, None]
            * block_sizes[None, :, None]
            * tile_rows[None, None, :]
            * p.win
        )

    def name_images(self, images):
        """Name the judged images by the caller's indices: ``images[i]`` is image ``i`` of
        the judged arrays (a sample of a larger batch). A ValueError unless it holds one
        int per judged image."""
        images = tuple(int(i) for i in images)
        if len(images) != self.case.problem.n:
            raise ValueError(
                f"name_images: {len(images)} indices for {self.case.problem.n} judged images"
            )
        self.images, self._regions = images, None

    def image_id(self, n):
        """The caller's index of judged image ``n``."""
        return n if self.images is None else self.images[n]

    @property
    def errors(self):
        """The result's ``accuracy.ElementErrors``."""
        return self._errors

    @property
    def over_bound(self):
        """|a - g| / bound per element (inf at a NaN/Inf mismatch); > 1 is outside. Made when
        first asked for (with an ErrorBound, from every element's bound)."""
        if self._over is None:
            bound = self._bound if isinstance(self._bound, np.ndarray) else self._bound.full()
            errors = self._errors
            with np.errstate(invalid="ignore", divide="ignore"):
                over = np.where(
                    errors.mismatch, np.inf, np.where(bound > 0, errors.abs / bound, 0.0)
                )
            self._over = np.nan_to_num(over, nan=0.0, posinf=np.inf)
        return self._over

    # --- names of the boxes ------------------------------------------------------------------
    def block_channels(self, b):
        start = b * self.channels_per_block
        return start, min(start + self.channels_per_block, self.case.problem.cin) - 1

    def tile_rows(self, m):
        start = m * self.rows_per_tile
        return start, min(start + self.rows_per_tile, self.case.problem.hin) - 1

    def block_name(self, b):
        lo, hi = self.block_channels(b)
        return f"channels {lo}-{hi}" if hi > lo else f"channel {lo}"

    def tile_name(self, m):
        lo, hi = self.tile_rows(m)
        return f"M tile {m} (rows {lo}-{hi})" if hi > lo else f"M tile {m} (row {lo})"

    # --- the sections --------------------------------------------------------------------------
    def _section(self, axis):
        """[(label, elements, outside, max ulp, pypto max ulp, max abs)] along one task axis."""
        others = tuple(a for a in (0, 1, 2) if a != axis)
        rows = []
        sums = [t.sum(axis=others) for t in (self.task_elements, self.task_outside)]
        maxes = [
            t.max(axis=others)
            for t in (self.task_max_ulp, self.task_reference_max_ulp, self.task_max_abs)
        ]
        names = {0: lambda i: f"image {self.image_id(i)}", 1: self.block_name, 2: self.tile_name}
        name = names[axis]
        for i in range(sums[0].shape[0]):
            rows.append(
                (
                    name(i),
                    int(sums[0][i]),
                    int(sums[1][i]),
                    float(maxes[0][i]),
                    float(maxes[1][i]),
                    float(maxes[2][i]),
                )
            )
        return rows

    def per_image(self):
        return self._section(0)

    def per_channel_block(self):
        return self._section(1)

    def per_m_tile(self):
        return self._section(2)

    def failing_tasks(self):
        """[(image, channel block, M tile, outside, elements, max ulp)], most outside first;
        the image as its position in the judged arrays (:meth:`image_id` names it)."""
        found = np.argwhere(self.task_outside > 0)
        tasks = [
            (
                int(n),
                int(b),
                int(m),
                int(self.task_outside[n, b, m]),
                int(self.task_elements[n, b, m]),
                float(self.task_max_ulp[n, b, m]),
            )
            for n, b, m in found
        ]
        return sorted(tasks, key=lambda t: (-t[3], -t[5], t[:3]))

    def task_regions(self, n, b, m):
        """The :class:`Region` list of the task (image ``n``, channel block ``b``, M tile
        ``m``): each run of its 16-channel blocks holding elements outside the bound, by each
        band of consecutive rows holding some in that run; one box around them all when there
        are more than MAX_REGIONS. [] for a task within the bound."""
        c_lo, c_hi = self.block_channels(b)
        r_lo, r_hi = self.tile_rows(m)
        box = self.outside[n, c_lo : c_hi + 1, r_lo : r_hi + 1]
        if not box.any():
            return []
        per_channel = box.any(axis=(1, 2))
        # C0 blocks are aligned to channel 0, as task blocks are (tileNL1 is a multiple of 16)
        blocks = np.logical_or.reduceat(per_channel, np.arange(0, per_channel.size, C0))
        spans = []  # (first channel, last channel, first row, last row), task-relative
        for first, last in _runs(blocks):
            lo, hi = first * C0, min((last + 1) * C0, per_channel.size) - 1
            rows = box[lo : hi + 1].any(axis=(0, 2))
            spans += [(lo, hi, top, bottom) for top, bottom in _runs(rows)]
        if len(spans) > MAX_REGIONS:
            spans = [
                (
                    min(s[0] for s in spans),
                    max(s[1] for s in spans),
                    min(s[2] for s in spans),
                    max(s[3] for s in spans),
                )
            ]
        regions = []
        for lo, hi, top, bottom in spans:
            c = slice(c_lo + lo, c_lo + hi + 1)
            h = slice(r_lo + top, r_lo + bottom + 1)
            regions.append(
                Region(
                    self.image_id(n),
                    (c_lo + lo, c_lo + hi),
                    (r_lo + top, r_lo + bottom),
                    int(self.outside[n, c, h].sum()),
                    (hi - lo + 1) * (bottom - top + 1) * self.case.problem.win,
                    float(self._errors.ulp[n, c, h].max()),
                    b,
                    m,
                )
            )
        return regions

    def regions(self):
        """Every failing task's regions (:meth:`task_regions`), the tasks in
        :meth:`failing_tasks` order."""
        if self._regions is None:
            self._regions = [
                r for task in self.failing_tasks() for r in self.task_regions(*task[:3])
            ]
        return self._regions

    def worst(self, k=10):
        """The ``k`` elements farthest outside (or nearest to) the bound, as WorstElement."""
        if k <= 0 or self._golden.size == 0:
            return []
        flat = self.over_bound.ravel()
        k = min(k, flat.size)
        # farthest first; among equals, the largest error in ulps
        idx = np.argpartition(-flat, k - 1)[:k] if k < flat.size else np.arange(flat.size)
        ulps = self._errors.ulp.ravel()
        idx = sorted(idx, key=lambda i: (-flat[i], -ulps[i], i))
        shape = self._golden.shape
        result = []
        for i in idx:
            n, c, h, w = (int(v) for v in np.unravel_index(i, shape))
            result.append(
                WorstElement(
                    self.image_id(n),
                    c,
                    h,
                    w,
                    float(self._golden[n, c, h, w]),
                    float(self._actual[n, c, h, w]),
                    float(self._reference[n, c, h, w]),
                    float(self._errors.abs[n, c, h, w]),
                    float(ulps[i]),
                    float(flat[i]),
                    c // self.channels_per_block,
                    h // self.rows_per_tile,
                )
            )
        return result

    # --- text --------------------------------------------------------------------------------
    def grid_text(self):
        p, t = self.case.problem, self.case.tiling
        how = (
            f"tileML1 {t.ml1} // Win {p.win}"
            if t.ml1 >= p.win
            else f"tileML1 {t.ml1} < Win {p.win}"
        )
        tasks = p.n * self.channel_blocks * self.m_tiles
        which = "" if self.images is None else f" (images {', '.join(map(str, self.images))})"
        return (
            f"M tile = {self.rows_per_tile} image row(s) ({how}), {self.m_tiles} tile(s); "
            f"channel block = {self.channels_per_block} channels (tileNL1 {t.nl1}), "
            f"{self.channel_blocks} block(s); {p.n} image(s){which}: {tasks} task(s)"
        )

    def grid_dict(self):
        """The task grid as plain data (``as_dict``'s "grid")."""
        return {
            "rows_per_m_tile": self.rows_per_tile,
            "m_tiles": self.m_tiles,
            "channels_per_block": self.channels_per_block,
            "channel_blocks": self.channel_blocks,
            "text": self.grid_text(),
        }

    def format(self, top=10):
        total = self._golden.size
        lines = [
            f"localisation: {self.outside_count} of {total} elements outside the bound "
            f"|a - g| <= 1 ulp + K 2^-24 sum|dy w| (K = {self.case.k_terms})",
            f"  {self.grid_text()}",
            f"  {'where':<30} {'elements':>9} {'outside':>8} {'max ulp':>10} "
            f"{'pypto max ulp':>14} {'max abs err':>12}",
        ]
        for title, rows in (
            ("per image", self.per_image()),
            ("per channel block", self.per_channel_block()),
            ("per M tile", self.per_m_tile()),
        ):
            shown = rows
            if len(rows) > MAX_ROWS:
                shown = sorted(rows, key=lambda r: (-r[2], -r[3]))[:MAX_ROWS]
                shown = [r for r in rows if r in shown]
                lines.append(f"  {title}: the {MAX_ROWS} worst of {len(rows)}")
            for label, elements, outside, max_ulp, ref_ulp, max_abs in shown:
                mark = "  <-" if outside else ""
                lines.append(
                    f"  {label:<30} {elements:>9} {outside:>8} {max_ulp:>10.3g} "
                    f"{ref_ulp:>14.3g} {max_abs:>12.3g}{mark}"
                )
        tasks = self.failing_tasks()
        total_tasks = self.task_outside.size
        if tasks:
            lines.append(
                f"  tasks with elements outside the bound: {len(tasks)} of "
                f"{total_tasks}" + (f" (the {MAX_ROWS} worst)" if len(tasks) > MAX_ROWS else "")
            )
            for n, b, m, outside, elements, max_ulp in tasks[:MAX_ROWS]:
                lines.append(
                    f"    image {self.image_id(n)}, {self.block_name(b)}, {self.tile_name(m)}: "
                    f"{outside} of {elements} outside, max {max_ulp:.3g} ulp"
                )
                lines += [
                    f"      region {r.where}: {r.outside} of {r.elements} outside, max "
                    f"{r.max_ulp:.3g} ulp"
                    for r in self.task_regions(n, b, m)
                ]
        else:
            lines.append(f"  every one of the {total_tasks} tasks is within the bound")
        worst = self.worst(top)
        if worst:
            lines.append("worst elements (by error / bound; > 1 is outside):")
            lines.append(
                f"  {'n':>4} {'c':>5} {'h':>5} {'w':>5} {'golden':>13} {'actual':>13} "
                f"{'pypto':>13} {'abs err':>10} {'ulps':>10} {'x bound':>9}  task"
            )
            for e in worst:
                lines.append(
                    f"  {e.n:>4} {e.c:>5} {e.h:>5} {e.w:>5} {e.golden:>13.6g} "
                    f"{e.actual:>13.6g} {e.pypto:>13.6g} {e.abs_error:>10.3g} "
                    f"{e.ulps:>10.3g} {e.over_bound:>9.3g}  block {e.block}, "
                    f"M tile {e.tile}"
                )
        return "\n".join(lines)

    def __str__(self):
        return self.format()

    def as_dict(self, top=10):
        """JSON-ready: the task grid, the boxes' counts, the failing tasks with their regions
        and the worst elements (``top`` of them); box rows as in :meth:`format`, every one of
        them."""
        keys = ("where", "elements", "outside", "max_ulp", "pypto_max_ulp", "max_abs_error")

        def rows(section):
            return [
                dict(
                    zip(
                        keys,
                        (r[0], r[1], r[2], json_ready(r[3]), json_ready(r[4]), json_ready(r[5])),
                    )
                )
                for r in section
            ]

        return {
            "outside_bound": self.outside_count,
            "bound": f"|a - g| <= 1 ulp + K 2^-24 sum|dy w|, K = {self.case.k_terms}",
            "grid": self.grid_dict(),
            "per_image": rows(self.per_image()),
            "per_channel_block": rows(self.per_channel_block()),
            "per_m_tile": rows(self.per_m_tile()),
            "failing_tasks": [
                {
                    "image": self.image_id(n),
                    "channel_block": b,
                    "m_tile": m,
                    "outside": o,
                    "elements": e,
                    "max_ulp": json_ready(u),
                    "regions": [r.as_dict() for r in self.task_regions(n, b, m)],
                }
                for n, b, m, o, e, u in self.failing_tasks()
            ],
            "worst": [json_ready(vars(e)) for e in self.worst(top)],
        }

    def plot(self, path, units="ulp"):
        """Save the heatmap of the error (``pypto._golden.heatmap.draw``); return ``path``."""
        return draw(self, path, units)
