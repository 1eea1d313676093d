"""End to end: the marts and their checks inside a real `grpo-warehouse build` of a tiny release."""

import pytest

pytestmark = pytest.mark.slow  # a whole build


def epoch_document(epoch: int) -> dict:
    """Four trajectories with rewards 0, .25, .5, .75 and, deliberately, the rewards' negatives as advantages."""
    rewards = [0.0, 0.25, 0.5, 0.75]
    return {
        "epoch": epoch,
        "loss": 0.5,
        "mean_reward": 0.375,
        "kl_sample_train": 0.0,
        "sample_entropy": 1.5,
        "train_entropy": 1.25,
        "snapshot_id": f"ft_snap_{epoch:03d}",
        "trajectory_ids": [f"ft_traj_{epoch:03d}_{i}" for i in range(4)],
        "rewards": rewards,
        "advantages": [-r for r in rewards],
    }


def test_build_publishes_the_marts_and_warning_checks_do_not_fail_it(tmp_path, write_epoch, build, query):
    release = tmp_path / "rel"
    # epochs 0, 1, 3: a gap (no_epoch_gaps warns); every group's advantages are reversed (advantages_normalised
    # warns). Neither may fail the build.
    for number in (0, 1, 3):
        write_epoch(release / "solo", number, epoch_document(number))
    wh = tmp_path / "wh"
    assert build([release], wh) == 0
    # rewards 0, .25, .5, .75 every epoch: mean .375, and so final, auc, peak EMA and matched reward
    assert query(
        wh,
        "select run_id, first_epoch, last_epoch, n_epochs, missing_epochs, matched_horizon, "
        "round(final_reward, 9), round(auc_reward, 9), round(peak_reward_ema, 9), peak_epoch, "
        "final_snapshot_id, matched_snapshot_id from run_summary",
    ) == [("solo", 0, 3, 3, 1, 3, 0.375, 0.375, 0.375, 0, "ft_snap_003", "ft_snap_003")]
    assert query(wh, "select count(*) from ablation_contrasts") == [(0,)]  # one run: no pair
    assert query(wh, "select count(*) from group_metrics where not advantages_consistent") == [(3,)]
    assert query(wh, "select role, model_name from snapshots order by role") == [
        ("best", "claude-haiku-4-5-20251001-ft_snap_000"),
        ("final", "claude-haiku-4-5-20251001-ft_snap_003"),
        ("matched", "claude-haiku-4-5-20251001-ft_snap_003"),
    ]
