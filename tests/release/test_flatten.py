"""Flattening of tiny hand-written epoch documents, checked cell by cell."""

import math
from pathlib import Path

import polars as pl
from helpers import epoch_document

from pipelines.release.decode import decode_epoch
from pipelines.release.discover import RunFolder, list_run
from pipelines.release.flatten import combine, drift_notes, extra_column_name, flatten, typed_series


def load_run(run_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    run = RunFolder(run_dir.name, run_dir.parent.name, run_dir.parent, run_dir)
    files = list_run(run).epoch_files
    return flatten(run.run_id, [(f, decode_epoch(f.path.read_bytes())) for f in files])


def test_both_layouts_flatten_cell_by_cell(tmp_path, write_epoch):
    run_dir = tmp_path / "rel" / "run_a_2fp"
    write_epoch(run_dir, 0, epoch_document(0, n=2), layout="file")
    write_epoch(run_dir, 1, epoch_document(1, n=3), layout="folder")
    epochs, trajectories, kinds = load_run(run_dir)

    assert kinds == {"epochs": {}, "trajectories": {}}
    rows = (
        epochs.sort("epoch")
        .select(
            "run_id",
            "epoch",
            "loss",
            "mean_reward",
            "kl_sample_train",
            "sample_entropy",
            "train_entropy",
            "snapshot_id",
            "n_trajectories",
            "source_path",
            "source_layout",
        )
        .rows()
    )
    assert rows == [
        ("run_a_2fp", 0, 0.5, 0.125, 0.0, 1.5, 1.25, "ft_snap_000", 2, "run_a_2fp/epoch_000_results.json", "file"),
        ("run_a_2fp", 1, 1.5, 0.25, 0.0, 1.5, 1.25, "ft_snap_001", 3, "run_a_2fp/epoch_001/results.json", "folder"),
    ]
    traj = (
        trajectories.sort("epoch", "traj_index")
        .select("epoch", "traj_index", "trajectory_id", "reward", "advantage", "source_path")
        .rows()
    )
    assert traj == [
        (0, 0, "ft_traj_000_0", 0.0, -0.0, "run_a_2fp/epoch_000_results.json"),
        (0, 1, "ft_traj_000_1", 0.25, -0.25, "run_a_2fp/epoch_000_results.json"),
        (1, 0, "ft_traj_001_0", 0.0, -0.0, "run_a_2fp/epoch_001/results.json"),
        (1, 1, "ft_traj_001_1", 0.25, -0.25, "run_a_2fp/epoch_001/results.json"),
        (1, 2, "ft_traj_001_2", 0.5, -0.5, "run_a_2fp/epoch_001/results.json"),
    ]


def test_scalar_array_and_nested_extras(tmp_path, write_epoch):
    run_dir = tmp_path / "rel" / "run"
    doc = epoch_document(
        0,
        n=2,
        baseline_epoch=50,
        temperature=0.7,
        judge="gpt",
        truncated=False,
        note=None,
        target_model=["m1", "m2"],
        is_fp_control=[True, False],
        judge_score=[7, 3.5],
        config={"lr": 1e-5, "layers": [1, 2]},
        short_list=[1, 2, 3],
    )
    write_epoch(run_dir, 0, doc)
    epochs, trajectories, kinds = load_run(run_dir)

    assert kinds == {"epochs": {"config": ["nested"], "short_list": ["nested"]}, "trajectories": {}}
    assert epochs.schema["baseline_epoch"] == pl.Int64
    assert epochs.schema["temperature"] == pl.Float64
    assert epochs.schema["truncated"] == pl.Boolean
    row = epochs.row(0, named=True)
    assert (row["baseline_epoch"], row["temperature"], row["judge"], row["truncated"], row["note"]) == (
        50,
        0.7,
        "gpt",
        False,
        None,
    )
    # Anything that is neither a scalar nor a per-trajectory array is kept as JSON text.
    assert row["config"] == '{"layers": [1, 2], "lr": 1e-05}'
    assert row["short_list"] == "[1, 2, 3]"
    assert "target_model" not in epochs.columns

    assert trajectories.schema["is_fp_control"] == pl.Boolean
    assert trajectories.schema["judge_score"] == pl.Float64  # 7 beside 3.5 widens to a float
    assert trajectories.select("target_model", "is_fp_control", "judge_score").rows() == [
        ("m1", True, 7.0),
        ("m2", False, 3.5),
    ]


def test_key_first_seen_in_a_late_epoch_gets_its_column(tmp_path, write_epoch):
    run_dir = tmp_path / "rel" / "run"
    for epoch in range(4):
        extras = {"grad_norm": 0.5 * epoch, "late_array": ["x", "y"]} if epoch == 3 else {}
        write_epoch(run_dir, epoch, epoch_document(epoch, n=2, **extras))
    epochs, trajectories, _ = load_run(run_dir)
    assert epochs.sort("epoch")["grad_norm"].to_list() == [None, None, None, 1.5]
    assert trajectories.sort("epoch", "traj_index")["late_array"].to_list() == [None] * 6 + ["x", "y"]


def test_nan_and_infinity_tokens_load_as_nan_and_infinity(tmp_path, write_epoch):
    run_dir = tmp_path / "rel" / "run"
    text = (
        '{"epoch": 0, "loss": NaN, "mean_reward": Infinity, "kl_sample_train": -Infinity,'
        ' "sample_entropy": 1.0, "train_entropy": 1.0, "snapshot_id": "s",'
        ' "trajectory_ids": ["a", "b"], "rewards": [NaN, 1.0], "advantages": [0.0, Infinity],'
        ' "judge_score": [NaN, 2.0]}'
    )
    write_epoch(run_dir, 0, text)
    epochs, trajectories, _ = load_run(run_dir)
    row = epochs.row(0, named=True)
    assert math.isnan(row["loss"])
    assert row["mean_reward"] == math.inf and row["kl_sample_train"] == -math.inf
    rewards = trajectories["reward"].to_list()
    assert math.isnan(rewards[0]) and rewards[1] == 1.0
    assert trajectories["advantage"].to_list()[1] == math.inf
    assert math.isnan(trajectories["judge_score"][0])
    # NaN is a value, not a missing one.
    assert trajectories["reward"].null_count() == 0


def test_extra_whose_type_drifts_keeps_every_value_as_json_text(tmp_path, write_epoch):
    run_dir = tmp_path / "rel" / "run"
    write_epoch(run_dir, 0, epoch_document(0, phase=1))
    write_epoch(run_dir, 1, epoch_document(1, phase="warmup"))
    write_epoch(run_dir, 2, epoch_document(2, phase={"k": 2}))
    epochs, _, kinds = load_run(run_dir)
    assert epochs.sort("epoch")["phase"].to_list() == ["1", '"warmup"', '{"k": 2}']
    assert kinds["epochs"] == {"phase": ["int", "nested", "str"]}
    (note,) = drift_notes(kinds["epochs"])
    assert "`phase`" in note and "int, nested, str" in note


def test_combine_retypes_a_column_stored_one_way_and_flattened_another():
    old = pl.DataFrame(
        {"epoch": [0, 1], "phase": [1, 2], "lr": [0.1, 0.2], "flag": [None, None]}, schema_overrides={"flag": pl.String}
    )
    new = pl.DataFrame({"epoch": [2, 3], "phase": ["warm", None], "lr": [1, 2], "flag": [True, False]})
    frame, kinds = combine([(old, {}), (new, {})], {"epoch": pl.Int64})
    assert frame["phase"].to_list() == ["1", "2", '"warm"', None]
    assert kinds == {"phase": ["int", "str"]}
    assert frame["lr"].dtype == pl.Float64 and frame["lr"].to_list() == [0.1, 0.2, 1.0, 2.0]
    assert frame["flag"].dtype == pl.Boolean and frame["flag"].to_list() == [None, None, True, False]

    # Stored JSON text is read back as the values it encodes, not as strings.
    newer = pl.DataFrame({"epoch": [4], "phase": ["cool"]})
    again, kinds = combine([(frame, kinds), (newer, {})], {"epoch": pl.Int64})
    assert again["phase"].to_list() == ["1", "2", '"warm"', None, '"cool"']
    assert kinds == {"phase": ["int", "str"]}


def test_integers_beyond_64_bits_are_kept_exactly():
    series, types = typed_series("big", [2**70, 1, None])
    assert series.to_list() == [str(2**70), "1", None] and types == ["int"]


def test_extra_keys_colliding_with_warehouse_columns_are_prefixed_one_to_one():
    from pipelines.release.flatten import EPOCH_COLUMNS

    names = [extra_column_name(k, EPOCH_COLUMNS) for k in ("Loss", "extra_loss", "extra_extra_loss", "lr", "extra_lr")]
    assert names == ["extra_Loss", "extra_extra_loss", "extra_extra_extra_loss", "lr", "extra_lr"]
    keys = ("", "extra_", "extra_extra_")  # the empty key, which no SQL client can name, and its prefixed spellings
    assert [extra_column_name(k, EPOCH_COLUMNS) for k in keys] == ["extra_", "extra_extra_", "extra_extra_extra_"]
