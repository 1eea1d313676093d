"""The ablation figure: reward curves of an ablation's runs, with GRPO signal and entropy panels beside them."""

from __future__ import annotations

import io
import math
import multiprocessing
import os
import re
import struct
import threading
import warnings
import zlib
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

import polars as pl

from pipelines.heap import older_objects_set_aside

# matplotlib and PIL are imported where a figure is drawn: loading the code location (every build, the UI) does
# not pay for them (0.6 s of CPU).
if TYPE_CHECKING:
    import numpy as np
    from matplotlib.figure import Figure
    from PIL import Image

# The paper's file names for some ablations, written beside `<ablation>.png`.
PAPER_FIGURE_NAMES = {"multi_target": "cut_multi_target.png"}
# Okabe-Ito: distinguishable with the common colour-vision deficiencies; tab10 takes over past eight runs.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
# Fixed SVG ids and no timestamps, so an unchanged figure renders to the same bytes. The SVG's text is text (each
# glyph's outline would take a third of its drawing time), in the first of these fonts a viewer has, and in its
# sans-serif face when it has none of them.
SANS_SERIF = ["DejaVu Sans", "Bitstream Vera Sans", "Verdana", "Arial", "Helvetica", "Liberation Sans"]
_RC = {"svg.hashsalt": "grpo-warehouse", "svg.fonttype": "none", "font.sans-serif": SANS_SERIF}
_NO_DATE = {"svg": {"Date": None}}
FIGURE_INCHES = (14, 7.2)
FIGURE_DPI = 150
# Deflate level of the PNG, ISA-L's (0-3): 2 writes a figure in a fifth of zlib's time at its level 3, for files 7%
# larger; ISA-L's level 3 is as slow as zlib's.
PNG_COMPRESSION = 2
LEGEND_COLUMNS = 4  # runs per row of the legend below the panels
PREVIEW_SCALE = 0.4  # the UI's preview: the PNG's raster shrunk to 60 dpi
JOBS_PER_HELPER = 4  # figures to draw per helper process spawned (draw_figures)
JOBS_AHEAD = 2  # figures handed to each helper before it finishes one
NEEDED_EPOCH_COLUMNS = [
    "run_id",
    "epoch",
    "mean_reward",
    "reward_ema",
    "frac_zero_std_groups",
    "sample_entropy",
    "train_entropy",
]


# What the matched interval's key says of each method; a method not named allows for autocorrelated epochs.
INTERVAL_KINDS = {"iid": "epochs taken as independent: too narrow"}


@dataclass(frozen=True)
class Smoothing:
    """How the figure smooths: the EMA weight of `reward_ema`, a trailing window and the band's coverage; and the
    interval method of the matched rewards' bars, which their key names."""

    ema_weight: float = 0.9
    window: int = 20
    band_level: float = 0.95
    ci_method: str = "reml"


def grid_margins(runs: int) -> dict[str, float]:
    """The panels' place in the figure, as fractions, from fixed margins in inches: room for the suptitle and the
    panel titles above, the tick labels and axis labels around, and one legend row per LEGEND_COLUMNS runs below.

    Fixed rather than matplotlib's constrained layout, which measures every text of the figure again for each
    file written (a third of a figure's drawing time); the margins fit tick labels up to about seven characters.
    """
    width, height = FIGURE_INCHES
    left, right, top = 0.8, 0.15, 0.75
    bottom = 0.6 + 0.27 * math.ceil(runs / LEGEND_COLUMNS)
    column_gap, row_gap = 0.95, 0.8  # the right panels' y labels; the upper right panel's ticks and the lower's title
    panels_width, panels_height = width - left - right, height - top - bottom
    return {
        "left": left / width,
        "right": 1 - right / width,
        "top": 1 - top / height,
        "bottom": bottom / height,
        # matplotlib gives the gaps as fractions of the mean panel width and height
        "wspace": column_gap / ((panels_width - column_gap) / 2),
        "hspace": row_gap / ((panels_height - row_gap) / 2),
    }


def file_stem(ablation: str | None) -> str:
    """A file-name-safe stem for an ablation name."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", ablation or "unassigned").strip("._")
    return stem or "unassigned"


def run_colours(run_ids: list[str]) -> dict[str, str]:
    import matplotlib
    import matplotlib.colors as mcolors

    extra = [mcolors.to_hex(c) for c in matplotlib.colormaps["tab10"].colors]
    palette = PALETTE + [c for c in extra if c not in PALETTE]
    return {run: palette[i % len(palette)] for i, run in enumerate(run_ids)}


def with_bands(epochs: pl.DataFrame, smoothing: Smoothing) -> pl.DataFrame:
    """Adds the reward band and trailing means of the side-panel signals, per run in epoch order.

    The band is an approximate `band_level` interval of the EMA line: reward_ema ± z · s · f, where s is the
    trailing-window standard deviation of the per-epoch mean reward and f = sqrt(Σ wᵢ²) is the noise factor of the
    debiased EMA after n finite values, f² = (1−w)(1−w²ⁿ) / ((1+w)(1−wⁿ)²) (1 at n = 1, ≈ 0.23 for w = 0.9 later on).
    """
    w = smoothing.ema_weight
    z = NormalDist().inv_cdf(0.5 + smoothing.band_level / 2)
    window = max(int(smoothing.window), 1)

    def finite(column: str) -> pl.Expr:
        return pl.when(pl.col(column).is_finite()).then(pl.col(column))

    def trailing_mean(column: str) -> pl.Expr:
        return finite(column).rolling_mean(window_size=window, min_samples=1).over("run_id")

    n = pl.col("mean_reward").is_finite().fill_null(False).cast(pl.Int64).cum_sum().over("run_id")
    wn = pl.lit(w) ** n
    factor = (((1 - w) * (1 - wn * wn)) / ((1 + w) * (1 - wn) ** 2)).sqrt()
    spread = finite("mean_reward").rolling_std(window_size=window, min_samples=2).over("run_id")
    half = pl.when(n > 0).then(z * spread * factor)
    return (
        epochs.sort("run_id", "epoch")
        .with_columns(band_half_width=half)
        .with_columns(
            band_low=pl.col("reward_ema") - pl.col("band_half_width"),
            band_high=pl.col("reward_ema") + pl.col("band_half_width"),
            frac_zero_std_trailing=trailing_mean("frac_zero_std_groups"),
            sample_entropy_trailing=trailing_mean("sample_entropy"),
            train_entropy_trailing=trailing_mean("train_entropy"),
        )
    )


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def _values(frame: pl.DataFrame, column: str) -> np.ndarray:
    return frame.get_column(column).cast(pl.Float64).to_numpy()


def ablation_inputs(
    ablation: str | None, runs: pl.DataFrame, epochs: pl.DataFrame, summary: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The rows one ablation's figure is drawn from, and nothing else: its runs, their epochs, their summaries."""
    members = runs.filter(pl.col("ablation").eq_missing(pl.lit(ablation, dtype=pl.String))).sort("run_id")
    run_ids = members["run_id"].to_list()
    return (
        members,
        epochs.filter(pl.col("run_id").is_in(run_ids)).select(NEEDED_EPOCH_COLUMNS),
        summary.filter(pl.col("run_id").is_in(run_ids)),
    )


def ablation_figure(
    ablation: str | None,
    runs: pl.DataFrame,
    epochs: pl.DataFrame,
    summary: pl.DataFrame,
    smoothing: Smoothing = Smoothing(),
    final_window: int = 50,
    reuse: Figure | None = None,
) -> Figure:
    """The figure of one ablation.

    runs: dim_runs rows (run_id, ablation, label); epochs: epoch_metrics rows with fact_epochs' sample_entropy and
    train_entropy; summary: run_summary rows (run_id, matched_horizon, matched_reward and, when present,
    matched_ci_low/high, drawn as a bar through the diamond). Other runs are ignored. reuse: a figure this function
    returned before, cleared and drawn on instead of a new one (its panels' tick marks and the sizes of texts measured
    for it are kept: a fifth of a figure's drawing time); the figure is the same.
    """
    members, epochs, summary = ablation_inputs(ablation, runs, epochs, summary)
    run_ids = members["run_id"].to_list()
    labels = {r: printable(lbl or r) for r, lbl in zip(run_ids, members["label"].to_list(), strict=True)}
    colours = run_colours(run_ids)
    data = with_bands(epochs, smoothing)
    horizons = sorted({int(h) for h in summary["matched_horizon"].drop_nulls().to_list()})

    fig = _panels() if reuse is None else _cleared(reuse)
    ax_reward, ax_zero, ax_entropy = fig.axes
    ax_reward.get_gridspec().update(**grid_margins(len(run_ids)))
    for ax in fig.axes:
        ax.set_subplotspec(ax.get_subplotspec())  # moves the panel to the margins: update moves only pyplot's
    rows_of = data.partition_by("run_id", as_dict=True)  # one pass, where a filter per run costs a query each
    matched_of = {row["run_id"]: row for row in reversed(summary.to_dicts())}  # a run's first row
    for run in run_ids:
        _draw_run(ax_reward, ax_zero, ax_entropy, run, rows_of.get((run,), data.clear()), colours[run], labels[run])
        matched = matched_of.get(run)
        if horizons and matched and _finite(matched["matched_reward"]):
            _draw_matched(ax_reward, run, horizons[0], matched, colours[run])
    _draw_horizons(ax_reward, ax_zero, ax_entropy, horizons)
    _label_axes(ax_reward, ax_zero, ax_entropy, smoothing.window)
    _legends(fig, ax_reward, ax_entropy, run_ids, smoothing, final_window)
    _pin_legends(fig)
    if not run_ids:
        ax_reward.text(0.5, 0.5, "no runs in this ablation", transform=ax_reward.transAxes, ha="center")
    elif data.is_empty():
        ax_reward.text(0.5, 0.5, "no epochs loaded", transform=ax_reward.transAxes, ha="center")

    horizon_text = f", compute-matched at epoch {horizons[0]}" if len(horizons) == 1 else ""
    fig.suptitle(
        f"Ablation “{printable(ablation or 'unassigned')}”: {len(run_ids)} run{'s' if len(run_ids) != 1 else ''}"
        f"{horizon_text}",
        fontsize=14,
        fontweight="bold",
    )
    return fig


def _panels() -> Figure:
    """A new figure of the three panels, empty: the reward panel on the left, the other two stacked on its right."""
    from matplotlib.figure import Figure

    from pipelines.exports.figure_canvas import canvas_class

    # Drawn on an Agg canvas, never through pyplot: no display needed and no global figure state.
    fig = Figure(figsize=FIGURE_INCHES, dpi=FIGURE_DPI)
    canvas_class()(fig)
    grid = fig.add_gridspec(2, 2, width_ratios=[1.75, 1])
    ax_reward = fig.add_subplot(grid[:, 0])
    fig.add_subplot(grid[0, 1], sharex=ax_reward)
    fig.add_subplot(grid[1, 1], sharex=ax_reward)
    return fig


def _cleared(fig: Figure) -> Figure:
    """A figure of _panels with everything an ablation drew on it taken off: curves, marks, texts and keys; its
    panels' limits back to those of new panels, autoscaled, and their titles placed again at the next draw."""
    for ax in fig.axes:
        for artist in [*ax.lines, *ax.collections, *ax.texts]:
            artist.remove()
        if ax.get_legend() is not None:
            ax.get_legend().remove()
        ax.relim()
        ax.set_xlim(0, 1)  # shared: turns the other panels' x autoscaling off too, so it is turned on after all
        ax.set_ylim(0, 1)
        ax._autotitlepos = True  # as new panels have it; see _pin_titles
    for ax in fig.axes:
        ax.set_autoscale_on(True)
    for legend in list(fig.legends):
        legend.remove()
    return fig


def _draw_run(ax_reward, ax_zero, ax_entropy, run: str, rows: pl.DataFrame, colour, label: str) -> None:
    """One run's curves: its per-epoch means, EMA and band on the reward panel, its trailing means on the others."""
    x = _values(rows, "epoch")
    ax_reward.plot(
        x,
        _values(rows, "mean_reward"),
        linestyle="none",
        marker="o",
        markersize=1.8,
        alpha=0.28,
        color=colour,
        gid=f"raw:{run}",
    )
    ax_reward.fill_between(
        x,
        _values(rows, "band_low"),
        _values(rows, "band_high"),
        color=colour,
        alpha=0.18,
        linewidth=0,
        gid=f"band:{run}",
    )
    ax_reward.plot(x, _values(rows, "reward_ema"), color=colour, linewidth=1.9, label=label, gid=f"ema:{run}")
    ax_zero.plot(x, _values(rows, "frac_zero_std_trailing"), color=colour, linewidth=1.5, gid=f"zero_std:{run}")
    ax_entropy.plot(
        x, _values(rows, "sample_entropy_trailing"), color=colour, linewidth=1.5, gid=f"sample_entropy:{run}"
    )
    ax_entropy.plot(
        x,
        _values(rows, "train_entropy_trailing"),
        color=colour,
        linewidth=1.2,
        linestyle="--",
        gid=f"train_entropy:{run}",
    )


def _draw_matched(ax_reward, run: str, horizon: int, matched: dict, colour) -> None:
    """A run's matched reward as a diamond at the horizon, and its interval as a bar through it when it has one."""
    ax_reward.plot(
        [horizon],
        [matched["matched_reward"]],
        marker="D",
        markersize=7,
        color=colour,
        markeredgecolor="black",
        markeredgewidth=0.8,
        linestyle="none",
        zorder=5,
        gid=f"matched:{run}",
    )
    low, high = matched.get("matched_ci_low"), matched.get("matched_ci_high")
    if _finite(low) and _finite(high):
        ax_reward.plot(
            [horizon] * 2,
            [low, high],
            color=colour,
            linewidth=2.2,
            solid_capstyle="butt",
            zorder=4.5,
            gid=f"matched_interval:{run}",
        )


def _draw_horizons(ax_reward, ax_zero, ax_entropy, horizons: list[int]) -> None:
    """The compute-matched horizons as dotted lines on every panel, named on the reward panel; the panels' grids."""
    for ax in (ax_reward, ax_zero, ax_entropy):
        for horizon in horizons:
            ax.axvline(horizon, color="0.25", linestyle=":", linewidth=1.3, zorder=4, gid=f"horizon:{horizon}")
        ax.grid(True, color="0.9", linewidth=0.7)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    for horizon in horizons:
        ax_reward.annotate(
            f"compute-matched\nhorizon: epoch {horizon}",
            xy=(horizon, 1),
            xycoords=("data", "axes fraction"),
            xytext=(-4, -4),
            textcoords="offset points",
            ha="right",
            va="top",
            fontsize=9,
            color="0.2",
            gid="horizon_label",
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
        )


def _label_axes(ax_reward, ax_zero, ax_entropy, window: int) -> None:
    """The panels' titles, axis labels and the zero-variance panel's percent scale."""
    from matplotlib.ticker import PercentFormatter

    ax_reward.set_title("Reward (per-epoch mean over trajectories)", loc="left", fontweight="bold")
    ax_reward.set_xlabel("epoch")
    ax_reward.set_ylabel("mean trajectory reward (unitless score)")
    ax_zero.set_title(f"Groups with no learning signal (trailing {window}-epoch mean)", loc="left", fontsize=10)
    ax_zero.set_ylabel("zero-variance groups (% of groups)")
    ax_zero.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax_entropy.set_title(f"Entropy (trailing {window}-epoch mean)", loc="left", fontsize=10)
    ax_entropy.set_ylabel("entropy (as logged by the trainer)")
    ax_entropy.set_xlabel("epoch")
    ax_zero.tick_params(labelbottom=True)


def _legends(fig, ax_reward, ax_entropy, run_ids: list[str], smoothing: Smoothing, final_window: int) -> None:
    """The reward panel's key to its marks, the entropy panel's to its two lines, and the runs' legend below them."""
    import matplotlib.lines as mlines
    import matplotlib.patches as mpatches

    window = smoothing.window
    grey = "0.35"
    key = [
        mlines.Line2D(
            [], [], color=grey, marker="o", markersize=3, alpha=0.5, linestyle="none", label="per-epoch mean reward"
        ),
        mlines.Line2D([], [], color=grey, linewidth=1.9, label=f"EMA (weight {smoothing.ema_weight:g})"),
        mpatches.Patch(
            color=grey, alpha=0.25, linewidth=0, label=f"EMA ± trailing {window}-epoch spread (descriptive, not a test)"
        ),
    ]
    if any(str(line.get_gid()).startswith("matched:") for line in ax_reward.get_lines()):
        key.append(
            mlines.Line2D(
                [],
                [],
                color=grey,
                marker="D",
                markeredgecolor="black",
                linestyle="none",
                label=f"matched reward (mean of last {final_window} epochs ≤ horizon)",
            )
        )
    if any(str(line.get_gid()).startswith("matched_interval:") for line in ax_reward.get_lines()):
        kind = INTERVAL_KINDS.get(smoothing.ci_method, "autocorrelation-aware")
        key.append(
            mlines.Line2D(
                [],
                [],
                color=grey,
                linewidth=2.2,
                label=f"its {smoothing.band_level:.0%} interval ({kind})",
            )
        )
    ax_reward.legend(handles=key, loc="best", fontsize=8.5, frameon=True, framealpha=0.9)
    ax_entropy.legend(
        handles=[
            mlines.Line2D([], [], color=grey, linewidth=1.5, label="sample entropy"),
            mlines.Line2D([], [], color=grey, linewidth=1.2, linestyle="--", label="train entropy"),
        ],
        loc="best",
        fontsize=8.5,
    )
    if run_ids:
        curves = [line for line in ax_reward.get_lines() if str(line.get_gid()).startswith("ema:")]
        fig.legend(
            handles=curves,
            loc="lower center",
            bbox_to_anchor=(0.5, 0.0),
            ncols=min(len(run_ids), LEGEND_COLUMNS),
            frameon=False,
            fontsize=10,
        )


def _pin_legends(fig) -> None:
    """Fixes each panel's key where matplotlib's "best" places it (the spot covering the fewest data), found once:
    "best" tests every candidate spot against every point drawn, twice in each file written."""
    from matplotlib.transforms import BboxTransformFrom

    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            ax.get_xlim(), ax.get_ylim()  # autoscales the panel first, as a draw does
            with _drawing():
                corner = legend.get_window_extent(renderer).p0
            legend.set_loc(tuple(BboxTransformFrom(legend.get_bbox_to_anchor()).transform(corner)))


def printable(name: str) -> str:
    """A name as a figure can show it: a tab, a newline or another control character as its escape (`\\t`), which no
    font draws."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in name)


@contextmanager
def _drawing():
    """Drawing with the figures' settings (_RC), and without matplotlib's warnings of a glyph the fonts lack (drawn
    as a box; the tables hold the exact name) or of tick arithmetic that overflows on huge values (value_warnings
    reports those): none is a step a user could take, and each would print a warning line for every figure."""
    import matplotlib
    import numpy as np

    with matplotlib.rc_context(_RC), warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
        warnings.filterwarnings("ignore", r"Glyph \d+ .* missing from font", UserWarning)
        yield


def render(fig: Figure, fmt: str, dpi: int = FIGURE_DPI) -> bytes:
    """The figure as PNG, SVG or JPEG bytes; the same figure always gives the same bytes."""
    if fmt == "png":
        return png_bytes(raster(fig, dpi), dpi)
    buffer = io.BytesIO()
    extra = {"pil_kwargs": {"quality": 80}} if fmt in ("jpg", "jpeg") else {"metadata": _NO_DATE.get(fmt)}
    with _drawing():
        fig.savefig(buffer, format=fmt, dpi=dpi, facecolor="white", **extra)
    return buffer.getvalue()


def raster(fig: Figure, dpi: int = FIGURE_DPI) -> Image.Image:
    """The figure drawn by Agg (figure_canvas.canvas_class) at dpi on white, as an RGB image (opaque: an alpha channel
    would only add bytes).

    Read from the canvas's own buffer: savefig would copy it into a file object first (a tenth of the time)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    from pipelines.exports.figure_canvas import canvas_class

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else canvas_class()(fig)
    fig.set_dpi(dpi)
    fig.set_facecolor("white")
    with _drawing():
        canvas.draw()
    _pin_titles(fig)
    pixels = canvas.buffer_rgba()
    return Image.frombuffer("RGBA", (pixels.shape[1], pixels.shape[0]), pixels).convert("RGB")


def _pin_titles(fig) -> None:
    """Keeps the panels' titles where the draw placed them (dpi does not move them) for the files drawn next:
    placing them measures each panel's y tick labels again, for the rare y axis whose offset text (×1e6) a title
    must clear. The switch is matplotlib's own, the one set_title(y=...) turns off (which would reset the style)."""
    for ax in fig.axes:
        ax._autotitlepos = False


def png_bytes(image: Image.Image, dpi: int = FIGURE_DPI) -> bytes:
    """PNG bytes of an RGB raster: its rows unfiltered, deflated at PNG_COMPRESSION, and its dpi.

    Written here rather than by PIL, whose writer tries every PNG row filter on every row, half of its time: a
    plot's flat colours compress as small unfiltered. Deflated by ISA-L, whose stream any zlib reads."""
    import numpy as np
    from isal import isal_zlib

    pixels = np.asarray(image if image.mode == "RGB" else image.convert("RGB"))
    height, width = pixels.shape[:2]
    rows = np.zeros((height, 1 + 3 * width), np.uint8)  # a row opens with its filter type, 0: none
    rows[:, 1:] = pixels.reshape(height, 3 * width)
    per_metre = round(dpi / 0.0254)
    return b"".join(
        [
            b"\x89PNG\r\n\x1a\n",
            _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)),  # 8-bit RGB
            _png_chunk(b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1)),
            _png_chunk(b"IDAT", isal_zlib.compress(rows, PNG_COMPRESSION)),
            _png_chunk(b"IEND", b""),
        ]
    )


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def figure_files(ablation: str | None, fig: Figure, image: Image.Image | None = None) -> dict[str, bytes]:
    """File name -> bytes for one ablation: `<ablation>.png`, `<ablation>.svg` and any paper name; image: the
    figure's raster if already drawn."""
    png = png_bytes(raster(fig) if image is None else image)
    files = {f"{file_stem(ablation)}.png": png, f"{file_stem(ablation)}.svg": render(fig, "svg")}
    if ablation in PAPER_FIGURE_NAMES:
        files[PAPER_FIGURE_NAMES[ablation]] = png
    return files


def preview_jpeg(image: Image.Image) -> bytes:
    """A small JPEG of a figure for the UI, shrunk from its raster (cheaper than drawing the figure again) by
    averaging each pixel's area (BOX): at this size as legible as a Lanczos filter, in a third of the time."""
    from PIL import Image

    size = (round(image.width * PREVIEW_SCALE), round(image.height * PREVIEW_SCALE))
    buffer = io.BytesIO()
    image.resize(size, Image.Resampling.BOX).save(buffer, format="jpeg", quality=80)
    return buffer.getvalue()


@dataclass(frozen=True)
class FigureJob:
    """One ablation's figure to draw: its rows (ablation_inputs), how to smooth, and whether the UI previews it."""

    ablation: str | None
    rows: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]
    smoothing: Smoothing
    final_window: int
    preview: bool


# The last figure this thread drew, which draw reuses for the next ablation (ablation_figure's reuse).
_last_figure = threading.local()


def draw(job: FigureJob) -> tuple[dict[str, bytes], bytes | None]:
    """The files of one ablation's figure (figure_files) and its preview JPEG if asked for."""
    reuse, _last_figure.figure = getattr(_last_figure, "figure", None), None
    with older_objects_set_aside():
        fig = ablation_figure(job.ablation, *job.rows, job.smoothing, final_window=job.final_window, reuse=reuse)
        image = raster(fig)
        drawn = figure_files(job.ablation, fig, image), preview_jpeg(image) if job.preview else None
    _last_figure.figure = fig  # kept only once drawn whole: a figure left half drawn by an error is not reused
    return drawn


def draw_figures(jobs: list[FigureJob], workers: int = 0) -> list[tuple[dict[str, bytes], bytes | None]]:
    """Draws the figures, in order: this process and up to `workers` - 1 helper processes (0: one per core).

    matplotlib draws on one core, and the figures are independent: helper processes are what use the others. A
    helper starts by importing matplotlib and polars (about a second of CPU), so one is spawned per
    JOBS_PER_HELPER figures at most, and this process draws too, from the first figure on, while they start. Each
    helper is kept JOBS_AHEAD figures ahead, no more, so that the last figures go to whoever is free. spawn, not
    fork: the caller (a Dagster run) has threads, and polars' thread pool does not survive fork.
    """
    helpers = min((workers or os.cpu_count() or 1) - 1, len(jobs) // JOBS_PER_HELPER)
    if helpers <= 0:
        drawn = [draw(job) for job in jobs]
        _last_figure.figure = None  # its memory back to the caller
        return drawn
    drawn: list = [None] * len(jobs)
    pending: dict = {}
    waiting = iter(range(len(jobs)))
    with ProcessPoolExecutor(helpers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for index in waiting:
            for future in [f for f in pending if f.done()]:
                drawn[pending.pop(future)] = future.result()
            if len(pending) < helpers * JOBS_AHEAD:
                pending[pool.submit(draw, jobs[index])] = index
            else:
                drawn[index] = draw(jobs[index])
        for future, index in pending.items():
            drawn[index] = future.result()
    _last_figure.figure = None  # its memory back to the caller
    return drawn
