"""The simulation study and its simulated curves: what they generate checked by hand or by a reference library, and
a small fixed simulation on which the default holds its level where the window's epochs taken as independent do
not."""

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint

from pipelines.stats import study
from pipelines.stats.simulate import Structure, expected_levels, long_memory, simulate


def test_the_noise_estimate_is_the_spread_of_group_means():
    # No drift: an epoch's mean reward varies by its sampling noise alone, whose variance each epoch's group means
    # estimate; over 200 × 200 epochs both must be noise_sd² (about 1% sampling error).
    values, noise = simulate(
        np.random.default_rng(4), Structure(phi=0.0, drift_sd=0.0, noise_sd=0.05, trend=False), 200
    )
    assert values.var(axis=1, ddof=1).mean() == pytest.approx(0.05**2, rel=0.03)
    assert noise.mean() == pytest.approx(0.05**2, rel=0.03)


def test_binary_rewards_are_means_of_64_draws_at_the_runs_level():
    structure = Structure(phi=0.0, drift_sd=0.0, trend=False, binary=True)
    values, noise = simulate(np.random.default_rng(5), structure, 300)
    assert set(np.unique(values * 64)) <= set(range(65))
    assert values.mean() == pytest.approx(0.45, abs=0.002)
    # a binomial mean of 64 draws at 0.45: variance 0.45 · 0.55 / 64
    assert values.var() == pytest.approx(0.45 * 0.55 / 64, rel=0.03)
    assert noise.mean() == pytest.approx(0.45 * 0.55 / 64, rel=0.03)


def test_the_walk_and_the_jump_follow_their_definitions():
    walk = Structure(phi=0.0, drift_sd=0.0, noise_sd=1e-9, trend=False, walk_sd=0.01)
    values = simulate(np.random.default_rng(6), walk, 4000)[0]
    # a walk from zero: after t + 1 steps its variance is (t + 1) · step²
    assert values[:, [9, 99, 199]].var(axis=0) == pytest.approx(np.array([10, 100, 200]) * 1e-4, rel=0.08)
    jump = Structure(phi=0.0, drift_sd=0.0, noise_sd=1e-9, trend=False, jump=0.2, jump_window=10, epochs=20)
    values = simulate(np.random.default_rng(7), jump, 4000)[0] - 0.45
    assert np.abs(values[:, :10]).max() < 1e-6 and np.all(np.isclose(values[:, -1], 0.2))
    # the jump epoch is uniform over the last 10: the expected level rises by 0.02 an epoch
    assert values.mean(axis=0)[10:] == pytest.approx(expected_levels(jump)[10:] - 0.45, abs=0.01)
    assert expected_levels(jump)[10:] - 0.45 == pytest.approx(0.02 * np.arange(1, 11))


def test_long_memory_has_the_fractional_autocorrelations():
    # ARFIMA(0, d, 0): ρ(1) = d / (1 − d), ρ(2) = ρ(1)(1 + d)/(2 − d)
    d = 0.4
    values = long_memory(np.random.default_rng(8), 20000, 3, d, 0.05)
    correlation = np.corrcoef(values.T)
    assert correlation[0, 1] == pytest.approx(d / (1 - d), abs=0.02)
    assert correlation[0, 2] == pytest.approx(d / (1 - d) * (1 + d) / (2 - d), abs=0.02)
    assert values.std() == pytest.approx(0.05, rel=0.02)


def test_wilson_range_is_statsmodels():
    for successes, trials in ((0, 200), (13, 200), (200, 200)):
        assert study.wilson(successes, trials) == pytest.approx(
            proportion_confint(successes, trials, alpha=0.05, method="wilson"), abs=1e-4
        )


@pytest.mark.parametrize(
    "structure",
    [Structure(phi=0.95), Structure(walk_sd=0.005), Structure(slow_share=0.5)],
    ids=["AR(1) 0.95", "random walk", "slow component"],
)
def test_the_default_holds_its_level_where_independent_epochs_do_not(structure):
    # 200 null pairs: at most 10% resolved is the bar (a true 5% exceeds 20 of 200 with probability 0.1%)
    row = study.Row("", structure)
    found = study.pairs_row(
        np.random.default_rng(11), row, 200, {"default": study.structural_pairs, "iid": study.iid_pairs}
    )
    assert found["default"]["null"] <= 20
    assert found["iid"]["null"] > 60


def test_the_default_finds_a_true_difference_at_phi_09_more_often_than_not():
    # its power is about 53% (docs/statistics.md); 180 of 400 is three standard errors below that
    row = study.Row("", Structure())
    found = study.pairs_row(np.random.default_rng(12), row, 400, {"default": study.structural_pairs})
    assert found["default"]["power"] >= 180 and found["oracle"] > 0.8
