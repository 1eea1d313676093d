"""End to end: `grpo-warehouse build` in-process on small releases, then the published file queried read-only."""

import json
import shutil

import pytest
from helpers import epoch_document, record_duckdb_connections

from pipelines.defs.resources import WarehouseConfig
from pipelines.lake.paths import RUN_TABLES, lake_files

pytestmark = pytest.mark.slow  # whole builds


def test_tiny_hand_written_releases_side_by_side(tmp_path, write_epoch, build, query):
    rel_a, rel_b = tmp_path / "rel_a", tmp_path / "rel_b"
    write_epoch(rel_a / "alpha_2fp", 0, epoch_document(0, n=4, temperature=0.5, target_model=["a", "b", "c", "d"]))
    write_epoch(
        rel_a / "alpha_2fp",
        1,
        epoch_document(1, n=4, temperature=0.25, target_model=["e", "f", "g", "h"]),
        layout="folder",
    )
    write_epoch(rel_b / "beta", 0, epoch_document(0, n=2, judge_score=[1, 2], n_correct=7))
    (rel_a / "alpha_2fp" / "epoch_002_results.json").write_text('{"epoch": 2, "rewards": [')
    registry = tmp_path / "runs.csv"
    registry.write_text("run_id,group_size,label\nalpha_2fp,2,Alpha\n")
    wh = tmp_path / "wh"

    assert build([rel_a, rel_b], wh, "--registry", str(registry)) == 0

    assert query(wh, "select run_id, release, fp_per_group, group_size, ablation, label from dim_runs order by 1") == [
        ("alpha_2fp", "rel_a", 2, 2, "rel_a", "Alpha"),
        ("beta", "rel_b", None, 8, "rel_b", "beta"),
    ]
    assert query(
        wh, "select run_id, epoch, loss, n_trajectories, temperature, n_correct from fact_epochs order by 1, 2"
    ) == [("alpha_2fp", 0, 0.5, 4, 0.5, None), ("alpha_2fp", 1, 1.5, 4, 0.25, None), ("beta", 0, 0.5, 2, None, 7)]
    # group_size 2 from the registry: trajectories 0,1 form group 0 and 2,3 group 1.
    assert query(
        wh,
        "select epoch, traj_index, group_index, reward, target_model from fact_trajectories "
        "where run_id = 'alpha_2fp' and epoch = 1 order by traj_index",
    ) == [(1, 0, 0, 0.0, "e"), (1, 1, 0, 0.25, "f"), (1, 2, 1, 0.5, "g"), (1, 3, 1, 0.75, "h")]
    assert query(wh, "select judge_score from fact_trajectories where run_id = 'beta' order by traj_index") == [
        (1,),
        (2,),
    ]
    errors = query(wh, "select source_path, run_id, epoch, error_kind, action from ingest_errors order by 1")
    assert errors == [
        ("alpha_2fp/epoch_002_results.json", "alpha_2fp", 2, "truncated_json", "quarantined: not loaded"),
        # 2 trajectories in a group of 8 (the default): the one group is partial
        (
            "beta/",
            "beta",
            0,
            "partial_group",
            "loaded: groups of group_size trajectories in order, the last one smaller (group_metrics.is_partial)",
        ),
    ]
    statuses = dict(query(wh, "select source_path, status from file_inventory where run_id = 'alpha_2fp'"))
    assert statuses == {
        "alpha_2fp/epoch_000_results.json": "loaded",
        "alpha_2fp/epoch_001/results.json": "loaded",
        "alpha_2fp/epoch_002_results.json": "quarantined",
    }
    # the report lists it under its run's ablation, with where to look
    report = (wh / "exports" / "report.md").read_text()
    section = report[report.index("## Ablation `rel_a`") : report.index("## Ablation `rel_b`")]
    assert (
        "| `alpha_2fp` | 1 | 1 | `alpha_2fp/epoch_002_results.json` (truncated\\_json) |"
        in section[section.index("### Files not loaded") :]
    )


def test_sample_release_epoch_counts_match_the_seed(sample_warehouse, query):
    _, wh = sample_warehouse
    # From the seed document: epochs 0..490, 0..480, 0..473, 0..438, 0..439.
    assert query(wh, "select run_id, count(*), min(epoch), max(epoch) from fact_epochs group by 1 order by 1") == [
        ("binary_v1_grpo_binary_v1_bs64", 491, 0, 490),
        ("mt3_2f_grpo_mt_v3_2fp", 481, 0, 480),
        ("mt3_4f_grpo_mt_v3_4fp", 474, 0, 473),
        ("mt3p1f_grpo_mt_v3_pw_1fp", 439, 0, 438),
        ("mt3p4f_grpo_mt_v3_pw_4fp", 440, 0, 439),
    ]
    assert query(wh, "select count(*) from ingest_errors where severity = 'error'") == [(0,)]


def test_sample_release_trajectories_match_the_files(sample_warehouse, query):
    releases, wh = sample_warehouse
    # A second, independent reading: the files themselves.
    path = next(releases[0].glob("*/epoch_007_results.json"))
    document = json.loads(path.read_text())
    run_id = path.parent.name
    rows = query(
        wh,
        "select trajectory_id, reward, advantage, group_index from fact_trajectories "
        "where run_id = ? and epoch = 7 order by traj_index",
        run_id,
    )
    assert [r[0] for r in rows] == document["trajectory_ids"]
    assert [r[1] for r in rows] == document["rewards"]
    assert [r[2] for r in rows] == document["advantages"]
    assert [r[3] for r in rows] == [i // 8 for i in range(64)]
    assert query(wh, "select count(*) from fact_trajectories") == [(64 * (491 + 481 + 474 + 439 + 440),)]


def test_second_build_with_no_change_parses_nothing_and_opens_the_build_database_once(
    sample_warehouse, tmp_path, monkeypatch
):
    from pipelines.cli import main

    releases, shared = sample_warehouse
    wh = shutil.copytree(shared, tmp_path / "wh")  # other tests read the shared one as it was built
    # The run partitions; the release-level tables (lake/*.parquet) are rewritten by the release scan.
    partitions = sorted(path for table in RUN_TABLES for path in lake_files(wh / "lake", table))
    assert len(partitions) == 5 * len(RUN_TABLES)  # every sample run has transcripts
    before = {p: p.stat().st_mtime_ns for p in partitions}
    opened = record_duckdb_connections(monkeypatch)
    argv = ["build", "--warehouse", str(wh), "--workers", "1"]
    for release in releases:
        argv += ["--release", str(release)]
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in partitions} == before
    # Every step of the build works on the one connection the build holds, not on one of its own.
    assert [path for path in opened if path.endswith("build.duckdb")] == [str(wh / ".build" / "build.duckdb")]


def test_parameters_given_on_the_command_line_reach_the_models_of_that_build_only(tmp_path, write_epoch, build, query):
    release = tmp_path / "rel"
    for run in ("run_a", "run_b"):
        for epoch in range(6):
            write_epoch(release / run, epoch, epoch_document(epoch, n=4))
    wh = tmp_path / "wh"
    params = ["--param", "ci_method=iid", "--param", "final_window=3"]

    assert build([release], wh, *params) == 0
    # One ablation (the release) of two runs: one contrast, its epochs taken as independent, and a matched window of
    # the last 3 of the 6 epochs both runs reach (a t interval on 2 degrees of freedom).
    assert query(wh, "select ci_method, unit from ablation_contrasts") == [("iid", "epochs of one run")]
    assert query(wh, "select run_id, matched_ci_df from run_summary order by 1") == [("run_a", 2), ("run_b", 2)]
    assert query(wh, "select run_id, min(epoch), max(epoch) from matched_window_values group by 1 order by 1") == [
        ("run_a", 3, 5),
        ("run_b", 3, 5),
    ]

    assert build([release], wh) == 0  # the defaults again: nothing given is remembered
    assert query(wh, "select ci_method from ablation_contrasts") == [(WarehouseConfig().ci_method,)]
    assert query(wh, "select run_id, min(epoch), max(epoch) from matched_window_values group by 1 order by 1") == [
        ("run_a", 0, 5),
        ("run_b", 0, 5),
    ]


def test_seeds_grouped_by_name_and_a_registry_row_naming_no_run(tmp_path, write_epoch, build, query, capsys):
    release = tmp_path / "sweep_seed_1"
    for run in ("lr3_s1", "lr3_s2", "lr4_s1"):
        write_epoch(release / run, 0)
    registry = tmp_path / "runs.csv"
    registry.write_text("run_id,label\nlr3,LR 3\nlr5_s1,typo\n")
    wh = tmp_path / "wh"

    assert build([release], wh, "--registry", str(registry)) == 0
    assert query(wh, "select run_id, ablation, arm, label from dim_runs order by 1") == [
        ("lr3_s1", "sweep", "lr3", "LR 3 · seed 1"),
        ("lr3_s2", "sweep", "lr3", "LR 3 · seed 2"),
        ("lr4_s1", "sweep", "lr4", "lr4_s1"),
    ]
    problem = (
        f"{registry}, line 3: run 'lr5_s1' is not in any release (nor a configuration whose seeds are); "
        "the row is not used"
    )
    assert query(wh, "select error_kind, severity, message from ingest_errors where run_id is null") == [
        ("registry_row_unused", "warning", problem)
    ]
    assert f"warning: {problem}\n" in capsys.readouterr().err

    assert build([release], wh, "--registry", str(registry), "--strict") == 1
    assert capsys.readouterr().err.splitlines()[-1] == "grpo-warehouse build: --strict: 1 registry row(s) name no run"

    registry.write_text("run_id,label\nlr3,LR 3\n")  # fixed: the warning leaves at the next build
    assert build([release], wh, "--registry", str(registry), "--strict") == 0
    assert query(wh, "select count(*) from ingest_errors where run_id is null") == [(0,)]
