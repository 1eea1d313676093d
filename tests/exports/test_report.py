"""report.md: its numbers, parsed back from the Markdown, are the tables' numbers; headline and snippets."""

import ast
import json
import math
import re
import shlex

import polars as pl
import pytest
from hostile import HOSTILE_NAMES, rendered, shown

from pipelines.exports.report import ReportSettings, render_headlines, render_report, render_report_and_headlines


def section(text: str, heading: str) -> str:
    """The text under a heading, up to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1 :]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, flags=re.M)]
    return rest[: ends[0]] if ends else rest


def markdown_table(text: str) -> list[dict[str, str]]:
    rows = [line for line in text.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in row.strip("|").split("|")), strict=True)) for row in rows[2:]]


def number(cell: str) -> float | None:
    return None if cell == "–" else float(cell)


def headline_numbers(headline: str) -> list[float]:
    """The difference, interval and probability of improvement a headline states."""
    found = re.search(
        r"difference ([+-]\d\.\d{3}), 95% [^\[]*\[(\S+), (\S+)\], "
        r"probability of improvement (\d\.\d{3})",
        headline,
    )
    return [float(g) for g in found.groups()]


def expected(value) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(value, 3)


@pytest.fixture
def report(tables) -> str:
    return render_report(
        tables["runs"],
        tables["summary"],
        tables["contrasts"],
        tables["snapshots"],
        ReportSettings(final_window=50, ci_level=0.95),
    )


def test_runs_table_numbers_equal_run_summary(report, tables):
    rows = markdown_table(section(section(report, "## Ablation `abl`"), "### Runs"))
    summary = {r["run_id"]: r for r in tables["summary"].iter_rows(named=True)}
    assert [r["run"] for r in rows] == ["`r_long`", "`r_mid`", "`r_short`"]  # best matched reward first
    assert [r["label"] for r in rows] == ["Long run", "Mid run", "–"]
    for row in rows:
        want = summary[row["run"].strip("`")]
        for column, key in [
            ("final reward", "final_reward"),
            ("AUC reward", "auc_reward"),
            ("peak EMA", "peak_reward_ema"),
            ("matched reward", "matched_reward"),
        ]:
            assert number(row[column]) == expected(want[key])
        low, high = re.fullmatch(r"\[(\S+), (\S+)\]", row["95% interval"]).groups()
        assert (number(low), number(high)) == (expected(want["matched_ci_low"]), expected(want["matched_ci_high"]))
        assert row["effective n"] == (
            "–" if want["matched_effective_n"] is None else f"{want['matched_effective_n']:.1f}"
        )
        assert int(row["matched horizon"]) == want["matched_horizon"]
        assert int(row["peak epoch"]) == want["peak_epoch"]
        assert row["epochs"] == f"{want['n_epochs']} ({want['first_epoch']}–{want['last_epoch']})"


def test_contrasts_table_numbers_equal_ablation_contrasts(report, tables):
    rows = markdown_table(section(report, "### Pairwise contrasts of the matched reward"))
    assert len(rows) == tables["contrasts"].height
    for row, want in zip(rows, tables["contrasts"].iter_rows(named=True), strict=True):
        assert (row["run A"], row["run B"]) == (f"`{want['run_a']}`", f"`{want['run_b']}`")
        assert number(row["Δ matched reward (B − A)"]) == expected(want["delta"])
        low, high = re.fullmatch(r"\[(\S+), (\S+)\]", row["95% interval"]).groups()
        assert (number(low), number(high)) == (expected(want["ci_low"]), expected(want["ci_high"]))
        assert number(row["P(B > A)"]) == expected(want["prob_improvement"])
        claim = "yes" if want["resolved_holm"] else "no"
        if want["resolved_holm"] is None:
            claim = f"no claim: {want['resolved_reason']}"
        assert (row["resolved"], row["unit"]) == (claim, want["unit"])
        assert row["ahead"] == f"`{want['run_b'] if want['delta'] > 0 else want['run_a']}`"


def test_headline_names_the_winner_and_turns_its_contrast_round(report):
    text = section(report, "## Ablation `abl`").strip().splitlines()[0]
    assert "(epoch 1)" in text
    assert re.search(
        r"\*\*Long run\*\* \(`r_long`\), matched reward 0\.700 against 0\.500 for the runner-up "
        r"\*\*Mid run\*\* \(`r_mid`\)",
        text,
    )
    # The table row is r_mid − r_long = −0.2004 [−0.35, −0.05], P = 0.2; the winner's view is its mirror image.
    assert headline_numbers(text) == [0.200, 0.050, 0.350, 0.800]
    # the ablation's two claims (the third pair has no interval) are adjusted together
    assert "excludes zero after Holm's adjustment for the ablation's 2 claims: the lead is resolved at 95%" in text
    assert "95% interval (`structural`" in text
    # one run per arm: the report says whose claim it is, and how many seeds would make it one about configurations;
    # no arm has seeds, so the runs' own variances give a lower bound
    assert "about these two runs, not about their configurations" in text
    assert "would need at least 7 seeds an arm" in text and "these runs' own variances" in text


def test_single_run_ablation_says_there_is_nothing_to_compare(report):
    text = section(report, "## Ablation `other`")
    assert "Only one run, **Solo run** (`solo`): matched reward 0.150 at epoch 3" in text
    assert "Pairwise contrasts" not in text
    assert "![Ablation other" in text and "(figures/other.png)" in text


def test_snapshots_and_how_to_call_them(report, tables):
    rows = markdown_table(section(section(report, "## Ablation `abl`"), "### Snapshots"))
    got = {(r["run"].strip("`"), r["role"]): (int(r["epoch"]), r["model name"].strip("`")) for r in rows}
    chosen = tables["snapshots"].filter(
        pl.col("role").is_in(["matched", "best", "final"]) & pl.col("run_id").is_in(["r_long", "r_mid", "r_short"])
    )
    assert got == {(r["run_id"], r["role"]): (r["epoch"], r["model_name"]) for r in chosen.iter_rows(named=True)}
    call = section(report, "## Calling a snapshot")
    # The winner of the largest ablation (r_long), at its matched epoch.
    assert call.count('"claude-haiku-4-5-20251001-s_l1"') == 2
    assert call.count("anthropic-beta: finetuning-2025-09-03") >= 2 and "/v1/messages" in call
    assert '"anthropic-beta": "finetuning-2025-09-03"' in call
    assert "$ANTHROPIC_API_KEY" in call and "sk-ant" not in report


def test_largest_ablation_comes_first_and_the_report_is_deterministic(report, tables):
    assert report.index("## Ablation `abl`") < report.index("## Ablation `other`")
    again = render_report(
        tables["runs"],
        tables["summary"],
        tables["contrasts"],
        tables["snapshots"],
        ReportSettings(final_window=50, ci_level=0.95),
    )
    assert again == report


def test_unresolved_lead_and_missing_values(tables):
    contrasts = tables["contrasts"].with_columns(
        ci_low=pl.lit(-0.4), ci_high=pl.lit(0.1), resolved=pl.lit(False), resolved_holm=pl.lit(False)
    )
    summary = tables["summary"].with_columns(
        final_reward=pl.when(pl.col("run_id") == "r_mid").then(None).otherwise(pl.col("final_reward"))
    )
    text = render_report(tables["runs"], summary, contrasts, tables["snapshots"])
    assert "includes zero: the lead is not resolved at 95%" in text
    rows = markdown_table(section(section(text, "## Ablation `abl`"), "### Runs"))
    assert [r["final reward"] for r in rows if r["run"] == "`r_mid`"] == ["–"]


def test_headlines_for_the_ui_leave_out_figure_and_snapshots(tables):
    text = render_headlines(tables["runs"], tables["summary"], tables["contrasts"])
    assert "Winner at the compute-matched horizon" in text and "### Runs" in text
    assert "![" not in text and "### Snapshots" not in text
    # the asset makes both from each ablation's parts at once: the same texts
    both = render_report_and_headlines(tables["runs"], tables["summary"], tables["contrasts"], tables["snapshots"])
    assert both == (render_report(tables["runs"], tables["summary"], tables["contrasts"], tables["snapshots"]), text)


def test_runs_without_an_ablation_get_their_own_section(tables):
    runs = tables["runs"].with_columns(
        ablation=pl.when(pl.col("run_id") == "solo").then(None).otherwise(pl.col("ablation"))
    )
    text = render_report(runs, tables["summary"], tables["contrasts"], tables["snapshots"])
    assert "## Ablation `unassigned`" in text and "(figures/unassigned.png)" in text
    assert "**Solo run** (`solo`)" in section(text, "## Ablation `unassigned`")


def test_headline_when_the_winner_is_run_b_keeps_its_contrast_as_it_is(tables):
    # r_mid now leads (.9 against r_long's .7004); its pair row (r_long, r_mid) already reads r_mid − r_long.
    summary = tables["summary"].with_columns(
        matched_reward=pl.when(pl.col("run_id") == "r_mid").then(0.9).otherwise(pl.col("matched_reward"))
    )
    contrasts = tables["contrasts"].with_columns(
        delta=pl.when(pl.col("run_b") == "r_mid").then(0.1996).otherwise(pl.col("delta")),
        ci_low=pl.when(pl.col("run_b") == "r_mid").then(0.05).otherwise(pl.col("ci_low")),
        ci_high=pl.when(pl.col("run_b") == "r_mid").then(0.35).otherwise(pl.col("ci_high")),
        prob_improvement=pl.when(pl.col("run_b") == "r_mid").then(0.8).otherwise(pl.col("prob_improvement")),
    )
    text = render_report(tables["runs"], summary, contrasts, tables["snapshots"])
    headline = section(text, "## Ablation `abl`").strip().splitlines()[0]
    assert re.search(
        r"\*\*Mid run\*\* \(`r_mid`\), matched reward 0\.900 against 0\.700 for the runner-up "
        r"\*\*Long run\*\* \(`r_long`\)",
        headline,
    )
    assert headline_numbers(headline) == [0.200, 0.050, 0.350, 0.800]
    assert "excludes zero" in headline


def test_the_interval_level_is_the_one_asked_for(tables):
    text = render_report(
        tables["runs"],
        tables["summary"],
        tables["contrasts"],
        tables["snapshots"],
        ReportSettings(final_window=50, ci_level=0.8),
    )
    assert "95%" not in text
    assert "80% interval" in section(text, "### Pairwise contrasts of the matched reward")
    assert "resolved at 80%" in section(text, "## Ablation `abl`")


def test_the_default_method_names_its_quantity_and_assumption(report):
    opening = report.split("## Ablation")[0]
    assert "interval (`structural`: for the difference of two runs' expected window means" in opening
    assert "assuming their paired difference is a random walk from the runs' start plus stationary drift" in opening
    runs_note = section(section(report, "## Ablation `abl`"), "### Runs")
    assert "expected mean of the run's window" in runs_note and "smooth trend plus stationary drift" in runs_note


def test_an_iid_interval_resolves_nothing(tables, report):
    contrasts = tables["contrasts"].with_columns(ci_method=pl.lit("iid"))
    text = render_report(
        tables["runs"], tables["summary"], contrasts, tables["snapshots"], ReportSettings(ci_method="iid")
    )
    headline = section(text, "## Ablation `abl`").strip().splitlines()[0]
    assert "95% iid interval [0.050, 0.350]" in headline
    assert "resolves nothing even though it excludes zero" in headline and "is resolved" not in headline
    rows = markdown_table(section(text, "### Pairwise contrasts of the matched reward"))
    assert [row["resolved"] for row in rows][:2] == ["no", "no"]  # the third pair has no interval at all
    # The runs' own intervals are iid too: their note does not claim they allow for autocorrelation.
    runs_note = section(section(text, "## Ablation `abl`"), "### Runs")
    assert "treats the window's epochs as independent" in runs_note and "allows for autocorrelated" not in runs_note
    assert "allows for autocorrelated epochs" in section(section(report, "## Ablation `abl`"), "### Runs")


def test_arms_of_seeds_lead_with_a_claim_about_configurations(tables):
    runs = pl.DataFrame({"run_id": ["a0", "a1", "b0", "b1"], "ablation": ["seeds"] * 4, "label": [None] * 4})
    contrasts = pl.DataFrame(
        {
            "ablation": ["seeds"],
            "run_a": ["arm_a"],
            "run_b": ["arm_b"],
            "delta": [0.12],
            "ci_low": [0.04],
            "ci_high": [0.2],
            "ci_method": ["t over runs"],
            "unit": ["runs"],
            "resolved": [True],
            "resolved_holm": [True],
            "resolved_reason": [None],
            "prob_improvement": [1.0],
            "matched_reward_a": [0.4],
            "matched_reward_b": [0.52],
            "n_runs_a": [2],
            "n_runs_b": [2],
        }
    )
    summary = tables["summary"].head(0)
    text = render_report(runs, summary, contrasts, tables["snapshots"].head(0))
    headline = section(text, "## Ablation `seeds`").strip().splitlines()[0]
    assert headline.startswith("Best configuration at the compute-matched horizon: arm **`arm_b`** (2 runs)")
    assert "difference +0.120, 95% t interval over seeds [0.040, 0.200]" in headline
    assert "resolved at 95%" in headline and "claim is about the configurations" in headline
    assert "mean of its runs' matched rewards 0.520" in headline


def test_seeds_of_a_single_configuration_are_not_ranked(tables):
    runs = tables["runs"].with_columns(
        arm=pl.when(pl.col("ablation") == "abl").then(pl.lit("cfg")).otherwise(pl.col("run_id"))
    )
    text = render_report(runs, tables["summary"], tables["contrasts"].head(0), tables["snapshots"])
    headline = section(text, "## Ablation `abl`").strip().splitlines()[0]
    assert headline.startswith("All 3 runs are seeds of one configuration (arm **`cfg`**)")
    assert "Winner" not in headline


def test_hostile_names_are_text_in_the_rendered_report(tables):
    """Run ids, labels, ablations and snapshot ids that are markup: rendered by a viewer that renders HTML, the report
    holds no element, attribute or link from them, and shows each of them as it is."""
    names = dict(zip(["r_long", "r_mid", "r_short", "solo"], HOSTILE_NAMES, strict=False))
    snapshot = HOSTILE_NAMES[1]  # holds </script>
    renamed = {
        key: frame.with_columns(
            pl.col(c).replace(names) for c in ("run_id", "run_a", "run_b", "arm") if c in frame.columns
        )
        for key, frame in tables.items()
    }
    runs = renamed["runs"].with_columns(
        label=pl.Series([HOSTILE_NAMES[5], HOSTILE_NAMES[6], None, HOSTILE_NAMES[7]]),
        ablation=pl.Series(["a|b", "a|b", "a|b", "x_{1}$\\&"]),
    )
    contrasts = renamed["contrasts"].with_columns(ablation=pl.lit("a|b"))
    snapshots = renamed["snapshots"].with_columns(model_name=pl.lit(f"claude-{snapshot}'\""))
    text = render_report(runs, renamed["summary"], contrasts, snapshots)

    page = rendered(text)
    allowed = {"h1", "h2", "h3", "p", "table", "thead", "tbody", "tr", "th", "td", "code", "strong", "em", "pre", "a"}
    assert {tag for tag, _ in page.elements} - allowed == {"img"}
    for tag, attributes in page.elements:
        if tag in ("img", "a"):
            link = attributes.get("src") or attributes.get("href")
            assert re.fullmatch(r"figures/[A-Za-z0-9._-]+\.(png|svg)", link), link
        elif tag == "code":
            assert attributes in ({}, {"class": "language-bash"}, {"class": "language-python"})
        else:
            assert attributes == {}, (tag, attributes)
    shown_text = "".join(page.text)
    for name in [*names.values(), "a|b", "x_{1}$\\&", HOSTILE_NAMES[5], HOSTILE_NAMES[6]]:
        assert shown(name) in shown_text, name
    # the call of the winner's snapshot: one shell word and one Python string holding the model name as it is
    model = f"claude-{snapshot}'\""
    bash = section(text, "## Calling a snapshot").split("```bash\n")[1].split("```")[0]
    data = shlex.split(bash.replace("\\\n", " "))
    assert json.loads(data[data.index("-d") + 1])["model"] == model
    python = section(text, "## Calling a snapshot").split("```python\n")[1].split("```")[0]
    call = next(n for n in ast.walk(ast.parse(python)) if isinstance(n, ast.Call) and n.keywords)
    assert ast.literal_eval(next(k.value for k in call.keywords if k.arg == "model")) == model


def test_a_collapse_after_a_peak_is_flagged_by_the_documented_rule(tables):
    # peak 0.80; collapse needs a drop above 25% of it (0.20) and above the matched interval's half-width
    summary = tables["summary"].with_columns(
        peak_reward_ema=pl.Series([0.80, 0.80, 0.80, 0.80]),
        final_reward_ema=pl.Series([0.30, 0.61, 0.59, 0.30]),
        matched_ci_low=pl.Series([0.10, 0.41, None, 0.0]),
        matched_ci_high=pl.Series([0.20, 0.59, None, 1.2]),  # solo: half-width 0.6 above its 0.5 drop
    )
    text = render_report(tables["runs"], summary, tables["contrasts"], tables["snapshots"])
    abl = section(text, "## Ablation `abl`")
    note = next(line for line in abl.splitlines() if line.startswith("**Collapse after a peak.**"))
    assert "of 2 run(s)" in note  # r_long (drop 0.50) and r_short (0.21, no interval); not r_mid (0.19)
    assert note.index("`r_long` peaks at 0.800 (epoch 9) and ends at 0.300 (epoch 9), 0.500 lower (62% of its peak") < (
        note.index("`r_short` peaks at 0.800")
    )
    assert "`r_mid`" not in note
    assert "Collapse" not in section(text, "## Ablation `other`")


def test_files_not_loaded_are_listed_per_run_bounded(tables):
    from pipelines.exports import run_notes

    problems = pl.DataFrame(
        {
            "run_id": ["r_mid", "solo"] + [f"x{i:02d}" for i in range(30)],
            "quarantined_files": [2, 1] + [0] * 30,
            "unloaded_epochs": [1, 0] + [1] * 30,
            "example_path": ["r_mid/epoch_003_results.json", "solo/epoch_1/results.json"] + ["x"] * 30,
            "example_reason": ["truncated_json", "bad|json"] + ["missing_document"] * 30,
        }
    )
    runs = pl.concat(
        [tables["runs"], pl.DataFrame({"run_id": [f"x{i:02d}" for i in range(30)], "ablation": "many"})],
        how="diagonal",
    )
    text = render_report(runs, tables["summary"], tables["contrasts"], tables["snapshots"], problems=problems)
    rows = markdown_table(section(section(text, "## Ablation `abl`"), "### Files not loaded"))
    assert rows == [
        {
            "run": "`r_mid`",
            "quarantined files": "2",
            "epochs not loaded": "1",
            "for example": "`r_mid/epoch_003_results.json` (truncated\\_json)",
        }
    ]
    solo = markdown_table(section(section(text, "## Ablation `other`"), "### Files not loaded"))
    assert solo[0]["for example"] == "`solo/epoch_1/results.json` (bad&#124;json)"
    many = section(section(text, "## Ablation `many`"), "### Files not loaded")
    assert len(markdown_table(many)) == run_notes.PROBLEM_ROWS_AT_MOST
    assert "Files of 30 run(s) were not loaded" in many and "10 more are in those tables" in many
    assert "### Files not loaded" not in section(render_report(*tables_for_report(tables)), "## Ablation `abl`")


def tables_for_report(tables):
    return tables["runs"], tables["summary"], tables["contrasts"], tables["snapshots"]


def test_a_claim_the_method_cannot_back_is_shown_without_a_verdict(tables):
    # The winner's pair has an interval excluding zero, but its runs are too short for the method: no claim.
    reason = "too few epochs for an honest interval: 30 < 80"
    contrasts = tables["contrasts"].with_columns(
        resolved=pl.when(pl.col("run_b") == "r_mid").then(None).otherwise(pl.col("resolved")),
        resolved_holm=pl.when(pl.col("run_b") == "r_mid").then(None).otherwise(pl.col("resolved_holm")),
        resolved_reason=pl.when(pl.col("run_b") == "r_mid").then(pl.lit(reason)).otherwise(pl.col("resolved_reason")),
    )
    text = render_report(tables["runs"], tables["summary"], contrasts, tables["snapshots"])
    headline = section(text, "## Ablation `abl`").strip().splitlines()[0]
    assert headline_numbers(headline) == [0.200, 0.050, 0.350, 0.800]  # the interval is still shown
    assert "no claim is made: too few epochs for an honest interval: 30 &lt; 80." in headline
    assert "resolved" not in headline
    rows = markdown_table(section(text, "### Pairwise contrasts of the matched reward"))
    assert rows[0]["resolved"] == "no claim: too few epochs for an honest interval: 30 &lt; 80"
    # the one claim left is not adjusted for others
    assert "Holm's adjustment for" not in headline


def test_a_lead_resolved_only_before_holms_adjustment_is_not_resolved(tables):
    contrasts = tables["contrasts"].with_columns(
        resolved_holm=pl.when(pl.col("resolved_holm").is_not_null()).then(False)
    )
    text = render_report(tables["runs"], tables["summary"], contrasts, tables["snapshots"])
    headline = section(text, "## Ablation `abl`").strip().splitlines()[0]
    assert "excludes zero, but not after Holm's adjustment for the ablation's 2 claims" in headline
    assert "the lead is not resolved at 95%" in headline
    rows = markdown_table(section(text, "### Pairwise contrasts of the matched reward"))
    assert [row["resolved"] for row in rows][:2] == ["no", "no"]


def test_seeds_needed_come_from_the_seeds_spread_when_an_arm_has_seeds(tables):
    contrasts = tables["contrasts"].with_columns(n_runs_b=pl.when(pl.col("run_b") == "r_short").then(3).otherwise(1))
    text = render_report(tables["runs"], tables["summary"], contrasts, tables["snapshots"])
    headline = section(text, "## Ablation `abl`").strip().splitlines()[0]
    assert "would need about 7 seeds an arm" in headline and "between the seeds of this ablation's arms" in headline


def test_runs_whose_interval_backs_no_claim_are_listed_with_the_reason(report):
    runs = section(section(report, "## Ablation `abl`"), "### Runs")
    assert "Intervals shown that back no claim: `r_short`: too few epochs for an interval: 1 &lt; 2." in runs


def test_an_ablation_compared_against_one_arm_says_which_and_why(tables):
    # r_long leads: the two contrasts kept are those of the others against it, as contrast_pairs keeps them
    against_best = tables["contrasts"].head(2).with_columns(pairing=pl.lit("against the best arm"))
    text = render_report(
        tables["runs"], tables["summary"], against_best, tables["snapshots"], ReportSettings(final_window=50)
    )
    contrasts = section(text, "### Pairwise contrasts of the matched reward")
    assert "each is compared with its best arm (chosen on these data" in contrasts
    assert ", `r_long`, alone" in contrasts
    assert len(markdown_table(contrasts)) == 2
    baseline = against_best.with_columns(pairing=pl.lit("against the baseline"))
    text = render_report(tables["runs"], tables["summary"], baseline, tables["snapshots"], ReportSettings())
    assert "each is compared with the baseline the registry names, `r_long`, alone" in text
    every = tables["contrasts"].with_columns(pairing=pl.lit("every pair"))
    text = render_report(tables["runs"], tables["summary"], every, tables["snapshots"], ReportSettings())
    assert "more arms than `pairwise_arms`" not in text
