"""Transcripts in the lake: every placement indexed with the place of each record, bad files reported and never a
failed epoch, and the incremental ingest reading only new or changed transcript files, to the same rows as a fresh
ingest."""

import json
import os
import shutil

import orjson
import polars as pl
import pytest
from helpers import epoch_document, touch_later, write_epoch_file

import pipelines.lake.transcripts as lake_transcripts
from pipelines.lake.ingest import ingest_run
from pipelines.lake.paths import partition_file
from pipelines.release.discover import RunFolder, list_run


def _audit(trajectory_id: str | None, n_turns: int = 2, where: str = "top") -> dict:
    """A record of 1 + 2 * n_turns messages (one tool call per auditor message), its id placed as asked."""
    messages = [{"role": "system", "content": "Audit."}]
    for turn in range(n_turns):
        messages.append({"role": "auditor", "content": f"probe {turn}", "tool_calls": [{"function": "send_message"}]})
        messages.append({"role": "target", "content": "reply"})
    record = {"metadata": {"judge": {"score": n_turns}}, "messages": messages}
    if where == "top" and trajectory_id is not None:
        record["trajectory_id"] = trajectory_id
    elif where == "metadata":
        record["metadata"]["trajectory_id"] = trajectory_id
    return record


def _release(root):
    """A run in each placement, two epochs of 4 trajectories each:
    - run_lines: <run>/transcripts/epoch_NNN.jsonl, a line per trajectory;
    - run_files: <run>/epoch_NNN/transcripts/<id>.json, named after its trajectory, no id inside;
    - run_array: <run>/transcripts.json, one array of every record, the ids in the metadata;
    - run_other: <run>/epoch_NNN/<id>.json beside summary.json, a document of another name."""
    release = root / "rel"
    for run in ("run_lines", "run_files", "run_array", "run_other"):
        records = []
        for epoch in range(2):
            document = epoch_document(epoch, trajectory_ids=[f"{run}_{epoch}_{i}" for i in range(4)])
            layout = "folder" if run == "run_files" else "file"
            if run == "run_other":
                (release / run / f"epoch_{epoch:03d}").mkdir(parents=True, exist_ok=True)
                (release / run / f"epoch_{epoch:03d}" / "summary.json").write_text(json.dumps(document))
            else:
                write_epoch_file(release / run, epoch, document, layout=layout)
            epoch_records = [_audit(i, n_turns=1 + k % 3) for k, i in enumerate(document["trajectory_ids"])]
            if run == "run_lines":
                path = release / run / "transcripts" / f"epoch_{epoch:03d}.jsonl"
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in epoch_records))
            for record in epoch_records:
                trajectory_id = record.pop("trajectory_id")
                if run in ("run_files", "run_other"):
                    folder = release / run / f"epoch_{epoch:03d}" / ("transcripts" if run == "run_files" else "")
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / f"{trajectory_id}.json").write_bytes(orjson.dumps(record))
                records.append(record | {"metadata": record["metadata"] | {"trajectory_id": trajectory_id}})
        if run == "run_array":
            (release / run / "transcripts.json").write_text(json.dumps(records, indent=1))
    return release


def _ingest(release, lake, run, **settings):
    return ingest_run(list_run(RunFolder(run, release.name, release, release / run)), lake, 10**7, **settings)


def _rows(lake, table, run) -> pl.DataFrame:
    path = partition_file(lake, table, run)
    return pl.read_parquet(path) if path.exists() else pl.DataFrame()


@pytest.fixture
def release(tmp_path):
    return _release(tmp_path)


@pytest.mark.parametrize(
    ("run", "format", "id_source", "path"),
    [
        ("run_lines", "jsonl", "trajectory_id", "run_lines/transcripts/epoch_{e:03d}.jsonl"),
        ("run_files", "json_object", "file name", "run_files/epoch_{e:03d}/transcripts/run_files_{e}_{i}.json"),
        ("run_array", "json_array", "metadata.trajectory_id", "run_array/transcripts.json"),
        ("run_other", "json_object", "file name", "run_other/epoch_{e:03d}/run_other_{e}_{i}.json"),
    ],
)
def test_every_placement_indexes_each_trajectory_with_the_bytes_of_its_record(
    release, tmp_path, run, format, id_source, path
):
    lake = tmp_path / "lake"
    result = _ingest(release, lake, run)
    assert (result.epochs, result.files_quarantined) == (2, 0)
    rows = _rows(lake, "transcripts", run).sort("trajectory_id")
    expected_ids = sorted(f"{run}_{e}_{i}" for e in range(2) for i in range(4))
    assert rows["trajectory_id"].to_list() == expected_ids
    assert set(rows["format"]) == {format} and set(rows["id_source"]) == {id_source}
    for row in rows.iter_rows(named=True):
        _, e, i = row["trajectory_id"].rsplit("_", 2)
        assert row["source_path"] == path.format(e=int(e), i=int(i))
        data = (release / row["source_path"]).read_bytes()
        record = orjson.loads(data[row["byte_offset"] : row["byte_offset"] + row["byte_length"]])
        # _audit(n_turns = 1 + k % 3): 1 + 2 n messages, n tool calls, 2 n turns, 6 + 7 n + 5 n characters.
        n = record["metadata"]["judge"]["score"]
        assert (row["n_messages"], row["n_tool_calls"], row["n_turns"]) == (1 + 2 * n, n, 2 * n)
        assert row["content_chars"] == len("Audit.") + sum(len(f"probe {t}") + len("reply") for t in range(n))
        assert row["metadata.judge.score"] == n
        if format == "jsonl":
            assert data.decode().splitlines()[row["line"] - 1] == data[row["byte_offset"] :].decode().split("\n")[0]
    statuses = _rows(lake, "files", run).filter(pl.col("layout") == "transcript")["status"].unique().to_list()
    assert statuses == ["indexed"]
    assert _rows(lake, "errors", run).height == 0


def test_bad_transcript_files_are_reported_and_no_epoch_fails(release, tmp_path):
    lake, run = tmp_path / "lake", release / "run_lines"
    good = (run / "transcripts" / "epoch_000.jsonl").read_bytes()
    (run / "transcripts" / "epoch_000.jsonl").write_bytes(good + b'{"trajectory_id": "cut')
    (run / "transcripts" / "epoch_001.jsonl").write_bytes(b"[" + good[: good.index(b"\n") - 5])  # no record in it
    (run / "transcripts" / "extra.jsonl").write_bytes(orjson.dumps(_audit(None)) + b"\n")  # a record with no id
    (run / "config.json").write_text('{"lr": 1e-5}')  # no messages at all: not a transcript

    result = _ingest(release, lake, "run_lines")
    assert (result.epochs, result.trajectories, result.files_quarantined) == (2, 8, 1)
    errors = {
        (e["source_path"], e["error_kind"], e["severity"]): e["message"]
        for e in _rows(lake, "errors", "run_lines").to_dicts()
    }
    assert set(errors) == {
        ("run_lines/transcripts/epoch_000.jsonl", "transcript_invalid", "warning"),
        ("run_lines/transcripts/epoch_001.jsonl", "transcript_invalid", "error"),
        ("run_lines/transcripts/extra.jsonl", "transcript_without_id", "warning"),
    }
    assert "line 5 does not parse" in errors[("run_lines/transcripts/epoch_000.jsonl", "transcript_invalid", "warning")]
    files = {f["source_path"]: (f["layout"], f["status"]) for f in _rows(lake, "files", "run_lines").to_dicts()}
    assert files["run_lines/transcripts/epoch_000.jsonl"] == ("transcript", "indexed_with_warnings")
    assert files["run_lines/transcripts/epoch_001.jsonl"] == ("transcript", "quarantined")
    assert files["run_lines/config.json"] == (None, "skipped")
    assert sorted(_rows(lake, "transcripts", "run_lines")["trajectory_id"]) == [f"run_lines_0_{i}" for i in range(4)]

    # Fixed in place, the file is indexed on the next ingest and its report goes.
    (run / "transcripts" / "epoch_001.jsonl").write_bytes(good.replace(b"run_lines_0_", b"run_lines_1_"))
    touch_later(run / "transcripts" / "epoch_001.jsonl")
    again = _ingest(release, lake, "run_lines")
    assert again.files_quarantined == 0
    assert len(_rows(lake, "transcripts", "run_lines")) == 8
    assert ("run_lines/transcripts/epoch_001.jsonl", "transcript_invalid", "error") not in {
        (e["source_path"], e["error_kind"], e["severity"]) for e in _rows(lake, "errors", "run_lines").to_dicts()
    }


def _count_indexing(monkeypatch) -> list[str]:
    read: list[str] = []
    index = lake_transcripts.index_transcripts

    def counting(data, name, keep_text=False):
        read.append(name)
        return index(data, name, keep_text)

    monkeypatch.setattr(lake_transcripts, "index_transcripts", counting)
    return read


def test_a_new_epoch_indexes_its_transcripts_alone_to_the_rows_of_a_fresh_ingest(release, tmp_path, monkeypatch):
    lake = tmp_path / "lake"
    read = _count_indexing(monkeypatch)
    _ingest(release, lake, "run_files")
    assert len(read) == 8
    read.clear()
    assert _ingest(release, lake, "run_files").changed is False and read == []  # no change: no transcript read

    document = epoch_document(2, trajectory_ids=[f"run_files_2_{i}" for i in range(4)])
    write_epoch_file(release / "run_files", 2, document, layout="folder")
    (release / "run_files" / "epoch_002" / "transcripts").mkdir()
    for i in range(4):
        extra = {"note": "x" * 300} if i == 0 else {}  # a field the earlier records lack
        path = release / "run_files" / "epoch_002" / "transcripts" / f"run_files_2_{i}.json"
        path.write_bytes(orjson.dumps(_audit(None, n_turns=i + 1) | extra))
    result = _ingest(release, lake, "run_files")
    assert sorted(read) == [f"run_files_2_{i}.json" for i in range(4)] and result.epochs == 3

    fresh = tmp_path / "fresh"
    _ingest(release, fresh, "run_files")
    for table in ("transcripts", "files", "errors"):
        assert _rows(lake, table, "run_files").equals(_rows(fresh, table, "run_files")), table
    assert _rows(lake, "transcripts", "run_files")["note_chars"].drop_nulls().to_list() == [300]

    # A transcript file removed takes its row with it, and the rest is what a fresh ingest gives.
    os.remove(release / "run_files" / "epoch_002" / "transcripts" / "run_files_2_0.json")
    _ingest(release, lake, "run_files")
    shutil.rmtree(fresh)
    _ingest(release, fresh, "run_files")
    assert "note_chars" not in _rows(lake, "transcripts", "run_files").columns
    assert _rows(lake, "transcripts", "run_files").equals(_rows(fresh, "transcripts", "run_files"))


def test_the_text_is_kept_only_when_asked_and_the_setting_reindexes(release, tmp_path, monkeypatch):
    lake = tmp_path / "lake"
    read = _count_indexing(monkeypatch)
    _ingest(release, lake, "run_lines")
    assert _rows(lake, "transcripts", "run_lines")["text"].null_count() == 8
    read.clear()
    with_text = _ingest(release, lake, "run_lines", transcript_text=True)
    assert with_text.changed and len(read) == 2  # the two files, read again for their text
    text = _rows(lake, "transcripts", "run_lines").sort("trajectory_id")["text"][0]
    assert text.splitlines() == [
        "system: Audit.",
        "auditor: probe 0",
        'auditor [tool call]: {"function":"send_message"}',
        "target: reply",
    ]
    read.clear()
    assert not _ingest(release, lake, "run_lines", transcript_text=True).changed and read == []
    _ingest(release, lake, "run_lines")
    assert _rows(lake, "transcripts", "run_lines")["text"].null_count() == 8
