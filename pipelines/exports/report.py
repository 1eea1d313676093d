"""report.md: per ablation, who wins at the compute-matched horizon and by how much, the runs, the snapshots."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import polars as pl

from pipelines.exports.claims import Claims, finite, interval_kind, interval_name, method_sentence, verdict
from pipelines.exports.escape import md_code, md_text, shell_json_string, visible
from pipelines.exports.figure import file_stem
from pipelines.exports.run_notes import collapse_note, problem_rows

MISSING = "–"
BETA_HEADER = "finetuning-2025-09-03"
API_URL = "https://api.anthropic.com/v1/messages"
SNAPSHOT_ROLES = ("matched", "best", "final")


@dataclass(frozen=True)
class ReportSettings:
    """The metric parameters the report quotes (they come from the warehouse configuration)."""

    final_window: int = 50
    ci_level: float = 0.95
    ci_method: str = "structural"
    figures_folder: str = "figures"


def num(value, signed: bool = False) -> str:
    """A number with 3 decimals (a sign when asked), or a dash when there is none."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def interval(low, high) -> str:
    return f"[{num(low)}, {num(high)}]"


def integer(value) -> str:
    return MISSING if value is None else str(int(value))


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of cells that are Markdown already (names through md_text or md_code); a `|` left in a cell,
    inside a code span, gets the table's escape."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def frame_table(frame: pl.DataFrame) -> str:
    """Any frame as a Markdown table, floats with 3 decimals."""

    def cell(value) -> str:
        return num(value) if isinstance(value, float) else (MISSING if value is None else md_text(value))

    return table([md_text(c) for c in frame.columns], [[cell(v) for v in row] for row in frame.iter_rows()])


def ranked(summary: pl.DataFrame) -> pl.DataFrame:
    """Runs by matched reward, best first; runs without one last, then by run id."""
    return (
        summary.with_columns(_has=pl.col("matched_reward").is_not_null() & pl.col("matched_reward").is_not_nan())
        .sort(["_has", "matched_reward", "run_id"], descending=[True, True, False], nulls_last=True)
        .drop("_has")
    )


# What a contrast row carries besides its numbers, kept as it is when the row is turned round.
CLAIM_KEYS = ("ci_method", "unit", "resolved", "resolved_holm", "resolved_reason", "seeds_needed")


def oriented_contrast(contrasts: pl.DataFrame, winner: str, other: str) -> dict | None:
    """The contrast row of a pair, turned so that delta is winner − other (interval and probability flipped too)."""
    for row in contrasts.iter_rows(named=True):
        kept = {key: row.get(key) for key in CLAIM_KEYS}
        if (row["run_a"], row["run_b"]) == (other, winner):
            return {
                "delta": row["delta"],
                "ci_low": row["ci_low"],
                "ci_high": row["ci_high"],
                "prob_improvement": row["prob_improvement"],
                **kept,
            }
        if (row["run_a"], row["run_b"]) == (winner, other):
            # Percentile and t intervals flip exactly under negation; ties count one half, so P(a wins) = 1 − P(b wins).
            def flip(v):
                return -v if finite(v) else v

            return {
                "delta": flip(row["delta"]),
                "ci_low": flip(row["ci_high"]),
                "ci_high": flip(row["ci_low"]),
                "prob_improvement": 1 - row["prob_improvement"] if finite(row["prob_improvement"]) else None,
                **kept,
            }
    return None


def headline(
    ablation_runs: pl.DataFrame, summary: pl.DataFrame, contrasts: pl.DataFrame, settings: ReportSettings
) -> str:
    """One paragraph: the winner at the matched horizon, its margin over the runner-up, interval and probability."""
    labels = dict(zip(ablation_runs["run_id"], ablation_runs["label"], strict=True))

    def name(run: str) -> str:
        return f"**{md_text(labels.get(run) or run)}** ({md_code(run)})"

    order = ranked(summary)
    scored = order.filter(pl.col("matched_reward").is_not_null() & pl.col("matched_reward").is_not_nan())
    horizons = sorted({int(h) for h in summary["matched_horizon"].drop_nulls()})
    at = f"epoch {horizons[0]}" if len(horizons) == 1 else "the matched horizon"
    level = f"{settings.ci_level:.0%}"
    if scored.is_empty():
        return "No run of this ablation has a matched reward yet (no loaded epochs at or before the horizon)."
    best = scored.row(0, named=True)
    if order.height == 1:
        return (
            f"Only one run, {name(best['run_id'])}: matched reward {num(best['matched_reward'])} at {at}; "
            "there is nothing to compare it with."
        )
    if scored.height == 1:
        return (
            f"{name(best['run_id'])} is the only run with a matched reward ({num(best['matched_reward'])} at {at}); "
            "the others have no loaded epochs at or before the horizon."
        )
    second = scored.row(1, named=True)
    text = (
        f"Winner at the compute-matched horizon ({at}): {name(best['run_id'])}, matched reward "
        f"{num(best['matched_reward'])} against {num(second['matched_reward'])} for the runner-up "
        f"{name(second['run_id'])}"
    )
    contrast = oriented_contrast(contrasts, best["run_id"], second["run_id"])
    if contrast is None:
        return (
            text + f", a difference of {num(best['matched_reward'] - second['matched_reward'], signed=True)} "
            "(no contrast row, so no interval)."
        )
    text += (
        f": difference {num(contrast['delta'], signed=True)}, {interval_name(contrast, level)} "
        f"{interval(contrast['ci_low'], contrast['ci_high'])}, probability of improvement "
        f"{num(contrast['prob_improvement'])}."
    )
    return text + verdict(contrast, level, Claims.of(contrasts))


def arm_headline(contrasts: pl.DataFrame, settings: ReportSettings) -> str:
    """The headline of an ablation whose arms have seeds: the best arm by the mean of its runs' matched rewards."""
    by_runs = contrasts.filter(pl.col("unit") == "runs")
    means: dict[str, tuple[float, int]] = {}
    for row in by_runs.iter_rows(named=True):
        for side in ("a", "b"):
            if finite(row[f"matched_reward_{side}"]):
                means[row[f"run_{side}"]] = (row[f"matched_reward_{side}"], row[f"n_runs_{side}"])
    order = sorted(means, key=lambda arm: (-means[arm][0], arm))
    if len(order) < 2:
        return "The arms with seeds have no matched rewards to compare yet."
    best, second = order[0], order[1]
    level = f"{settings.ci_level:.0%}"
    text = (
        f"Best configuration at the compute-matched horizon: arm **{md_code(best)}** ({means[best][1]} runs), mean "
        f"of its runs' matched rewards {num(means[best][0])}, against {num(means[second][0])} for arm "
        f"**{md_code(second)}** ({means[second][1]} runs)"
    )
    contrast = oriented_contrast(by_runs, best, second)
    if contrast is None:
        return text + "."
    text += (
        f": difference {num(contrast['delta'], signed=True)}, {interval_name(contrast, level)} "
        f"{interval(contrast['ci_low'], contrast['ci_high'])}, probability of improvement "
        f"{num(contrast['prob_improvement'])}."
    )
    return text + verdict(contrast, level, Claims.of(contrasts))


def runs_table(ablation_runs: pl.DataFrame, summary: pl.DataFrame, settings: ReportSettings) -> str:
    labels = dict(zip(ablation_runs["run_id"], ablation_runs["label"], strict=True))
    header = [
        "run",
        "label",
        "epochs",
        "missing",
        "final reward",
        "AUC reward",
        "peak EMA",
        "peak epoch",
        "matched horizon",
        "matched reward",
        f"{settings.ci_level:.0%} interval",
        "IQM",
        "effective n",
    ]
    rows = [
        [
            md_code(r["run_id"]),
            md_text(labels[r["run_id"]]) if labels.get(r["run_id"]) else MISSING,
            f"{integer(r['n_epochs'])} ({integer(r['first_epoch'])}–{integer(r['last_epoch'])})",
            integer(r["missing_epochs"]),
            num(r["final_reward"]),
            num(r["auc_reward"]),
            num(r["peak_reward_ema"]),
            integer(r["peak_epoch"]),
            integer(r["matched_horizon"]),
            num(r["matched_reward"]),
            interval(r["matched_ci_low"], r["matched_ci_high"]),
            num(r["matched_iqm"]),
            one_decimal(r["matched_effective_n"]),
        ]
        for r in ranked(summary).iter_rows(named=True)
    ]
    return table(header, rows)


def one_decimal(value) -> str:
    return f"{value:.1f}" if finite(value) else MISSING


def contrasts_table(contrasts: pl.DataFrame, settings: ReportSettings) -> str:
    header = [
        "run A",
        "run B",
        "Δ matched reward (B − A)",
        f"{settings.ci_level:.0%} interval",
        "resolved",
        "unit",
        "P(B > A)",
        "ahead",
    ]

    def ahead(row: dict) -> str:
        if not finite(row["delta"]) or row["delta"] == 0:
            return MISSING
        return md_code(row["run_b"] if row["delta"] > 0 else row["run_a"])

    def resolved(row: dict) -> str:
        if row.get("resolved_holm") is None and row.get("resolved_reason"):
            return f"no claim: {md_text(row['resolved_reason'])}"
        return "yes" if row.get("resolved_holm") and row["ci_method"] != "iid" else "no"

    rows = [
        [
            md_code(r["run_a"]),
            md_code(r["run_b"]),
            num(r["delta"], signed=True),
            interval(r["ci_low"], r["ci_high"]),
            resolved(r),
            r["unit"],
            num(r["prob_improvement"]),
            ahead(r),
        ]
        for r in contrasts.sort("run_a", "run_b").iter_rows(named=True)
    ]
    note = pairing_note(contrasts)
    return f"{note}\n\n{table(header, rows)}" if note else table(header, rows)


def pairing_note(contrasts: pl.DataFrame) -> str | None:
    """What an ablation of more arms than `pairwise_arms` compares (contrast_pairs): every arm with one reference
    arm, the registry's baseline or the best arm, named; None when it compares every pair."""
    pairings = set(contrasts["pairing"]) - {"every pair"} if "pairing" in contrasts.columns else set()
    if not pairings:
        return None
    shared = set.intersection(*({r["run_a"], r["run_b"]} for r in contrasts.iter_rows(named=True)))
    reference = md_code(min(shared)) if shared else "one arm"
    chosen = (
        "the baseline the registry names"
        if pairings == {"against the baseline"}
        else "its best arm (chosen on these data, so the contrasts lean its way)"
    )
    return (
        f"This ablation has more arms than `pairwise_arms`: each is compared with {chosen}, {reference}, alone, so "
        "that its contrasts grow with its arms rather than with their square."
    )


def snapshots_table(summary: pl.DataFrame, snapshots: pl.DataFrame) -> str:
    order = {run: i for i, run in enumerate(ranked(summary)["run_id"])}
    chosen = (
        snapshots.filter(pl.col("role").is_in(SNAPSHOT_ROLES))
        .with_columns(
            _run=pl.col("run_id").replace_strict(order, default=len(order), return_dtype=pl.Int64),
            _role=pl.col("role").replace_strict({r: i for i, r in enumerate(SNAPSHOT_ROLES)}, return_dtype=pl.Int64),
        )
        .sort("_run", "run_id", "_role")
    )
    rows = [
        [
            md_code(r["run_id"]),
            md_text(r["role"]),
            integer(r["epoch"]),
            md_code(r["model_name"]) if r["model_name"] else MISSING,
        ]
        for r in chosen.iter_rows(named=True)
    ]
    return table(["run", "role", "epoch", "model name"], rows)


def how_to_call(model_name: str) -> str:
    """The Messages API call of a promoted snapshot, in curl and in Python; the key comes from the environment. The
    model name is a string literal in both, whatever it holds."""
    return f"""A snapshot is called by its model name on `/v1/messages` with the `anthropic-beta: {BETA_HEADER}`
header. The snapshots of the paper's compute-matched tables are promoted on the Finetuning API and do not
expire; other snapshots expire 7 days after they were made unless promoted. Here, the winner's matched snapshot
(the API key is read from the environment; none is written here):

```bash
curl {API_URL} \\
  -H "x-api-key: $ANTHROPIC_API_KEY" \\
  -H "anthropic-version: 2023-06-01" \\
  -H "anthropic-beta: {BETA_HEADER}" \\
  -H "content-type: application/json" \\
  -d '{{"model": {shell_json_string(model_name)}, "max_tokens": 1024,
       "messages": [{{"role": "user", "content": "Hello"}}]}}'
```

```python
import anthropic

client = anthropic.Anthropic()  # reads ANTHROPIC_API_KEY from the environment
message = client.messages.create(
    model={json.dumps(visible(model_name))},
    max_tokens=1024,
    messages=[{{"role": "user", "content": "Hello"}}],
    extra_headers={{"anthropic-beta": "{BETA_HEADER}"}},
)
print(message.content[0].text)
```"""


def ordered_ablations(runs: pl.DataFrame) -> list[str | None]:
    """The ablations of dim_runs, largest first (it is the release's headline comparison), then by name."""
    sizes = runs.group_by("ablation").len().iter_rows()
    return [a for a, _ in sorted(sizes, key=lambda item: (-item[1], item[0] is None, item[0] or ""))]


def _of_ablation(frame: pl.DataFrame, column: str, ablation: str | None) -> pl.DataFrame:
    return frame.filter(pl.col(column).eq_missing(pl.lit(ablation, dtype=pl.String)))


def _section_lead(
    members: pl.DataFrame, summary: pl.DataFrame, contrasts: pl.DataFrame, settings: ReportSettings
) -> str:
    """The section's first paragraph: the arms' or the runs' headline, or what one arm of several seeds allows."""
    ids = members["run_id"].to_list()
    arms = members["arm"].unique().to_list() if "arm" in members.columns else ids
    if len(ids) > 1 and len(arms) == 1:
        return (
            f"All {len(ids)} runs are seeds of one configuration (arm **{md_code(arms[0])}**): there is no other "
            "configuration to compare it with; the table shows how much its seeds differ."
        )
    with_seeds = contrasts.height and contrasts["unit"].eq("runs").any()
    return arm_headline(contrasts, settings) if with_seeds else headline(members, summary, contrasts, settings)


def _figure_lines(ablation: str | None, settings: ReportSettings) -> list[str]:
    """The ablation's figure, inlined, with links to its files and a key to what it draws."""
    name, stem, folder = ablation or "unassigned", file_stem(ablation), settings.figures_folder
    return [
        "",
        f"![Ablation {md_text(name)}: reward curves, zero-variance groups and entropy]({folder}/{stem}.png)",
        "",
        f"Figure: [{stem}.png]({folder}/{stem}.png), [{stem}.svg]({folder}/{stem}.svg). Lines: EMA of the "
        "per-epoch mean reward; points: per-epoch means; band: the EMA ± the trailing spread of per-epoch "
        "means (descriptive: it treats neighbouring epochs as independent, so it is no test); diamonds: "
        f"matched rewards, with bars for their {settings.ci_level:.0%} intervals; dotted line: the horizon.",
    ]


@dataclass(frozen=True)
class SectionParts:
    """What one ablation's section is made of: its first paragraph and its tables (None: the section has none)."""

    lead: str
    runs: str
    contrasts: str | None
    snapshots: str | None
    collapse: str | None = None  # the runs that collapsed after a peak
    problems: str | None = None  # the runs with files not loaded
    claim_notes: str | None = None  # the runs whose own interval backs no claim


def section_parts(
    ablation: str | None,
    runs: pl.DataFrame,
    summary: pl.DataFrame,
    contrasts: pl.DataFrame,
    snapshots: pl.DataFrame,
    settings: ReportSettings,
    problems: pl.DataFrame | None = None,
) -> SectionParts:
    """The parts of one ablation's section, from the whole tables (problems: run_notes.PROBLEMS_SQL's rows)."""
    members = _of_ablation(runs, "ablation", ablation).sort("run_id")
    ids = members["run_id"].to_list()
    summary = summary.filter(pl.col("run_id").is_in(ids))
    # a row of arms with seeds names the arms, not runs
    contrasts = _of_ablation(contrasts, "ablation", ablation).filter(
        (pl.col("run_a").is_in(ids) & pl.col("run_b").is_in(ids)) | (pl.col("unit") == "runs")
    )
    snapshots = snapshots.filter(pl.col("run_id").is_in(ids))
    return SectionParts(
        lead=_section_lead(members, summary, contrasts, settings),
        runs=runs_table(members, summary, settings),
        contrasts=contrasts_table(contrasts, settings) if contrasts.height else None,
        snapshots=snapshots_table(summary, snapshots) if snapshots.height else None,
        collapse=collapse_note(summary),
        problems=_problems_part(problems.filter(pl.col("run_id").is_in(ids)) if problems is not None else None),
        claim_notes=claim_notes(summary),
    )


def _problems_part(problems: pl.DataFrame | None) -> str | None:
    made = problem_rows(problems) if problems is not None else None
    return None if made is None else f"{made[0]}\n\n{table(made[1], made[2])}"


def section_lines(ablation: str | None, parts: SectionParts, settings: ReportSettings, full: bool = True) -> list[str]:
    """The report's lines for one ablation; `full=False` leaves out the figure and the snapshots (for the UI)."""
    name = ablation or "unassigned"
    lines = ["", f"## Ablation {md_code(name)}", "", parts.lead]
    if parts.collapse:
        lines += ["", parts.collapse]
    if full:
        lines += _figure_lines(ablation, settings)
    lines += [
        "",
        "### Runs",
        "",
        f"Best matched reward first. *Final reward*: mean over the last {settings.final_window} loaded epochs; "
        "*AUC reward*: mean over all loaded epochs; *peak EMA*: the highest smoothed reward and the first epoch "
        f"reaching it. The matched reward's *{settings.ci_level:.0%} interval* {interval_kind(settings.ci_method)}; "
        "*IQM*: the interquartile mean of its window; *effective n*: how many independent epochs the window is "
        "worth.",
        "",
        parts.runs,
    ]
    if parts.claim_notes:
        lines += ["", parts.claim_notes]
    if parts.problems:
        lines += ["", "### Files not loaded", "", parts.problems]
    if parts.contrasts is not None:
        lines += [
            "",
            "### Pairwise contrasts of the matched reward",
            "",
            "As in `ablation_contrasts`: one row per pair with run A < run B by id, so a negative Δ means "
            "run A is ahead. *Resolved*: the interval excludes zero after Holm's adjustment for the ablation's "
            "claims (`resolved_holm`); *no claim*: the method cannot hold its level here, for the reason given. "
            "Unit *epochs of one run*: the interval is for the difference of these two runs' expected window "
            "means (were the same runs replayed), not of their configurations; unit *runs*: run A and run B are "
            "arms of several seeds, and the interval is for the difference of the configurations' mean matched "
            "rewards over seeds (Student's t on the runs' values).",
            "",
            parts.contrasts,
        ]
    if full and parts.snapshots is not None:
        lines += [
            "",
            "### Snapshots",
            "",
            "*matched*: the last loaded epoch at or before the horizon; *best*: the epoch of the peak EMA; *final*: "
            "the last loaded epoch.",
            "",
            parts.snapshots,
        ]
    return lines


def winner_model_name(runs: pl.DataFrame, summary: pl.DataFrame, snapshots: pl.DataFrame) -> str | None:
    """The matched snapshot's model name of the winner of the largest ablation (any snapshot if there is none)."""
    for ablation in ordered_ablations(runs):
        ids = _of_ablation(runs, "ablation", ablation)["run_id"].to_list()
        for run in ranked(summary.filter(pl.col("run_id").is_in(ids)))["run_id"]:
            names = snapshots.filter((pl.col("run_id") == run) & (pl.col("role") == "matched"))["model_name"]
            if names.drop_nulls().len():
                return names.drop_nulls()[0]
    names = snapshots["model_name"].drop_nulls() if snapshots.height else []
    return names[0] if len(names) else None


def claim_notes(summary: pl.DataFrame) -> str | None:
    """The runs whose own interval backs no claim, and why (run_summary.matched_ci_note)."""
    if "matched_ci_note" not in summary.columns:
        return None
    noted = ranked(summary).filter(pl.col("matched_ci_note").is_not_null())
    if noted.is_empty():
        return None
    listed = "; ".join(f"{md_code(r['run_id'])}: {md_text(r['matched_ci_note'])}" for r in noted.iter_rows(named=True))
    return f"Intervals shown that back no claim: {listed}."


def render_report(
    runs: pl.DataFrame,
    summary: pl.DataFrame,
    contrasts: pl.DataFrame,
    snapshots: pl.DataFrame,
    settings: ReportSettings = ReportSettings(),
    problems: pl.DataFrame | None = None,
) -> str:
    """The whole report.md, one section per ablation of dim_runs; no timestamps, so unchanged tables give the same
    bytes. problems: the runs with files not loaded (run_notes.PROBLEMS_SQL)."""
    return render_report_and_headlines(runs, summary, contrasts, snapshots, settings, problems=problems)[0]


def render_report_and_headlines(
    runs: pl.DataFrame,
    summary: pl.DataFrame,
    contrasts: pl.DataFrame,
    snapshots: pl.DataFrame,
    settings: ReportSettings = ReportSettings(),
    parts: dict[str | None, SectionParts] | None = None,
    problems: pl.DataFrame | None = None,
) -> tuple[str, str]:
    """report.md (render_report) and the UI's headlines (render_headlines), each ablation's parts made once for
    both; parts: every ablation's (section_parts of these tables) when already made."""
    ablations = ordered_ablations(runs)
    if parts is None:
        parts = {a: section_parts(a, runs, summary, contrasts, snapshots, settings, problems) for a in ablations}
    lines = [
        "# GRPO ablation report",
        "",
        f"{runs.height} run{'s' if runs.height != 1 else ''} in {len(ablations)} "
        f"ablation{'s' if len(ablations) != 1 else ''}. Runs are compared at each ablation's **compute-matched "
        "horizon**, the last epoch of its shortest run: a run's *matched reward* is the mean per-epoch reward over "
        f"its last {settings.final_window} loaded epochs at or before that epoch. Differences carry a "
        f"{settings.ci_level:.0%} interval ({method_sentence(settings.ci_method)}) and the *probability of "
        "improvement*, the chance that a per-epoch reward of one run in its matched window exceeds one of the other "
        "(ties count one half).",
        "",
        "The tables behind these numbers (`run_summary`, `ablation_contrasts`, `snapshots`, `epoch_metrics`) are "
        "beside this file as CSV and Parquet, and in `warehouse.duckdb`.",
    ]
    for ablation in ablations:
        lines += section_lines(ablation, parts[ablation], settings)
    model_name = winner_model_name(runs, summary, snapshots)
    if model_name:
        lines += ["", "## Calling a snapshot", "", how_to_call(model_name)]
    headlines = [line for a in ablations for line in section_lines(a, parts[a], settings, full=False)]
    return "\n".join(lines) + "\n", "\n".join(headlines).strip() + "\n"


def render_headlines(
    runs: pl.DataFrame,
    summary: pl.DataFrame,
    contrasts: pl.DataFrame,
    settings: ReportSettings = ReportSettings(),
) -> str:
    """The headline of every ablation with its runs and contrasts tables, as Markdown for the Dagster UI."""
    empty = pl.DataFrame(schema={"run_id": pl.String, "role": pl.String, "epoch": pl.Int64, "model_name": pl.String})
    lines: list[str] = []
    for ablation in ordered_ablations(runs):
        parts = section_parts(ablation, runs, summary, contrasts, empty, settings)
        lines += section_lines(ablation, parts, settings, full=False)
    return "\n".join(lines).strip() + "\n"
