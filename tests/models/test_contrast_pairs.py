"""Which pairs of arms an ablation compares (contrast_pairs, read by ablation_contrasts), against values worked out by
hand: every pair up to pairwise_arms arms, else every arm against the registry's baseline or the best arm."""

import duckdb
import pytest
from mart_fixture import NAN, build_marts, create_staging, epoch, rows

# One trajectory an epoch, epochs 0 and 1, final_window 2: a run's matched reward is the mean of its two rewards.
REWARDS = {
    "cfg_s1": (0.8, 1.0),  # arm cfg: two seeds, mean matched reward (0.9 + 0.5) / 2 = 0.7
    "cfg_s2": (0.4, 0.6),
    "p": (0.7, 0.8),  # 0.75: the best arm
    "q": (0.5, 0.7),  # 0.6
    "r": (0.1, 0.3),  # 0.2
    "s": (NAN, NAN),  # no finite matched reward: never the best, still compared
}
ARMS = {"cfg_s1": "cfg", "cfg_s2": "cfg"}


def contrasts(pairwise_arms: int, baseline: str | None = None, rewards: dict = REWARDS) -> list[tuple]:
    """(run_a, run_b, unit, n_runs_a, n_runs_b, delta, pairing) of each contrast of the ablation, in order."""
    con = duckdb.connect()
    docs = [epoch(run, e, [reward], [0.0]) for run, pair in rewards.items() for e, reward in enumerate(pair)]
    runs = [(run, "abl", 1, ARMS.get(run, run), ARMS.get(run, run) == baseline) for run in rewards]
    create_staging(con, docs, runs)
    build_marts(con, {"final_window": 2, "ci_method": "iid", "pairwise_arms": pairwise_arms})
    found = rows(con, "select * from ablation_contrasts order by run_a, run_b")
    pairs = rows(con, "select run_a, run_b, pairing from contrast_pairs order by run_a, run_b")
    con.close()
    assert [(c["run_a"], c["run_b"], c["pairing"]) for c in found] == [tuple(p.values()) for p in pairs]
    return [
        (
            c["run_a"],
            c["run_b"],
            c["unit"],
            c["n_runs_a"],
            c["n_runs_b"],
            None if c["delta"] is None else round(c["delta"], 9),
            c["pairing"],
        )
        for c in found
    ]


def test_an_ablation_of_at_most_pairwise_arms_arms_compares_every_pair():
    found = contrasts(pairwise_arms=5)  # five arms: cfg, p, q, r, s
    assert [(a, b) for a, b, *_ in found] == [
        ("cfg", "p"),
        ("cfg", "q"),
        ("cfg", "r"),
        ("cfg", "s"),
        ("p", "q"),
        ("p", "r"),
        ("p", "s"),
        ("q", "r"),
        ("q", "s"),
        ("r", "s"),
    ]
    assert {pairing for *_, pairing in found} == {"every pair"}
    one_run = {(a, b): delta for a, b, unit, _, _, delta, _ in found if unit == "epochs of one run"}
    assert one_run[("p", "q")] == pytest.approx(0.6 - 0.75)
    assert one_run[("q", "r")] == pytest.approx(0.2 - 0.6)


def test_a_larger_ablation_compares_every_arm_with_its_best_arm_alone():
    found = contrasts(pairwise_arms=4)
    # p's mean matched reward, 0.75, is the highest (cfg's seeds average 0.7); s has none and is compared all the same
    assert found == [
        ("cfg", "p", "runs", 2, 1, pytest.approx(0.75 - 0.7), "against the best arm"),
        ("p", "q", "epochs of one run", 1, 1, pytest.approx(0.6 - 0.75), "against the best arm"),
        ("p", "r", "epochs of one run", 1, 1, pytest.approx(0.2 - 0.75), "against the best arm"),
        ("p", "s", "epochs of one run", 1, 1, None, "against the best arm"),
    ]


def test_the_registrys_baseline_is_the_reference_whatever_its_reward():
    found = contrasts(pairwise_arms=2, baseline="r")
    assert [(a, b, delta, pairing) for a, b, _, _, _, delta, pairing in found] == [
        ("cfg", "r", pytest.approx(0.2 - 0.7), "against the baseline"),
        ("p", "r", pytest.approx(0.2 - 0.75), "against the baseline"),
        ("q", "r", pytest.approx(0.2 - 0.6), "against the baseline"),
        ("r", "s", None, "against the baseline"),
    ]
    # an arm of seeds may be the baseline too: cfg against each other arm
    assert [(a, b) for a, b, *_ in contrasts(pairwise_arms=2, baseline="cfg")] == [
        ("cfg", "p"),
        ("cfg", "q"),
        ("cfg", "r"),
        ("cfg", "s"),
    ]


def test_arms_tied_for_best_give_the_first_by_name_and_no_reward_at_all_gives_no_contrast():
    tied = {"b": (0.5, 0.7), "a": (0.7, 0.5), "c": (0.1, 0.1)}  # a and b both 0.6
    assert [(a, b) for a, b, *_ in contrasts(pairwise_arms=2, rewards=tied)] == [("a", "b"), ("a", "c")]
    none = {"a": (NAN, NAN), "b": (NAN, NAN), "c": (NAN, NAN)}
    assert contrasts(pairwise_arms=2, rewards=none) == []
