"""A tiny hand-checkable warehouse for the SQL model tests: staging tables written directly, marts by the real code."""

import math

import duckdb
import polars as pl
from helpers import empty_table_sql

from pipelines.models import load_models, run_model, set_parameters

NAN = math.nan
# Parameters small enough to work the numbers out by hand.
PARAMS = {
    "ema_weight": 0.5,
    "rolling_window": 2,
    "final_window": 2,
    "ci_level": 0.95,
    "ci_method": "ar1",
    "ci_fit_epochs": 200,
    "breakdown_window": 2,
    "snapshot_model_prefix": "model-",
    "advantage_tolerance": 1e-3,
    "pairwise_arms": 20,
}


def epoch(run_id, epoch, rewards, advantages, *, reported=None, kl=0.0, targets=None, fp=None, n=None):
    """One epoch of a run: its trajectory arrays and the file's scalars (reported mean defaults to the finite mean)."""
    finite = [r for r in rewards if math.isfinite(r)]
    if reported is None:
        reported = sum(finite) / len(finite) if finite else NAN
    return {
        "run_id": run_id,
        "epoch": epoch,
        "rewards": rewards,
        "advantages": advantages,
        "reported": reported,
        "kl": kl,
        "targets": targets,
        "fp": fp,
        "n": len(rewards) if n is None else n,
    }


# Two runs of one ablation, group size 2, two groups per epoch, and a third run alone in its ablation.
# run_a: epochs 0, 1, 3 (epoch 2 missing); a zero-variance group in epochs 0 and 3; a NaN reward in epoch 1.
# run_b: epochs 0, 1, 2; its advantages use another convention (scale 0.7071, i.e. sample std): still consistent.
# Advantages of run_a: (r − group mean) / population std, 0 for flat groups and NaN rewards.
EPOCHS = [
    epoch(
        "run_a",
        0,
        [1.0, 0.0, 0.5, 0.5],
        [1.0, -1.0, 0.0, 0.0],
        targets=["x", "y", "x", "y"],
        fp=[True, False, False, False],
    ),
    epoch(
        "run_a",
        1,
        [1.0, NAN, 1.0, 0.0],
        [0.0, 0.0, 1.0, -1.0],
        targets=["x", "y", "x", "y"],
        fp=[True, False, False, False],
    ),
    epoch(
        "run_a",
        3,
        [1.0, 1.0, 1.0, 0.0],
        [0.0, 0.0, 1.0, -1.0],
        targets=["x", "y", "x", "y"],
        fp=[True, False, False, False],
    ),
    epoch("run_b", 0, [0.0, 0.0, 0.0, 1.0], [0.0, 0.0, -0.7071, 0.7071]),
    epoch("run_b", 1, [1.0, 0.0, 1.0, 1.0], [0.7071, -0.7071, 0.0, 0.0]),
    epoch("run_b", 2, [1.0, 0.0, 0.0, 1.0], [0.7071, -0.7071, -0.7071, 0.7071]),
    epoch("run_c", 0, [0.0, 1.0], [-1.0, 1.0]),
]
RUNS = [("run_a", "abl", 2), ("run_b", "abl", 2), ("run_c", "solo", 2)]
MARTS = [model for model in load_models().values() if model.layer == "marts"]  # in dependency order


def create_staging(
    con: duckdb.DuckDBPyConnection,
    epochs: list[dict],
    runs: list[tuple],
    *,
    extras: bool = True,
    extras_as_json_text: bool = False,
) -> None:
    """Writes fact_epochs, fact_trajectories and dim_runs as the staging models would; a run is (run_id, ablation,
    group_size), (run_id, ablation, group_size, arm) or (..., arm, baseline), its arm the run itself by default and
    not its ablation's baseline."""
    group_size = {run[0]: run[2] for run in runs}
    epoch_rows, trajectory_rows = [], []
    for doc in epochs:
        epoch_rows.append(
            {
                "run_id": doc["run_id"],
                "epoch": doc["epoch"],
                "loss": 0.1,
                "mean_reward": doc["reported"],
                "kl_sample_train": doc["kl"],
                "sample_entropy": 1.5,
                "train_entropy": 1.25,
                "snapshot_id": f"snap_{doc['run_id']}_{doc['epoch']}",
                "n_trajectories": doc["n"],
                "source_path": f"{doc['run_id']}/epoch_{doc['epoch']:03d}_results.json",
            }
        )
        for index, (reward, advantage) in enumerate(zip(doc["rewards"], doc["advantages"], strict=True)):
            row = {
                "run_id": doc["run_id"],
                "epoch": doc["epoch"],
                "traj_index": index,
                "group_index": index // group_size[doc["run_id"]],
                "trajectory_id": f"t{doc['epoch']}_{index}",
                "reward": reward,
                "advantage": advantage,
                "source_path": f"{doc['run_id']}/epoch_{doc['epoch']:03d}_results.json",
            }
            if extras:
                target = doc["targets"][index] if doc["targets"] else None
                fp = doc["fp"][index] if doc["fp"] else None
                if extras_as_json_text:  # how flatten stores an extra whose value types drift
                    target = None if target is None else f'"{target}"'
                    fp = None if fp is None else ("true" if fp else "false")
                row["target_model"] = target
                row["is_fp_control"] = fp
            trajectory_rows.append(row)
    trajectory_schema = {
        "run_id": pl.String,
        "epoch": pl.Int64,
        "traj_index": pl.Int64,
        "group_index": pl.Int64,
        "trajectory_id": pl.String,
        "reward": pl.Float64,
        "advantage": pl.Float64,
        "source_path": pl.String,
    }
    if extras:
        trajectory_schema |= {
            "target_model": pl.String,
            "is_fp_control": pl.String if extras_as_json_text else pl.Boolean,
        }
    frames = {
        "fact_epochs": pl.DataFrame(epoch_rows),
        "fact_trajectories": pl.DataFrame(trajectory_rows, schema=trajectory_schema),
        "dim_runs": pl.DataFrame(
            [
                {
                    "run_id": r,
                    "release": "rel",
                    "reward_family": "binary",
                    "fp_per_group": None,
                    "group_size": size,
                    "ablation": ablation,
                    "label": r,
                    "arm": arm,
                    "baseline": baseline,
                }
                for r, ablation, size, arm, baseline in map(_run_fields, runs)
            ],
            schema={
                "run_id": pl.String,
                "release": pl.String,
                "reward_family": pl.String,
                "fp_per_group": pl.Int64,
                "group_size": pl.Int64,
                "ablation": pl.String,
                "label": pl.String,
                "arm": pl.String,
                "baseline": pl.Boolean,
            },
        ),
    }
    for table, frame in frames.items():
        con.register("frame", frame)
        con.execute(f"create or replace table {table} as select * from frame")
        con.unregister("frame")
    con.execute(empty_table_sql("trajectory_transcripts"))  # the fixture's runs have no transcripts


def _run_fields(run: tuple) -> tuple:
    """(run_id, ablation, group_size, arm, baseline) of a run as create_staging takes it."""
    run_id, ablation, size, *rest = run
    arm = rest[0] if rest else run_id
    baseline = rest[1] if len(rest) > 1 else False
    return run_id, ablation, size, arm, baseline


def build_marts(con: duckdb.DuckDBPyConnection, params: dict | None = None) -> None:
    """Runs every mart model, in the loader's dependency order, against the staging tables in con."""
    set_parameters(con, {**PARAMS, **(params or {})})
    for model in MARTS:
        run_model(con, model)


def rows(con: duckdb.DuckDBPyConnection, sql: str, *params) -> list[dict]:
    cursor = con.execute(sql, list(params))
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
