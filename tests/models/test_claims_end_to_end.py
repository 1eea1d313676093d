"""End to end through the SQL models: a simulated release of ablations of two runs with no true difference, whose
curves drift more slowly than one AR(1) (a random walk on top of it), built with each interval method. The default
makes at most about 10% false claims; `ar1` and `iid`, on the same data, make clearly more."""

import math

import duckdb
import numpy as np
import pytest
from mart_fixture import build_marts, create_staging, epoch, rows

from pipelines.defs.resources import WarehouseConfig
from pipelines.stats import simulate

pytestmark = pytest.mark.slow  # three builds of the marts over 80 runs of 200 epochs (about 10 s CPU)

DEFAULT = WarehouseConfig.model_fields["ci_method"].default
PAIRS = 40
# Beyond one AR(1): drift at φ 0.9 (sd 0.04) around a learning curve, sampling noise of sd 0.03 from 16 groups an
# epoch, and a random walk of step sd 0.005 from the run's start; 200 epochs, window 50.
STRUCTURE = simulate.Structure(walk_sd=0.005)
WINDOW = 50
SPREAD = 0.05  # each group's two rewards lie this far either side of its mean


def null_documents(seed: int) -> tuple[list[dict], list[tuple]]:
    """Epoch documents of 2 × PAIRS runs, paired into ablations, each epoch's groups of two trajectories whose means
    scatter around the run's level as the simulation's group means do."""
    rng = np.random.default_rng(seed)
    s = STRUCTURE
    level = simulate.levels(rng, s, 2 * PAIRS)
    group_means = level[..., None] + rng.standard_normal((*level.shape, s.groups)) * s.noise_sd * math.sqrt(s.groups)
    documents, runs = [], []
    for index, run_means in enumerate(group_means):
        run_id = f"run_{index:03d}"
        runs.append((run_id, f"null_{index // 2:02d}", 2))
        for number, means in enumerate(run_means):
            rewards = [reward for mean in means for reward in (mean - SPREAD, mean + SPREAD)]
            documents.append(epoch(run_id, number, rewards, [-1.0, 1.0] * s.groups))
    return documents, runs


@pytest.fixture(scope="module")
def release() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    create_staging(con, *null_documents(seed=30), extras=False)
    return con


def claims(con: duckdb.DuckDBPyConnection, method: str) -> list[dict]:
    build_marts(con, {"final_window": WINDOW, "ci_method": method})
    return rows(con, "select * from ablation_contrasts order by ablation")


def false_claims(found: list[dict]) -> float:
    """The share of the null pairs the report would call resolved."""
    return sum(bool(row["resolved_holm"]) for row in found) / len(found)


def test_the_default_holds_its_level_where_ar1_and_iid_do_not(release):
    default = claims(release, DEFAULT)
    assert len(default) == PAIRS and all(row["ci_method"] == DEFAULT for row in default)
    # every pair has an interval: 200 epochs is no short run
    assert [row["resolved_reason"] for row in default] == [None] * PAIRS
    # the flags are those of the intervals: resolved exactly when the interval excludes zero, p below 0.05 then
    for row in default:
        assert row["resolved"] == (row["ci_low"] > 0 or row["ci_high"] < 0) == (row["p_value"] < 0.05)
    rate = false_claims(default)
    assert rate <= 0.10
    # the same data with a method that fits one AR(1) by moments, and one that takes epochs as independent
    assert false_claims(claims(release, "ar1")) >= max(0.25, rate + 0.2)
    assert false_claims(claims(release, "iid")) >= 0.5
