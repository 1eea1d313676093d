"""The ingest's fast path (RunColumns.add_parsed: a run's documents of one shape, checked per column) against the
document-by-document path (decode_epoch, then flatten): the same lake rows, the same refusals, on runs whose
documents share a shape except for random departures from it."""

import json
import tempfile
from pathlib import Path

import polars as pl
import pytest
from helpers import epoch_document, write_epoch_file
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipelines.lake.ingest import ingest_run
from pipelines.lake.paths import manifest_file, partition_file
from pipelines.release.decode import DecodeError, decode_epoch
from pipelines.release.discover import list_run
from pipelines.release.flatten import EPOCH_COLUMNS, TRAJECTORY_COLUMNS, RunColumns, flatten
from pipelines.release.releases import find_run_folders

LIMIT = 1 << 20

# Departures from the run's shape, each touching one document; None leaves it as the others are.
DEPARTURES = (
    "reward_str",
    "reward_bool",
    "reward_int",
    "reward_huge_int",
    "reward_none",
    "id_int",
    "per_traj_nested",
    "per_traj_short",
    "loss_int",
    "loss_none",
    "loss_str",
    "key_order",
    "drop_extra",
    "new_extra",
    "wrong_epoch",
    "short_list_is_n",
    "epoch_float",
    "snapshot_none",
    "no_trajectories",
    "all_int_rewards",
    "nan_reward",
    "deep_nested",
    "empty_lists",
    "dup_key_equal",
    "dup_key_differs",
    "colon_in_string",
    "big_int_reward",
    "big_int_per_traj",
    "count_beyond_int64",
    "lone_surrogate",
    "escaped_string",
    "nested_is_scalar",
    "flag_int",
    "big_float_reward",
    "count_float",
    "pretty_printed",
    "crlf_and_bom",
    "per_traj_objects",
    "details_objects",
    "details_other_shape",
)


@st.composite
def runs(draw) -> list[tuple[int, dict | str]]:
    """A run's documents: one shape (the same extras, in one order, of one type each) with random departures."""
    n_docs = draw(st.integers(1, 6))
    departures = draw(st.lists(st.sampled_from((None,) * 8 + DEPARTURES), min_size=n_docs, max_size=n_docs))
    late_key_from = draw(st.one_of(st.none(), st.integers(0, n_docs - 1)))  # a key logged from this epoch on
    documents = []
    for epoch, how in enumerate(departures):
        n = draw(st.integers(1, 3))
        late = {"grad_norm": 0.5} if late_key_from is not None and epoch >= late_key_from else {}
        doc = epoch_document(
            epoch,
            n=n,
            lr=1e-5,
            phase="rl",
            count=3,
            config={"b": [1, 2], "a": 0.5},
            short_list=[1, 2, 3, 4],
            per_traj=[i * 0.5 for i in range(n)],
            flags=[i % 2 == 0 for i in range(n)],
            **late,
        )
        i = draw(st.integers(0, n - 1))
        text = None
        if how == "reward_str":
            doc["rewards"][i] = "0.5"
        elif how == "reward_bool":
            doc["rewards"][i] = True
        elif how == "reward_int":
            doc["rewards"][i] = 2
        elif how == "reward_huge_int":
            doc["rewards"][i] = 10**400  # too large for a float: refused
        elif how == "reward_none":
            doc["rewards"][i] = None
        elif how == "id_int":
            doc["trajectory_ids"][i] = 7
        elif how == "per_traj_nested":
            doc["per_traj"][i] = {"x": 1}  # then the whole list is kept as JSON text
        elif how == "per_traj_objects":  # every element an object: the column is JSON text beside the numbers
            doc["per_traj"] = [{"x": i, "tags": ["a"] * i} for i in range(n)]
        elif how == "details_objects":  # a per-trajectory extra of objects: typed when it has one shape in the run
            doc["details"] = [{"judge": "j1", "scores": [i, 2 * i]} for i in range(n)]
        elif how == "details_other_shape":
            doc["details"] = [{"judge": i, "scores": None} for i in range(n)]
        elif how == "per_traj_short":
            doc["per_traj"] = doc["per_traj"][:-1]
        elif how == "loss_int":
            doc["loss"] = 3
        elif how == "loss_none":
            doc["loss"] = None
        elif how == "loss_str":
            doc["loss"] = "3"
        elif how == "key_order":
            doc = dict(reversed(list(doc.items())))
        elif how == "drop_extra":
            del doc["phase"]
        elif how == "new_extra":
            doc["late"] = 1
        elif how == "wrong_epoch":
            doc["epoch"] = epoch + 50
        elif how == "short_list_is_n":
            doc["short_list"] = list(range(n))
        elif how == "epoch_float":
            doc["epoch"] = float(epoch)
        elif how == "snapshot_none":
            doc["snapshot_id"] = None
        elif how == "no_trajectories":
            doc = epoch_document(epoch, n=0)
        elif how == "all_int_rewards":
            doc["rewards"] = [1] * n
        elif how == "deep_nested":  # orjson parses it; Python cannot encode it back to text
            text = json.dumps(doc | {"config": "DEEP"}).replace('"DEEP"', "[" * 1000 + "]" * 1000)
        elif how == "nan_reward":
            text = json.dumps(doc).replace('"rewards": [0.0', '"rewards": [NaN', 1)
        elif how == "empty_lists":  # the same keys, no trajectory: the lists are then extras of the epoch
            for key in ("trajectory_ids", "rewards", "advantages", "per_traj", "flags"):
                doc[key] = []
        elif how in ("dup_key_equal", "dup_key_differs"):  # equal: loaded with a warning; different: refused
            again = json.dumps(doc["loss"] if how == "dup_key_equal" else doc["loss"] + 1)
            text = json.dumps(doc).replace('"phase": ', f'"loss": {again}, "phase": ', 1)
        elif how == "colon_in_string":
            doc["phase"] = "rl:warmup"
        elif how == "big_int_reward":
            doc["rewards"][i] = 2**64 + 1  # orjson reads it as a float
        elif how == "big_int_per_traj":
            doc["per_traj"][i] = 2**63  # beyond int64, within uint64
        elif how == "count_beyond_int64":
            doc["count"] = 2**63
        elif how == "lone_surrogate":
            text = json.dumps(doc).replace('"rl"', '"\\ud800"', 1)
        elif how == "escaped_string":
            doc["phase"] = "r\u00e9\u4e2d"  # written as \u escapes by json.dumps
        elif how == "nested_is_scalar":
            doc["config"] = 5
        elif how == "flag_int":
            doc["flags"][i] = 1
        elif how == "big_float_reward":
            text = json.dumps(doc).replace('"rewards": [0.0', '"rewards": [1e400', 1)
        elif how == "count_float":
            doc["count"] = 3.0
        elif how == "pretty_printed":  # as json.dump(indent=2) writes it: the same document
            text = json.dumps(doc, indent=2)
        elif how == "crlf_and_bom":  # Windows line ends are whitespace; a byte-order mark is not JSON
            text = ("\ufeff" if i % 2 else "") + json.dumps(doc, indent=1).replace("\n", "\r\n")
        documents.append((epoch, text if text is not None else doc))
    return documents


def reference(run_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame, set[str]]:
    """decode_epoch and flatten, document by document: the frames and the refused files."""
    listing = list_run(find_run_folders([run_dir.parent])[0][run_dir.name])
    loaded, refused = [], set()
    for file in listing.epoch_files:
        try:
            doc = decode_epoch(Path(file.file_path).read_bytes())
            if doc.epoch != file.epoch_in_name:
                raise DecodeError("epoch_mismatch", "")
        except DecodeError:
            refused.add(file.source_path)
            continue
        loaded.append((file, doc))
    epochs, trajectories, _ = flatten(run_dir.name, loaded)
    return epochs, trajectories, refused


def lake_table(lake: Path, table: str) -> pl.DataFrame:
    path = partition_file(lake, table, "run")
    return pl.read_parquet(path) if path.exists() else pl.DataFrame()


def same_rows(stored: pl.DataFrame, expected: pl.DataFrame, keys: list[str], schema: dict) -> None:
    """The lake's rows are flatten's, with the table's own columns first and the extra keys' in name order."""
    if expected.height == 0:
        assert stored.height == 0
        return
    extras = sorted(set(expected.columns) - set(schema))
    assert stored.columns == [name for name in schema if name in expected.columns] + extras
    expected = expected.select(stored.columns)
    assert stored.schema == expected.schema
    assert stored.sort(keys).equals(expected.sort(keys), null_equal=True)


def _extras(n: int) -> dict:
    return {
        "lr": 1e-05,
        "phase": "rl",
        "count": 3,
        "config": {"b": [1, 2], "a": 0.5},
        "short_list": [1, 2, 3, 4],
        "per_traj": [0.0] * n,
        "flags": [True] * n,
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=runs())
# Found by hypothesis: the first document sets the shape but is refused (wrong epoch), the second is taken one by
# one with its keys reversed; its columns must come in its own order, not the shape's.
@example(
    documents=[
        (0, epoch_document(0, n=1, **_extras(1)) | {"epoch": 50}),
        (1, dict(reversed(list(epoch_document(1, n=1, **_extras(1)).items())))),
    ]
)
def test_the_fast_path_loads_and_refuses_what_decoding_one_by_one_does(documents):
    with tempfile.TemporaryDirectory() as tmp:
        run_dir, lake = Path(tmp) / "rel" / "run", Path(tmp) / "lake"
        for epoch, doc in documents:
            write_epoch_file(run_dir, epoch, doc)
        ingest_run(list_run(find_run_folders([run_dir.parent])[0]["run"]), lake, LIMIT)
        epochs, trajectories, refused = reference(run_dir)

        errors = lake_table(lake, "errors").filter(pl.col("severity") == "error")
        assert set(errors["source_path"]) == refused
        same_rows(lake_table(lake, "epochs"), epochs, ["epoch"], EPOCH_COLUMNS)
        same_rows(lake_table(lake, "trajectories"), trajectories, ["epoch", "traj_index"], TRAJECTORY_COLUMNS)


@pytest.mark.parametrize("deep_epoch", [0, 1])
def test_an_extra_nested_too_deeply_to_store_is_quarantined_not_a_crash(tmp_path, deep_epoch):
    """orjson parses 1,000 levels of nesting, Python's encoder cannot store them as text (first document or not)."""
    run_dir, lake = tmp_path / "rel" / "run", tmp_path / "lake"
    for epoch in range(3):
        text = json.dumps(epoch_document(epoch, n=2, config="DEEP" if epoch == deep_epoch else [1]))
        write_epoch_file(run_dir, epoch, text.replace('"DEEP"', "[" * 1000 + "]" * 1000))
    ingest_run(list_run(find_run_folders([run_dir.parent])[0]["run"]), lake, LIMIT)
    assert lake_table(lake, "epochs")["epoch"].to_list() == [e for e in range(3) if e != deep_epoch]
    (error,) = lake_table(lake, "errors").rows(named=True)
    assert (error["epoch"], error["error_kind"]) == (deep_epoch, "invalid_json")
    assert "`config` is nested too deeply" in error["message"]


def test_documents_of_one_shape_take_the_fast_path_and_a_bad_value_is_declined(tmp_path):
    """Which path each document took, on a hand-made run: the fast paths must not be dead branches."""
    from pipelines.release.decode import parse_document
    from pipelines.release.discover import EpochFile

    def file(epoch: int) -> EpochFile:
        return EpochFile(
            "run",
            f"/r/run/epoch_{epoch:03d}_results.json",
            f"run/epoch_{epoch:03d}_results.json",
            epoch,
            "file",
            10,
            10**18,
        )

    def text(doc: dict) -> bytes:
        return json.dumps(doc).encode()

    columns = RunColumns("run")
    docs = [epoch_document(e, n=2, lr=0.1, config={"k": 1}) for e in range(4)]
    assert not columns.add_bytes(file(0), text(docs[0]))  # no shape yet
    assert columns.add_parsed(file(0), parse_document(text(docs[0]))[0])  # sets it
    assert columns.add_parsed(file(1), parse_document(text(docs[1]))[0])  # parsed, checked value by value
    assert columns.add_bytes(file(2), text(docs[2]))  # decoded typed from the bytes
    reordered = dict(reversed(list(docs[3].items())))
    assert columns.add_bytes(file(3), text(reordered))  # the typed decoder ignores key order
    # No shape (a documented key missing), a wrong epoch, a string among the rewards, a key twice: declined.
    other = epoch_document(4, n=2, lr=0.1, config={"k": 1})
    del other["loss"]
    assert not columns.add_parsed(file(4), other) and not columns.add_bytes(file(4), text(other))
    wrong_epoch = epoch_document(4, n=2, lr=0.1, config={"k": 1})
    assert not columns.add_parsed(file(5), wrong_epoch) and not columns.add_bytes(file(5), text(wrong_epoch))
    bad = epoch_document(6, n=2, lr=0.1, config={"k": 1})
    bad["rewards"][1] = "x"
    assert not columns.add_parsed(file(6), bad) and not columns.add_bytes(file(6), text(bad))
    twice = text(epoch_document(7, n=2, lr=0.1, config={"k": 1})).replace(b'"lr"', b'"loss": 9.0, "lr"')
    assert not columns.add_bytes(file(7), twice)

    epochs, trajectories, kinds = columns.frames()
    assert epochs["epoch"].to_list() == [0, 1, 2, 3] and epochs["lr"].to_list() == [0.1] * 4
    assert epochs["loss"].to_list() == [0.5, 1.5, 2.5, 3.5]
    assert epochs["config"].to_list() == ['{"k": 1}'] * 4 and kinds["epochs"] == {"config": ["nested"]}
    assert trajectories["reward"].to_list() == [0.0, 0.25] * 4
    assert trajectories["traj_index"].to_list() == [0, 1] * 4


def test_a_key_that_appears_mid_run_gives_the_run_a_new_shape(tmp_path):
    """Like the sample's grad_norm, logged from epoch 400 of one run: the documents after it stay on the fast path."""
    from pipelines.release.decode import decode_epoch, parse_document
    from pipelines.release.discover import EpochFile

    def file(epoch: int) -> EpochFile:
        return EpochFile(
            "run",
            f"/r/run/epoch_{epoch:03d}_results.json",
            f"run/epoch_{epoch:03d}_results.json",
            epoch,
            "file",
            10,
            10**18,
        )

    texts = [
        json.dumps(epoch_document(e, n=2, lr=0.1, **({"grad_norm": 0.5 * e} if e >= 3 else {}))).encode()
        for e in range(6)
    ]
    columns, paths = RunColumns("run"), []
    for epoch, text in enumerate(texts):
        if columns.add_bytes(file(epoch), text):
            paths.append("bytes")
        else:
            assert columns.add_parsed(file(epoch), parse_document(text)[0])
            paths.append("parsed")
    # Each shape's first document is parsed (it sets the shape), the others are decoded typed.
    assert paths == ["parsed", "bytes", "bytes", "parsed", "bytes", "bytes"]
    epochs, trajectories, _ = columns.frames()
    expected = flatten("run", [(file(e), decode_epoch(text)) for e, text in enumerate(texts)])
    assert epochs.equals(expected[0], null_equal=True) and trajectories.equals(expected[1], null_equal=True)
    assert epochs["grad_norm"].to_list() == [None, None, None, 1.5, 2.0, 2.5]


@pytest.mark.parametrize("big", [-(2**63) - 1, 2**63, 2**64])
def test_an_integer_beyond_64_bits_beside_floats_is_kept_as_json_text_on_both_paths(tmp_path, big):
    """Integers beside floats widen to a float only when they fit in 64 bits; one beyond, in a scalar extra or a
    per-trajectory one, keeps its column as JSON text with every value exact, and one inside a nested extra stays
    exact too, whichever path read its document. One such integer per document, each document's bytes meeting the
    typed decoder the first one set up; orjson alone would read the integer as a float."""
    run_dir, lake = tmp_path / "rel" / "run", tmp_path / "lake"
    lrs, per_traj = [0.5, big, 2.5, 3.5], [[0.5, 1.5], [1, 2.0], [0.25, big], [1.0, 0.0]]
    configs = [{"k": 0.5}, {"k": 1}, {"k": 1.5}, {"k": big}]
    for epoch in range(4):
        write_epoch_file(
            run_dir, epoch, epoch_document(epoch, n=2, lr=lrs[epoch], per_traj=per_traj[epoch], config=configs[epoch])
        )
    ingest_run(list_run(find_run_folders([run_dir.parent])[0]["run"]), lake, LIMIT)
    kinds = json.loads(manifest_file(lake, "run").read_text())["json_columns"]
    epochs, trajectories, _ = reference(run_dir)
    expected_lr = ["0.5", str(big), "2.5", "3.5"]
    expected_per_traj = ["0.5", "1.5", "1", "2.0", "0.25", str(big), "1.0", "0.0"]
    expected_config = ['{"k": 0.5}', '{"k": 1}', '{"k": 1.5}', f'{{"k": {big}}}']
    for frame in (lake_table(lake, "epochs"), epochs):
        assert frame.sort("epoch")["lr"].to_list() == expected_lr
        assert frame.sort("epoch")["config"].to_list() == expected_config
    for frame in (lake_table(lake, "trajectories"), trajectories):
        assert frame.sort("epoch", "traj_index")["per_traj"].to_list() == expected_per_traj
    assert kinds == {
        "epochs": {"config": ["nested"], "lr": ["float", "int"]},
        "trajectories": {"per_traj": ["float", "int"]},
    }


@pytest.mark.parametrize("edge", [-(2**63), 2**63 - 1])
def test_an_integer_at_the_edge_of_64_bits_beside_floats_widens_to_a_float(tmp_path, edge):
    run_dir, lake = tmp_path / "rel" / "run", tmp_path / "lake"
    for epoch, lr in enumerate([0.5, edge]):
        write_epoch_file(run_dir, epoch, epoch_document(epoch, n=2, lr=lr, per_traj=[0.5, lr]))
    ingest_run(list_run(find_run_folders([run_dir.parent])[0]["run"]), lake, LIMIT)
    assert lake_table(lake, "epochs").sort("epoch")["lr"].to_list() == [0.5, float(edge)]
    assert lake_table(lake, "trajectories").sort("epoch", "traj_index")["per_traj"].to_list() == [
        0.5,
        0.5,
        0.5,
        float(edge),
    ]
