"""Incremental builds: only new or changed files are parsed, a build with no change rewrites nothing, removals leave."""

import pytest
from helpers import epoch_document, touch_later

import pipelines.lake.read

pytestmark = pytest.mark.slow  # whole builds


@pytest.fixture
def parsed(monkeypatch):
    """Counts the epoch files read, to be parsed, from now on (builds run one ingest process, so in this process)."""
    seen: list[str] = []
    read = pipelines.lake.read._read_file

    def counting(file, max_file_bytes):
        seen.append(file.source_path)
        return read(file, max_file_bytes)

    monkeypatch.setattr(pipelines.lake.read, "_read_file", counting)
    return seen


def snapshot(folder):
    """Every file under folder with what a rewrite would change: inode, size, mtime."""
    return {
        str(path.relative_to(folder)): (path.stat().st_ino, path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.name.endswith(".lock")
    }


def test_a_build_parses_only_new_or_changed_files_removals_leave_and_a_no_change_build_rewrites_nothing(
    tmp_path, write_epoch, build, query, parsed
):
    """run_a and run_b gain and change files, run_c loses two (one quarantined) and run_d goes: each build once."""
    release, wh = tmp_path / "release", tmp_path / "wh"
    for epoch in range(3):
        write_epoch(release / "run_a", epoch)
        write_epoch(release / "run_b", epoch, layout="folder")
        write_epoch(release / "run_c", epoch)
        write_epoch(release / "run_d", epoch)
    (release / "run_c" / "epoch_003_results.json").write_text('{"epoch": 3, "rewards": [')  # quarantined
    assert build([release], wh) == 0
    assert len(parsed) == 3 * 4 + 1
    assert query(wh, "select count(*) from ingest_errors where run_id = 'run_c' and severity = 'error'") == [(1,)]

    parsed.clear()
    write_epoch(release / "run_a", 3)
    write_epoch(release / "run_a", 4, epoch_document(4, n=2))
    changed = write_epoch(release / "run_b", 1, epoch_document(1, n=3), layout="folder")
    touch_later(changed)
    (release / "run_c" / "epoch_001_results.json").unlink()
    (release / "run_c" / "epoch_003_results.json").unlink()
    for path in (release / "run_d").iterdir():
        path.unlink()
    (release / "run_d").rmdir()
    assert build([release], wh) == 0
    assert sorted(parsed) == [  # a removal needs no parsing
        "run_a/epoch_003_results.json",
        "run_a/epoch_004_results.json",
        "run_b/epoch_001/results.json",
    ]
    assert query(wh, "select run_id, count(*), sum(n_trajectories) from fact_epochs group by 1 order by 1") == [
        ("run_a", 5, 4 * 4 + 2),
        ("run_b", 3, 4 + 3 + 4),
        ("run_c", 2, 4 + 4),
    ]
    assert query(wh, "select count(*) from fact_trajectories where run_id = 'run_b' and epoch = 1") == [(3,)]
    assert query(wh, "select run_id, epoch from fact_epochs where run_id = 'run_c' order by 2") == [
        ("run_c", 0),
        ("run_c", 2),
    ]
    assert query(
        wh, "select distinct run_id, epoch from fact_trajectories where run_id in ('run_c', 'run_d') order by 1, 2"
    ) == [("run_c", 0), ("run_c", 2)]
    assert query(wh, "select run_id from dim_runs order by 1") == [("run_a",), ("run_b",), ("run_c",)]
    assert query(wh, "select count(*) from ingest_errors where severity = 'error'") == [(0,)]
    assert query(wh, "select source_path from file_inventory where run_id in ('run_c', 'run_d') order by 1") == [
        ("run_c/epoch_000_results.json",),
        ("run_c/epoch_002_results.json",),
    ]

    parsed.clear()
    before = snapshot(wh)
    assert build([release], wh) == 0
    assert parsed == []
    after = snapshot(wh)
    assert after == before  # lake, build database, warehouse.duckdb, exports: not one file rewritten
    assert "warehouse.duckdb" in after and any(p.startswith("lake/epochs/") for p in after)
