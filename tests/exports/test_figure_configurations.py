"""The ablation figure by configuration (seeds of one arm as one colour, its IQM line and the seeds' quartile band)
and with many lines: legends that name what a reader needs and fit the figure, colours that do not repeat."""

import xml.etree.ElementTree as ET

import numpy as np
import polars as pl
import pytest
from figure_artists import by_gid, colour_of
from matplotlib.colors import to_hex
from matplotlib.lines import Line2D
from matplotlib.text import Text
from scipy.stats import trim_mean

from pipelines.exports.figure import FigureJob, Smoothing, ablation_figure, draw, render
from pipelines.exports.figure_series import PALETTE, shade

SVG = "{http://www.w3.org/2000/svg}"
# run -> (arm, label, epochs): configuration a is named by the label of its run named like the arm, cfg_b by its arm
# (no run is named so), c by its one run's label. a_s2 stops after 3 epochs (2 of 3 seeds go on: drawn); three of
# cfg_b's four after 2 (1 of 4 goes on: not drawn).
SEEDS = {
    "a": ("a", "Config A", 6),
    "a_s1": ("a", "Config A · seed 1", 6),
    "a_s2": ("a", "Config A · seed 2", 3),
    "b_s0": ("cfg_b", "b seed 0", 6),
    "b_s1": ("cfg_b", "b seed 1", 2),
    "b_s2": ("cfg_b", "b seed 2", 2),
    "b_s3": ("cfg_b", "b seed 3", 2),
    "c": ("c", "Solo C", 6),
}
VALUES = ["mean_reward", "reward_ema", "frac_zero_std_groups", "sample_entropy", "train_entropy"]


@pytest.fixture
def seeds() -> dict[str, pl.DataFrame]:
    rng = np.random.default_rng(7)
    runs = pl.DataFrame(
        {
            "run_id": list(SEEDS),
            "ablation": ["abl"] * len(SEEDS),
            "label": [label for _, label, _ in SEEDS.values()],
            "arm": [arm for arm, _, _ in SEEDS.values()],
            "reward_family": ["binary"] * len(SEEDS),
        }
    )
    epochs = pl.concat(
        pl.DataFrame({"run_id": [run] * n, "epoch": list(range(n)), **{c: rng.uniform(0, 1, n) for c in VALUES}})
        for run, (_, _, n) in SEEDS.items()
    )
    summary = pl.DataFrame(
        {"run_id": list(SEEDS), "matched_horizon": [1] * len(SEEDS), "matched_reward": rng.uniform(0, 1, len(SEEDS))}
    )
    return {"runs": runs, "epochs": epochs, "summary": summary}


def draw_seeds(seeds):
    # window 1: each seed's trailing means are its own per-epoch values, so the side panels' references are plain
    return ablation_figure("abl", seeds["runs"], seeds["epochs"], seeds["summary"], Smoothing(window=1))


def test_the_legend_names_configurations_with_their_seeds(seeds):
    fig = draw_seeds(seeds)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "Config A (3 seeds)",
        "Solo C (1 seed)",
        "cfg_b (4 seeds)",
    ]
    assert fig.get_suptitle().startswith("Ablation “abl”: 3 configurations, 8 runs")
    key = " / ".join(t.get_text() for t in fig.axes[0].get_legend().get_texts())
    assert "IQM of the seeds' EMAs" in key and "25th–75th percentile" in key and "not an interval" in key


def test_one_colour_per_configuration_on_every_mark(seeds):
    fig = draw_seeds(seeds)
    reward, zero, entropy = fig.axes
    legend_colours = [  # a configuration of seeds is keyed by its band and line, one of one run by its line
        to_hex(h.get_color() if isinstance(h, Line2D) else h.get_facecolor(), keep_alpha=False)
        for h in fig.legends[0].legend_handles
    ]
    colours = {}
    for arm in ("a", "c", "cfg_b"):
        runs = [run for run, (of, _, _) in SEEDS.items() if of == arm]
        artists = [by_gid(reward, "seed")[r] for r in runs] + [by_gid(reward, "matched_seed")[r] for r in runs]
        artists += [by_gid(reward, "centre")[arm], by_gid(reward, "matched")[arm], by_gid(zero, "zero_std")[arm]]
        artists += [by_gid(entropy, "sample_entropy")[arm], by_gid(entropy, "train_entropy")[arm]]
        artists += [by_gid(reward, "spread")[arm]] if len(runs) > 1 else []
        (colours[arm],) = {colour_of(a) for a in artists}
    assert list(colours.values()) == legend_colours
    assert len(set(colours.values())) == 3
    # The band of the seeds' spread where a configuration has 2+ seeds, none for the configuration of one run.
    assert sorted(by_gid(reward, "spread")) == ["a", "cfg_b"]
    assert not [gid for gid in by_gid(reward, "") if gid.startswith(("ema:", "raw:", "band:"))]


def _per_epoch(seeds, arm: str, column: str) -> dict[int, list[float]]:
    runs = [run for run, (of, _, _) in SEEDS.items() if of == arm]
    frame = seeds["epochs"].filter(pl.col("run_id").is_in(runs)).group_by("epoch").agg(column).sort("epoch")
    return dict(zip(frame["epoch"].to_list(), frame[column].to_list(), strict=True))


@pytest.mark.parametrize(("arm", "epochs"), [("a", [0, 1, 2, 3, 4, 5]), ("cfg_b", [0, 1]), ("c", [0, 1, 2, 3, 4, 5])])
def test_the_line_is_the_iqm_across_seeds_and_the_band_their_quartiles(seeds, arm, epochs):
    # scipy's trim_mean(·, 0.25) (rliable's IQM) and numpy's percentiles are the references; an epoch fewer than
    # half a configuration's seeds reached is not drawn.
    fig = draw_seeds(seeds)
    reward, zero, entropy = fig.axes
    values = _per_epoch(seeds, arm, "reward_ema")
    centre = by_gid(reward, "centre")[arm]
    assert list(centre.get_xdata()) == epochs
    assert list(centre.get_ydata()) == pytest.approx([trim_mean(values[e], 0.25) for e in epochs])
    if arm != "c":
        (band,) = by_gid(reward, "spread")[arm].get_paths()
        vertices = band.vertices[np.isfinite(band.vertices[:, 1])]
        for epoch in epochs:
            lo, hi = np.percentile(values[epoch], [25, 75])
            at = vertices[vertices[:, 0] == epoch][:, 1]
            assert sorted(set(np.round(at, 12))) == pytest.approx(sorted({round(lo, 12), round(hi, 12)}))
    for panel, gid, column in ((zero, "zero_std", "frac_zero_std_groups"), (entropy, "train_entropy", "train_entropy")):
        signal = _per_epoch(seeds, arm, column)
        line = by_gid(panel, gid)[arm]
        assert list(line.get_ydata()) == pytest.approx([trim_mean(signal[e], 0.25) for e in line.get_xdata()])


def test_the_matched_diamond_is_the_iqm_of_the_seeds_matched_rewards(seeds):
    fig = draw_seeds(seeds)
    matched = dict(zip(seeds["summary"]["run_id"], seeds["summary"]["matched_reward"], strict=True))
    for arm in ("a", "c", "cfg_b"):
        rewards = [matched[run] for run, (of, _, _) in SEEDS.items() if of == arm]
        diamond = by_gid(fig.axes[0], "matched")[arm]
        assert list(diamond.get_xydata()[0]) == pytest.approx([1, trim_mean(rewards, 0.25)])
        dots = [by_gid(fig.axes[0], "matched_seed")[run].get_ydata()[0] for run, (o, _, _) in SEEDS.items() if o == arm]
        assert dots == pytest.approx(rewards)


def test_the_svg_names_the_configurations_and_draws_each_in_its_colour(seeds):
    svg = ET.fromstring(render(draw_seeds(seeds), "svg"))
    words = {"".join(el.itertext()) for el in svg.iter(f"{SVG}text")}
    assert {"Config A (3 seeds)", "Solo C (1 seed)", "cfg_b (4 seeds)"} <= words
    groups = {el.get("id"): el for el in svg.iter(f"{SVG}g")}
    for arm, colour in zip(("a", "c", "cfg_b"), PALETTE, strict=False):
        (path,) = groups[f"centre:{arm}"].iter(f"{SVG}path")
        assert f"stroke: {colour.lower()}" in path.get("style")


def test_shades_mix_a_colour_towards_black_and_white():
    # #0072B2 (0, 114, 178): 60% of the way to white is (153, 198.6, 224.2); to black (0, 45.6, 71.2).
    assert shade("#0072B2", 0.5) == "#99C7E0"
    assert shade("#0072B2", -0.5) == "#002E47"
    assert shade("#0072B2", 0.0) == "#0072B2"


def many_runs(
    count: int, seeds: int = 1, families: int = 2, epochs: int = 30, detail: str = ""
) -> dict[str, pl.DataFrame]:
    """count configurations of `seeds` runs each, with long labels (detail: more of them), in `families` reward
    families."""
    rng = np.random.default_rng(count)
    rows = [
        (
            f"run_{k:03d}_s{s}",
            f"cfg_{k:03d}",
            f"Iterative pairwise vs baseline{detail}, {k}/8 FP, lr 3e-6 · seed {s}",
            k,
        )
        for k in range(count)
        for s in range(seeds)
    ]
    runs = pl.DataFrame(
        {
            "run_id": [r[0] for r in rows],
            "ablation": ["abl"] * len(rows),
            "label": [r[2] if seeds == 1 else r[2].rsplit(" · ", 1)[0] for r in rows],
            "arm": [r[1] for r in rows],
            "reward_family": [f"family_{r[3] % families}" for r in rows],
        }
    )
    frame = pl.DataFrame(
        {
            "run_id": np.repeat(runs["run_id"].to_numpy(), epochs),
            "epoch": np.tile(np.arange(epochs), len(rows)),
            **{c: rng.uniform(0, 1, epochs * len(rows)) for c in VALUES},
        }
    )
    summary = pl.DataFrame({"run_id": runs["run_id"], "matched_horizon": 20, "matched_reward": 0.5})
    return {"runs": runs, "epochs": frame, "summary": summary}


LONG = ", the rewards of an ensemble of three judges averaged, each prompted with its own rubric" * 2


@pytest.mark.parametrize(
    ("count", "seeds", "entries", "detail"),
    [(5, 1, 5, ""), (4, 10, 4, ""), (20, 1, 20, ""), (40, 1, 2, ""), (90, 1, 2, ""), (3, 1, 3, LONG)],
)
def test_the_legend_fits_below_the_panels_and_no_label_runs_into_a_title(count, seeds, entries, detail):
    tables = many_runs(count, seeds, detail=detail)
    fig = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"])
    render(fig, "png")  # laid out as the file is
    renderer = fig.canvas.get_renderer()
    width, height = fig.bbox.width, fig.bbox.height
    legend = fig.legends[0].get_window_extent(renderer)
    assert len(fig.legends[0].get_texts()) == entries
    assert all(("\n" in t.get_text()) == bool(detail) for t in fig.legends[0].get_texts())  # the long ones wrap
    assert legend.x0 >= 0 and legend.x1 <= width and legend.y0 >= 0 and legend.y1 <= height  # never clipped
    for ax in fig.axes:
        assert legend.y1 <= ax.get_tightbbox(renderer).y0  # below every panel, its tick labels and axis labels
    (title,) = [t.get_window_extent(renderer) for t in fig.get_children() if titled(t, fig.get_suptitle())]
    for ax in fig.axes:
        label = ax.yaxis.label.get_window_extent(renderer)
        assert label.y0 >= ax.bbox.y0 - 1 and label.y1 <= ax.bbox.y1 + 1  # within its panel's height
        (panel_title,) = [t.get_window_extent(renderer) for t in ax.get_children() if titled(t, ax.get_title("left"))]
        assert not panel_title.overlaps(label) and not panel_title.overlaps(title)


def titled(artist, title: str) -> bool:
    return isinstance(artist, Text) and artist.get_text() == title


def test_up_to_twenty_lines_never_share_a_colour_and_past_it_a_family_shares_a_hue():
    tables = many_runs(20)
    fig = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"])
    assert len({colour_of(line) for line in by_gid(fig.axes[0], "ema").values()}) == 20
    tables = many_runs(21, families=2)
    fig = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "family_0: 11 runs, a shade each",
        "family_1: 10 runs, a shade each",
    ]
    colours = {run: colour for run, (_, colour) in crowded_lines(fig.axes[0], "ema", tables, "reward_ema").items()}
    # family_0 (runs 0, 2, ..., 20) in PALETTE[0]'s shades, darkest to lightest; family_1 in PALETTE[1]'s
    assert (
        colours["run_000_s0"] == shade(PALETTE[0], -0.5).lower()
        and colours["run_020_s0"] == shade(PALETTE[0], 0.5).lower()
    )
    assert colours["run_001_s0"] == shade(PALETTE[1], -0.5).lower()
    assert len(set(colours.values())) == 21
    # past twenty lines, single runs are lines alone: no per-epoch points or bands
    assert not by_gid(fig.axes[0], "raw") and not by_gid(fig.axes[0], "band")


@pytest.mark.parametrize("case", ["no epochs", "NaN only", "beyond 1e100"])
def test_degenerate_seeds_are_drawn(seeds, case):
    epochs = seeds["epochs"]
    epochs = {
        "no epochs": epochs.clear(),
        "NaN only": epochs.with_columns(pl.lit(float("nan")).alias(c) for c in VALUES),
        "beyond 1e100": epochs.with_columns(reward_ema=pl.lit(1e308), mean_reward=pl.lit(-1e308)),
    }[case]
    drawing = draw(FigureJob("abl", (seeds["runs"], epochs, seeds["summary"]), Smoothing(), 50, False))
    assert drawing.failure is None and sorted(drawing.files) == ["abl.png", "abl.svg"]
    ET.fromstring(drawing.files["abl.svg"])


def crowded_lines(ax, prefix: str, tables, column: str) -> dict[str, tuple[list, str]]:
    """Past twenty lines, the one artist drawing every run's series: per run, its polylines' points and its colour,
    each polyline told by the points it draws (a run's values are its own)."""
    (lines,) = by_gid(ax, prefix).values()
    series = tables["epochs"].partition_by("run_id", as_dict=True)
    drawn: dict[str, tuple[list, str]] = {}
    for path, colour in zip(lines.get_paths(), lines.get_edgecolor(), strict=True):
        points = [tuple(map(float, point)) for point in path.vertices]
        run = next(r for (r,), frame in series.items() if set(points) <= set(frame.select("epoch", column).rows()))
        drawn.setdefault(run, ([], to_hex(colour, keep_alpha=False)))[0].append(points)
    return drawn


def test_past_twenty_runs_a_series_is_one_artist_with_each_runs_values_gaps_and_colour():
    tables = many_runs(24, epochs=6)
    ema_of = pl.when((pl.col("run_id") == "run_001_s0") & (pl.col("epoch") == 2)).then(None).otherwise("reward_ema")
    # run_002 has one epoch, far above the others: no line to draw, yet the panel reaches it, as a plotted point would
    epochs = (
        tables["epochs"]
        .with_columns(reward_ema=ema_of)
        .filter((pl.col("run_id") != "run_002_s0") | (pl.col("epoch") == 0))
        .with_columns(reward_ema=pl.when(pl.col("run_id") == "run_002_s0").then(7.0).otherwise("reward_ema"))
    )
    rewards = [0.1 * k if k != 3 else float("nan") for k in range(24)]
    summary = tables["summary"].with_columns(
        matched_horizon=pl.lit(4),
        matched_reward=pl.Series(rewards),
        matched_ci_low=pl.Series(rewards) - 0.05,
        matched_ci_high=pl.Series([r + 0.05 if k % 2 else None for k, r in enumerate(rewards)]),
    )
    tables = {**tables, "epochs": epochs, "summary": summary}
    # window 1: the side panels' trailing means are the values themselves
    reward, _, entropy = ablation_figure("abl", tables["runs"], epochs, summary, Smoothing(window=1)).axes
    ema = crowded_lines(reward, "ema", tables, "reward_ema")
    assert sorted(ema) == sorted(set(tables["runs"]["run_id"]) - {"run_002_s0"})
    assert [len(points) for points in ema["run_001_s0"][0]] == [2, 3]  # broken at the missing epoch 2
    first = epochs.filter(pl.col("run_id") == "run_000_s0")
    assert ema["run_000_s0"][0] == [list(zip(map(float, first["epoch"]), first["reward_ema"], strict=True))]
    assert reward.get_ylim()[1] >= 7.0
    assert sorted(crowded_lines(entropy, "train_entropy", tables, "train_entropy")) == sorted(ema)
    (diamonds,) = by_gid(reward, "matched").values()
    finite = [k for k in range(24) if k != 3]
    assert diamonds.get_offsets().tolist() == [[4.0, rewards[k]] for k in finite]
    diamond_colours = {
        f"run_{k:03d}_s0": to_hex(c, keep_alpha=False) for k, c in zip(finite, diamonds.get_facecolor(), strict=True)
    }
    assert {run: colour for run, (_, colour) in ema.items() if run in diamond_colours} == {
        run: colour for run, colour in diamond_colours.items() if run in ema
    }
    assert len(set(diamond_colours.values())) == len(finite)
    (bars,) = by_gid(reward, "matched_interval").values()
    assert [path.vertices.tolist() for path in bars.get_paths()] == [
        [[4.0, rewards[k] - 0.05], [4.0, rewards[k] + 0.05]] for k in finite if k % 2
    ]


def test_past_twenty_runs_the_panels_artists_do_not_grow_with_the_runs():
    drawn = []
    for count in (24, 48):
        tables = many_runs(count, epochs=3)
        fig = ablation_figure("abl", tables["runs"], tables["epochs"], tables["summary"])
        drawn.append([len(ax.get_children()) for ax in fig.axes])
    assert drawn[0] == drawn[1]
