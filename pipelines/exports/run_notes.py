"""What report.md says of single runs besides their numbers: a collapse after a peak, and the files it did not load."""

from __future__ import annotations

import math

import polars as pl

from pipelines.exports.escape import md_code, md_text

# A run has collapsed after its peak when its last smoothed reward is below its peak smoothed reward by more than
# this share of the peak's size, and by more than the half-width of its matched interval (so that the noise of a
# run's mean reward is never read as a collapse).
COLLAPSE_SHARE = 0.25
NAMED_AT_MOST = 5  # runs named in a note; the rest counted
PROBLEM_ROWS_AT_MOST = 20  # runs listed in a section's table of files not loaded; the rest counted

# The report's summary rows: run_summary with each run's last finite reward_ema (its final EMA).
SUMMARY_SQL = """
with final_emas as (
    select run_id, arg_max(reward_ema, epoch) filter (where isfinite(reward_ema)) as final_reward_ema
    from epoch_metrics
    group by run_id
)
select run_summary.*, final_emas.final_reward_ema
from run_summary
left join final_emas using (run_id)
order by run_id
"""
# Per run with files not loaded: how many were quarantined, how many epoch entries loaded nothing, and one of them.
PROBLEMS_SQL = """
with quarantined as (
    select
        run_id,
        count(*) as quarantined_files,
        min(source_path) as quarantined_example,
        arg_min(reason, source_path) as quarantined_reason
    from file_inventory
    where status = 'quarantined' and run_id is not null
    group by run_id
),
unloaded as (
    select
        run_id,
        count(*) as unloaded_epochs,
        min(source_path) as unloaded_example,
        arg_min(reason, source_path) as unloaded_reason
    from unloaded_epochs
    group by run_id
)
select
    run_id,
    coalesce(quarantined.quarantined_files, 0) as quarantined_files,
    coalesce(unloaded.unloaded_epochs, 0) as unloaded_epochs,
    coalesce(quarantined.quarantined_example, unloaded.unloaded_example) as example_path,
    coalesce(quarantined.quarantined_reason, unloaded.unloaded_reason) as example_reason
from quarantined
full join unloaded using (run_id)
order by run_id
"""


def collapsed(summary: pl.DataFrame) -> pl.DataFrame:
    """The runs of summary (SUMMARY_SQL's rows) that collapsed after their peak (COLLAPSE_SHARE), biggest drop first,
    with `drop` (peak EMA − final EMA) and `half_width` (of the matched interval)."""
    if "final_reward_ema" not in summary.columns:
        return summary.head(0)
    half_width = ((pl.col("matched_ci_high") - pl.col("matched_ci_low")) / 2).fill_nan(None)
    drop = pl.col("peak_reward_ema") - pl.col("final_reward_ema")
    return (
        summary.with_columns(drop=drop, half_width=half_width)
        .filter(
            pl.col("drop").is_finite()
            & (pl.col("drop") > COLLAPSE_SHARE * pl.col("peak_reward_ema").abs())
            & (pl.col("half_width").is_null() | (pl.col("drop") > pl.col("half_width")))
        )
        .sort(["drop", "run_id"], descending=[True, False])
    )


def collapse_note(summary: pl.DataFrame) -> str | None:
    """A paragraph naming the runs that collapsed after a peak, with their peak and final smoothed rewards; None when
    none did."""
    runs = collapsed(summary)
    if runs.is_empty():
        return None
    named = []
    for r in runs.head(NAMED_AT_MOST).iter_rows(named=True):
        share = r["drop"] / abs(r["peak_reward_ema"]) if r["peak_reward_ema"] else math.inf
        width = f", more than its matched interval's half-width {r['half_width']:.3f}" if r["half_width"] else ""
        named.append(
            f"{md_code(r['run_id'])} peaks at {r['peak_reward_ema']:.3f} (epoch {r['peak_epoch']}) and ends at "
            f"{r['final_reward_ema']:.3f} (epoch {r['last_epoch']}), {r['drop']:.3f} lower ({share:.0%} of its peak"
            f"{width})"
        )
    more = f"; and {runs.height - NAMED_AT_MOST} more run(s)" if runs.height > NAMED_AT_MOST else ""
    what = (
        "Its final and matched rewards describe the collapsed policy; its *best* snapshot is the one at the peak."
        if runs.height == 1
        else "Their final and matched rewards describe collapsed policies; their *best* snapshots are those at the "
        "peaks."
    )
    return (
        f"**Collapse after a peak.** The smoothed reward (EMA) of {runs.height} run(s) ends far below its peak "
        f"(by more than {COLLAPSE_SHARE:.0%} of the peak and more than the matched interval's half-width): "
        + "; ".join(named)
        + more
        + ". "
        + what
    )


def problem_rows(problems: pl.DataFrame) -> tuple[str, list[str], list[list[str]]] | None:
    """The runs of problems (PROBLEMS_SQL's rows, one ablation's) as a sentence, a header and the rows of a table, at
    most PROBLEM_ROWS_AT_MOST (the runs with most problems); None when every file loaded."""
    if problems.is_empty():
        return None
    ranked = problems.sort(pl.col("quarantined_files") + pl.col("unloaded_epochs"), "run_id", descending=[True, False])
    rows = [
        [
            md_code(r["run_id"]),
            str(r["quarantined_files"]),
            str(r["unloaded_epochs"]),
            f"{md_code(r['example_path'])} ({md_text(r['example_reason'])})" if r["example_path"] else "–",
        ]
        for r in ranked.head(PROBLEM_ROWS_AT_MOST).iter_rows(named=True)
    ]
    more = problems.height - PROBLEM_ROWS_AT_MOST
    lead = (
        f"Files of {problems.height} run(s) were not loaded: `ingest_errors` lists each file with what is wrong and "
        "where, and `unloaded_epochs` each epoch entry that loaded nothing, with the path to look at (for one run: "
        "`grpo-warehouse sql \"select * from ingest_errors where run_id = '<run>'\"`). A fixed file is loaded at "
        "the next build."
        + (
            f" The {PROBLEM_ROWS_AT_MOST} runs with the most are listed; {more} more are in those tables."
            if more > 0
            else ""
        )
    )
    return lead, ["run", "quarantined files", "epochs not loaded", "for example"], rows
