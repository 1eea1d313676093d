"""The ablation figure, checked through what a reader sees: matplotlib's own objects (series, colours, legend,
horizon, band) and the files it writes."""

import io
import math
import multiprocessing
import warnings
import xml.etree.ElementTree as ET
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import polars as pl
import pytest
from figure_artists import by_gid, colour_of
from hostile import HOSTILE_NAMES
from matplotlib.collections import PolyCollection
from matplotlib.text import Text
from PIL import Image

from pipelines.exports.figure import (
    FIGURES_PER_PROCESS,
    NEEDED_EPOCH_COLUMNS,
    PAPER_FIGURE_NAMES,
    FigureJob,
    Smoothing,
    ablation_figure,
    ablation_inputs,
    draw,
    draw_figures,
    figure_files,
    file_stem,
    render,
)
from pipelines.exports.figure_series import PALETTE, with_bands

SVG = "{http://www.w3.org/2000/svg}"


def legend_texts(fig) -> list[str]:
    return [t.get_text() for t in fig.legends[0].get_texts()]


def test_three_run_ablation_has_one_series_per_run_with_its_label(tables):
    fig = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"])
    reward, zero, entropy = fig.axes
    runs = ["r_long", "r_mid", "r_short"]
    for prefix in ("ema", "raw", "band"):
        assert sorted(by_gid(reward, prefix)) == runs
    assert sorted(by_gid(zero, "zero_std")) == runs
    assert sorted(by_gid(entropy, "sample_entropy")) == runs and sorted(by_gid(entropy, "train_entropy")) == runs
    assert all(isinstance(band, PolyCollection) for band in by_gid(reward, "band").values())
    # The run legend: dim_runs labels in run_id order, the run id where the label is missing.
    assert legend_texts(fig) == ["Long run", "Mid run", "r_short"]
    # One colour per run, the palette's first three, the same on every panel.
    for run, colour in zip(runs, PALETTE[:3], strict=True):
        artists = [by_gid(reward, p)[run] for p in ("ema", "raw", "band")] + [by_gid(zero, "zero_std")[run]]
        assert {colour_of(a) for a in artists} == {colour.lower()}
    # One raw point per loaded epoch.
    assert [len(by_gid(reward, "raw")[r].get_xdata()) for r in runs] == [10, 6, 2]
    assert list(by_gid(reward, "ema")["r_mid"].get_ydata()) == pytest.approx([0.2 + 0.05 * i for i in range(6)])
    # A matched-reward marker per run at the horizon.
    markers = {r: [float(v) for v in m.get_xydata()[0]] for r, m in by_gid(reward, "matched").items()}
    assert markers == {"r_long": [1.0, 0.7004], "r_mid": [1.0, 0.5], "r_short": [1.0, 0.35]}
    # Through each marker, a bar of the run's own interval (r_short has none: no bar).
    bars = {r: [float(v) for v in bar.get_ydata()] for r, bar in by_gid(reward, "matched_interval").items()}
    assert bars == {"r_long": [0.61, 0.79], "r_mid": [0.41, 0.59]}
    assert all(list(bar.get_xdata()) == [1, 1] for bar in by_gid(reward, "matched_interval").values())


@pytest.mark.parametrize(
    ("ci_method", "kind"), [("reml", "autocorrelation-aware"), ("iid", "epochs taken as independent")]
)
def test_the_intervals_key_names_what_the_method_allows_for(tables, ci_method, kind):
    fig = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"], Smoothing(ci_method=ci_method))
    keys = [t.get_text() for t in fig.axes[0].get_legend().get_texts() if "interval" in t.get_text()]
    assert len(keys) == 1 and kind in keys[0]


def test_names_no_font_draws_are_shown_escaped_and_drawn_without_warnings(tables):
    runs = tables["runs"].with_columns(
        label=pl.when(pl.col("run_id") == "r_mid").then(pl.lit("tab\there")).otherwise(pl.lit("訓練\x07")),
        ablation=pl.col("ablation").replace("abl", "abl\n2"),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = ablation_figure("abl\n2", runs, tables["epochs"], tables["summary"])
        figure_files("abl\n2", fig)
    assert [str(w.message) for w in caught] == []
    assert legend_texts(fig) == ["訓練\\x07", "tab\\there", "訓練\\x07"]
    assert fig.get_suptitle().startswith("Ablation “abl\\n2”")


def test_names_are_text_never_markup_in_the_png_and_a_well_formed_svg():
    # Names that are markup somewhere, and one that mathtext would typeset ($…$): each is the run id, label and (the
    # first) ablation; each is shown as written (a newline as its escape), and the SVG, parsed as XML, holds them.
    names = [*HOSTILE_NAMES, r"run_$x_{1}$ \alpha {a}"]
    runs = pl.DataFrame({"run_id": names, "ablation": names[0], "label": names})
    epochs = pl.DataFrame(
        {"run_id": [n for n in names for _ in range(3)], "epoch": [0, 1, 2] * len(names)}
    ).with_columns(pl.lit(0.5).alias(c) for c in NEEDED_EPOCH_COLUMNS[2:])
    summary = pl.DataFrame({"run_id": names, "matched_horizon": 1, "matched_reward": 0.5})
    fig = ablation_figure(names[0], runs, epochs, summary)
    shown = sorted(name.replace("\n", "\\n") for name in names)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == shown
    assert not [t for t in fig.findobj(Text) if t.get_parse_math()]
    files = figure_files(names[0], fig)
    svg = ET.fromstring(files[f"{file_stem(names[0])}.svg"])
    words = {"".join(el.itertext()) for el in svg.iter(f"{SVG}text")}
    assert set(shown) <= words and f"Ablation “{names[0]}”: {len(names)} runs, compute-matched at epoch 1" in words
    assert {f"ema:{name}" for name in shown} <= {el.get("id") for el in svg.iter(f"{SVG}g")}
    assert Image.open(io.BytesIO(files[f"{file_stem(names[0])}.png"])).format == "PNG"


def test_the_matched_horizon_is_marked_in_every_panel(tables):
    fig = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"])
    for ax in fig.axes:
        lines = [line for line in ax.get_lines() if line.get_gid() == "horizon:1"]
        assert len(lines) == 1 and list(lines[0].get_xdata()) == [1, 1]
    labels = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "horizon_label"]
    assert labels == ["compute-matched\nhorizon: epoch 1"]


def test_titles_and_axis_labels_are_set(tables):
    fig = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"])
    reward, zero, entropy = fig.axes
    assert "abl" in fig.get_suptitle() and "3 runs" in fig.get_suptitle()
    assert reward.get_xlabel() == "epoch" and entropy.get_xlabel() == "epoch"
    for ax in fig.axes:
        assert ax.get_ylabel() and ax.get_title(loc="left")
    assert "%" in zero.get_ylabel()


def test_a_single_run_ablation_renders(tables):
    fig = ablation_figure("other", tables["runs"], tables["epochs"], tables["summary"])
    assert legend_texts(fig) == ["Solo run"]
    assert sorted(by_gid(fig.axes[0], "ema")) == ["solo"]
    files = figure_files("other", fig)
    assert sorted(files) == ["other.png", "other.svg"]
    assert files["other.png"].startswith(b"\x89PNG") and b"<svg" in files["other.svg"][:500]


def test_the_png_and_preview_are_matplotlibs_own_drawing_of_the_figure(tables):
    # matplotlib's savefig of the figure is the reference: the same pixels, at 150 dpi, the preview 40% of them.
    drawing = draw(FigureJob("abl", (tables["runs"], tables["epochs"], tables["summary"]), Smoothing(), 50, True))
    files, preview = drawing.files, drawing.preview
    fig = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"])
    reference = io.BytesIO()
    fig.savefig(reference, format="png", dpi=150, facecolor="white")
    png = Image.open(io.BytesIO(files["abl.png"]))
    assert png.size == (round(fig.get_figwidth() * 150), round(fig.get_figheight() * 150))
    assert png.info["dpi"] == pytest.approx((150, 150), abs=0.02)
    assert np.array_equal(np.asarray(png.convert("RGB")), np.asarray(Image.open(reference).convert("RGB")))
    assert Image.open(io.BytesIO(preview)).size == (round(png.width * 0.4), round(png.height * 0.4))
    assert "Software" not in png.info  # no tool version in the file: its bytes follow the drawing only


def _draw_in_a_new_process(job: FigureJob):
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(draw, job).result()


def test_the_same_figure_drawn_in_two_processes_has_the_same_bytes(tables):
    job = FigureJob("abl", (tables["runs"], tables["epochs"], tables["summary"]), Smoothing(), 50, False)
    first, second = _draw_in_a_new_process(job), _draw_in_a_new_process(job)
    assert first.failure is None and sorted(first.files) == ["abl.png", "abl.svg"]
    assert first.files == second.files == draw(job).files
    assert b"<dc:date>" not in first.files["abl.svg"]


def test_a_run_with_one_epoch_and_runs_without_epochs_still_render(tables):
    epochs = tables["epochs"].filter((pl.col("run_id") != "r_short") | (pl.col("epoch") == 0))
    fig = ablation_figure("abl", tables["runs"], epochs, tables["summary"])
    assert len(by_gid(fig.axes[0], "raw")["r_short"].get_xdata()) == 1
    render(fig, "png")
    empty = ablation_figure("abl", tables["runs"], epochs.clear(), tables["summary"].clear())
    assert [t.get_text() for t in empty.axes[0].texts] == ["no epochs loaded"]
    render(empty, "svg")


def test_non_finite_rewards_leave_gaps_not_errors(tables):
    epochs = tables["epochs"].with_columns(
        mean_reward=pl.when(pl.col("epoch") == 3).then(float("nan")).otherwise(pl.col("mean_reward")),
        reward_ema=pl.when(pl.col("epoch") == 3).then(None).otherwise(pl.col("reward_ema")),
    )
    fig = ablation_figure("abl", tables["runs"], epochs, tables["summary"])
    assert math.isnan(by_gid(fig.axes[0], "ema")["r_long"].get_ydata()[3])
    render(fig, "png")


def _degenerate(tables, case: str) -> pl.DataFrame:
    epochs = tables["epochs"]
    numbers = ["mean_reward", "reward_ema", "frac_zero_std_groups", "sample_entropy", "train_entropy"]
    if case == "nan":
        return epochs.with_columns(pl.lit(float("nan")).alias(c) for c in numbers)
    if case == "inf":
        return epochs.with_columns(pl.lit(float("inf")).alias(c) for c in numbers[:2]).with_columns(
            sample_entropy=pl.lit(-float("inf"))
        )
    if case == "constant":
        return epochs.with_columns(pl.lit(0.5).alias(c) for c in numbers)
    if case == "huge":
        return epochs.with_columns(mean_reward=pl.lit(1e308), reward_ema=pl.lit(-1e308))
    return epochs.filter(pl.col("epoch") == 0)  # one epoch each


@pytest.mark.parametrize("case", ["nan", "inf", "constant", "huge", "one epoch"])
def test_degenerate_curves_are_drawn(tables, case):
    summary = tables["summary"].with_columns(matched_reward=pl.lit(float("nan")) if case == "nan" else None)
    job = FigureJob("abl", (tables["runs"], _degenerate(tables, case), summary), Smoothing(), 50, True)
    drawing = draw(job)
    assert drawing.failure is None
    notes = "".join(t.get_text() for t in ablation_figure("abl", *job.rows).axes[0].texts)
    assert ("not drawn" in notes) == (case == "huge")  # NaN and infinities are gaps, not values left out
    if case == "huge":  # 10 rewards and 10 EMAs of r_long, 6 and 6 of r_mid, 2 and 2 of r_short
        assert "36 values beyond ±1e+100 not drawn" in notes
    assert Image.open(io.BytesIO(drawing.files["abl.png"])).format == "PNG"
    ET.fromstring(drawing.files["abl.svg"])


def test_a_figure_that_cannot_be_drawn_is_one_line_of_why_and_no_files(tables):
    rows = (tables["runs"], tables["epochs"].drop("sample_entropy"), tables["summary"])
    drawing = draw(FigureJob("abl", rows, Smoothing(), 50, True))
    assert drawing.files == {} and drawing.preview is None
    assert drawing.failure.startswith("ColumnNotFoundError: ") and "\n" not in drawing.failure


def test_renders_are_byte_stable_and_the_paper_name_is_added(tables):
    runs = tables["runs"].with_columns(ablation=pl.lit("multi_target"))
    files = figure_files("multi_target", ablation_figure("multi_target", runs, tables["epochs"], tables["summary"]))
    again = figure_files("multi_target", ablation_figure("multi_target", runs, tables["epochs"], tables["summary"]))
    assert files == again
    assert files[PAPER_FIGURE_NAMES["multi_target"]] == files["multi_target.png"]


@pytest.mark.parametrize(
    "name, stem", [("multi_target", "multi_target"), ("a/b c", "a_b_c"), (None, "unassigned"), ("..", "unassigned")]
)
def test_file_stems_are_safe(name, stem):
    assert file_stem(name) == stem


# z of the band's level, from a normal table: 0.95 -> 1.959964, 0.5 -> 0.674490
@pytest.mark.parametrize("level, z", [(0.95, 1.959964), (0.5, 0.674490)])
def test_band_is_the_ema_noise_of_the_trailing_spread(level, z):
    # Second computation, from the debiased EMA's weights: after n values the weight of value k is
    # (1 − w)·w^(n−k) / (1 − wⁿ); the EMA's noise factor is the root of the sum of squared weights.
    w, values = 0.9, [0.0, 1.0, 3.0, 2.0]
    frame = pl.DataFrame(
        {
            "run_id": ["r"] * 4,
            "epoch": [0, 1, 2, 3],
            "mean_reward": values,
            "reward_ema": [0.5] * 4,
            "frac_zero_std_groups": [0.0] * 4,
            "sample_entropy": [1.0] * 4,
            "train_entropy": [1.0] * 4,
        }
    )
    half = with_bands(frame, Smoothing(ema_weight=w, window=3, band_level=level))["band_half_width"].to_list()
    assert half[0] is None  # one value has no spread
    for row in (1, 2, 3):
        n = row + 1
        weights = [(1 - w) * w ** (n - k) / (1 - w**n) for k in range(1, n + 1)]
        window = values[max(0, row - 2) : row + 1]
        mean = sum(window) / len(window)
        spread = math.sqrt(sum((v - mean) ** 2 for v in window) / (len(window) - 1))
        assert half[row] == pytest.approx(z * spread * math.sqrt(sum(x * x for x in weights)), rel=1e-6)
    # a window of one epoch has no spread: no band
    assert with_bands(frame, Smoothing(window=1))["band_half_width"].to_list() == [None] * 4


def test_side_panels_draw_trailing_means_over_the_window_of_each_run():
    epochs = pl.DataFrame(
        {
            "run_id": ["r1"] * 5 + ["r2"] * 2,
            "epoch": [0, 1, 2, 3, 4, 0, 1],
            "mean_reward": [0.5] * 7,
            "reward_ema": [0.5] * 7,
            "frac_zero_std_groups": [0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0],
            "sample_entropy": [1.0, 2.0, 3.0, 4.0, 5.0, 9.0, 9.0],
            "train_entropy": [5.0, 4.0, 3.0, 2.0, 1.0, 0.0, 0.0],
        }
    )
    runs = pl.DataFrame(
        {"run_id": ["r1", "r2"], "ablation": ["a", "a"], "label": [None, None]},
        schema={"run_id": pl.String, "ablation": pl.String, "label": pl.String},
    )
    summary = pl.DataFrame({"run_id": ["r1", "r2"], "matched_horizon": [1, 1], "matched_reward": [0.5, 0.5]})
    fig = ablation_figure("a", runs, epochs, summary, Smoothing(window=3))
    _, zero, entropy = fig.axes
    # Means of each epoch and up to 2 before it, within its run (r2 starts afresh).
    assert list(by_gid(zero, "zero_std")["r1"].get_ydata()) == pytest.approx([0, 1 / 2, 1 / 3, 2 / 3, 2 / 3])
    assert list(by_gid(zero, "zero_std")["r2"].get_ydata()) == pytest.approx([0, 0])
    assert list(by_gid(entropy, "sample_entropy")["r2"].get_ydata()) == pytest.approx([9, 9])
    assert list(by_gid(entropy, "sample_entropy")["r1"].get_ydata()) == pytest.approx([1, 1.5, 2, 3, 4])
    assert list(by_gid(entropy, "train_entropy")["r1"].get_ydata()) == pytest.approx([5, 4.5, 4, 3, 2])
    assert "trailing 3-epoch mean" in zero.get_title(loc="left")


def test_figures_drawn_in_a_pool_of_processes_are_those_drawn_here_in_the_same_order(tables):
    # Just enough figures for two processes; each differs (its own smoothing), so a mix-up of order shows.
    jobs = [
        FigureJob(
            ablation,
            ablation_inputs(ablation, tables["runs"], tables["epochs"], tables["summary"]),
            Smoothing(ema_weight=0.5 + 0.05 * i),
            final_window=2,
            preview=i == 0,
        )
        for i, ablation in enumerate((["abl", "other"] * FIGURES_PER_PROCESS)[: FIGURES_PER_PROCESS + 1])
    ]
    drawn = draw_figures(jobs, workers=2)
    assert drawn == [draw(job) for job in jobs]
    assert len({d.files[f"{job.ablation}.png"] for d, job in zip(drawn, jobs, strict=True)}) == len(jobs)
    assert drawn[0].preview.startswith(b"\xff\xd8") and all(d.preview is None for d in drawn[1:])  # a JPEG


def test_the_svg_writes_its_text_as_text_in_a_sans_serif_fallback_list(tables):
    fig = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"])
    svg = ET.fromstring(render(fig, "svg"))
    texts = list(svg.iter(f"{SVG}text"))
    words = {"".join(el.itertext()) for el in texts}
    # The suptitle, an axis label, a run's legend entry, a key's entry, the horizon label's first line, a tick label.
    for expected in (
        "Ablation “abl”: 3 runs, compute-matched at epoch 1",
        "epoch",
        "Long run",
        "train entropy",
        "compute-matched",
        "0.4",
    ):
        assert expected in words
    assert not any(str(el.get("id", "")).startswith("DejaVu") for el in svg.iter(f"{SVG}path"))  # no glyph outlines
    families = {el.get("style").split("font-family: ")[1].split(";")[0] for el in texts}
    assert len(families) == 1
    family = families.pop().split(", ")
    assert family[0] == "'DejaVu Sans'" and "Arial" in family[3] and family[-1] == "sans-serif"


def test_the_keys_stay_where_matplotlibs_best_places_them(tables):
    # matplotlib's own "best" search, run at draw time on a copy whose keys are set back to it, is the reference.
    pinned = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"])
    searched = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"])
    for ax in (searched.axes[0], searched.axes[2]):
        ax.get_legend().set_loc("best")
    for fig in (pinned, searched):
        render(fig, "png")
    for ax_pinned, ax_searched in zip(pinned.axes, searched.axes, strict=True):
        if ax_searched.get_legend() is not None:
            box_pinned, box_searched = (ax.get_legend().get_window_extent() for ax in (ax_pinned, ax_searched))
            assert box_pinned.bounds == pytest.approx(box_searched.bounds, abs=1e-6)
