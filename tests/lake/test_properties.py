"""Property-based: random documents, mutations and file trees never crash ingest, never lose a valid file,
and leave exactly one error row per file not loaded."""

import json
import math
import shutil
import tempfile
from pathlib import Path

import polars as pl
import pytest
from helpers import epoch_document, write_epoch_file
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipelines.lake.ingest import ingest_run
from pipelines.lake.paths import manifest_file, partition_file
from pipelines.release.decode import DOCUMENTED_KEYS
from pipelines.release.discover import list_run
from pipelines.release.flatten import EPOCH_COLUMNS, extra_column_name, python_values
from pipelines.release.releases import find_run_folders

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMIT = 1 << 20

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
)
nested = st.one_of(st.dictionaries(st.text(max_size=3), scalars, max_size=3), st.lists(scalars, max_size=3))
extra_values = st.one_of(scalars, nested)
extra_keys = st.sampled_from(["phase", "lr", "note", "config", "Loss", "extra_loss", "n_trajectories"])


@st.composite
def documents(draw, epoch: int) -> dict:
    n = draw(st.integers(0, 4))
    doc = epoch_document(epoch, n=n)
    for key in draw(st.lists(extra_keys, max_size=3, unique=True)):
        doc[key] = draw(extra_values)
    if n and draw(st.booleans()):
        doc["per_traj"] = draw(st.lists(scalars, min_size=n, max_size=n))
    return doc


MUTATIONS = (
    "truncate",
    "flip_byte",
    "drop_key",
    "wrong_type",
    "short_array",
    "empty",
    "not_object",
    "duplicate_key",
    "wrong_epoch",
)


def mutate(draw, doc: dict, how: str) -> bytes:
    text = json.dumps(doc)
    if how == "truncate":  # a proper prefix of an object is never a whole JSON document
        return text[: draw(st.integers(0, len(text) - 1))].encode()
    if how == "flip_byte":  # may or may not break the file: only the general properties are checked
        data = bytearray(text.encode())
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data)
    if how == "drop_key":
        doc = dict(doc)
        del doc[draw(st.sampled_from(["epoch", "trajectory_ids", "rewards", "advantages"]))]
    elif how == "wrong_type":
        doc = doc | {draw(st.sampled_from(["rewards", "loss", "trajectory_ids"])): draw(st.sampled_from(["x", 1.5]))}
        if doc["loss"] == 1.5:
            doc["loss"] = "1.5"
    elif how == "short_array":
        doc = doc | {"advantages": doc["advantages"] + [0.0]}
    elif how == "empty":
        return b""
    elif how == "not_object":
        return json.dumps([doc]).encode()
    elif how == "duplicate_key":
        return (text[:-1] + ', "epoch": -1}').encode()
    elif how == "wrong_epoch":
        doc = doc | {"epoch": doc["epoch"] + 1000}
    return json.dumps(doc).encode()


@st.composite
def run_trees(draw) -> list[tuple[int, str, bytes | dict, bool]]:
    """(epoch, layout, content, valid) for each epoch file of one run, epochs unique."""
    epochs = draw(st.lists(st.integers(0, 30), min_size=1, max_size=6, unique=True))
    files = []
    for epoch in epochs:
        doc = draw(documents(epoch))
        layout = draw(st.sampled_from(["file", "folder"]))
        how = draw(st.sampled_from((None, None, None) + MUTATIONS))
        files.append((epoch, layout, doc if how is None else mutate(draw, doc, how), how is None))
    return files


STRAYS = ["notes.txt", "epoch_003_results.json.bak", "epoch_x", ".hidden", "epoch_abc_results.json"]


def write_tree(run_dir: Path, files, strays) -> None:
    for epoch, layout, content, _ in files:
        write_epoch_file(run_dir, epoch, content, layout=layout)
    for name in strays:
        (run_dir / name).write_text("?")


def check_lake(lake: Path, files) -> None:
    """Every file is either loaded (with its extras' values intact) or has exactly one error row; valid ones load."""
    errors = pl.read_parquet(partition_file(lake, "errors", "run"))
    epochs_path = partition_file(lake, "epochs", "run")
    epochs = pl.read_parquet(epochs_path) if epochs_path.exists() else pl.DataFrame({"source_path": [], "epoch": []})
    loaded = dict(zip(epochs["source_path"].to_list(), epochs["epoch"].to_list(), strict=True))
    kinds = json.loads(manifest_file(lake, "run").read_text())["json_columns"]["epochs"]
    for epoch, layout, content, valid in files:
        path = f"run/epoch_{epoch:03d}_results.json" if layout == "file" else f"run/epoch_{epoch:03d}/results.json"
        refused = errors.filter((pl.col("source_path") == path) & (pl.col("severity") == "error")).height
        assert (path in loaded) != (refused == 1) and refused <= 1, path
        if valid:
            assert loaded.get(path) == epoch, path
            row = epochs.filter(pl.col("source_path") == path)
            for key, value in content.items():
                if key in DOCUMENTED_KEYS or key == "per_traj" or isinstance(value, (dict, list)):
                    continue
                column = extra_column_name(key, EPOCH_COLUMNS)
                (stored,) = python_values(row[column], kinds.get(column))
                # An integer widens to a float beside floats, only when it fits in 64 bits.
                widened = type(value) is int and -(2**63) <= value < 2**63 and kinds.get(column) is None
                assert (
                    stored == value
                    or (isinstance(value, float) and math.isnan(value) and math.isnan(stored))
                    or (widened and stored == float(value))
                ), (key, value)


def ingest(release: Path, lake: Path):
    runs, _, _ = find_run_folders([release])
    return ingest_run(list_run(runs["run"]), lake, LIMIT)


@SETTINGS
@given(first=run_trees(), second=run_trees(), strays=st.lists(st.sampled_from(STRAYS), unique=True))
# Found by hypothesis: an integer just beyond 64 bits beside a float came back as a float.
@example(
    first=[
        (0, "file", epoch_document(0, n=1, lr=0.5), True),
        (1, "file", epoch_document(1, n=1, lr=-(2**63) - 1), True),
    ],
    second=[],
    strays=[],
)
def test_random_trees_and_mutations_never_crash_nor_lose_a_valid_file(first, second, strays):
    with tempfile.TemporaryDirectory() as tmp:
        release, lake = Path(tmp) / "rel", Path(tmp) / "lake"
        write_tree(release / "run", first, strays)
        ingest(release, lake)
        check_lake(lake, first)
        # A second, incremental ingest: new epochs arrive (never overwriting the first ones).
        taken = {epoch for epoch, *_ in first}
        # Mutated files keep the old epoch inside, so under the new name they are refused in any case.
        more = [
            (e + 100, layout, content | {"epoch": e + 100} if valid else content, valid)
            for e, layout, content, valid in second
            if e + 100 not in taken
        ]
        write_tree(release / "run", more, [])
        ingest(release, lake)
        check_lake(lake, first + more)


@pytest.mark.slow
@settings(
    max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(files=run_trees())
def test_random_release_full_build_exits_0_and_reports_each_refused_file(files, build, query):
    with tempfile.TemporaryDirectory() as tmp:
        release, wh = Path(tmp) / "rel", Path(tmp) / "wh"
        write_tree(release / "run", files, ["notes.txt"])
        assert build([release], wh) == 0
        loaded = {p for (p,) in query(wh, "select source_path from fact_epochs")}
        refused = query(wh, "select source_path, count(*) from ingest_errors where severity = 'error' group by 1")
        assert all(n == 1 for _, n in refused)
        for epoch, layout, _, valid in files:
            path = f"run/epoch_{epoch:03d}_results.json" if layout == "file" else f"run/epoch_{epoch:03d}/results.json"
            assert (path in loaded) != (path in dict(refused))
            assert path in loaded or not valid
        shutil.rmtree(wh)
