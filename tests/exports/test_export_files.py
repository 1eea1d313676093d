"""Exports: atomic change-only writes, and CSV/Parquet copies that read back to the same rows."""

import io
import json
import math

import polars as pl
from polars.testing import assert_frame_equal

from pipelines.exports.files import table_files, write_if_changed
from pipelines.exports.state import STATE_NAME, kept_entry, record, recorded_metadata


def test_write_if_changed_skips_identical_bytes(tmp_path):
    path = tmp_path / "sub" / "a.txt"
    assert write_if_changed(path, b"one") is True
    stamp = path.stat().st_mtime_ns
    assert write_if_changed(path, b"one") is False
    assert path.stat().st_mtime_ns == stamp
    assert write_if_changed(path, b"two") is True and path.read_bytes() == b"two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.txt"]  # no temp file left behind


def test_tables_round_trip_through_csv_and_parquet(tmp_path, tables):
    awkward = pl.DataFrame(
        {
            "run_id": ["a,b", 'say "hi"', "line\nbreak", None],
            "epoch": [0, 1, None, 3],
            "reward": [0.1 + 0.2, math.nan, None, -1e-300],
            "flag": [True, False, None, True],
        }
    )
    for name, frame in {**tables, "awkward": awkward}.items():
        for ext, content in table_files(frame).items():
            assert write_if_changed(tmp_path / f"{name}.{ext}", content)
        assert_frame_equal(pl.read_parquet(tmp_path / f"{name}.parquet"), frame)
        assert_frame_equal(pl.read_csv(tmp_path / f"{name}.csv", schema=frame.schema), frame)
        # The same frame again gives the same bytes, so nothing is rewritten.
        assert not any(
            write_if_changed(tmp_path / f"{name}.{ext}", content) for ext, content in table_files(frame.clone()).items()
        )


def test_table_bytes_are_stable_and_csv_has_the_columns(tables):
    assert table_files(tables["epochs"]) == table_files(tables["epochs"].clone())
    csv = table_files(tables["summary"])["csv"].decode()
    assert csv.splitlines()[0].split(",") == tables["summary"].columns
    assert pl.read_csv(io.StringIO(csv)).height == tables["summary"].height


def test_the_exports_record_is_read_again_once_another_process_replaced_it(tmp_path):
    record(tmp_path, "report", "fp1", [], "v1", {"headline": "first"})
    assert recorded_metadata(tmp_path, "report") == {"headline": "first"}
    # another process (the UI's run) records its own: a new file put in place
    write_if_changed(
        tmp_path / STATE_NAME,
        json.dumps(
            {"report": {"fingerprint": "fp2", "files": {}, "data_version": "v2", "metadata": {"headline": "2"}}}
        ).encode(),
    )
    assert recorded_metadata(tmp_path, "report") == {"headline": "2"}
    assert kept_entry(tmp_path, "report", "fp2")["data_version"] == "v2"
    record(tmp_path, "figures", "fp3", [], "v3", {})
    assert set(json.loads((tmp_path / STATE_NAME).read_text())) == {"report", "figures"}


def test_csv_fields_holding_markup_or_formulas_read_back_as_they_are():
    """Quoting keeps commas, quotes and line breaks inside one field; a formula-like value is kept as it is (the CSV
    is data: a prefix would change the run id)."""
    import csv

    from hostile import HOSTILE_NAMES

    names = [*HOSTILE_NAMES, 'say "hi", then\r\nleave', "+1", "-x", "@sum(A1)", "\ttab"]
    frame = pl.DataFrame({"run_id": names, "value": [-0.5] * len(names)})
    rows = list(csv.reader(io.StringIO(table_files(frame)["csv"].decode(), newline="")))
    assert rows == [["run_id", "value"], *([name, "-0.5"] for name in names)]
