"""What an ablation figure plots: each run's band and trailing means, each configuration's centre and spread across
its seeds, and the colours of its lines."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import polars as pl

from pipelines.exports.configurations import configuration_names, iqm

NEEDED_EPOCH_COLUMNS = [
    "run_id",
    "epoch",
    "mean_reward",
    "reward_ema",
    "frac_zero_std_groups",
    "sample_entropy",
    "train_entropy",
]
# The per-run series a configuration's line summarises across its seeds.
SEED_SERIES = ["reward_ema", "frac_zero_std_trailing", "sample_entropy_trailing", "train_entropy_trailing"]
# Okabe-Ito first (distinguishable with the common colour-vision deficiencies), then twelve more that differ from them
# and from each other: no two lines share a colour up to twenty.
PALETTE = [
    *("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"),
    *("#8C564B", "#9467BD", "#7F7F7F", "#BCBD22", "#D62728", "#17BECF"),
    *("#393B79", "#AEC7E8", "#FFBB78", "#98DF8A", "#C5B0D5", "#C49C94"),
]
# Values of larger magnitude are left out of the figure (counted in a note on it): the axes' arithmetic overflows on a
# range near 1e308, and no reward or entropy is anywhere near.
PLOTTABLE = 1e100
SUMMARY_VALUES = ["matched_reward", "matched_ci_low", "matched_ci_high"]
SHADE_RANGE = 1.2  # a family's darkest and lightest shades are its colour mixed 60% towards black and white


@dataclass(frozen=True)
class Smoothing:
    """How the figure smooths: the EMA weight of `reward_ema`, a trailing window and the band's coverage; and the
    interval method of the matched rewards' bars, which their key names."""

    ema_weight: float = 0.9
    window: int = 20
    band_level: float = 0.95
    ci_method: str = "structural"


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


def plottable(epochs: pl.DataFrame, summary: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """The epochs and summaries with every value beyond ±PLOTTABLE null, and how many there were."""
    left_out = 0
    frames = []
    for frame in (epochs, summary):
        columns = [c for c in [*NEEDED_EPOCH_COLUMNS[2:], *SUMMARY_VALUES] if c in frame.columns]
        too_large = [(finite(c).abs() > PLOTTABLE).fill_null(False) for c in columns]  # NaN and ±inf are gaps anyway
        left_out += int(frame.select(pl.sum_horizontal(too_large).sum()).item()) if columns and frame.height else 0
        frames.append(
            frame.with_columns(
                pl.when(~large).then(pl.col(c)).alias(c) for c, large in zip(columns, too_large, strict=True)
            )
        )
    return frames[0], frames[1], left_out


def finite(column: str) -> pl.Expr:
    """The column's values, null where not a finite number."""
    return pl.when(pl.col(column).cast(pl.Float64).is_finite()).then(pl.col(column).cast(pl.Float64))


def with_bands(epochs: pl.DataFrame, smoothing: Smoothing) -> pl.DataFrame:
    """Adds the reward band and trailing means of the side-panel signals, per run in epoch order.

    The band is an approximate `band_level` interval of the EMA line: reward_ema ± z · s · f, where s is the
    trailing-window standard deviation of the per-epoch mean reward and f = sqrt(Σ wᵢ²) is the noise factor of the
    debiased EMA after n finite values, f² = (1−w)(1−w²ⁿ) / ((1+w)(1−wⁿ)²) (1 at n = 1, ≈ 0.23 for w = 0.9 later on).
    """
    w = smoothing.ema_weight
    z = NormalDist().inv_cdf(0.5 + smoothing.band_level / 2)
    window = max(int(smoothing.window), 1)

    def trailing_mean(column: str) -> pl.Expr:
        return finite(column).rolling_mean(window_size=window, min_samples=1).over("run_id")

    n = pl.col("mean_reward").is_finite().fill_null(False).cast(pl.Int64).cum_sum().over("run_id")
    wn = pl.lit(w) ** n
    factor = (((1 - w) * (1 - wn * wn)) / ((1 + w) * (1 - wn) ** 2)).sqrt()
    # a window of one epoch has no spread (and polars refuses more samples than the window)
    spread = finite("mean_reward").rolling_std(window_size=window, min_samples=min(2, window)).over("run_id")
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


def interquartile_mean(column: str) -> pl.Expr:
    """The mean of a group's middle values, after dropping floor(n/4) of its n values at each end: configurations.iqm
    as an expression, for every epoch of every configuration at once; the plain mean below four values."""
    n = pl.len()
    rank = pl.col(column).rank("ordinal")
    return pl.col(column).filter((rank > n // 4) & (rank <= n - n // 4)).mean()


def printable(name: str) -> str:
    """A name as a figure can show it: a tab, a newline or another control character as its escape (`\\t`), which no
    font draws."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in name)


def configurations(members: pl.DataFrame) -> pl.DataFrame:
    """One row per configuration (dim_runs' `arm`; each run its own where the column is missing or null), in arm
    order: its name (configuration_name), its runs in run_id order, and its reward family (the first its runs name,
    or null)."""
    runs = members.sort("run_id").with_columns(
        arm=pl.coalesce("arm", "run_id") if "arm" in members.columns else pl.col("run_id"),
        reward_family=pl.col("reward_family") if "reward_family" in members.columns else pl.lit(None, pl.String),
    )
    grouped = (
        runs.group_by("arm")
        .agg(pl.col("run_id").alias("runs"), pl.col("reward_family").drop_nulls().first())
        .sort("arm")
    )
    name_of = configuration_names(runs)
    names = [printable(name_of[arm]) for arm in grouped["arm"]]
    return grouped.select("arm", pl.Series("name", names, pl.String), "runs", "reward_family")


def across_seeds(data: pl.DataFrame, configs: pl.DataFrame) -> pl.DataFrame:
    """Per configuration, series of SEED_SERIES and epoch: its seeds with a finite value there, their IQM, and their
    25th and 75th percentiles (linear interpolation, as numpy's default). An epoch fewer than half a configuration's
    seeds reached is left out: its line would describe the seeds that ran longest, not the configuration."""
    arm_of = configs.select("arm", pl.col("runs").alias("run_id"), size=pl.col("runs").list.len()).explode("run_id")
    values = (
        data.join(arm_of, on="run_id", how="inner")
        .unpivot(index=["arm", "size", "epoch"], on=SEED_SERIES, variable_name="series")
        .with_columns(value=finite("value"))
        .drop_nulls("value")
    )
    return (
        values.group_by("arm", "series", "epoch")
        .agg(
            pl.len().alias("seeds"),
            pl.col("size").first(),
            interquartile_mean("value").alias("centre"),
            pl.col("value").quantile(0.25, "linear").alias("low"),
            pl.col("value").quantile(0.75, "linear").alias("high"),
        )
        .filter(pl.col("seeds") * 2 >= pl.col("size"))
        .drop("size")
        .sort("arm", "series", "epoch")
    )


def matched_across_seeds(summary: pl.DataFrame, configs: pl.DataFrame) -> dict[str, float]:
    """Per configuration, the IQM of its runs' finite matched rewards (as the paper tables give it; none: left out)."""
    arm_of = configs.select("arm", pl.col("runs").alias("run_id")).explode("run_id")
    rewards = (
        summary.select("run_id", reward=finite("matched_reward"))
        .drop_nulls("reward")
        .unique("run_id", keep="first", maintain_order=True)
        .join(arm_of, on="run_id", how="inner")
        .group_by("arm")
        .agg("reward")
    )
    return {arm: iqm(values) for arm, values in rewards.rows()}


def run_colours(run_ids: list[str]) -> dict[str, str]:
    """A colour per run, from PALETTE in order, repeating only past its twenty colours."""
    return {run: PALETTE[i % len(PALETTE)] for i, run in enumerate(run_ids)}


def family_colours(configs: pl.DataFrame) -> dict[str | None, str]:
    """A colour per reward family of the configurations, PALETTE's in the order they first appear."""
    families = list(dict.fromkeys(configs["reward_family"].to_list()))
    return {family: PALETTE[index % len(PALETTE)] for index, family in enumerate(families)}


def line_colours(configs: pl.DataFrame) -> dict[str, str]:
    """A colour per configuration (arm): PALETTE's, one each, up to its length; past it, each configuration a shade
    of its reward family's colour (family_colours), from darker to lighter in arm order."""
    arms = configs["arm"].to_list()
    if len(arms) <= len(PALETTE):
        return run_colours(arms)
    colours = {}
    for family, base in family_colours(configs).items():
        members = configs.filter(pl.col("reward_family").eq_missing(family))["arm"].to_list()
        for index, arm in enumerate(members):
            colours[arm] = shade(base, index / (len(members) - 1) - 0.5 if len(members) > 1 else 0.0)
    return colours


def shade(colour: str, amount: float) -> str:
    """The colour mixed towards black (amount < 0) or white (amount > 0), by SHADE_RANGE · |amount|, as hex."""
    red, green, blue = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    towards, share = (1.0, amount) if amount > 0 else (0.0, -amount)
    share *= SHADE_RANGE
    mixed = [channel + (towards - channel) * share for channel in (red, green, blue)]
    return "#" + "".join(f"{math.floor(channel * 255 + 0.5):02X}" for channel in mixed)
