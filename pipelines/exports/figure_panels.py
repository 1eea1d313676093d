"""The ablation figure, drawn by matplotlib's public API: reward curves beside the GRPO signal and entropy panels,
by configuration where runs are seeds of one, with their legend below."""

from __future__ import annotations

import math
import textwrap
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING

import polars as pl

from pipelines.exports.figure_series import (
    PALETTE,
    PLOTTABLE,
    Smoothing,
    ablation_inputs,
    across_seeds,
    configurations,
    family_colours,
    line_colours,
    matched_across_seeds,
    plottable,
    printable,
    with_bands,
)

# matplotlib is imported where a figure is drawn: loading the code location (every build, the UI) does not pay for it.
if TYPE_CHECKING:
    import numpy as np
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FIGURE_WIDTH = 14  # inches
PANELS_HEIGHT = 6.7  # inches: the title and the panels; the legend below them adds its own height
FIGURE_DPI = 150
LEGEND_COLUMNS = 4  # at most; fewer where the labels would not fit across the figure
LABEL_CHARACTERS = 80  # a longer legend label wraps onto more lines (a column of it still fits across the figure)
# Past this many lines (runs, or configurations), colours go by reward family and single runs lose their per-epoch
# points and bands: a legend entry per line, or those marks, would hide the curves.
CROWDED = len(PALETTE)
# Fixed SVG ids and no date, so a figure renders to the same bytes. The SVG's text is text, in the first of these
# fonts a viewer has (the PNG's is DejaVu Sans, which matplotlib carries). Names are never read as mathtext.
SANS_SERIF = ["DejaVu Sans", "Bitstream Vera Sans", "Verdana", "Arial", "Helvetica", "Liberation Sans"]
RC = {
    "svg.hashsalt": "grpo-warehouse",
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": SANS_SERIF,
    "text.parse_math": False,
    "text.usetex": False,
}
# What the matched interval's key says of each method; a method not named allows for autocorrelated epochs.
INTERVAL_KINDS = {"iid": "epochs taken as independent: too narrow"}
GREY = "0.35"
DEFAULT_SMOOTHING = Smoothing()


@contextmanager
def drawing():
    """The figures' settings (RC), without matplotlib's warnings of a glyph the fonts lack (drawn as a box; the tables
    hold the exact name) or of tick arithmetic that overflows on huge values: no step a user could take."""
    import matplotlib
    import numpy as np

    with matplotlib.rc_context(RC), warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
        warnings.filterwarnings("ignore", r"Glyph \d+ .* missing from font", UserWarning)
        yield


def ablation_figure(
    ablation: str | None,
    runs: pl.DataFrame,
    epochs: pl.DataFrame,
    summary: pl.DataFrame,
    smoothing: Smoothing = DEFAULT_SMOOTHING,
    final_window: int = 50,
) -> Figure:
    """The figure of one ablation, a new one each call.

    runs: dim_runs rows (run_id, ablation, label, and arm and reward_family where present); epochs: epoch_metrics rows
    with fact_epochs' sample_entropy and train_entropy; summary: run_summary rows (run_id, matched_horizon,
    matched_reward and, when present, matched_ci_low/high). Other ablations' rows are ignored. Where a configuration
    (arm) has two or more runs, each configuration is one colour: its seeds faint, the IQM across them as its line.
    """
    members, epochs, summary = ablation_inputs(ablation, runs, epochs, summary)
    epochs, summary, left_out = plottable(epochs, summary)
    configs = configurations(members)
    colours = line_colours(configs)
    by_config = any(len(runs_of) > 1 for runs_of in configs["runs"])
    data = with_bands(epochs, smoothing)
    horizons = sorted({int(h) for h in summary["matched_horizon"].drop_nulls().to_list()})
    with drawing():
        fig = _panels()
        axes = fig.axes
        if by_config:
            _draw_configurations(axes, data, summary, configs, colours, horizons[:1])
        else:
            _draw_runs(axes, data, summary, configs, colours, horizons[:1])
        _draw_horizons(axes, horizons)
        _label_axes(axes, smoothing.window, by_config)
        _key(axes, smoothing, final_window, by_config)
        _line_legend(fig, configs, colours, by_config)
        _notes(axes[0], data.is_empty(), left_out)
        fig.suptitle(_title(ablation, members.height, configs.height, by_config, horizons), fontweight="bold")
        _lay_out_once(fig)
    return fig


def _lay_out_once(fig: Figure) -> None:
    """Lays the figure out (constrained layout) and places each panel's key at matplotlib's "best" spot (covering
    the fewest data) once, then fixes both: otherwise every file written would do both again, measuring every text
    and testing every spot of each key against every point drawn."""
    from matplotlib.transforms import BboxTransformFrom

    renderer = fig.canvas.get_renderer()
    fig.get_layout_engine().execute(fig)
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            ax.get_xlim(), ax.get_ylim()  # autoscales the panel to its data first, as a draw does
            corner = legend.get_window_extent(renderer).p0
            legend.set_loc(tuple(BboxTransformFrom(legend.get_bbox_to_anchor()).transform(corner)))
    fig.set_layout_engine("none")


def _notes(ax_reward: Axes, no_epochs: bool, left_out: int) -> None:
    """What the reward panel cannot show: no epochs at all, or values too large to draw."""
    if no_epochs:
        ax_reward.text(0.5, 0.5, "no epochs loaded", transform=ax_reward.transAxes, ha="center")
    if left_out:
        note = (
            f"{left_out} value{'s' if left_out != 1 else ''} beyond ±{PLOTTABLE:.0e} not drawn (the tables hold them)"
        )
        ax_reward.text(0.01, 0.01, note, transform=ax_reward.transAxes, fontsize=8, color="0.3", gid="left_out")


def _title(ablation: str | None, runs: int, configs: int, by_config: bool, horizons: list[int]) -> str:
    counted = f"{runs} run{'s' if runs != 1 else ''}"
    if by_config:
        counted = f"{configs} configuration{'s' if configs != 1 else ''}, {counted}"
    horizon = f", compute-matched at epoch {horizons[0]}" if len(horizons) == 1 else ""
    return f"Ablation “{printable(ablation or 'unassigned')}”: {counted}{horizon}"


def _panels() -> Figure:
    """A new figure of three empty panels, the reward panel on the left and the other two stacked on its right, on
    an Agg canvas (never through pyplot: no display, no global state), laid out by matplotlib's constrained layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(FIGURE_WIDTH, PANELS_HEIGHT), dpi=FIGURE_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2, 2, width_ratios=[1.75, 1])
    ax_reward = fig.add_subplot(grid[:, 0])
    fig.add_subplot(grid[0, 1], sharex=ax_reward)
    fig.add_subplot(grid[1, 1], sharex=ax_reward)
    return fig


def _values(frame: pl.DataFrame, column: str) -> np.ndarray:
    """A column as floats, NaN (a gap in a line) where it is null or not finite."""
    import numpy as np

    values = frame.get_column(column).cast(pl.Float64).fill_null(np.nan).to_numpy()
    return np.where(np.isfinite(values), values, np.nan)


def _name(key: str) -> str:
    return printable(key)  # an artist's id in the SVG: no control character, which XML forbids


# The side panels' series: column, panel, id prefix, line width, line style.
SIGNALS = [
    ("frac_zero_std_trailing", 1, "zero_std", 1.5, "-"),
    ("sample_entropy_trailing", 2, "sample_entropy", 1.5, "-"),
    ("train_entropy_trailing", 2, "train_entropy", 1.2, "--"),
]


def _draw_signals(axes: list[Axes], name: str, colour: str, xy) -> None:
    """A line's series on the side panels; xy(column) gives a series' epochs and values."""
    for column, panel, prefix, width, style in SIGNALS:
        axes[panel].plot(*xy(column), color=colour, linewidth=width, linestyle=style, gid=f"{prefix}:{name}")


def _draw_runs(axes: list[Axes], data, summary, configs, colours, horizon: list[int]) -> None:
    """One line per run: its EMA, per-epoch means and band; its trailing means on the side panels; its matched reward
    at the horizon. Past CROWDED runs, _draw_crowded_runs."""
    if configs.height > CROWDED:
        _draw_crowded_runs(axes, data, summary, configs, colours, horizon)
        return
    ax_reward = axes[0]
    rows_of = data.partition_by("run_id", as_dict=True)
    matched_of = {row["run_id"]: row for row in reversed(summary.to_dicts())}  # a run's first row
    for arm, runs in configs.select("arm", "runs").rows():
        rows, name, colour = rows_of.get((runs[0],), data.clear()), _name(runs[0]), colours[arm]
        x = _values(rows, "epoch")
        raw = {"markersize": 1.8, "alpha": 0.28, "color": colour, "gid": f"raw:{name}"}
        ax_reward.plot(x, _values(rows, "mean_reward"), "o", **raw)
        band = (_values(rows, "band_low"), _values(rows, "band_high"))
        ax_reward.fill_between(x, *band, color=colour, alpha=0.18, linewidth=0, gid=f"band:{name}")
        ax_reward.plot(x, _values(rows, "reward_ema"), color=colour, linewidth=1.9, gid=f"ema:{name}")
        _draw_signals(axes, name, colour, lambda column, rows=rows, x=x: (x, _values(rows, column)))
        matched = matched_of.get(runs[0])
        if horizon and matched and _finite(matched["matched_reward"]):
            _draw_matched(ax_reward, name, horizon[0], matched, colour)


# Past CROWDED runs, a series' artists are named for all of them (`ema:runs`), not for a run each.
CROWDED_NAME = "runs"


def _draw_crowded_runs(axes: list[Axes], data, summary, configs, colours, horizon: list[int]) -> None:
    """Past CROWDED runs, lines alone, a shade each: every run's EMA as one collection, each side-panel series as one,
    the matched rewards as one scatter of diamonds and their intervals as one collection. Thousands of artists would
    each be laid out, tested against the keys' spots and drawn on their own: this way the cost follows the points."""
    import numpy as np

    order = pl.DataFrame({"run_id": configs["runs"].list.first(), "line": np.arange(configs.height)})
    rows = data.join(order, on="run_id").sort("line", "epoch")
    line, x = rows.get_column("line").to_numpy(), _values(rows, "epoch")
    line_colours = [colours[arm] for arm in configs["arm"]]
    series = [("reward_ema", 0, "ema", 1.2, "-"), *SIGNALS]
    for column, panel, prefix, width, style in series:
        pieces, owners = _polylines(line, x, _values(rows, column))
        _add_lines(axes[panel], pieces, [line_colours[i] for i in owners], width, style, f"{prefix}:{CROWDED_NAME}")
    matched = summary.unique("run_id", keep="first", maintain_order=True).join(order, on="run_id").sort("line")
    reward = _values(matched, "matched_reward")
    shown = np.isfinite(reward)
    if not horizon or not shown.any():
        return
    owners = matched.get_column("line").to_numpy()
    diamonds = {"marker": "D", "s": 7**2, "edgecolors": "black", "linewidths": 0.8, "zorder": 5}
    at = np.full(int(shown.sum()), float(horizon[0]))
    shown_colours = [line_colours[i] for i in owners[shown]]
    axes[0].scatter(at, reward[shown], c=shown_colours, gid=f"matched:{CROWDED_NAME}", **diamonds)
    if {"matched_ci_low", "matched_ci_high"} <= set(matched.columns):
        low, high = _values(matched, "matched_ci_low"), _values(matched, "matched_ci_high")
        bars = shown & np.isfinite(low) & np.isfinite(high)
        if not bars.any():
            return
        pieces = [np.array([[horizon[0], lo], [horizon[0], hi]]) for lo, hi in zip(low[bars], high[bars], strict=True)]
        bar_colours = [line_colours[i] for i in owners[bars]]
        gid = f"matched_interval:{CROWDED_NAME}"
        _add_lines(axes[0], pieces, bar_colours, 2.2, "-", gid).set(capstyle="butt", zorder=4.5)


def _polylines(line: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Points of many lines (line: the line of each, its points together and in order) as polylines of their finite
    points, broken where a value is missing as a plotted line is; and the line of each polyline."""
    import numpy as np

    finite = np.isfinite(x) & np.isfinite(y)
    if not finite.any():
        return [], line[:0]
    follows = np.r_[False, finite[:-1] & (line[1:] == line[:-1])]  # the point before is of its line and drawn
    starts = finite & ~follows
    pieces = np.split(np.column_stack([x, y])[finite], np.flatnonzero(starts[finite])[1:])
    return pieces, line[starts]


def _add_lines(ax: Axes, pieces: list, colours: list[str], width: float, style: str, gid: str):
    """Polylines as one artist, drawn (and taking part in the panel's limits) as plotted lines are: a polyline of one
    point draws nothing, and is left out but for the limits. A PolyCollection left open, not a LineCollection:
    matplotlib's "best" spot for a key avoids a PolyCollection's paths, not a LineCollection's."""
    import numpy as np
    from matplotlib.collections import PolyCollection

    if pieces:
        ax.update_datalim(np.concatenate(pieces))
    drawn = [i for i, piece in enumerate(pieces) if len(piece) > 1]
    lines = PolyCollection(
        [pieces[i] for i in drawn],
        closed=False,
        facecolors="none",
        edgecolors=[colours[i] for i in drawn],
        linewidths=width,
        linestyles=style,
        zorder=2,
    )
    lines.set_gid(gid)
    return ax.add_collection(lines, autolim=True)


def _draw_configurations(axes: list[Axes], data, summary, configs, colours, horizon: list[int]) -> None:
    """One colour per configuration: its seeds' EMAs faint, the IQM across them as its line with the seeds' middle
    half as its band; the IQM of their trailing means on the side panels; its seeds' matched rewards and their IQM."""
    ax_reward = axes[0]
    series = across_seeds(data, configs).partition_by("arm", "series", as_dict=True)
    none = pl.DataFrame(schema={"epoch": pl.Int64, "centre": pl.Float64, "low": pl.Float64, "high": pl.Float64})
    rows_of = data.partition_by("run_id", as_dict=True)
    matched = {row["run_id"]: row["matched_reward"] for row in reversed(summary.to_dicts())}
    matched_iqm = matched_across_seeds(summary, configs)
    for arm, runs in configs.select("arm", "runs").rows():
        colour, name = colours[arm], _name(arm)
        for run in runs:
            rows = rows_of.get((run,), data.clear())
            x, ema = _values(rows, "epoch"), _values(rows, "reward_ema")
            ax_reward.plot(x, ema, color=colour, linewidth=0.7, alpha=0.3, gid=f"seed:{_name(run)}")
            if horizon and _finite(matched.get(run)):
                seed = {"markersize": 3.5, "color": colour, "alpha": 0.7, "zorder": 4.8}
                ax_reward.plot(horizon, [matched[run]], "o", **seed, gid=f"matched_seed:{_name(run)}")
        reward = series.get((arm, "reward_ema"), none)
        x = _values(reward, "epoch")
        if len(runs) > 1:
            band = (_values(reward, "low"), _values(reward, "high"))
            ax_reward.fill_between(x, *band, color=colour, alpha=0.2, linewidth=0, gid=f"spread:{name}")
        ax_reward.plot(x, _values(reward, "centre"), color=colour, linewidth=2.2, gid=f"centre:{name}")

        def centre(column: str, arm=arm) -> tuple:
            frame = series.get((arm, column), none)
            return _values(frame, "epoch"), _values(frame, "centre")

        _draw_signals(axes, name, colour, centre)
        if horizon and _finite(matched_iqm.get(arm)):
            _draw_matched(ax_reward, name, horizon[0], {"matched_reward": matched_iqm[arm]}, colour)


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def _draw_matched(ax_reward: Axes, name: str, horizon: int, matched: dict, colour) -> None:
    """A matched reward as a diamond at the horizon, and its interval as a bar through it when it has one."""
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
        gid=f"matched:{name}",
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
            gid=f"matched_interval:{name}",
        )


def _draw_horizons(axes: list[Axes], horizons: list[int]) -> None:
    """The compute-matched horizons as dotted lines on every panel, named on the reward panel; the panels' grids."""
    for ax in axes:
        for horizon in horizons:
            ax.axvline(horizon, color="0.25", linestyle=":", linewidth=1.3, zorder=4, gid=f"horizon:{horizon}")
        ax.grid(True, color="0.9", linewidth=0.7)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    left, right = axes[0].get_xlim()
    for horizon in horizons:
        before = horizon > (left + right) / 2  # the label on the side of the line with more room
        axes[0].annotate(
            f"compute-matched\nhorizon: epoch {horizon}",
            xy=(horizon, 1),
            xycoords=("data", "axes fraction"),
            xytext=(-4 if before else 4, -4),
            textcoords="offset points",
            ha="right" if before else "left",
            va="top",
            fontsize=9,
            color="0.2",
            gid="horizon_label",
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
        )


def _label_axes(axes: list[Axes], window: int, by_config: bool) -> None:
    """The panels' titles and axis labels (the side panels' short enough for their height), and the percent scale."""
    from matplotlib.ticker import PercentFormatter

    ax_reward, ax_zero, ax_entropy = axes
    across = "IQM over each configuration's seeds of " if by_config else ""
    ax_reward.set_title(
        "Reward by configuration" if by_config else "Reward (per-epoch mean over trajectories)",
        loc="left",
        fontweight="bold",
    )
    ax_reward.set_xlabel("epoch")
    ax_reward.set_ylabel("mean trajectory reward (unitless score)")
    smoothed = f"{across}trailing {window}-epoch means" if by_config else f"trailing {window}-epoch mean"
    ax_zero.set_title(f"Groups with no learning signal\n{smoothed}", loc="left", fontsize=10)
    ax_zero.set_ylabel("% of groups")
    ax_zero.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax_entropy.set_title(f"Entropy as logged by the trainer\n{smoothed}", loc="left", fontsize=10)
    ax_entropy.set_ylabel("entropy")
    ax_entropy.set_xlabel("epoch")
    ax_zero.tick_params(labelbottom=True)


def _key(axes: list[Axes], smoothing: Smoothing, final_window: int, by_config: bool) -> None:
    """The reward panel's key to the marks drawn on it, and the entropy panel's to its two lines."""
    import matplotlib.lines as mlines
    import matplotlib.patches as mpatches

    ax_reward, _, ax_entropy = axes
    drawn = {str(artist.get_gid()).split(":", 1)[0] for artist in [*ax_reward.lines, *ax_reward.collections]}
    ema = f"EMA (weight {smoothing.ema_weight:g})"
    matched = f"mean of last {final_window} epochs ≤ horizon"
    marks = {
        "raw": mlines.Line2D([], [], color=GREY, marker="o", markersize=3, alpha=0.5, ls="none"),
        "ema": mlines.Line2D([], [], color=GREY, linewidth=1.9),
        "band": mpatches.Patch(color=GREY, alpha=0.25, linewidth=0),
        "seed": mlines.Line2D([], [], color=GREY, linewidth=0.7, alpha=0.5),
        "centre": mlines.Line2D([], [], color=GREY, linewidth=2.2),
        "spread": mpatches.Patch(color=GREY, alpha=0.25, linewidth=0),
        "matched_seed": mlines.Line2D([], [], color=GREY, marker="o", markersize=3.5, alpha=0.7, ls="none"),
        "matched": mlines.Line2D([], [], color=GREY, marker="D", markeredgecolor="black", linestyle="none"),
        "matched_interval": mlines.Line2D([], [], color=GREY, linewidth=2.2),
    }
    kind = INTERVAL_KINDS.get(smoothing.ci_method, "autocorrelation-aware")
    labels = {
        "raw": "per-epoch mean reward",
        "ema": ema,
        "band": f"EMA ± trailing {smoothing.window}-epoch spread (descriptive, not a test)",
        "seed": f"a seed's {ema}",
        "centre": "IQM of the seeds' EMAs, at epochs half or more of them reached",
        "spread": "the seeds' middle half (25th–75th percentile; a spread, not an interval)",
        "matched_seed": f"a seed's matched reward ({matched})",
        "matched": "IQM of the seeds' matched rewards" if by_config else f"matched reward ({matched})",
        "matched_interval": f"its {smoothing.band_level:.0%} interval ({kind})",
    }
    shown = [name for name in labels if name in drawn]
    ax_reward.legend([marks[n] for n in shown], [labels[n] for n in shown], loc="best", fontsize=8.5, framealpha=0.9)
    ax_entropy.legend(
        handles=[
            mlines.Line2D([], [], color=GREY, linewidth=1.5, label="sample entropy"),
            mlines.Line2D([], [], color=GREY, linewidth=1.2, linestyle="--", label="train entropy"),
        ],
        loc="best",
        fontsize=8.5,
    )


def _line_legend(fig: Figure, configs: pl.DataFrame, colours: dict[str, str], by_config: bool) -> None:
    """The legend below the panels: a line per configuration (with its seeds' count and band) or per run; past
    CROWDED of them, a line per reward family, whose shades its members are."""
    import matplotlib.lines as mlines
    import matplotlib.patches as mpatches

    handles, labels = [], []
    if configs.height > CROWDED:
        unit = "configuration" if by_config else "run"
        bases = family_colours(configs)
        for family, count in configs.group_by("reward_family", maintain_order=True).len().rows():
            handles.append(mlines.Line2D([], [], color=bases[family], linewidth=2.2))
            labels.append(f"{family or 'no reward family'}: {count} {unit}s, a shade each")
    else:
        for arm, name, runs in configs.select("arm", "name", "runs").rows():
            line = mlines.Line2D([], [], color=colours[arm], linewidth=2.2 if by_config else 1.9)
            seeds = len(runs)
            band = mpatches.Patch(color=colours[arm], alpha=0.2, linewidth=0)
            handles.append((band, line) if by_config and seeds > 1 else line)
            labels.append(f"{name} ({seeds} seed{'s' if seeds != 1 else ''})" if by_config else name)
    if handles:
        wrapped = [_wrapped(label) for label in labels]
        _fit_legend(fig, handles, wrapped)


def _wrapped(label: str) -> str:
    """A label as written, or on several lines where it is longer than LABEL_CHARACTERS."""
    if len(label) <= LABEL_CHARACTERS:
        return label
    return textwrap.fill(label, LABEL_CHARACTERS, break_on_hyphens=False)


def _fit_legend(fig: Figure, handles: list, labels: list[str]) -> None:
    """The legend below the panels in as many columns as fit across the figure (up to LEGEND_COLUMNS), and the
    figure made taller by its height: the panels keep their size however many lines the legend names."""
    renderer = fig.canvas.get_renderer()
    for columns in range(min(len(handles), LEGEND_COLUMNS), 0, -1):
        legend = fig.legend(handles, labels, loc="outside lower center", ncols=columns, frameon=False, fontsize=10)
        box = legend.get_window_extent(renderer)
        if box.width <= 0.98 * fig.bbox.width or columns == 1:
            break
        legend.remove()
    height = PANELS_HEIGHT + box.height / fig.dpi
    fig.set_figheight(math.ceil(height * fig.dpi) / fig.dpi)  # whole pixels: the PNG is exactly the figure
