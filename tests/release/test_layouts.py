"""Every placement of an epoch document loads the same rows; other files beside the documents are only inventoried."""

import json
import math

import dagster as dg
import duckdb
import polars as pl
import pytest
from helpers import epoch_document

from pipelines.defs.models import checks
from pipelines.lake.ingest import ingest_run
from pipelines.lake.paths import partition_file
from pipelines.release.discover import LAYOUTS, RunFolder, list_run
from pipelines.release.sample import write_epoch_in_layout

RUNS = ("run_a", "run_b")
EPOCHS = 4
N = 8


def _document(run: str, epoch: int) -> dict:
    """Rewards that differ by run, epoch and position (one NaN), a scalar extra and a per-trajectory extra."""
    offset = RUNS.index(run)
    rewards = [((i * 3 + epoch + offset) % 5) / 4 for i in range(N)]
    rewards[(epoch + offset) % N] = math.nan
    finite = [r for r in rewards if not math.isnan(r)]
    return epoch_document(epoch, n=N) | {
        "rewards": rewards,
        "advantages": [0.0 if math.isnan(r) else r - 0.5 for r in rewards],
        "mean_reward": sum(finite) / len(finite),
        "loss": 0.1 * epoch + offset,
        "snapshot_id": f"snap_{run}_{epoch}",
        "trajectory_ids": [f"{run}_{epoch}_{i}" for i in range(N)],
        "lr": 1e-5 * (epoch + 1),
        "judge_score": [i % 3 for i in range(N)],
    }


def _release(root, layout: str):
    """One release per layout, its runs named <run>@<layout> (a run id is unique across releases)."""
    release = root / f"rel_{layout}"
    for run in RUNS:
        for epoch in range(EPOCHS):
            write_epoch_in_layout(
                release / f"{run}@{layout}",
                layout,
                _document(run, epoch),
                json.dumps({"epoch": epoch, "lr": 1e-5}).encode(),
                10**18 + epoch * 10**9,
            )
    return release


def _table(warehouse, query, table: str, layout: str) -> pl.DataFrame:
    """A table's rows of one layout's runs, run ids without the layout, in key order; the columns that name a file
    or a release, or come from bootstrap draws seeded by run id (every run has its own draws), left out."""
    columns = [row[0] for row in query(warehouse, f"select column_name from (describe {table})")]
    key = "run_id" if "run_id" in columns else "run_a"
    rows = query(warehouse, f"select * from {table} where {key} like '%@{layout}'")
    frame = pl.DataFrame(rows, schema=columns, orient="row", infer_schema_length=None)
    frame = frame.with_columns(
        pl.col(c).str.replace(f"@{layout}", "", literal=True)
        for c in ("run_id", "run_a", "run_b", "arm", "arm_a", "arm_b")
        if c in columns
    )
    left_out = ("source_path", "source_layout", "source_mtime", "release", "ablation", "model_name")
    frame = frame.drop([c for c in columns if c in left_out or "ci_" in c or c == "resolved"])
    return frame.sort(frame.columns[: 3 if "traj_index" in frame.columns else 2])


COMPARED = ("fact_epochs", "fact_trajectories", "epoch_metrics", "run_summary", "snapshots", "ablation_contrasts")


@pytest.mark.slow
def test_every_layout_builds_the_same_tables_as_the_flat_one(tmp_path, build, query):
    releases = [_release(tmp_path, layout) for layout in LAYOUTS]
    warehouse = tmp_path / "wh"
    assert build(releases, warehouse, "--strict") == 0  # nothing left unloaded

    # The flat layout itself loads every document: 2 runs x 4 epochs of 8 trajectories, one reward NaN per epoch.
    flat_epochs = _table(warehouse, query, "fact_epochs", "file")
    assert flat_epochs.height == len(RUNS) * EPOCHS
    assert flat_epochs.filter(pl.col("run_id") == "run_b", pl.col("epoch") == 2)["loss"].item() == pytest.approx(1.2)
    flat_trajectories = _table(warehouse, query, "fact_trajectories", "file")
    assert flat_trajectories.height == len(RUNS) * EPOCHS * N
    assert flat_trajectories["judge_score"].to_list()[:4] == [0, 1, 2, 0]
    flat_metrics = _table(warehouse, query, "epoch_metrics", "file")
    # run_a epoch 0: rewards (3i mod 5)/4 for i = 1..7 (i = 0 is the NaN): 3, 1, 4, 2, 0, 3, 1 quarters.
    assert flat_metrics["mean_reward"][0] == pytest.approx(14 / 28)

    for layout in LAYOUTS[1:]:
        for name in COMPARED:
            flat, other = _table(warehouse, query, name, "file"), _table(warehouse, query, name, layout)
            assert other.height == flat.height, (layout, name)
            assert other.equals(flat), (layout, name)

    # Nothing to report: the configs beside the documents are inventoried, the transcripts indexed and linked.
    assert query(warehouse, "select count(*) from ingest_errors") == [(0,)]
    others = "select status, layout, count(*) from file_inventory where status <> 'loaded' group by all order by 1"
    # A transcripts file per epoch in every layout; a config.json per epoch folder, no transcript (in the
    # folder_other_json layout a candidate document, set aside as before).
    assert sorted(query(warehouse, others), key=str) == [
        ("indexed", "transcript", len(LAYOUTS) * len(RUNS) * EPOCHS),
        ("skipped", "folder_other_json", len(RUNS) * EPOCHS),
        ("skipped", None, (len(LAYOUTS) - 2) * len(RUNS) * EPOCHS),
    ]
    linked = query(warehouse, "select count(transcript_path), count(*) from trajectory_transcripts")
    assert linked == [(len(LAYOUTS) * len(RUNS) * EPOCHS * N,) * 2]


def _ingest(root, lake, run="run", max_file_bytes=10**7):
    return ingest_run(list_run(RunFolder(run, root.name, root, root / run)), lake, max_file_bytes)


def _rows(lake, table: str, run="run") -> list[dict]:
    return pl.read_parquet(partition_file(lake, table, run)).rows(named=True)


def test_an_unknown_json_that_is_no_document_is_reported_once_and_other_epochs_load(tmp_path):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    run = release / "run"
    for epoch in (0, 2):
        write_epoch_in_layout(run, "folder_other_json", epoch_document(epoch), b"{}")
    (run / "epoch_001").mkdir()
    # JSON lines under a .json name: not one JSON value, and still no damaged epoch document.
    lines = [json.dumps({"messages": [{"rewards": [1]}]}), json.dumps({"messages": []})]
    (run / "epoch_001" / "transcript.json").write_text("\n".join(lines))

    result = _ingest(release, lake)
    assert (result.epochs, result.files_quarantined) == (2, 0)
    errors = _rows(lake, "errors")
    assert [(e["source_path"], e["epoch"], e["error_kind"]) for e in errors] == [
        ("run/epoch_001", 1, "missing_document")
    ]
    assert "transcript.json: not an epoch document" in errors[0]["message"]
    # The config.json beside each loaded summary.json is set aside without a report.
    statuses = {row["source_path"]: row["status"] for row in _rows(lake, "files")}
    assert statuses["run/epoch_000/summary.json"] == "loaded"
    assert statuses["run/epoch_000/config.json"] == statuses["run/epoch_001/transcript.json"] == "skipped"

    again = _ingest(release, lake)  # nothing new: nothing read again, still one report
    assert (again.changed, again.files_parsed) == (False, 0)
    assert len(_rows(lake, "errors")) == 1

    # The file fixed in place is an epoch document now: it loads, and the report goes.
    (run / "epoch_001" / "transcript.json").write_text(json.dumps(epoch_document(1)))
    fixed = _ingest(release, lake)
    assert fixed.epochs == 3
    assert _rows(lake, "errors") == []


def test_two_documents_in_one_epoch_folder_load_the_first_by_name_order(tmp_path):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    folder = release / "run" / "epoch_003"
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(epoch_document(3, loss=1.0)))
    (folder / "results.json").write_text(json.dumps(epoch_document(3, loss=2.0)))
    (folder / "epoch_003_results.json").write_text(json.dumps(epoch_document(3, loss=3.0)))

    _ingest(release, lake)
    assert [row["loss"] for row in _rows(lake, "epochs")] == [3.0]
    errors = _rows(lake, "errors")
    assert sorted((e["source_path"], e["error_kind"], e["severity"]) for e in errors) == [
        ("run/epoch_003/metrics.json", "duplicate_epoch", "warning"),
        ("run/epoch_003/results.json", "duplicate_epoch", "warning"),
    ]
    assert all("run/epoch_003/epoch_003_results.json is loaded" in e["message"] for e in errors)


def test_a_damaged_document_of_any_name_is_quarantined_and_a_large_transcript_not_opened(tmp_path):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    folder = release / "run" / "epoch_000"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(epoch_document(0))[:-30])  # cut short
    (folder / "rollouts.json").write_bytes(b"[" + b"0," * 600 + b"0]")

    _ingest(release, lake, max_file_bytes=1000)
    errors = _rows(lake, "errors")
    assert [(e["source_path"], e["error_kind"]) for e in errors] == [("run/epoch_000/summary.json", "truncated_json")]
    reasons = {row["source_path"]: row["reason"] for row in _rows(lake, "files")}
    assert reasons["run/epoch_000/rollouts.json"].startswith("over max_file_bytes")


@pytest.mark.slow
def test_a_run_that_loads_nothing_or_far_fewer_epochs_is_loud(tmp_path, build, query, capsys):
    unrecognised, damaged = tmp_path / "unrecognised", tmp_path / "damaged"
    for epoch in range(2):  # documents, but in no recognised placement
        (unrecognised / "run_a" / f"ep{epoch}").mkdir(parents=True)
        (unrecognised / "run_a" / f"ep{epoch}" / "data.json").write_text(json.dumps(epoch_document(epoch)))
    for epoch in range(7):
        write_epoch_in_layout(damaged / "run_b", "file", epoch_document(epoch), b"{}")
    for epoch in range(3):
        write_epoch_in_layout(damaged / "run_c", "folder", epoch_document(epoch), b"{}")
    (damaged / "run_b" / "epoch_007_results.json").write_text(json.dumps(epoch_document(7))[:40])
    (damaged / "run_b" / "epoch_008").mkdir()
    (damaged / "run_b" / "epoch_008" / "transcript.json").write_text('{"messages": []}')
    (damaged / "run_b" / "epoch_009").mkdir()
    warehouse = tmp_path / "wh"

    assert build([unrecognised, damaged], warehouse, "--strict") == 1

    # run_b: 7 of its 10 epoch entries loaded (under 90%); run_a: none recognised; run_c: all 3.
    assert query(warehouse, "select run_id, epoch, reason, source_path from unloaded_epochs") == [
        ("run_b", 7, "truncated_json", "run_b/epoch_007_results.json"),
        ("run_b", 8, "missing_document", "run_b/epoch_008"),
        ("run_b", 9, "missing_document", "run_b/epoch_009"),
    ]
    out, err = capsys.readouterr()
    assert "3 epoch entr(ies) not loaded" in out
    assert "2  missing_document     e.g. run_b/epoch_008" in out
    assert "1  truncated_json       e.g. run_b/epoch_007_results.json" in out
    [release_line] = [line for line in err.splitlines() if line.startswith("warning: release")]
    assert release_line.startswith("warning: release unrecognised loaded no epoch from its 1 run(s)")
    assert (
        "<run>/epoch_NNN/metrics.json" in release_line
        and "e.g. run_a/ep0/data.json, run_a/ep1/data.json" in release_line
    )
    assert (
        "2 run(s) loaded no epoch or under 90% of their epoch entries: "
        "run_a (no epoch entry recognised), run_b (7 of 10 loaded)" in err
    )
    assert err.splitlines()[-1].startswith("grpo-warehouse build: --strict: release unrecognised loaded no epoch")

    with duckdb.connect(str(warehouse / "warehouse.duckdb"), read_only=True) as con:
        result = checks.runs_not_loading(con)
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN
    assert [(e["run_id"], e["n_loaded"], e["n_not_loaded"]) for e in result.metadata["examples"].value] == [
        ("run_a", 0, 0),
        ("run_b", 7, 3),
    ]


def test_a_document_of_any_name_over_the_limit_loads_once_the_limit_rises(tmp_path):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    write_epoch_in_layout(release / "run", "folder_other_json", epoch_document(0, n=40), b"{}")

    assert _ingest(release, lake, max_file_bytes=1000).epochs == 0
    [error] = _rows(lake, "errors")
    assert (error["source_path"], error["error_kind"]) == ("run/epoch_000", "missing_document")
    assert "summary.json: over max_file_bytes" in error["message"]

    raised = _ingest(release, lake, max_file_bytes=10**7)  # the files unchanged: the new limit alone brings it in
    assert (raised.files_parsed, raised.epochs) == (2, 1)  # and the transcripts beside it, over the limit too
    assert _rows(lake, "errors") == []


def test_files_an_epoch_comes_with_in_a_flat_run_are_inventoried_and_a_misnamed_document_reported(tmp_path):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    run = release / "run"
    write_epoch_in_layout(run, "file", epoch_document(0), b"{}")
    for name in (
        "epoch_000_transcripts.jsonl",
        "epoch_000_config.json",
        "epoch_000_rollouts.tar.gz",
        "epoch_1.json",
        "epoch_000_results.json.bak",
    ):
        (run / name).write_text("{}")

    assert _ingest(release, lake).epochs == 1
    assert sorted((e["source_path"], e["error_kind"]) for e in _rows(lake, "errors")) == [
        ("run/epoch_000_results.json.bak", "stray_file"),
        ("run/epoch_1.json", "stray_file"),
    ]
    statuses = {row["source_path"]: row["status"] for row in _rows(lake, "files")}
    assert statuses["run/epoch_000_transcripts.jsonl"] == statuses["run/epoch_000_rollouts.tar.gz"] == "skipped"
