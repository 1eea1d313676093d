"""Per ablation, a table of its configurations for a paper, Markdown and LaTeX: seeds, matched reward, interval, IQM."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from pipelines.exports.configurations import configuration_name, iqm
from pipelines.exports.escape import latex_text, md_code, md_text
from pipelines.exports.report import MISSING, interval, num, table
from pipelines.stats.intervals import interval_quantile

ONE_SEED_MARK = "†"


def configurations(runs: pl.DataFrame, summary: pl.DataFrame, level: float) -> pl.DataFrame:
    """One row per configuration (ablation × arm) of dim_runs: its name (the label of the run named like the arm,
    or of its one run, else the arm), its runs, those with a matched reward (`scored`), the mean of their matched
    rewards with a t interval over them at `level` (a claim about the configuration), and their IQM. With one
    scored run, the mean is its matched reward and the interval its own (about that run's epochs): `one_seed`."""
    joined = runs.join(summary, on="run_id", how="left").sort("run_id")
    rows = []
    for (ablation, arm), group in joined.group_by(["ablation", "arm"], maintain_order=True):
        scored = group.filter(pl.col("matched_reward").is_not_null() & pl.col("matched_reward").is_finite())
        values = scored["matched_reward"].to_list()
        row = {
            "ablation": ablation,
            "arm": arm,
            "configuration": configuration_name(arm, group),
            "runs": group.height,
            "scored": len(values),
            "matched_horizon": group["matched_horizon"].min(),
            "matched_reward": float(np.mean(values)) if values else None,
            "ci_low": None,
            "ci_high": None,
            "iqm": iqm(values),
            "one_seed": len(values) == 1,
        }
        if len(values) == 1:
            row["ci_low"], row["ci_high"] = scored["matched_ci_low"][0], scored["matched_ci_high"][0]
        elif len(values) > 1 and np.std(values) > 0:
            half = interval_quantile(level, len(values) - 1) * float(np.std(values, ddof=1)) / math.sqrt(len(values))
            row["ci_low"], row["ci_high"] = row["matched_reward"] - half, row["matched_reward"] + half
        rows.append(row)
    return pl.DataFrame(rows, schema=CONFIGURATION_COLUMNS).sort(
        ["ablation", "matched_reward", "arm"], descending=[False, True, False], nulls_last=True
    )


CONFIGURATION_COLUMNS = {
    "ablation": pl.String,
    "arm": pl.String,
    "configuration": pl.String,
    "runs": pl.Int64,
    "scored": pl.Int64,
    "matched_horizon": pl.Int64,
    "matched_reward": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "iqm": pl.Float64,
    "one_seed": pl.Boolean,
}


def _seeds(row: dict) -> str:
    return str(row["runs"]) if row["scored"] == row["runs"] else f"{row['scored']} of {row['runs']}"


def _caption(rows: pl.DataFrame, level: float) -> str:
    horizons = sorted({h for h in rows["matched_horizon"].drop_nulls()})
    at = f"epoch {horizons[0]}" if len(horizons) == 1 else "each configuration's compute-matched horizon"
    return (
        f"Matched reward at the compute-matched horizon ({at}): the mean over seeds of their mean reward in the "
        f"matched window, a {level:.0%} t interval over seeds, and the interquartile mean (IQM) over seeds."
    )


ONE_SEED_NOTE = "one seed, so the interval is that run's own (about its epochs, not its configuration)."


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def markdown_table(ablation: str | None, rows: pl.DataFrame, level: float) -> str:
    """The ablation's configurations (rows of `configurations`) as a Markdown table under a heading, and a caption."""
    body = [
        [
            md_text(r["configuration"]),
            _seeds(r),
            num(r["matched_reward"]),
            interval(r["ci_low"], r["ci_high"]) + (f" {ONE_SEED_MARK}" if r["one_seed"] else ""),
            num(r["iqm"]),
        ]
        for r in rows.iter_rows(named=True)
    ]
    header = ["configuration", "seeds", "matched reward", f"{level:.0%} interval", "IQM"]
    caption = _caption(rows, level) + (f" {ONE_SEED_MARK}: {ONE_SEED_NOTE}" if rows["one_seed"].any() else "")
    return f"### Ablation {md_code(ablation or 'unassigned')}\n\n{table(header, body)}\n\n{md_text(caption)}\n"


def _latex_number(value) -> str:
    text = num(value)
    return "--" if text == MISSING else f"${text}$"


def latex_table(ablation: str | None, rows: pl.DataFrame, level: float) -> str:
    """The ablation's configurations as a LaTeX table (booktabs rules), every name escaped."""
    note = f" \\dag: {latex_text(ONE_SEED_NOTE)}" if rows["one_seed"].any() else ""
    name = latex_text(ablation or "unassigned")
    lines = [
        "% Made by grpo-warehouse from run_summary and dim_runs; needs \\usepackage{booktabs}.",
        "\\begin{table}[t]",
        "\\centering",
        f"\\caption{{Ablation \\texttt{{{name}}}. {latex_text(_caption(rows, level))}{note}}}",
        "\\begin{tabular}{lrrcr}",
        "\\toprule",
        f"Configuration & Seeds & Matched reward & {latex_text(f'{level:.0%}')} interval & IQM \\\\",
        "\\midrule",
    ]
    for r in rows.iter_rows(named=True):
        bounds = "--"
        if _finite(r["ci_low"]) and _finite(r["ci_high"]):
            bounds = f"$[{num(r['ci_low'])}, {num(r['ci_high'])}]$"
        mark = "\\textsuperscript{\\dag}" if r["one_seed"] else ""
        lines.append(
            f"{latex_text(r['configuration'])} & {_seeds(r)} & {_latex_number(r['matched_reward'])} & "
            f"{bounds}{mark} & {_latex_number(r['iqm'])} \\\\"
        )
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return "\n".join(lines)
