"""The export tests' fixture: tiny hand-written result tables shaped like the marts (two ablations, of 3 and 1 runs)."""

import math

import polars as pl
import pytest

RUNS = pl.DataFrame(
    {
        "run_id": ["r_long", "r_mid", "r_short", "solo"],
        "release": ["rel", "rel", "rel", "rel2"],
        "release_root": ["/data/rel", "/data/rel", "/data/rel", "/data/rel2"],
        "reward_family": ["pairwise", "pairwise", "pairwise", "binary"],
        "fp_per_group": [2, 4, None, None],
        "group_size": [8, 8, 8, 4],
        "ablation": ["abl", "abl", "abl", "other"],
        "label": ["Long run", "Mid run", None, "Solo run"],
        "arm": ["r_long", "r_mid", "r_short", "solo"],
    },
    schema_overrides={"fp_per_group": pl.Int64},
)


def _epochs(run_id: str, n: int, start: float) -> dict:
    return {
        "run_id": [run_id] * n,
        "epoch": list(range(n)),
        "n_trajectories": [8] * n,
        "n_groups": [1] * n,
        "mean_reward": [start + 0.1 * i for i in range(n)],
        "reported_mean_reward": [start + 0.1 * i for i in range(n)],
        "reward_std": [0.2] * n,
        "frac_zero_std_groups": [0.5 if i % 2 else 0.0 for i in range(n)],
        "reward_ema": [start + 0.05 * i for i in range(n)],
        "reward_rolling": [start + 0.05 * i for i in range(n)],
        "sample_entropy": [1.5 - 0.01 * i for i in range(n)],
        "train_entropy": [1.4 - 0.01 * i for i in range(n)],
    }


def _concat(*parts: dict) -> pl.DataFrame:
    return pl.concat([pl.DataFrame(p) for p in parts])


# r_long: 10 epochs, r_mid: 6, r_short: only 2 (the ablation's horizon is its last epoch, 1), solo: 4.
EPOCHS = _concat(
    _epochs("r_long", 10, 0.1), _epochs("r_mid", 6, 0.2), _epochs("r_short", 2, 0.3), _epochs("solo", 4, 0.0)
)

SUMMARY = pl.DataFrame(
    {
        "run_id": ["r_long", "r_mid", "r_short", "solo"],
        "first_epoch": [0, 0, 0, 0],
        "last_epoch": [9, 5, 1, 3],
        "n_epochs": [10, 6, 2, 4],
        "missing_epochs": [0, 0, 0, 0],
        "final_reward": [0.55, 0.45, 0.35, 0.15],
        "auc_reward": [0.5512, 0.4487, 0.35, 0.15],
        "peak_reward_ema": [0.55, 0.45, 0.35, 0.15],
        "peak_epoch": [9, 5, 1, 3],
        "matched_horizon": [1, 1, 1, 3],
        "matched_reward": [0.7004, 0.5, 0.35, 0.15],
        "matched_ci_low": [0.61, 0.41, None, 0.05],
        "matched_ci_high": [0.79, 0.59, None, 0.25],
        "matched_iqm": [0.7, 0.5, 0.35, 0.15],
        "matched_effective_n": [5.43, 4.0, None, 3.2],
        "final_snapshot_id": ["s_l9", "s_m5", "s_s1", "s_o3"],
        "best_snapshot_id": ["s_l9", "s_m5", "s_s1", "s_o3"],
        "matched_snapshot_id": ["s_l1", "s_m1", "s_s1", "s_o3"],
        "matched_ci_note": [None, None, "too few epochs for an interval: 1 < 2", None],
    }
)

# Pairs with run_a < run_b; r_long (the winner) is run_a of its pair with the runner-up r_mid, so the report has
# to turn that row round: winner − runner-up = +0.2004, interval [0.05, 0.35], probability 1 − 0.2 = 0.8.
CONTRASTS = pl.DataFrame(
    {
        "ablation": ["abl", "abl", "abl"],
        "run_a": ["r_long", "r_long", "r_mid"],
        "run_b": ["r_mid", "r_short", "r_short"],
        "delta": [-0.2004, -0.3504, -0.15],
        "ci_low": [-0.35, -0.5, -0.3],
        "ci_high": [-0.05, -0.2, math.nan],
        "ci_method": ["structural"] * 3,
        "unit": ["epochs of one run"] * 3,
        "resolved": [True, True, None],
        "prob_improvement": [0.2, 0.0, 0.25],
        "arm_a": ["r_long", "r_long", "r_mid"],
        "arm_b": ["r_mid", "r_short", "r_short"],
        "n_runs_a": [1, 1, 1],
        "n_runs_b": [1, 1, 1],
        "p_value": [0.009, 0.0001, None],
        "resolved_holm": [True, True, None],
        "resolved_reason": [
            None,
            None,
            "no interval: neither window varies, so there is no spread to estimate one from",
        ],
        "seeds_needed": [7, 3, None],
    }
)

SNAPSHOTS = pl.DataFrame(
    {
        "run_id": [r for r in ["r_long", "r_mid", "r_short", "solo"] for _ in range(3)],
        "role": ["final", "best", "matched"] * 4,
        "epoch": [9, 9, 1, 5, 5, 1, 1, 1, 1, 3, 3, 3],
        "snapshot_id": ["s_l9", "s_l9", "s_l1", "s_m5", "s_m5", "s_m1", "s_s1", "s_s1", "s_s1", "s_o3", "s_o3", "s_o3"],
    }
).with_columns(model_name="claude-haiku-4-5-20251001-" + pl.col("snapshot_id"))


@pytest.fixture
def tables() -> dict[str, pl.DataFrame]:
    return {"runs": RUNS, "epochs": EPOCHS, "summary": SUMMARY, "contrasts": CONTRASTS, "snapshots": SNAPSHOTS}
