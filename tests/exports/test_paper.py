"""The paper tables: per ablation, each configuration's seeds, matched reward with its interval and IQM, recomputed
here from the tables with scipy and numpy; names escaped in Markdown and LaTeX."""

import re

import numpy as np
import polars as pl
import pytest
from helpers import epoch_document
from hostile import HOSTILE_NAMES, read_latex, rendered, shown
from scipy import stats

from pipelines.defs.exports.paper_tables import paper_files, table_stems
from pipelines.exports.paper import configurations, latex_table, markdown_table

RUNS = pl.DataFrame(
    {
        "run_id": ["cfg", "cfg_s1", "cfg_s2", "cfg_s3", "cfg_s4", "solo", "other_s1", "other_s2"],
        "ablation": ["abl"] * 6 + ["abl2"] * 2,
        "label": [
            "Config",
            "Config · seed 1",
            "Config · seed 2",
            "Config · seed 3",
            "Config · seed 4",
            "Solo",
            None,
            None,
        ],
        "arm": ["cfg"] * 5 + ["solo", "other", "other"],
    }
)
SUMMARY = pl.DataFrame(
    {
        "run_id": ["cfg", "cfg_s1", "cfg_s2", "cfg_s3", "cfg_s4", "solo", "other_s1", "other_s2"],
        "matched_horizon": [9, 9, 9, 9, 9, 9, 4, 4],
        "matched_reward": [0.50, 0.62, 0.55, 0.90, 0.58, 0.40, 0.30, float("nan")],
        "matched_ci_low": [None] * 5 + [0.35, None, None],
        "matched_ci_high": [None] * 5 + [0.45, None, None],
    }
)


def test_each_configuration_is_its_seeds_mean_with_a_t_interval_and_their_iqm():
    rows = {r["arm"]: r for r in configurations(RUNS, SUMMARY, 0.9).iter_rows(named=True)}
    values = np.array([0.50, 0.62, 0.55, 0.90, 0.58])
    low, high = stats.t.interval(0.9, len(values) - 1, loc=values.mean(), scale=stats.sem(values))
    config = rows["cfg"]
    assert (config["configuration"], config["runs"], config["scored"], config["one_seed"]) == ("Config", 5, 5, False)
    assert config["matched_reward"] == pytest.approx(values.mean())
    assert (config["ci_low"], config["ci_high"]) == pytest.approx((low, high), abs=1e-6)
    assert config["iqm"] == pytest.approx(stats.trim_mean(values, 0.25))  # 5 values: the middle 3 (floor(5/4) cut)
    # one seed: its own matched reward and interval, marked; a seed without a matched reward is counted, not used
    assert (rows["solo"]["matched_reward"], rows["solo"]["ci_low"], rows["solo"]["one_seed"]) == (0.40, 0.35, True)
    assert (rows["other"]["configuration"], rows["other"]["runs"], rows["other"]["scored"]) == ("other", 2, 1)


def test_the_tables_show_the_configurations_numbers():
    rows = configurations(RUNS, SUMMARY, 0.9)
    abl = rows.filter(pl.col("ablation") == "abl")
    text = markdown_table("abl", abl, 0.9)
    lines = [line for line in text.splitlines() if line.startswith("| ")][2:]
    bounds = f"[{abl['ci_low'][0]:.3f}, {abl['ci_high'][0]:.3f}]"
    assert lines == [
        f"| Config | 5 | 0.630 | {bounds} | {np.mean([0.55, 0.58, 0.62]):.3f} |",
        "| Solo | 1 | 0.400 | [0.350, 0.450] † | 0.400 |",
    ]
    latex = latex_table("abl", abl, 0.9)
    assert f"Config & 5 & $0.630$ & $[{abl['ci_low'][0]:.3f}, {abl['ci_high'][0]:.3f}]$ & $0.583$ \\\\" in latex
    assert "Solo & 1 & $0.400$ & $[0.350, 0.450]$\\textsuperscript{\\dag} & $0.400$ \\\\" in latex
    other = markdown_table("abl2", rows.filter(pl.col("ablation") == "abl2"), 0.9)
    assert "| other | 1 of 2 | 0.300 | [–, –] † | 0.300 |" in other


def test_names_are_text_in_both_formats():
    runs = RUNS.with_columns(
        ablation=pl.lit(HOSTILE_NAMES[5]),
        label=pl.Series([HOSTILE_NAMES[i % len(HOSTILE_NAMES)] for i in range(RUNS.height)]),
        arm=pl.col("run_id"),
    )
    rows = configurations(runs, SUMMARY, 0.95)
    page = rendered(markdown_table(HOSTILE_NAMES[5], rows, 0.95))
    assert {tag for tag, _ in page.elements} <= {"h3", "table", "thead", "tbody", "tr", "th", "td", "code", "p"}
    assert all(attributes == {} for _, attributes in page.elements)
    assert {shown(n) for n in runs["label"]} <= {t for t in page.text}
    latex = latex_table(HOSTILE_NAMES[5], rows, 0.95)
    body = latex.split("\\midrule\n")[1].split("\\bottomrule")[0]
    names = [read_latex(line.split(" & ")[0]) for line in body.splitlines()]
    assert sorted(names) == sorted(shown(n) for n in runs["label"])
    caption = re.search(r"\\caption\{Ablation \\texttt\{(.*?)\}\. ", latex).group(1)
    assert read_latex(caption) == shown(HOSTILE_NAMES[5])


def test_ablations_whose_file_names_would_clash_get_files_of_their_own():
    stems = table_stems(["a b", "a_b", "c"])
    assert stems["c"] == "c" and len(set(stems.values())) == 3
    files = paper_files(RUNS.with_columns(ablation=pl.Series(["a b"] * 4 + ["a_b"] * 4)), SUMMARY, 0.95)
    assert len(files) == 4 and all(path.startswith("tables/a_b") for path in files)


@pytest.mark.slow
def test_a_build_writes_dim_runs_and_tables_whose_numbers_are_the_warehouses(tmp_path, write_epoch, build, query):
    release = tmp_path / "sweep"
    for run, level in {"lr3_s1": 0.2, "lr3_s2": 0.3, "lr3_s3": 0.6, "lr4_seed1": 0.5}.items():
        for epoch in range(6):
            rewards = [level + 0.01 * epoch, level, level + 0.02, level - 0.01]
            write_epoch(
                release / run, epoch, epoch_document(epoch, rewards=rewards, mean_reward=float(np.mean(rewards)))
            )
    wh = tmp_path / "wh"
    assert build([release], wh) == 0

    dim_runs = query(wh, "select * from dim_runs order by run_id")
    assert pl.read_parquet(wh / "exports" / "dim_runs.parquet").rows() == dim_runs
    schema = dict.fromkeys(pl.read_parquet(wh / "exports" / "dim_runs.parquet").columns, pl.String)
    # CSV spells a boolean as SQL does (false), not as Python (False)
    as_text = [
        tuple(None if v is None else str(v).lower() if isinstance(v, bool) else str(v) for v in row) for row in dim_runs
    ]
    assert pl.read_csv(wh / "exports" / "dim_runs.csv", schema=schema).rows() == as_text
    rewards = dict(query(wh, "select run_id, matched_reward from run_summary"))
    seeds = np.array([rewards[f"lr3_s{k}"] for k in (1, 2, 3)])
    low, high = stats.t.interval(0.95, 2, loc=seeds.mean(), scale=stats.sem(seeds))
    text = (wh / "exports" / "tables" / "sweep.md").read_text()
    # the arm names the configuration (no run is named `lr3`); with 3 seeds the IQM trims none (floor(3/4) = 0)
    assert f"| lr3 | 3 | {seeds.mean():.3f} | [{low:.3f}, {high:.3f}] | {seeds.mean():.3f} |" in text
    assert "| lr4\\_seed1 | 1 |" in text
    assert (wh / "exports" / "tables" / "sweep.tex").read_text().count("\\\\\n") == 3  # header and two rows
