"""The ablation figure, checked through matplotlib's own objects: series, labels, legend, horizon, band."""

import math
import warnings

import polars as pl
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.text import Text

from pipelines.exports.figure import (
    JOBS_PER_HELPER,
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
    with_bands,
)


def by_gid(ax, prefix: str) -> dict[str, object]:
    artists = list(ax.get_lines()) + list(ax.collections)
    return {str(a.get_gid()).split(":", 1)[1]: a for a in artists if str(a.get_gid()).startswith(prefix + ":")}


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
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["Long run", "Mid run", "r_short"]
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
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["訓練\\x07", "tab\\there", "訓練\\x07"]
    assert fig.get_suptitle().startswith("Ablation “abl\\n2”")


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
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["Solo run"]
    assert sorted(by_gid(fig.axes[0], "ema")) == ["solo"]
    files = figure_files("other", fig)
    assert sorted(files) == ["other.png", "other.svg"]
    assert files["other.png"].startswith(b"\x89PNG") and b"<svg" in files["other.svg"][:500]


def test_the_png_and_preview_are_matplotlibs_own_drawing_of_the_figure(tables):
    # matplotlib's own Agg canvas and PNG writer are the reference: the same pixels, whatever route the files take,
    # also for figures whose texts were drawn before at the same place (the second "abl") or elsewhere ("other").
    import io

    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    for ablation in ["abl", "other", "abl"]:
        fig = ablation_figure(ablation, tables["runs"], tables["epochs"], tables["summary"])
        FigureCanvasAgg(fig)
        reference = io.BytesIO()
        fig.savefig(reference, format="png", dpi=150, facecolor="white")
        expected = np.asarray(Image.open(reference).convert("RGB"))
        files, preview = draw(
            FigureJob(ablation, (tables["runs"], tables["epochs"], tables["summary"]), Smoothing(), 50, True)
        )
        png = Image.open(io.BytesIO(files[f"{ablation}.png"]))
        assert png.mode == "RGB" and png.size == (2100, 1080)  # 14 x 7.2 inches at 150 dpi
        assert png.info["dpi"] == pytest.approx((150, 150), abs=0.02)  # 5906 pixels a metre
        assert np.array_equal(np.asarray(png), expected), ablation
        assert Image.open(io.BytesIO(preview)).size == (840, 432)  # shrunk to 40%


def test_the_svg_is_matplotlibs_own_svg_of_the_figure(tables):
    # matplotlib's stock SVG canvas is the reference, byte for byte, also for texts measured before by another SVG
    # (the second "abl") and for the runs' per-epoch marks.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for ablation in ["abl", "other", "abl"]:
        fig = ablation_figure(ablation, tables["runs"], tables["epochs"], tables["summary"])
        ours = render(fig, "svg")
        FigureCanvasAgg(fig)  # savefig then draws the SVG on matplotlib's FigureCanvasSVG
        assert ours == render(fig, "svg"), ablation
        assert ours.count(b"<use ") >= len(tables["epochs"].filter(pl.col("run_id").is_in(by_gid(fig.axes[0], "raw"))))


def test_a_text_met_before_in_another_size_colour_or_angle_is_drawn_and_measured_in_its_own():
    # The same words at the same place, drawn again larger, in another colour, turned: the PNG's pixels and the
    # SVG's bytes are those of matplotlib's stock canvases, which remember nothing from one figure to the next.
    import io

    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from pipelines.exports.figure_canvas import ReplayingCanvas

    def drawn(canvas_class, size, colour, angle):
        fig = Figure(figsize=(3, 2), dpi=100)
        canvas_class(fig)
        fig.text(0.2, 0.5, "same words", size=size, color=colour, rotation=angle, rotation_mode="anchor")
        svg = io.BytesIO()
        fig.savefig(svg, format="svg", metadata={"Date": None})
        fig.canvas.draw()
        return np.asarray(fig.canvas.buffer_rgba()).copy(), svg.getvalue()

    for look in [(10, "black", 0), (10, "red", 0), (16, "red", 0), (16, "red", 30)]:
        ours, stock = drawn(ReplayingCanvas, *look), drawn(FigureCanvasAgg, *look)
        assert np.array_equal(ours[0], stock[0]), look
        assert ours[1] == stock[1], look


def test_a_matplotlib_without_the_private_pieces_gets_its_stock_canvas_and_the_same_files(tables, monkeypatch):
    # The canvas builds on private helpers of matplotlib's; where a matplotlib lacks them, figures are drawn on its
    # stock Agg canvas, into the same files.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from pipelines.exports import figure, figure_canvas

    job = FigureJob("abl", (tables["runs"], tables["epochs"], tables["summary"]), Smoothing(), 50, True)
    monkeypatch.setattr(figure._last_figure, "figure", None, raising=False)
    ours = draw(job)
    monkeypatch.setattr(figure_canvas, "BUILDS_ON_PRIVATE", False)
    monkeypatch.setattr(figure._last_figure, "figure", None)
    assert figure_canvas.canvas_class() is FigureCanvasAgg
    assert draw(job) == ours
    assert type(figure._last_figure.figure.canvas) is FigureCanvasAgg


def test_drawing_leaves_the_garbage_collector_as_it_found_it(tables):
    # A figure sets the objects alive before it aside from the collector (gc.freeze) while it is drawn only: none stays
    # set aside after, and objects a process set aside itself stay so.
    import gc

    job = FigureJob("other", (tables["runs"], tables["epochs"], tables["summary"]), Smoothing(), 50, False)
    assert gc.get_freeze_count() == 0
    draw(job)
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        draw(job)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


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


def test_figures_drawn_with_helper_processes_are_those_drawn_here_in_the_same_order(tables):
    # Enough figures for a helper process; each differs (its own smoothing), so a mix-up of order shows.
    jobs = [
        FigureJob(
            ablation,
            ablation_inputs(ablation, tables["runs"], tables["epochs"], tables["summary"]),
            Smoothing(ema_weight=0.5 + 0.05 * i),
            final_window=2,
            preview=i == 0,
        )
        for i, ablation in enumerate(["abl", "other"] * (JOBS_PER_HELPER // 2))
    ]
    drawn = draw_figures(jobs, workers=2)
    assert drawn == [draw(job) for job in jobs]
    assert len({files[f"{job.ablation}.png"] for (files, _), job in zip(drawn, jobs, strict=True)}) == len(jobs)
    assert drawn[0][1].startswith(b"\xff\xd8") and all(preview is None for _, preview in drawn[1:])  # a JPEG


def test_the_svg_writes_its_text_as_text_in_a_sans_serif_fallback_list(tables):
    import xml.etree.ElementTree as ET

    fig = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"])
    svg = ET.fromstring(render(fig, "svg"))
    texts = [el for el in svg.iter("{http://www.w3.org/2000/svg}text")]
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
    assert not list(svg.iter("{http://www.w3.org/2000/svg}path")) or all(
        not str(el.get("id", "")).startswith("DejaVu") for el in svg.iter("{http://www.w3.org/2000/svg}path")
    )  # no glyph outlines
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


def test_a_title_lifted_over_an_offset_text_stays_lifted_in_the_svg(tables):
    # Entropies of 1000 ± 0.0005 get an offset text (+1e3) over their axis, which the entropy title must clear; an
    # SVG drawn after the PNG (titles kept in place) is the same as one drawn alone (titles placed by matplotlib).
    epochs = tables["epochs"].with_columns(
        sample_entropy=1000 + pl.col("sample_entropy") / 1000, train_entropy=1000 + pl.col("train_entropy") / 1000
    )
    alone = ablation_figure("abl", tables["runs"], epochs, tables["summary"])
    after_png = ablation_figure("abl", tables["runs"], epochs, tables["summary"])
    render(after_png, "png")
    assert alone.axes[2].yaxis.get_offset_text().get_text() == ""  # not drawn yet
    assert after_png.axes[2].yaxis.get_offset_text().get_text() != ""
    [title] = [
        t for t in after_png.axes[2].get_children() if isinstance(t, Text) and t.get_text().startswith("Entropy")
    ]
    assert title.get_position()[1] > 1  # lifted
    assert render(after_png, "svg") == render(alone, "svg")


def test_a_figure_drawn_on_a_reused_one_is_the_figure_drawn_new(tables):
    # Ablations of other shapes one after another on one figure (3 runs, 1 run, no epochs, a title lifted over an
    # offset text, another smoothing window): each one's files are those of a new figure, byte for byte.
    lifted = tables["epochs"].with_columns(
        sample_entropy=1000 + pl.col("sample_entropy") / 1000, train_entropy=1000 + pl.col("train_entropy") / 1000
    )
    cases = [
        ("abl", tables["epochs"], Smoothing()),
        ("other", tables["epochs"], Smoothing(window=3)),
        ("abl", tables["epochs"].clear(), Smoothing()),
        ("abl", lifted, Smoothing()),
        ("other", lifted, Smoothing()),
        ("abl", tables["epochs"], Smoothing()),
    ]
    new, reused, fig = [], [], None
    for ablation, epochs, smoothing in cases:
        rows = (tables["runs"], epochs, tables["summary"])
        new.append(figure_files(ablation, ablation_figure(ablation, *rows, smoothing)))
        fig = ablation_figure(ablation, *rows, smoothing, reuse=fig)
        reused.append(figure_files(ablation, fig))
    for index, (files_new, files_reused) in enumerate(zip(new, reused, strict=True)):
        assert files_reused == files_new, cases[index][0]
