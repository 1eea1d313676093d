"""What an explorer page carries for an ablation: its runs and configurations, every numeric epoch column, histograms
of the trajectories' rewards and advantages, its contrasts and snapshots, bounded in size whatever the run count."""

from __future__ import annotations

import math

import polars as pl

from pipelines.exports.configurations import configuration_name
from pipelines.exports.figure import run_colours

# An ablation with more runs than this is summarised on its page: per configuration a few seeds spread over its
# range of matched rewards, at most this many in all (the best and worst configurations when there are more).
MAX_RUNS_ON_PAGE = 60
# At most this many contrast rows on a page: those of the leading run or configuration first, then the largest.
MAX_CONTRASTS_ON_PAGE = 60
# Histograms of trajectory rewards and advantages: this many equal bins per epoch, for at most about this many
# run × epochs of an ablation (every k-th loaded epoch of each run).
HISTOGRAM_BINS = 20
HISTOGRAM_EPOCHS = 2400
# The page's epochs: epoch_metrics and, in epochs with transcripts, their measures (transcript_metrics), which the
# page plots beside the reward.
EXPLORER_EPOCHS_SQL = """
select
    m.*,
    t.mean_content_chars as transcript_chars,
    t.top_mean_content_chars as transcript_chars_top_third,
    t.bottom_mean_content_chars as transcript_chars_bottom_third,
    t.mean_turns as transcript_turns,
    t.mean_tool_calls as transcript_tool_calls
from epoch_metrics as m
left join transcript_metrics as t using (run_id, epoch)
order by m.run_id, m.epoch
"""
# The smoothing slider reproduces these from mean_reward; the page does not carry them.
DERIVED_COLUMNS = {"reward_ema", "reward_rolling"}
# mean_reward keeps every digit (the slider must reproduce reward_ema exactly); the other columns keep float32's
# precision, as TensorBoard stores its scalars: a tenth of the page's size at 50 runs.
FULL_PRECISION = {"mean_reward"}
SIGNIFICANT_DIGITS = 7
# Each epoch's snapshot id (the hover box's model name) is carried for pages of at most this many runs: a random
# id costs a fourth of the page's data at 50 runs. Every run's final, best and matched snapshots are always listed.
SNAPSHOT_RUNS = 12
# The order of the metric menu; the others follow by name.
METRIC_ORDER = [
    "mean_reward",
    "frac_zero_std_groups",
    "sample_entropy",
    "train_entropy",
    "loss",
    "kl_sample_train",
    "reward_std",
    "mean_group_reward_std",
    "mean_advantage",
    "reported_mean_reward",
]
SUMMARY_COLUMNS = [
    "n_epochs",
    "first_epoch",
    "last_epoch",
    "missing_epochs",
    "final_reward",
    "peak_reward_ema",
    "peak_epoch",
    "matched_horizon",
    "matched_epoch",
    "matched_reward",
    "matched_ci_low",
    "matched_ci_high",
    "matched_iqm",
    "matched_effective_n",
]
# The interval columns and the claim columns are shown when the warehouse's tables have them.
CONTRAST_COLUMNS = [
    "run_a",
    "run_b",
    "arm_a",
    "arm_b",
    "delta",
    "ci_low",
    "ci_high",
    "ci_method",
    "unit",
    "resolved",
    "resolved_holm",
    "resolved_reason",
    "claim_note",
    "p_value",
    "prob_improvement",
    "matched_reward_a",
    "matched_reward_b",
    "n_runs_a",
    "n_runs_b",
]
SNAPSHOT_COLUMNS = ["run_id", "role", "epoch", "snapshot_id", "model_name"]
ROLE_ORDER = {"final": 0, "best": 1, "matched": 2}
BREAKDOWN_COLUMNS = ["run_id", "breakdown", "level", "window_start", "window_end", "n_trajectories", "mean_reward"]


def json_ready(frame: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """The columns of frame that it has, non-finite floats as null (JSON has no NaN), decimals as floats."""
    present = [c for c in columns if c in frame.columns]
    return frame.select(
        [
            pl.when(pl.col(c).cast(pl.Float64).is_finite()).then(pl.col(c).cast(pl.Float64)).alias(c)
            if frame.schema[c].is_float() or frame.schema[c].is_decimal()
            else pl.col(c)
            for c in present
        ]
    )


def joined_epochs(metrics: pl.DataFrame, files: pl.DataFrame) -> pl.DataFrame:
    """epoch_metrics with the numeric columns of fact_epochs it does not have (loss, KL, numeric extras) and
    snapshot_id, by run × epoch."""
    wanted = [c for c, t in files.schema.items() if (t.is_numeric() and t != pl.Boolean) or c == "snapshot_id"]
    own = ["run_id", "epoch", *(c for c in wanted if c not in metrics.columns)]
    if metrics.is_empty() or len(own) <= 2:
        return metrics
    return metrics.join(files.select(own), on=["run_id", "epoch"], how="left")


def metric_columns(epochs: pl.DataFrame) -> list[str]:
    """The numeric epoch columns a page can plot, in menu order, that hold a finite value somewhere."""
    numeric = [
        c
        for c, dtype in epochs.schema.items()
        if (dtype.is_numeric() and dtype != pl.Boolean) and c not in ("run_id", "epoch") and c not in DERIVED_COLUMNS
    ]
    if not numeric or epochs.is_empty():
        return []
    held = epochs.select(pl.col(c).cast(pl.Float64).is_finite().any() for c in numeric).row(0)
    present = [c for c, any_finite in zip(numeric, held, strict=True) if any_finite]
    rank = {c: i for i, c in enumerate(METRIC_ORDER)}
    return sorted(present, key=lambda c: (rank.get(c, len(rank)), c))


def series(epochs: pl.DataFrame, metrics: list[str], snapshots: bool = True) -> dict[str, dict[str, list]]:
    """Per run, its epochs in order as columns (compact JSON, one list per column): epoch, trajectories seen by the
    end of each epoch (the running sum of n_trajectories over loaded epochs), each metric, and snapshot_id if asked."""
    rounded = [
        pl.col(c)
        if c in FULL_PRECISION or not epochs.schema[c].is_float()
        else pl.col(c).round_sig_figs(SIGNIFICANT_DIGITS)
        for c in metrics
    ]
    seen = [pl.col("n_trajectories").fill_null(0).cum_sum().over("run_id").alias("trajectories")]
    extra = [c for c in ("snapshot_id",) if c in epochs.columns and snapshots]
    frame = epochs.sort("run_id", "epoch").select(
        "run_id", "epoch", *(seen if "n_trajectories" in epochs.columns else []), *rounded, *extra
    )
    frame = json_ready(frame, frame.columns)
    out = {}
    for (run,), part in frame.partition_by("run_id", as_dict=True, maintain_order=True).items():
        columns = part.drop("run_id").to_dict(as_series=False)
        # a column with no value in this run is left out: the page reads it as missing
        out[run] = {c: v for c, v in columns.items() if c in ("epoch", "trajectories") or any(x is not None for x in v)}
    return out


def summaries(summary: pl.DataFrame) -> dict[str, dict]:
    """Each run's run_summary numbers as JSON values, by run id."""
    return {row["run_id"]: row for row in json_ready(summary, ["run_id", *SUMMARY_COLUMNS]).to_dicts()}


def arm_values(contrasts: pl.DataFrame) -> dict[str, float]:
    """Each arm of several seeds' matched value as ablation_contrasts gives it (the IQM of its runs' matched
    rewards, in the rows of unit `runs`)."""
    needed = {"unit", "arm_a", "arm_b", "matched_reward_a", "matched_reward_b"}
    if contrasts.is_empty() or not needed <= set(contrasts.columns):
        return {}
    by_runs = contrasts.filter(pl.col("unit") == "runs")
    values = {}
    for side in ("a", "b"):
        for arm, value in by_runs.select(f"arm_{side}", f"matched_reward_{side}").iter_rows():
            if value is not None and math.isfinite(value):
                values[arm] = value
    return values


def _ranked(run_ids: list[str], matched: dict[str, float | None]) -> list[str]:
    """Runs by matched reward, best first, runs without one last."""
    return sorted(run_ids, key=lambda r: (matched.get(r) is None, -(matched.get(r) or 0.0), r))


def _spread(ranked: list[str], count: int) -> list[str]:
    """count of the ranked runs at evenly spaced ranks: the best and the worst, and the median when count is 1."""
    if count >= len(ranked):
        return ranked
    if count == 1:
        return [ranked[(len(ranked) - 1) // 2]]
    return [ranked[round(i * (len(ranked) - 1) / (count - 1))] for i in range(count)]


def carried_runs(members: pl.DataFrame, matched: dict[str, float | None], limit: int = MAX_RUNS_ON_PAGE) -> list[str]:
    """The runs a page draws: all of them up to limit; beyond it, per configuration an equal share of its seeds at
    evenly spaced ranks of matched reward, and with more configurations than limit, the limit/2 best and the rest
    worst configurations (by their best-ranked seed's matched reward), one seed each."""
    if members.height <= limit:
        return members["run_id"].to_list()
    arms = {
        arm: _ranked(runs, matched)
        for arm, runs in members.group_by("arm", maintain_order=True).agg("run_id").iter_rows()
    }
    order = sorted(arms, key=lambda a: (matched.get(arms[a][0]) is None, -(matched.get(arms[a][0]) or 0.0), a))
    if len(order) > limit:
        order = order[: limit // 2] + order[len(order) - (limit - limit // 2) :]
    share = max(1, limit // len(order))
    return sorted(run for arm in order for run in _spread(arms[arm], share))


def run_entries(members: pl.DataFrame, carried: list[str], summary: dict[str, dict], colours: dict) -> list[dict]:
    """Each carried run: id, label, arm, colour (its configuration's when configurations are drawn) and its
    run_summary numbers."""
    kept = members.filter(pl.col("run_id").is_in(carried)).sort("run_id")
    arms = kept["arm"].to_list() if "arm" in kept.columns else kept["run_id"].to_list()
    return [
        {
            "run_id": run,
            "label": label or run,
            "arm": arm or run,
            "colour": colours.get(arm) or colours[run],
            **{k: v for k, v in summary.get(run, {}).items() if k != "run_id"},
        }
        for run, label, arm in zip(kept["run_id"].to_list(), kept["label"].to_list(), arms, strict=True)
    ]


def configurations(members: pl.DataFrame, carried: list[str], values: dict[str, float]) -> list[dict]:
    """The ablation's configurations when one has 2+ seeds (none otherwise): arm, its name (configuration_name, as the
    figure's legend and the paper tables give it), colour, its carried runs and their count in all, and its value
    from ablation_contrasts (arm_values) if it has one."""
    if "arm" not in members.columns:
        return []
    arms = members.group_by("arm").agg("run_id")
    if arms.is_empty() or arms["run_id"].list.len().max() < 2:
        return []
    colours = run_colours(sorted(arms["arm"].to_list()))
    kept = set(carried)
    entries = []
    for arm, runs in arms.sort("arm").iter_rows():
        label = configuration_name(arm, members.filter(pl.col("arm") == arm).select("run_id", "label"))
        entries.append(
            {
                "arm": arm,
                "label": label,
                "colour": colours[arm],
                "runs": sorted(r for r in runs if r in kept),
                "n_runs": len(runs),
                "value": values.get(arm),
            }
        )
    return entries


def bounded_contrasts(contrasts: pl.DataFrame, leader: str | None, limit: int = MAX_CONTRASTS_ON_PAGE) -> list[dict]:
    """The contrast rows a page lists, by run_a, run_b: all up to limit, else the leader's rows first and then
    those of the largest difference."""
    if contrasts.is_empty():
        return []
    if contrasts.height > limit:
        order = [pl.col("delta").abs()]
        if leader is not None:
            order.insert(0, (pl.col("run_a") == leader) | (pl.col("run_b") == leader))
        contrasts = contrasts.sort(order, descending=True, nulls_last=True).head(limit)
    return json_ready(contrasts.sort("run_a", "run_b"), CONTRAST_COLUMNS).to_dicts()


def histograms(frame: pl.DataFrame) -> dict[str, dict]:
    """Per run, the epochs with histograms and, for reward and advantage, per epoch (epoch, lo, hi, bin, n): the
    range of its finite values and its non-empty bins with their counts (HISTOGRAM_BINS equal bins from lo to hi)."""
    if frame.is_empty():
        return {}
    grouped = (
        frame.sort("run_id", "quantity", "epoch", "bin")
        .group_by("run_id", "quantity", "epoch", maintain_order=True)
        .agg(pl.col("lo").first(), pl.col("hi").first(), pl.col("bin"), pl.col("n"))
    )
    out: dict[str, dict] = {}
    for (run, quantity), part in grouped.partition_by("run_id", "quantity", as_dict=True).items():
        entry = out.setdefault(run, {})
        entry["epoch"] = sorted(set(entry.get("epoch", [])) | set(part["epoch"].to_list()))
        entry[quantity] = json_ready(part, ["epoch", "lo", "hi", "bin", "n"]).to_dict(as_series=False)
    return out


def histogram_sql(bins: int = HISTOGRAM_BINS, budget: int = HISTOGRAM_EPOCHS) -> str:
    """The query of the histograms (run × epoch × quantity × bin: lo, hi, n) from fact_trajectories: each run's
    every k-th loaded epoch, k such that an ablation has at most about budget of them; finite values only."""
    return f"""
with positions as (
    select
        e.run_id,
        e.epoch,
        row_number() over (partition by e.run_id order by e.epoch) - 1 as position,
        count(*) over (partition by d.ablation) as ablation_epochs
    from fact_epochs as e
    inner join dim_runs as d using (run_id)
),
chosen as (
    select run_id, epoch from positions
    where position % greatest(1, ceil(ablation_epochs / {int(budget)})::bigint) = 0
),
trajectories as (
    select t.run_id, t.epoch, t.reward, t.advantage from fact_trajectories as t semi join chosen using (run_id, epoch)
),
values as (
    select run_id, epoch, 'reward' as quantity, reward as value from trajectories where isfinite(reward)
    union all
    select run_id, epoch, 'advantage' as quantity, advantage as value from trajectories where isfinite(advantage)
),
ranged as (
    select *, min(value) over w as lo, max(value) over w as hi
    from values
    window w as (partition by run_id, epoch, quantity)
)
select
    run_id,
    epoch,
    quantity,
    any_value(lo) as lo,
    any_value(hi) as hi,
    case when hi > lo then least(floor((value - lo) / (hi - lo) * {int(bins)}), {int(bins) - 1})::integer else 0 end
        as bin,
    count(*) as n
from ranged
group by run_id, epoch, quantity, bin
order by run_id, epoch, quantity, bin
"""
