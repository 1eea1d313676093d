"""The mart models on the tiny fixture of mart_fixture.py, against values worked out by hand."""

import math

import duckdb
import pytest
from mart_fixture import EPOCHS, NAN, RUNS, build_marts, create_staging, epoch, rows
from oracles import tensorboard_ema
from scipy import stats as scipy_stats


def by_key(con, table: str, *key: str) -> dict:
    return {tuple(row[k] for k in key): row for row in rows(con, f"select * from {table}")}


def approx(value):
    return pytest.approx(value, abs=1e-9)


def test_epoch_metrics_contract_columns_come_first(warehouse_con):
    columns = [c[0] for c in warehouse_con.execute("select * from epoch_metrics limit 0").description]
    assert columns[:11] == [
        "run_id",
        "epoch",
        "n_trajectories",
        "n_groups",
        "mean_reward",
        "reported_mean_reward",
        "reward_std",
        "mean_group_reward_std",
        "frac_zero_std_groups",
        "reward_ema",
        "reward_rolling",
    ]


def test_epoch_metrics_by_hand(warehouse_con):
    metrics = by_key(warehouse_con, "epoch_metrics", "run_id", "epoch")
    assert sorted(metrics) == [
        ("run_a", 0),
        ("run_a", 1),
        ("run_a", 3),
        ("run_b", 0),
        ("run_b", 1),
        ("run_b", 2),
        ("run_c", 0),
    ]
    a0, a1, a3 = metrics["run_a", 0], metrics["run_a", 1], metrics["run_a", 3]
    # run_a epoch 0: rewards 1, 0, .5, .5 -> mean 2/4; deviations .5, -.5, 0, 0 -> SS .5, /3 -> std sqrt(1/6);
    # groups (1, 0) and (.5, .5): one of two has no spread.
    assert (a0["n_trajectories"], a0["n_groups"]) == (4, 2)
    assert a0["mean_reward"] == approx(0.5)
    assert a0["reward_std"] == approx(math.sqrt(1 / 6))
    assert a0["frac_zero_std_groups"] == approx(0.5)
    # group stds (n-1): (1, 0) -> sqrt(.5), (.5, .5) -> 0; their mean sqrt(.5)/2 (TRL's reward_std up to v0.26)
    assert a0["mean_group_reward_std"] == approx(math.sqrt(0.5) / 2)
    # epoch 1: rewards 1, NaN, 1, 0 -> finite mean 2/3; deviations 1/3, 1/3, -2/3 -> SS 2/3, /2 -> std sqrt(1/3).
    # Group (1, NaN) has one finite reward, so it does not count; group (1, 0) has spread -> 0 of 1.
    assert a1["mean_reward"] == approx(2 / 3)
    assert a1["reported_mean_reward"] == approx(2 / 3)
    assert a1["reward_std"] == approx(math.sqrt(1 / 3))
    assert a1["frac_zero_std_groups"] == approx(0.0)
    assert a1["mean_group_reward_std"] == approx(math.sqrt(0.5))  # (1, NaN) has no std and is left out
    assert a1["n_nonfinite_rewards"] == 1
    # epoch 3: rewards 1, 1, 1, 0 -> mean .75; deviations .25 x3, -.75 -> SS .75, /3 -> std .5; group (1, 1) flat.
    assert a3["mean_reward"] == approx(0.75)
    assert a3["reward_std"] == approx(0.5)
    assert a3["frac_zero_std_groups"] == approx(0.5)
    # EMA, w = .5: last = .25 -> /(1-.5) = .5; last = .125 + 1/3 = 11/24 -> /(1-.25) = 11/18;
    # last = 11/48 + 3/8 = 29/48 -> /(1-.125) = 29/42.
    assert [a0["reward_ema"], a1["reward_ema"], a3["reward_ema"]] == [approx(0.5), approx(11 / 18), approx(29 / 42)]
    # Rolling mean over the epoch and 1 loaded epoch before it (the gap at epoch 2 is skipped):
    # .5; (.5 + 2/3)/2 = 7/12; (2/3 + .75)/2 = 17/24.
    assert [a0["reward_rolling"], a1["reward_rolling"], a3["reward_rolling"]] == [
        approx(0.5),
        approx(7 / 12),
        approx(17 / 24),
    ]
    # run_b: means .25, .75, .5; EMA .25; (.0625 + .375)/.75 = 7/12; (.21875 + .25)/.875 = 15/28.
    b = [metrics["run_b", e] for e in (0, 1, 2)]
    assert [m["mean_reward"] for m in b] == [approx(0.25), approx(0.75), approx(0.5)]
    assert [m["reward_ema"] for m in b] == [approx(0.25), approx(7 / 12), approx(15 / 28)]
    assert [m["frac_zero_std_groups"] for m in b] == [approx(0.5), approx(0.5), approx(0.0)]
    assert b[2]["reward_std"] == approx(math.sqrt(1 / 3))  # deviations +-.5 x4 -> SS 1, /3


def test_frac_zero_std_groups_leaves_out_groups_of_fewer_than_two_finite_rewards():
    # Group size 2, four groups: (.5, .5) flat; (1, 0) with spread; (1, NaN) one finite reward; (NaN, inf) none.
    # Only the first two can have a spread at all: one flat of two -> 1/2 (1/3 or 1/4 if the others counted).
    docs = [
        epoch("run", 0, [0.5, 0.5, 1.0, 0.0, 1.0, NAN, NAN, math.inf], [0.0] * 8),
        # (1, 1) flat and (0, NaN): one flat of one -> 1 (1/2 if the single finite reward counted)
        epoch("run", 1, [1.0, 1.0, 0.0, NAN], [0.0] * 4),
    ]
    con = duckdb.connect()
    create_staging(con, docs, [("run", "abl", 2)])
    build_marts(con)
    got = con.execute("select n_groups, frac_zero_std_groups from epoch_metrics order by epoch").fetchall()
    con.close()
    assert got == [(4, approx(0.5)), (2, approx(1.0))]


def test_group_metrics_by_hand(warehouse_con):
    groups = by_key(warehouse_con, "group_metrics", "run_id", "epoch", "group_index")
    assert len(groups) == 13  # 3 + 3 epochs of 2 groups, and run_c's one group
    flat = groups["run_a", 0, 1]  # rewards .5, .5
    assert (flat["n_trajectories"], flat["reward_mean"], flat["reward_std"], flat["is_zero_std"]) == (2, 0.5, 0.0, True)
    spread = groups["run_a", 0, 0]  # rewards 1, 0: mean .5, sample std sqrt(.5)
    assert spread["reward_std"] == approx(math.sqrt(0.5)) and spread["is_zero_std"] is False
    with_nan = groups["run_a", 1, 0]  # rewards 1, NaN: one finite reward, no std, not "zero std"
    assert (with_nan["n_trajectories"], with_nan["n_finite_rewards"], with_nan["reward_mean"]) == (2, 1, 1.0)
    assert with_nan["reward_std"] is None and with_nan["is_zero_std"] is False
    # both conventions (population std in run_a, sample std in run_b) count as normalised
    assert all(g["advantages_consistent"] for g in groups.values())
    assert all(g["advantage_problem"] is None for g in groups.values())


def sum_in_order(values: list[float]) -> float:
    """Left to right, one rounding per addition, as a sum in a fixed order adds."""
    total = 0.0
    for value in values:
        total += value
    return total


def test_means_add_in_trajectory_order_whatever_the_rows_order():
    # Rounding makes these sums depend on their order: 1e16 + 1 rounds back to 1e16 (its floats are 2 apart), so in
    # traj_index order (1e16, 1, -1e16, 1) they come to 1, backwards (1, -1e16, 1, 1e16) to 0.
    rewards = [1e16, 1.0, -1e16, 1.0]
    con = duckdb.connect()
    create_staging(con, [epoch("run", 0, rewards, rewards, targets=["x"] * 4)], [("run", "abl", 4)])
    # the rows stored backwards, and read on one thread: an aggregate adding them as read gets the backwards sum
    con.execute("create or replace table fact_trajectories as from fact_trajectories order by traj_index desc")
    con.execute("set threads = 1")
    build_marts(con, {"breakdown_window": 1})
    scale = 2.0**32  # the models sum values divided by 2^32 (exact), so the same roundings happen
    expected = sum_in_order([r / scale for r in rewards]) / 4 * scale
    assert expected == 0.25  # not 0, the backwards mean
    group = rows(con, "select reward_mean, advantage_mean from group_metrics")[0]
    assert (group["reward_mean"], group["advantage_mean"]) == (expected, expected)
    assert rows(con, "select mean_reward from epoch_metrics")[0]["mean_reward"] == expected
    assert rows(con, "select mean_reward from reward_breakdowns where breakdown = 'target_model'")[0] == {
        "mean_reward": expected
    }
    con.close()


def test_rolling_means_add_their_epochs_in_epoch_order():
    # One trajectory per epoch, so each epoch's mean is its reward; 1e16 + 1 rounds back to 1e16, so a window's sum
    # depends on the order its means are added in. A windowed avg adds a 40-epoch frame's means in an order of its
    # own (partial sums of blocks of rows), which is not epoch order and changes with the other runs in the query.
    means = [1e16, 1.0, -1e16, 3.0] * 25
    window = 40
    con = duckdb.connect()
    create_staging(con, [epoch("run", e, [m], [0.0]) for e, m in enumerate(means)], [("run", "abl", 1)])
    build_marts(con, {"rolling_window": window})
    got = [row["reward_rolling"] for row in rows(con, "select reward_rolling from epoch_metrics order by epoch")]
    con.close()
    scale = 2.0**32  # the models sum values divided by 2^32 (exact), so the same roundings happen
    frames = [means[max(0, e - window + 1) : e + 1] for e in range(len(means))]
    expected = [sum_in_order([m / scale for m in frame]) / len(frame) * scale for frame in frames]
    assert got == expected


def test_run_summary_by_hand(warehouse_con):
    summary = by_key(warehouse_con, "run_summary", "run_id")
    a, b, c = summary["run_a",], summary["run_b",], summary["run_c",]
    assert (a["first_epoch"], a["last_epoch"], a["n_epochs"], a["missing_epochs"]) == (0, 3, 3, 1)
    assert a["final_reward"] == approx((2 / 3 + 0.75) / 2)  # last 2 loaded epochs: 1 and 3
    assert a["auc_reward"] == approx((0.5 + 2 / 3 + 0.75) / 3)
    assert (a["peak_reward_ema"], a["peak_epoch"]) == (approx(29 / 42), 3)
    # matched horizon: the smaller last epoch of run_a (3) and run_b (2); run_a's window is epochs 0 and 1
    assert (a["matched_horizon"], b["matched_horizon"]) == (2, 2)
    assert a["matched_reward"] == approx((0.5 + 2 / 3) / 2)
    assert (a["final_snapshot_id"], a["best_snapshot_id"], a["matched_snapshot_id"]) == (
        "snap_run_a_3",
        "snap_run_a_3",
        "snap_run_a_1",
    )
    assert (b["missing_epochs"], b["final_reward"], b["auc_reward"]) == (0, approx(0.625), approx(0.5))
    assert (b["peak_reward_ema"], b["peak_epoch"], b["matched_reward"]) == (approx(7 / 12), 1, approx(0.625))
    assert (b["final_snapshot_id"], b["best_snapshot_id"], b["matched_snapshot_id"]) == (
        "snap_run_b_2",
        "snap_run_b_1",
        "snap_run_b_2",
    )
    # run_c is alone in its ablation: its own last epoch is the horizon
    assert (c["matched_horizon"], c["matched_reward"], c["final_reward"]) == (0, approx(0.5), approx(0.5))


def test_snapshots_roles_and_model_names(warehouse_con):
    got = {
        (r["run_id"], r["role"]): (r["epoch"], r["snapshot_id"], r["model_name"])
        for r in rows(warehouse_con, "select * from snapshots")
    }
    assert len(got) == 9
    assert got["run_a", "final"] == (3, "snap_run_a_3", "model-snap_run_a_3")
    assert got["run_a", "best"] == (3, "snap_run_a_3", "model-snap_run_a_3")
    assert got["run_a", "matched"] == (1, "snap_run_a_1", "model-snap_run_a_1")
    assert got["run_b", "best"] == (1, "snap_run_b_1", "model-snap_run_b_1")


def test_ablation_contrasts_by_hand(warehouse_con):
    build_marts(warehouse_con, {"ci_method": "iid"})  # epochs taken as independent, the interval worked out below
    contrasts = rows(warehouse_con, "select * from ablation_contrasts")
    assert len(contrasts) == 1  # run_c is alone in its ablation: no pair
    pair = contrasts[0]
    assert (pair["ablation"], pair["run_a"], pair["run_b"]) == ("abl", "run_a", "run_b")
    # windows: run_a {.5, 2/3}, run_b {.75, .5}; delta = .625 - 7/12 = 1/24
    assert pair["delta"] == approx(1 / 24)
    # b > a: (.75, .5) (.75, 2/3) -> 2; tie (.5, .5) -> 1/2; (.5, 2/3) -> 0; 2.5 of 4 pairs
    assert pair["prob_improvement"] == approx(2.5 / 4)
    # Welch's t interval of two means of 2 values: variances (1/6)²/2/2 = 1/144 and (1/4)²/2/2 = 1/64, on
    # (1/144 + 1/64)² / ((1/144)² + (1/64)²) degrees of freedom
    variance = 1 / 144 + 1 / 64
    df = variance**2 / ((1 / 144) ** 2 + (1 / 64) ** 2)
    half = scipy_stats.t.ppf(0.975, df) * math.sqrt(variance)
    # (the t quantile's closed form is conservative below 2 degrees of freedom: a few tenths of a percent wider here)
    assert (pair["ci_low"] + pair["ci_high"]) / 2 == approx(1 / 24)
    assert (pair["ci_high"] - pair["ci_low"]) / 2 == pytest.approx(half, rel=5e-3)
    assert pair["p_value"] == pytest.approx(2 * scipy_stats.t.sf(1 / 24 / math.sqrt(variance), df))
    assert (pair["ci_method"], pair["unit"], pair["resolved"]) == ("iid", "epochs of one run", False)


def _clear_case(n: int = 40) -> list[dict]:
    """Two runs of n epochs with one trajectory each: run_a's rewards around .2, run_b's around .8."""
    docs = []
    for e in range(n):
        wiggle = ((e * 7) % 11) / 50  # 0 .. .2, deterministic
        docs.append(epoch("lo", e, [0.1 + wiggle], [0.0]))
        docs.append(epoch("hi", e, [0.7 + ((e * 5) % 13) / 60], [0.0]))
    return docs


def test_iid_interval_on_a_clear_case_is_welchs():
    con = duckdb.connect()
    docs = _clear_case()
    create_staging(con, docs, [("hi", "pair", 1), ("lo", "pair", 1)])
    build_marts(con, {"final_window": 40, "ci_method": "iid"})
    pair = rows(con, "select * from ablation_contrasts")[0]
    con.close()
    # one trajectory per epoch: an epoch's mean reward is its one reward
    values = {run: [doc["rewards"][0] for doc in docs if doc["run_id"] == run] for run in ("hi", "lo")}
    assert (pair["run_a"], pair["run_b"]) == ("hi", "lo")
    mean = {run: sum(v) / len(v) for run, v in values.items()}
    assert pair["delta"] == approx(mean["lo"] - mean["hi"])
    assert pair["ci_low"] < pair["delta"] < pair["ci_high"] < 0
    assert pair["prob_improvement"] == 0.0  # every "lo" epoch is below every "hi" epoch
    welch = scipy_stats.ttest_ind(values["lo"], values["hi"], equal_var=False)
    low, high = welch.confidence_interval(0.95)
    assert (pair["ci_low"], pair["ci_high"], pair["p_value"]) == (
        pytest.approx(low, rel=1e-5),
        pytest.approx(high, rel=1e-5),
        pytest.approx(welch.pvalue),
    )


def test_ci_level_sets_the_width_of_the_contrast_interval():
    def interval(level: float) -> tuple[float, float, float]:
        con = duckdb.connect()
        create_staging(con, _clear_case(), [("hi", "pair", 1), ("lo", "pair", 1)])
        build_marts(con, {"final_window": 40, "ci_level": level})
        pair = rows(con, "select delta, ci_low, ci_high from ablation_contrasts")[0]
        con.close()
        return pair["ci_low"], pair["delta"], pair["ci_high"]

    widths = {}
    for level in (0.5, 0.95, 0.99):
        low, delta, high = interval(level)
        assert low < delta < high
        widths[level] = high - low
    # For any roughly normal spread the 50% interval is about a third as wide as the 95% one (z .67 against 1.96)
    # and the 99% one about a third wider (z 2.58): well inside these bounds, whatever the interval's method.
    assert widths[0.5] < 0.6 * widths[0.95]
    assert widths[0.99] > 1.1 * widths[0.95]


# 0.9 and 0.6 tell w from 1 − w (0.5 cannot); at 1 TensorBoard does not debias and the line stays at 0; at 0 the
# EMA is the value itself.
@pytest.mark.parametrize("weight", [0.9, 0.6, 1.0, 0.0])
def test_reward_ema_matches_tensorboard_with_a_nan_epoch(weight):
    docs = []
    for e in range(30):
        if e == 12:
            docs.append(epoch("run", e, [NAN, NAN], [0.0, 0.0]))  # no finite reward: mean_reward is null
        elif e not in (5, 6):  # a gap
            docs.append(epoch("run", e, [((e * 37) % 17) / 17, ((e * 11) % 7) / 7], [0.0, 0.0]))
    con = duckdb.connect()
    create_staging(con, docs, [("run", "abl", 2)])
    build_marts(con, {"ema_weight": weight})
    got = con.execute("select mean_reward, reward_ema from epoch_metrics order by epoch").fetchall()
    # an epoch with no finite reward has no spread of any kind (TRL would log NaN)
    assert con.execute(
        "select reward_std, mean_group_reward_std, frac_zero_std_groups from epoch_metrics where epoch = 12"
    ).fetchone() == (None, None, None)
    con.close()
    means = [m for m, _ in got]
    assert means[10] is None  # epoch 12 is the 11th loaded epoch
    expected = tensorboard_ema(means, weight)
    assert [ema for _, ema in got] == [None if x is None else approx(x) for x in expected]


def test_reward_ema_does_not_overflow_on_a_long_run():
    # 0.9^-n overflows a double after ~6,700 epochs; the recursion never forms it
    docs = [epoch("long", e, [float(e % 2)], [0.0]) for e in range(8000)]
    con = duckdb.connect()
    create_staging(con, docs, [("long", "abl", 1)])
    build_marts(con, {"ema_weight": 0.9})
    last = con.execute("select reward_ema from epoch_metrics where epoch = 7999").fetchone()[0]
    con.close()
    assert last == approx(tensorboard_ema([float(e % 2) for e in range(8000)], 0.9)[-1])


def test_reward_breakdowns_by_hand(warehouse_con):
    got = {
        (r["run_id"], r["window_start"], r["breakdown"], r["level"]): r
        for r in rows(warehouse_con, "select * from reward_breakdowns")
    }
    assert {key[0] for key in got} == {"run_a"}  # the other runs have no extras
    # window 0-1 (epochs 0, 1): target x = 1, .5, 1, 1; y = 0, .5, NaN, 0 -> mean of the finite ones 1/6
    x, y = got["run_a", 0, "target_model", "x"], got["run_a", 0, "target_model", "y"]
    assert (x["window_end"], x["n_epochs"], x["n_trajectories"], x["mean_reward"]) == (1, 2, 4, approx(0.875))
    assert (y["n_trajectories"], y["mean_reward"]) == (4, approx(1 / 6))
    # FP controls (trajectory 0) = 1, 1; the rest = 0, .5, .5, NaN, 1, 0 -> 2/5
    assert got["run_a", 0, "is_fp_control", "true"]["mean_reward"] == approx(1.0)
    assert got["run_a", 0, "is_fp_control", "false"]["mean_reward"] == approx(0.4)
    # window 2-3 holds epoch 3 only: rewards 1, 1, 1, 0
    assert got["run_a", 2, "target_model", "y"]["mean_reward"] == approx(0.5)
    assert got["run_a", 2, "is_fp_control", "false"]["mean_reward"] == approx(2 / 3)


def test_reward_breakdowns_build_without_the_optional_columns():
    con = duckdb.connect()
    create_staging(con, EPOCHS, RUNS, extras=False)
    build_marts(con)
    assert con.execute("select count(*) from reward_breakdowns").fetchone()[0] == 0
    # and every other mart still builds
    assert con.execute("select count(*) from run_summary").fetchone()[0] == 3
    con.close()


def test_reward_breakdowns_read_extras_stored_as_json_text(warehouse_con):
    con = duckdb.connect()
    create_staging(con, EPOCHS, RUNS, extras_as_json_text=True)
    build_marts(con)
    query = "select * from reward_breakdowns order by all"
    assert con.execute(query).fetchall() == warehouse_con.execute(query).fetchall()
    con.close()
