"""Values that load but deserve a reader's eye each get a row in ingest_errors: a null or infinite reward or advantage,
rewards whose sum overflows (their mean is still recomputed), a group size that leaves an epoch's last group partial,
a per-trajectory extra of another length than the trajectory count."""

import json

import pytest
from helpers import epoch_document, write_epoch_file


def _with(epoch: int, n: int = 4, **changes) -> dict:
    return {**epoch_document(epoch, n=n), **changes}


@pytest.mark.slow
def test_each_surprising_value_gets_its_row_and_means_do_not_overflow(tmp_path, build, query):
    release = tmp_path / "rel"
    # group_size 3 (registry) for 4 trajectories an epoch: groups of 3 and 1
    write_epoch_file(release / "groups3", 0)
    write_epoch_file(release / "groups3", 1)
    write_epoch_file(release / "groups3", 2, _with(2, n=6))  # 6 = 2 x 3: no partial group
    # a null reward; a number too large for a float; a null advantage
    write_epoch_file(release / "values", 0, _with(0, rewards=[0.0, None, 0.5, 0.75]))
    text = json.dumps(_with(1, rewards=[0.0, 0.25, 7.0, 0.75])).replace("7.0", "1e309")
    write_epoch_file(release / "values", 1, text)
    write_epoch_file(release / "values", 2, _with(2, advantages=[0.0, 0.1, -0.1, None]))
    # every reward 1e308: the sum overflows, the mean does not
    write_epoch_file(release / "huge", 0, _with(0, rewards=[1e308] * 4, advantages=[0.0] * 4, mean_reward=1e308))
    # a per-trajectory extra (4 values for 4 trajectories), with 2 values in another epoch
    write_epoch_file(release / "short", 0, _with(0, judge=[1, 2, 3, 4]))
    write_epoch_file(release / "short", 1, _with(1, judge=[1, 2]))
    registry = tmp_path / "runs.csv"
    registry.write_text("run_id,group_size\ngroups3,3\nvalues,4\nhuge,4\nshort,4\n")
    wh = tmp_path / "wh"
    assert build([release], wh, "--registry", str(registry)) == 0

    rows = query(
        wh,
        "select run_id, source_path, epoch, error_kind, message, severity from ingest_errors "
        "order by run_id, source_path, error_kind",
    )
    assert rows == [
        (
            "groups3",
            "groups3/",
            0,
            "partial_group",
            "group_size 3 does not divide the trajectory count of 2 epoch(s) (epoch 0: 4 trajectories); the last "
            "group of each is partial",
            "warning",
        ),
        (
            "huge",
            "huge/epoch_000_results.json",
            0,
            "mean_overflow",
            "the sum of the finite rewards overflows a float",
            "warning",
        ),
        (
            "short",
            "short/epoch_001_results.json",
            1,
            "extra_length_mismatch",
            "per-trajectory extra `judge` holds 2 value(s) for 4 trajectories",
            "warning",
        ),
        (
            "values",
            "values/epoch_000_results.json",
            0,
            "null_value",
            "rewards: 1 null(s), the first at position 1",
            "warning",
        ),
        (
            "values",
            "values/epoch_001_results.json",
            1,
            "infinite_value",
            "rewards: 1 infinite value(s), the first at position 2 (a number too large for a float, such as 1e309, "
            "or an Infinity token)",
            "warning",
        ),
        (
            "values",
            "values/epoch_002_results.json",
            2,
            "null_value",
            "advantages: 1 null(s), the first at position 3",
            "warning",
        ),
    ]
    assert query(
        wh,
        "select epoch, group_index, n_trajectories, is_partial from group_metrics "
        "where run_id = 'groups3' order by 1, 2",
    ) == [(0, 0, 3, False), (0, 1, 1, True), (1, 0, 3, False), (1, 1, 1, True), (2, 0, 3, False), (2, 1, 3, False)]
    # the true means, worked out by hand
    assert query(wh, "select mean_reward from epoch_metrics where run_id = 'huge'") == [(1e308,)]
    assert query(wh, "select reward_mean from group_metrics where run_id = 'huge'") == [(1e308,)]
    assert query(wh, "select auc_reward from run_summary where run_id = 'huge'") == [(1e308,)]
    assert query(wh, "select epoch, mean_reward from epoch_metrics where run_id = 'values' order by 1") == [
        (0, (0.0 + 0.5 + 0.75) / 3),
        (1, (0.0 + 0.25 + 0.75) / 3),
        (2, (0.0 + 0.25 + 0.5 + 0.75) / 4),
    ]
    assert query(wh, "select judge from fact_epochs where run_id = 'short' order by epoch") == [(None,), ("[1, 2]",)]
