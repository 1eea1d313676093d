"""Hostile input through the CLI: entries named as epoch documents that are no files, a file written in 2302, an
empty release given beside a good one as a shell glob gives them, after one flag."""

import contextlib
import datetime
import io
import json
import os

import pytest
from helpers import epoch_document, write_epoch_file

# One whole build, which the module's tests read on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hostile_input")]

YEAR_2302 = 10_500_000_000  # seconds since 1970: in nanoseconds, past 64 bits


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from pipelines.cli import main

    root = tmp_path_factory.mktemp("hostile")
    release, empty = root / "hostile", root / "empty"
    empty.mkdir()
    future = write_epoch_file(release / "run_future", 0, epoch_document(0, n=2))
    os.utime(future, (YEAR_2302, YEAR_2302))
    write_epoch_file(release / "run_future", 1, epoch_document(1, n=2))
    write_epoch_file(release / "run_fifo", 0, epoch_document(0, n=2))
    os.mkfifo(release / "run_fifo" / "epoch_001_results.json")  # opened, the build would wait for a writer
    (release / "run_fifo" / "EPOCH_002_RESULTS.JSON").write_text(json.dumps(epoch_document(2, n=2)))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["build", "--release", str(release), str(empty), "--warehouse", str(root / "wh"), "--strict"])
    return code, root / "wh", empty, err.getvalue()


def test_an_empty_release_warns_and_fails_the_strict_build_which_still_builds(built):
    code, _, empty, err = built
    assert code == 1
    assert f"warning: release folder {empty} holds no run folder\n" in err
    strict = [line for line in err.splitlines() if line.startswith("grpo-warehouse build: --strict: ")]
    assert strict == [
        f"grpo-warehouse build: --strict: release folder {empty} holds no run folder; 1 run(s) loaded no epoch or "
        "under 90% of their epoch entries"
    ]
    assert "Traceback" not in err


def test_every_epoch_file_loads_whatever_its_mtime(built, query):
    rows = query(built[1], "select run_id, epoch, source_mtime from fact_epochs order by 1, 2")
    assert [row[:2] for row in rows] == [("run_fifo", 0), ("run_future", 0), ("run_future", 1)]
    assert rows[1][2] == datetime.datetime.fromtimestamp(YEAR_2302, datetime.UTC)


def test_entries_that_are_no_epoch_documents_are_reported_under_their_true_cause(built, query):
    errors = "select source_path, error_kind, epoch from ingest_errors where run_id = 'run_fifo' and severity = 'error'"
    assert query(built[1], errors + " order by 1") == [
        ("run_fifo/EPOCH_002_RESULTS.JSON", "stray_file", 2),
        ("run_fifo/epoch_001_results.json", "not_a_file", 1),
    ]
    assert query(built[1], "select epoch, reason from unloaded_epochs where run_id = 'run_fifo' order by 1") == [
        (1, "not_a_file"),
        (2, "stray_file"),
    ]
