"""A damaged release: the build exits 0, every good epoch loads, each bad file has one row in ingest_errors."""

import json
import os
from pathlib import Path

import pytest
from helpers import epoch_document, write_epoch_file

# Whole builds of a damaged release; the tests reading the module's one build share a worker, which makes it once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("damaged_warehouse")]

RUN = "damaged_run"
GOOD_EPOCHS = {0, 9, 13, 17, 20}
QUARANTINED = "quarantined: not loaded"
# source_path -> (error_kind, severity, action): as docs/bad-input.md lists them.
EXPECTED = {
    f"{RUN}/epoch_001_results.json": ("truncated_json", "error", QUARANTINED),
    f"{RUN}/epoch_002_results.json": ("empty_file", "error", QUARANTINED),
    f"{RUN}/epoch_003_results.json": ("invalid_utf8", "error", QUARANTINED),
    f"{RUN}/epoch_004_results.json": ("not_an_object", "error", QUARANTINED),
    f"{RUN}/epoch_005_results.json": ("missing_key", "error", QUARANTINED),
    f"{RUN}/epoch_006_results.json": ("wrong_type", "error", QUARANTINED),
    f"{RUN}/epoch_007_results.json": ("wrong_type", "error", QUARANTINED),
    f"{RUN}/epoch_008_results.json": ("length_mismatch", "error", QUARANTINED),
    f"{RUN}/epoch_009_results.json": ("duplicate_epoch", "warning", "not loaded: duplicate"),
    f"{RUN}/epoch_010_results.json": ("epoch_mismatch", "error", QUARANTINED),
    f"{RUN}/epoch_012_results.json": ("duplicate_key", "error", QUARANTINED),
    f"{RUN}/epoch_013_results.json": ("duplicate_key", "warning", "loaded"),
    f"{RUN}/epoch_014_results.json": ("file_too_large", "error", QUARANTINED),
    f"{RUN}/epoch_015_results.json": ("outside_link", "error", "skipped: not opened"),
    f"{RUN}/epoch_016_results.json": ("unreadable", "error", QUARANTINED),
    f"{RUN}/epoch_017_results.json": ("missing_key", "warning", "loaded"),
    f"{RUN}/epoch_018_results.json.bak": ("stray_file", "error", "skipped: not opened"),
    "damaged/linked_run": ("outside_link", "error", "skipped: not opened"),
}


def damaged_release(root: Path, write_epoch) -> tuple[Path, Path]:
    release, run = root / "damaged", root / "damaged" / RUN
    good = json.dumps(epoch_document(1, n=2))
    write_epoch(run, 0)
    write_epoch(run, 1, good[: len(good) // 2])
    write_epoch(run, 2, b"")
    latin1 = json.dumps(epoch_document(3, snapshot_id="s\u00e9"), ensure_ascii=False).encode("latin-1")
    write_epoch(run, 3, latin1)
    write_epoch(run, 4, "[1, 2, 3]")
    write_epoch(run, 5, {k: v for k, v in epoch_document(5).items() if k != "rewards"})
    write_epoch(run, 6, epoch_document(6) | {"loss": "0.5"})
    write_epoch(run, 7, epoch_document(7) | {"rewards": 1.0})
    write_epoch(run, 8, epoch_document(8) | {"advantages": [0.0]})
    older = write_epoch(run, 9, epoch_document(9) | {"copy": "older"}, layout="file")
    newer = write_epoch(run, 9, epoch_document(9) | {"copy": "newer"}, layout="folder")
    os.utime(older, ns=(10**18, 10**18))
    os.utime(newer, ns=(2 * 10**18, 2 * 10**18))
    write_epoch(run, 11, name_epoch=10)
    write_epoch(run, 12, json.dumps(epoch_document(12))[:-1] + ', "loss": 7.0}')
    write_epoch(run, 13, json.dumps(epoch_document(13))[:-1] + ', "loss": 13.5}')
    with open(write_epoch(run, 14), "r+b") as big:  # sparse: over the 64 MiB limit, never read
        big.truncate(65 * 2**20)
    outside = root / "outside"
    os.symlink(write_epoch(outside / "elsewhere", 15), run / "epoch_015_results.json")
    os.symlink(outside / "elsewhere", release / "linked_run")
    locked = write_epoch(run, 16)
    write_epoch(run, 17, {k: v for k, v in epoch_document(17).items() if k != "train_entropy"})
    (run / "epoch_018_results.json.bak").write_text("{}")
    (run / "notes.txt").write_text("not an epoch file")
    (release / "README.md").write_text("about this release")
    write_epoch(run, 20)
    return release, locked


@pytest.fixture(scope="module")
def damaged_warehouse(tmp_path_factory):
    from pipelines.cli import main

    root = tmp_path_factory.mktemp("damaged")
    release, locked = damaged_release(root, write_epoch_file)
    real_open = os.open

    def deny(path, *args, **kwargs):  # an unreadable file, even for root
        if Path(path) == locked.resolve():
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(os, "open", deny)
    try:
        code = main(["build", "--release", str(release), "--warehouse", str(root / "wh"), "--workers", "1"])
    finally:
        mp.undo()
    return code, root / "wh"


def test_build_exits_0(damaged_warehouse):
    assert damaged_warehouse[0] == 0


def test_every_good_epoch_is_loaded_and_no_bad_one(damaged_warehouse, query):
    rows = query(damaged_warehouse[1], "select epoch, source_path from fact_epochs where run_id = ?", RUN)
    assert {epoch for epoch, _ in rows} == GOOD_EPOCHS
    # Two files for epoch 9: the more recently written one (the folder layout) is kept.
    assert dict(rows)[9] == f"{RUN}/epoch_009/results.json"
    assert query(
        damaged_warehouse[1], "select distinct epoch from fact_trajectories where run_id = ? order by 1", RUN
    ) == [(e,) for e in sorted(GOOD_EPOCHS)]


@pytest.mark.parametrize("source_path", sorted(EXPECTED))
def test_one_row_per_bad_file(damaged_warehouse, query, source_path):
    rows = query(
        damaged_warehouse[1],
        "select error_kind, severity, action, message, epoch, run_id from ingest_errors where source_path = ?",
        source_path,
    )
    assert [r[:3] for r in rows] == [EXPECTED[source_path]]
    message = rows[0][3]
    assert message and str(damaged_warehouse[1].parent) not in message  # no absolute paths


def test_nothing_else_in_ingest_errors(damaged_warehouse, query):
    paths = {
        p
        for (p,) in query(
            damaged_warehouse[1], "select source_path from ingest_errors where error_kind != 'partial_group'"
        )
    }
    assert paths == set(EXPECTED)


@pytest.mark.parametrize(
    "source_path, fragment",
    [
        (f"{RUN}/epoch_001_results.json", "line 1, column"),
        (f"{RUN}/epoch_003_results.json", "invalid UTF-8 at line 1"),
        (f"{RUN}/epoch_005_results.json", "`rewards`"),
        (f"{RUN}/epoch_006_results.json", "`loss` should be a number, found str"),
        (f"{RUN}/epoch_007_results.json", "`rewards` should be a list"),
        (f"{RUN}/epoch_008_results.json", "`advantages` 1"),
        (f"{RUN}/epoch_009_results.json", f"{RUN}/epoch_009/results.json"),
        (f"{RUN}/epoch_010_results.json", "says epoch 11 but its name says epoch 10"),
        (f"{RUN}/epoch_012_results.json", "`loss`"),
        (f"{RUN}/epoch_014_results.json", str(65 * 2**20)),
        (f"{RUN}/epoch_016_results.json", "Permission denied"),
        (f"{RUN}/epoch_017_results.json", "`train_entropy`"),
    ],
)
def test_messages_say_what_and_where(damaged_warehouse, query, source_path, fragment):
    ((message,),) = query(damaged_warehouse[1], "select message from ingest_errors where source_path = ?", source_path)
    assert fragment in message


def test_inventory_lists_every_entry_with_its_status(damaged_warehouse, query):
    status = dict(query(damaged_warehouse[1], "select source_path, status from file_inventory"))
    assert status[f"{RUN}/notes.txt"] == "skipped"
    assert status["damaged/README.md"] == "skipped"
    assert status[f"{RUN}/epoch_009_results.json"] == "duplicate"
    assert status[f"{RUN}/epoch_013_results.json"] == "loaded_with_warnings"
    assert status[f"{RUN}/epoch_001_results.json"] == "quarantined"


@pytest.mark.parametrize(
    "statement, fragment",
    [
        ("copy (select 1) to '{tmp}/out.csv'", "disabled by configuration"),
        ("attach '{tmp}/other.duckdb' as other", "disabled by configuration"),
        ("create table t as select 1", "read-only"),
        ("insert into dim_runs (run_id) values ('x')", "read-only"),
        ("set enable_external_access = true", "locked"),
    ],
)
def test_sql_command_cannot_write(damaged_warehouse, tmp_path, capsys, statement, fragment):
    from pipelines.cli import main

    code = main(["sql", statement.format(tmp=tmp_path), "--warehouse", str(damaged_warehouse[1])])
    err = capsys.readouterr().err
    assert code == 2
    assert fragment in err and err.startswith("grpo-warehouse sql:")
    assert list(tmp_path.iterdir()) == []


def test_fixed_file_loads_on_the_next_build_and_type_drift_is_kept(tmp_path, write_epoch, build, query):
    release, wh = tmp_path / "rel", tmp_path / "wh"
    write_epoch(release / "run", 0, epoch_document(0, phase=1))
    write_epoch(release / "run", 1, '{"epoch": 1, "loss"')
    assert build([release], wh) == 0
    assert query(wh, "select source_path, error_kind from ingest_errors order by 1") == [
        ("run/", "partial_group"),
        ("run/epoch_001_results.json", "truncated_json"),
    ]
    assert query(wh, "select phase from fact_epochs") == [(1,)]

    write_epoch(release / "run", 1, epoch_document(1, phase=2))  # fixed
    write_epoch(release / "run", 2, epoch_document(2, phase="cooldown"))  # a new file whose extra changes type
    assert build([release], wh) == 0
    assert query(wh, "select epoch, phase from fact_epochs order by epoch") == [(0, "1"), (1, "2"), (2, '"cooldown"')]
    assert query(wh, "select source_path, error_kind, severity from ingest_errors order by 2") == [
        ("run/", "partial_group", "warning"),
        ("run/", "type_drift", "warning"),
    ]
