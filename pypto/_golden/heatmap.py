"""The picture of a localisation (``pypto compare --plot``, ``CompareResult.plot``): the error
over (H, W), one panel per channel block of the task grid, M tile boundaries in blue, the row
bands of the failing regions framed in red; and the checks on a plot path made before any work.
"""

import os

import numpy as np

from .._core.fileio import atomic_writer
from .._core.tiling import ceil_div
from ..error import FeError

__all__ = ["PLOT_UNITS", "draw", "check_plot_path", "plotting_available"]

MAX_PANELS = 8  # channel blocks drawn
PLOT_UNITS = ("ulp", "relative", "bound")


def draw(loc, path, units="ulp"):
    """Save a heatmap of ``loc``'s (a ``Localisation``) error over (H, W), one panel per channel
    block (the worst MAX_PANELS when there are more), max over the images and the block's
    channels, with the M tile boundaries drawn and the row bands of the failing regions
    (``Localisation.regions``) framed in red; return ``path``.

    ``units``: "ulp" (|a - g| / ulp of the output dtype at g), "relative"
    (|a - g| / (|g| + 1e-7)) or "bound" (|a - g| / the bound). Needs matplotlib.
    """
    if units not in PLOT_UNITS:
        raise FeError(
            ValueError(f"units must be one of {', '.join(PLOT_UNITS)}, but got {units!r}")
        )
    figure_type, canvas_type, colors, patches = _matplotlib()
    path, fmt = check_plot_path(path)
    case, errors = loc.case, loc.errors
    p = case.problem
    values = {"ulp": errors.ulp, "relative": errors.rel, "bound": loc.over_bound}[units]
    floor = {"ulp": 0.25, "relative": 1e-5, "bound": 1e-2}[units]
    label = {
        "ulp": f"|actual - golden| in ulps of {case.dtype_name}",
        "relative": "|actual - golden| / (|golden| + 1e-7)",
        "bound": "|actual - golden| / bound (> 1: outside)",
    }[units]
    # per block: max over the images and the block's channels, (blocks, H, W)
    starts = loc.channel_starts
    per_block = np.maximum.reduceat(values.max(axis=0), starts, axis=0)
    mismatch = np.add.reduceat(errors.mismatch.sum(axis=0), starts, axis=0) > 0
    regions = loc.regions()
    order = sorted(
        range(loc.channel_blocks), key=lambda b: (-int(loc.task_outside[:, b].sum()), b)
    )[:MAX_PANELS]
    order.sort()
    finite = per_block[np.isfinite(per_block)]
    vmax = max(float(finite.max()) if finite.size else floor, floor * 16)
    shown = np.clip(np.where(np.isfinite(per_block), per_block, vmax), floor, vmax)

    cols = min(len(order), 4)
    rows = ceil_div(len(order), cols)
    panel_w = 3.6
    panel_h = min(max(panel_w * p.hin / p.win, 1.6), 6.0)
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
        mine = [r for r in regions if r.channel_block == b]
        ax.set_title(_panel_title(loc, b, mine), fontsize=9, color="red" if mine else "black")
        if loc.m_tiles <= 64:
            for m in range(1, loc.m_tiles):
                ax.axhline(m * loc.rows_per_tile - 0.5, color="#7fdbff", lw=0.8, alpha=0.9)
        for lo, hi in sorted({r.rows for r in mine}):  # max over images: one frame per band
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
        if loc.m_tiles <= 12:
            centres = [sum(loc.tile_rows(m)) / 2 for m in range(loc.m_tiles)]
            ax.set_yticks(centres)
            ax.set_yticklabels([f"M{m}" for m in range(loc.m_tiles)], fontsize=8)
            ax.set_ylabel(f"M tile ({loc.rows_per_tile} row(s) each)", fontsize=8)
        else:
            ax.tick_params(labelsize=8)
            ax.set_ylabel("h", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_xlabel("w", fontsize=8)
    more = (
        f"; the {len(order)} worst of {loc.channel_blocks} channel blocks"
        if loc.channel_blocks > len(order)
        else ""
    )
    lines = (
        "M tile boundaries (blue lines)"
        if loc.m_tiles <= 64
        else f"{loc.m_tiles} M tiles (lines omitted)"
    )
    fig.suptitle(
        f"dgrad {case.dtype_name} {list(case.input_size)}: "
        f"{loc.outside_count} elements outside the bound{more}\n"
        f"max over images and the block's channels; {lines};\n"
        f"red frame: rows of a failing region (its 16-channel blocks in the title), "
        f"x: NaN/Inf mismatch",
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


def _panel_title(loc, b, regions):
    """ "channels 0-31: 1534 outside (image 1: channels 16-31)": the block, how many elements of
    it are outside the bound and, when some are, the images and channels of its regions."""
    out = int(loc.task_outside[:, b].sum())
    title = f"{loc.block_name(b)}: {out} outside"
    if not regions:
        return title
    images = sorted({r.image for r in regions})
    channels = sorted({r.channels for r in regions})
    shown = ", ".join(str(n) for n in images[:3]) + (", ..." if len(images) > 3 else "")
    spans = ", ".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in channels[:2])
    spans += ", ..." if len(channels) > 2 else ""
    return f"{title}\n(image{'s' if len(images) > 1 else ''} {shown}: channels {spans})"


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
