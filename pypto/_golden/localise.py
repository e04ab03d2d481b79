"""Where a dgrad result is wrong, in the terms of the NPU kernel: image, channel block, M tile.

The NPU launch plan cuts dx of one image into tasks (``pypto/_core/tiling.py``, ``task_grid``):
tileNL1 input channels (at most Cin rounded up to 16) by tileML1 pixels of whole image rows
(``tileML1 // Win`` rows when tileML1 >= Win, else one row; taller when one image would need
more than 65535 tasks). A fault in one task's tiling, halo or tail shows as errors confined to
one (image, channel block, M tile) box; this module counts them per image, per block, per tile
and per task, lists the worst elements, and draws them.

An element is *outside the bound* when it is off the golden by more than any fp32-accumulating
kernel with one final rounding can be: one ulp of the output dtype plus K * 2^-24 * sum|dy * w|
(``pypto._golden.case.error_bound``), or when it is a NaN/Inf mismatch. A correct kernel, in any
summation order, has no element outside it.
"""

import os
from dataclasses import dataclass

import numpy as np

from .._core.fileio import atomic_writer
from .._core.tiling import ceil_div, task_grid
from ..error import FeError
from .accuracy import json_ready

__all__ = ["Localisation", "task_grid", "PLOT_UNITS", "check_plot_path", "plotting_available"]

MAX_ROWS = 16  # rows per table section before only the worst are shown
MAX_PANELS = 8  # channel blocks drawn
PLOT_UNITS = ("ulp", "relative", "bound")


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


def _reduce(values, op, c_starts, h_starts):
    """(N, C, H, W) -> (N, channel blocks, M tiles) with ``op`` (np.add or np.maximum)."""
    per_row = op.reduce(values, axis=3)
    return op.reduceat(op.reduceat(per_row, c_starts, axis=1), h_starts, axis=2)


class Localisation:
    """Errors of a result by image, channel block, M tile and task; the worst elements."""

    def __init__(self, case, golden, actual, reference, errors, reference_errors, bound):
        self.case = case
        p = case.problem
        self.rows_per_tile, self.channels_per_block, self.m_tiles, self.channel_blocks = task_grid(
            p, case.tiling
        )
        self._golden, self._actual, self._reference = golden, actual, reference
        self._errors, self._reference_errors = errors, reference_errors
        with np.errstate(invalid="ignore", divide="ignore"):
            self._over = np.where(
                errors.mismatch, np.inf, np.where(bound > 0, errors.abs / bound, 0.0)
            )
        self._over = np.nan_to_num(self._over, nan=0.0, posinf=np.inf)
        outside = self._over > 1.0
        self.outside = outside
        self.outside_count = int(outside.sum())
        c_starts = np.arange(0, p.cin, self.channels_per_block)
        h_starts = np.arange(0, p.hin, self.rows_per_tile)
        self._c_starts, self._h_starts = c_starts, h_starts
        # per task (image, channel block, M tile)
        self.task_outside = _reduce(outside.astype(np.int64), np.add, c_starts, h_starts)
        self.task_max_ulp = _reduce(errors.ulp, np.maximum, c_starts, h_starts)
        self.task_reference_max_ulp = _reduce(reference_errors.ulp, np.maximum, c_starts, h_starts)
        self.task_max_abs = _reduce(errors.abs, np.maximum, c_starts, h_starts)
        block_sizes = np.diff(np.append(c_starts, p.cin))
        tile_rows = np.diff(np.append(h_starts, p.hin))
        self.task_elements = (
            np.ones(p.n, np.int64)[:, None, None]
            * block_sizes[None, :, None]
            * tile_rows[None, None, :]
            * p.win
        )

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
        name = {0: lambda i: f"image {i}", 1: self.block_name, 2: self.tile_name}[axis]
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
        """[(image, channel block, M tile, outside, elements, max ulp)], most outside first."""
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

    def worst(self, k=10):
        """The ``k`` elements farthest outside (or nearest to) the bound, as WorstElement."""
        flat = self._over.ravel()
        k = min(k, flat.size)
        if k <= 0:
            return []
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
                    n,
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
        return (
            f"M tile = {self.rows_per_tile} image row(s) ({how}), {self.m_tiles} tile(s); "
            f"channel block = {self.channels_per_block} channels (tileNL1 {t.nl1}), "
            f"{self.channel_blocks} block(s); {p.n} image(s): {tasks} task(s)"
        )

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
                    f"    image {n}, {self.block_name(b)}, {self.tile_name(m)}: "
                    f"{outside} of {elements} outside, max {max_ulp:.3g} ulp"
                )
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
        """JSON-ready: the task grid, the boxes' counts, the failing tasks and the worst
        elements (``top`` of them); box rows as in :meth:`format`, every one of them."""
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
            "grid": {
                "rows_per_m_tile": self.rows_per_tile,
                "m_tiles": self.m_tiles,
                "channels_per_block": self.channels_per_block,
                "channel_blocks": self.channel_blocks,
                "text": self.grid_text(),
            },
            "per_image": rows(self.per_image()),
            "per_channel_block": rows(self.per_channel_block()),
            "per_m_tile": rows(self.per_m_tile()),
            "failing_tasks": [
                {
                    "image": n,
                    "channel_block": b,
                    "m_tile": m,
                    "outside": o,
                    "elements": e,
                    "max_ulp": json_ready(u),
                }
                for n, b, m, o, e, u in self.failing_tasks()
            ],
            "worst": [json_ready(vars(e)) for e in self.worst(top)],
        }

    # --- the picture ---------------------------------------------------------------------------
    def plot(self, path, units="ulp"):
        """Save a heatmap of the error over (H, W), one panel per channel block (the worst
        MAX_PANELS when there are more), max over the images and the block's channels, with the
        M tile boundaries drawn and the tiles holding elements outside the bound framed in red.

        ``units``: "ulp" (|a - g| / ulp of the output dtype at g), "relative"
        (|a - g| / (|g| + 1e-7)) or "bound" (|a - g| / the bound). Needs matplotlib.
        """
        if units not in PLOT_UNITS:
            raise FeError(
                ValueError(f"units must be one of {', '.join(PLOT_UNITS)}, but got {units!r}")
            )
        figure_type, canvas_type, colors, patches = _matplotlib()
        path, fmt = check_plot_path(path)
        p = self.case.problem
        values = {"ulp": self._errors.ulp, "relative": self._errors.rel, "bound": self._over}[units]
        floor = {"ulp": 0.25, "relative": 1e-5, "bound": 1e-2}[units]
        label = {
            "ulp": f"|actual - golden| in ulps of {self.case.dtype_name}",
            "relative": "|actual - golden| / (|golden| + 1e-7)",
            "bound": "|actual - golden| / bound (> 1: outside)",
        }[units]
        # per block: max over the images and the block's channels, (blocks, H, W)
        per_block = np.maximum.reduceat(values.max(axis=0), self._c_starts, axis=0)
        mismatch = np.add.reduceat(self._errors.mismatch.sum(axis=0), self._c_starts, axis=0) > 0
        outside_tiles = self.task_outside.sum(axis=0) > 0  # (blocks, tiles)
        order = sorted(
            range(self.channel_blocks), key=lambda b: (-int(self.task_outside[:, b].sum()), b)
        )[:MAX_PANELS]
        order.sort()
        finite = per_block[np.isfinite(per_block)]
        vmax = max(float(finite.max()) if finite.size else floor, floor * 16)
        shown = np.clip(np.where(np.isfinite(per_block), per_block, vmax), floor, vmax)

        cols = min(len(order), 4)
        rows = ceil_div(len(order), cols)
        aspect = p.hin / p.win
        panel_w = 3.6
        panel_h = min(max(panel_w * aspect, 1.6), 6.0)
        fig = figure_type(
            figsize=(max(panel_w * cols + 1.4, 7.5), panel_h * rows + 1.4),
            dpi=80,
            layout="constrained",
        )
        canvas_type(fig)
        axes = fig.subplots(rows, cols, squeeze=False)
        norm = colors.LogNorm(vmin=floor, vmax=vmax)
        image = None
        for slot, ax in enumerate(axes.ravel()):
            if slot >= len(order):
                ax.set_visible(False)
                continue
            b = order[slot]
            image = ax.imshow(
                shown[b], cmap="inferno", norm=norm, interpolation="nearest", aspect="auto"
            )
            out = int(self.task_outside[:, b].sum())
            title = f"{self.block_name(b)}: {out} outside"
            if out:
                images = [int(n) for n in np.nonzero(self.task_outside[:, b].sum(axis=1))[0]]
                title += (
                    f" (image{'s' if len(images) > 1 else ''} "
                    + ", ".join(str(n) for n in images[:3])
                    + (", ..." if len(images) > 3 else "")
                    + ")"
                )
            ax.set_title(title, fontsize=9, color="red" if out else "black")
            if self.m_tiles <= 64:
                for m in range(1, self.m_tiles):
                    ax.axhline(m * self.rows_per_tile - 0.5, color="#7fdbff", lw=0.8, alpha=0.9)
            for m in range(self.m_tiles):
                if outside_tiles[b, m]:
                    lo, hi = self.tile_rows(m)
                    ax.add_patch(
                        patches.Rectangle(
                            (-0.5, lo - 0.5),
                            p.win,
                            hi - lo + 1,
                            fill=False,
                            edgecolor="#ff2020",
                            lw=3,
                            linestyle="--",
                        )
                    )
            ys, xs = np.nonzero(mismatch[b])
            if ys.size:
                ax.plot(xs, ys, "x", color="#00ff66", ms=6, mew=1.5)
            if self.m_tiles <= 12:
                centres = [
                    (self.tile_rows(m)[0] + self.tile_rows(m)[1]) / 2 for m in range(self.m_tiles)
                ]
                ax.set_yticks(centres)
                ax.set_yticklabels([f"M{m}" for m in range(self.m_tiles)], fontsize=8)
                ax.set_ylabel(f"M tile ({self.rows_per_tile} row(s) each)", fontsize=8)
            else:
                ax.tick_params(labelsize=8)
                ax.set_ylabel("h", fontsize=8)
            ax.tick_params(axis="x", labelsize=8)
            ax.set_xlabel("w", fontsize=8)
        more = (
            f"; the {len(order)} worst of {self.channel_blocks} channel blocks"
            if self.channel_blocks > len(order)
            else ""
        )
        lines = (
            "M tile boundaries (blue lines)"
            if self.m_tiles <= 64
            else f"{self.m_tiles} M tiles (lines omitted)"
        )
        fig.suptitle(
            f"dgrad {self.case.dtype_name} {list(self.case.input_size)}: "
            f"{self.outside_count} elements outside the bound{more}\n"
            f"max over images and the block's channels; {lines};\n"
            f"red frame: tile with elements outside the bound, x: NaN/Inf mismatch",
            fontsize=9,
        )
        bar = fig.colorbar(image, ax=axes, shrink=0.9, aspect=30)
        bar.set_label(label, fontsize=8)
        bar.ax.tick_params(labelsize=8)
        try:
            with atomic_writer(path, "wb") as f:  # a failed plot leaves the old file
                fig.savefig(f, format=fmt)
        except (OSError, ValueError, RuntimeError) as exc:  # ValueError: a format it refuses
            raise FeError(ValueError(f"cannot write the plot to {path}: {exc}")) from None
        return path


def _matplotlib():
    """matplotlib's Figure, the Agg canvas, colors and patches, imported on first use only."""
    try:
        from matplotlib import colors, patches
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise FeError(
            RuntimeError(
                "plotting needs matplotlib, which is not installed: "
                "pip install matplotlib (or pip install 'pypto[plot]')"
            )
        ) from None
    return Figure, FigureCanvasAgg, colors, patches


def check_plot_path(path):
    """(path, format) for savefig, or a PyptoError before anything is drawn: an empty path, a
    folder, a missing or read-only folder, or an extension matplotlib cannot write. A name
    without an extension is a PNG written under that very name (matplotlib would add .png)."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise FeError(
            TypeError(f"the plot path must be a str or os.PathLike, but got {path!r}")
        ) from None
    if not isinstance(path, str) or not path.strip() or "\0" in path:
        raise FeError(ValueError(f"the plot path is {path!r}: give a file name such as dx.png"))
    if os.path.isdir(path) or path.endswith(("/", os.sep)):
        raise FeError(
            ValueError(
                f"cannot write the plot to {path}: it is a folder; give a file "
                f"name such as {os.path.join(path, 'dx.png')}"
            )
        )
    _matplotlib()  # its clear error when matplotlib is missing
    from matplotlib.backend_bases import FigureCanvasBase

    extension = os.path.splitext(path)[1]
    fmt = extension[1:].lower() if extension else "png"
    supported = FigureCanvasBase.get_supported_filetypes()
    if fmt not in supported:
        raise FeError(
            ValueError(
                f"cannot write the plot to {path}: matplotlib cannot write "
                f"'{extension}' files (it writes "
                f"{', '.join('.' + f for f in sorted(supported))})"
            )
        )
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise FeError(
            OSError(f"cannot write the plot to {path}: {folder} is not a writable folder")
        )
    return path, fmt


def plotting_available():
    """None when matplotlib can be imported, else the PyptoError plot() would raise."""
    try:
        _matplotlib()
    except FeError as exc:
        return exc
    return None
