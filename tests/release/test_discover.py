"""Discovery of run folders and epoch files in both layouts, with every other entry inventoried."""

import os

from pipelines.release.discover import list_run
from pipelines.release.releases import find_run_folders


def test_both_layouts_and_every_other_entry_inventoried(tmp_path, write_epoch):
    release = tmp_path / "my_release"
    run_dir = release / "run_x"
    write_epoch(run_dir, 0, layout="file")
    write_epoch(run_dir, 1, layout="folder")
    (run_dir / "epoch_001" / "config.json").write_text("{}")
    (run_dir / "epoch_001" / "stdout.log").write_text("log")
    (run_dir / "notes.txt").write_text("hello")
    (run_dir / "epoch_002").mkdir()  # an epoch folder without its document
    (run_dir / ".epoch_003_results.json.tmp").write_text("{")  # an interrupted write
    (release / "README.md").write_text("readme")

    runs, root_entries, problems = find_run_folders([release])
    assert list(runs) == ["run_x"] and problems == []
    assert runs["run_x"].release == "my_release"
    assert [(e.source_path, e.is_problem) for e in root_entries] == [("my_release/README.md", False)]

    listing = list_run(runs["run_x"])
    assert [(f.source_path, f.epoch_in_name, f.layout) for f in listing.epoch_files] == [
        ("run_x/epoch_000_results.json", 0, "file"),
        ("run_x/epoch_001/results.json", 1, "folder"),
    ]
    assert all(f.size == f.path.stat().st_size for f in listing.epoch_files)
    skipped = {e.source_path: e for e in listing.skipped}
    assert set(skipped) == {
        "run_x/.epoch_003_results.json.tmp",
        "run_x/epoch_001/stdout.log",
        "run_x/epoch_002",
        "run_x/notes.txt",
    }
    # A *.json beside a document may hold transcripts: the ingest opens it to see.
    assert [(f.source_path, f.epoch_in_name, f.layout) for f in listing.transcript_files] == [
        ("run_x/epoch_001/config.json", 1, "transcript")
    ]
    assert not skipped["run_x/notes.txt"].is_problem
    assert skipped["run_x/epoch_002"].is_problem  # an epoch folder without results.json is worth reporting


def test_run_ids_are_unique_across_releases(tmp_path, write_epoch):
    write_epoch(tmp_path / "rel_a" / "run_1", 0)
    write_epoch(tmp_path / "rel_b" / "run_1", 0)
    write_epoch(tmp_path / "rel_b" / "run_2", 0)
    runs, _, problems = find_run_folders([tmp_path / "rel_a", tmp_path / "rel_b", tmp_path / "missing"])
    assert {k: v.release for k, v in runs.items()} == {"run_1": "rel_a", "run_2": "rel_b"}
    assert len(problems) == 2
    assert "run_1" in problems[0] and "missing" in problems[1]


def test_links_out_of_the_release_are_reported_and_links_inside_followed(tmp_path, write_epoch):
    outside = write_epoch(tmp_path / "elsewhere" / "run_o", 5)
    release = tmp_path / "rel"
    run_dir = release / "run"
    inside = write_epoch(run_dir, 0)
    os.symlink(outside, run_dir / "epoch_005_results.json")
    os.symlink(inside, run_dir / "epoch_006_results.json")
    os.symlink(tmp_path / "elsewhere" / "run_o", release / "run_linked")
    runs, root_entries, _ = find_run_folders([release])
    assert list(runs) == ["run"]
    assert [(e.source_path, e.is_problem) for e in root_entries] == [("rel/run_linked", True)]
    listing = list_run(runs["run"])
    assert [f.source_path for f in listing.epoch_files] == ["run/epoch_000_results.json", "run/epoch_006_results.json"]
    assert [(e.source_path, e.is_problem) for e in listing.skipped] == [("run/epoch_005_results.json", True)]


def test_entries_named_as_epoch_documents_that_are_no_files_are_reported_as_what_they_are(tmp_path, write_epoch):
    """Each is never opened (a FIFO's open would wait for a writer: the test would hang)."""
    import socket

    run_dir = tmp_path / "rel" / "run"
    write_epoch(run_dir, 0)
    os.mkfifo(run_dir / "epoch_001_results.json")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(run_dir / "epoch_002_results.json"))
        (run_dir / "epoch_003_results.json").mkdir()
        (run_dir / "epoch_004").mkdir()
        os.mkfifo(run_dir / "epoch_004" / "results.json")
        write_epoch(run_dir, 5, name_epoch=5)
        (run_dir / "epoch_005_results.json").rename(run_dir / "EPOCH_005_RESULTS.JSON")
        (run_dir / "Epoch_006").mkdir()
        runs, _, _ = find_run_folders([tmp_path / "rel"])
        listing = list_run(runs["run"])
    assert [f.source_path for f in listing.epoch_files] == ["run/epoch_000_results.json"]
    never = "not a file; not opened"
    assert [(e.source_path, e.error_kind, e.epoch, e.reason) for e in listing.skipped] == [
        (
            "run/EPOCH_005_RESULTS.JSON",
            "stray_file",
            5,
            "named as an epoch entry in capital letters; not loaded (renamed epoch_005_results.json, it is)",
        ),
        (
            "run/Epoch_006",
            "stray_file",
            6,
            "named as an epoch entry in capital letters; not loaded (renamed epoch_006, it is)",
        ),
        (
            "run/epoch_001_results.json",
            "not_a_file",
            1,
            f"named as an epoch document, but a FIFO (named pipe), {never}",
        ),
        ("run/epoch_002_results.json", "not_a_file", 2, f"named as an epoch document, but a socket, {never}"),
        ("run/epoch_003_results.json", "not_a_file", 3, f"named as an epoch document, but a folder, {never}"),
        (
            "run/epoch_004/results.json",
            "not_a_file",
            4,
            f"named as an epoch document, but a FIFO (named pipe), {never}",
        ),
    ]
