"""run_interval, pair_interval and arm_interval against second computations: scipy's t intervals, the restricted
likelihood written from its definition, statsmodels' autocovariances, and hand-worked tiny cases."""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats
from scipy.linalg import null_space
from statsmodels.tsa.stattools import acovf

from pipelines.stats import intervals, structural

OPTIONS = {"level": 0.95, "fit_epochs": 200}


def ar1_curve(seed: int, epochs: int, phi: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    drift = np.zeros(epochs)
    for t in range(1, epochs):
        drift[t] = phi * drift[t - 1] + rng.standard_normal() * 0.04
    return 0.3 + 0.002 * np.arange(epochs) + drift + rng.standard_normal(epochs) * 0.03


def ar1_window_variance(drift: float, phi: float, noise: float, n: int) -> float:
    """The double sum of the AR(1)'s covariances over n epochs, plus white noise."""
    lags = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    return (drift * phi**lags).sum() / n**2 + noise / n


def test_iid_is_the_t_interval_of_the_window():
    values = ar1_curve(1, 30, 0.5)
    got = intervals.run_interval(np.arange(30) + 100, values, np.full(30, np.nan), 12, method="iid", **OPTIONS)
    window = values[-12:]
    low, high = scipy_stats.t.interval(0.95, 11, loc=window.mean(), scale=scipy_stats.sem(window))
    assert (got["estimate"], got["df"], got["effective_n"], got["ar_coefficient"]) == (
        pytest.approx(window.mean()),
        11,
        12,
        None,
    )
    assert (got["ci_low"], got["ci_high"]) == (pytest.approx(low, rel=1e-5), pytest.approx(high, rel=1e-5))
    assert got["claimable"] and got["reason"] is None


def test_reml_is_the_best_grid_point_of_the_restricted_likelihood_written_from_its_definition():
    # 40 epochs (a fit of 40 < fit_epochs), the window the last 15; a gap at epoch 110 does not change the order.
    epochs = np.r_[np.arange(100, 110), np.arange(111, 141)].astype(float)
    values = ar1_curve(2, 40, 0.8)
    got = intervals.run_interval(epochs, values, np.full(40, np.nan), 15, method="reml", **OPTIONS)
    # REML: the density of the error contrasts K'y (K orthogonal to the quadratic trend), σ² profiled out
    design = np.vander(epochs, 3)
    contrasts = null_space(design.T)
    steps = np.arange(40)
    best = None
    for phi in [p for p in intervals.REML_PHIS if p <= 38 / 42]:
        for ratio in intervals.REML_NOISE_RATIOS if phi > 0 else [0.0]:
            covariance = contrasts.T @ (phi ** np.abs(np.subtract.outer(steps, steps)) + ratio * np.eye(40)) @ contrasts
            projected = contrasts.T @ values
            scale = projected @ np.linalg.solve(covariance, projected) / 37
            likelihood = -0.5 * (37 * np.log(scale) + np.linalg.slogdet(covariance)[1])
            if best is None or likelihood > best[0]:
                best = (likelihood, phi, scale, ratio)
    _, phi, scale, ratio = best
    variance = ar1_window_variance(scale, phi, scale * ratio, 15)
    half = scipy_stats.norm.ppf(0.975) * math.sqrt(variance)
    assert got["ar_coefficient"] == phi
    assert (got["variance"], got["df"]) == (pytest.approx(variance, rel=1e-8), math.inf)
    assert (got["ci_low"], got["ci_high"]) == (
        pytest.approx(values[-15:].mean() - half, rel=1e-8),
        pytest.approx(values[-15:].mean() + half, rel=1e-8),
    )


def test_ar1_is_the_moment_fit_with_its_t_quantile():
    values = ar1_curve(3, 120, 0.7)
    epochs = np.arange(120.0)
    got = intervals.run_interval(epochs, values, np.full(120, np.nan), 50, method="ar1", level=0.9, fit_epochs=80)
    fit_values = values[-80:]
    design = np.vander(epochs[-80:], 3)
    residuals = fit_values - design @ np.linalg.lstsq(design, fit_values, rcond=None)[0]
    gamma = acovf(residuals, nlag=2, fft=False)
    raw_phi = gamma[2] / gamma[1]
    phi = raw_phi
    for _ in range(3):
        phi = raw_phi + (3 + 5 * phi) / 80
    drift = gamma[1] / raw_phi
    variance = ar1_window_variance(drift, phi, gamma[0] - drift, 50)
    df = gamma[0] / ar1_window_variance(drift, phi, gamma[0] - drift, 80) - 1
    half = scipy_stats.t.ppf(0.95, df) * math.sqrt(variance)
    assert (got["ar_coefficient"], got["variance"], got["df"]) == (
        pytest.approx(phi, rel=1e-9),
        pytest.approx(variance, rel=1e-9),
        pytest.approx(df, rel=1e-9),
    )
    assert got["effective_n"] == pytest.approx(gamma[0] / variance, rel=1e-9)
    assert got["ci_low"] == pytest.approx(values[-50:].mean() - half, rel=1e-5)


@pytest.mark.parametrize("method", ["ar1", "iid", "reml"])
def test_a_contrast_combines_the_two_runs_variances_on_welch_degrees_of_freedom(method):
    a, b = ar1_curve(4, 60, 0.6), ar1_curve(5, 60, 0.6) + 0.05
    epochs = np.arange(60.0)
    nan = np.full(60, np.nan)
    run_a = intervals.run_interval(epochs, a, nan, 20, method=method, **OPTIONS)
    run_b = intervals.run_interval(epochs, b, nan, 20, method=method, **OPTIONS)
    got = intervals.pair_interval(epochs, a, nan, epochs, b, nan, 20, method=method, **OPTIONS)
    variance = np.float64(run_a["variance"] + run_b["variance"])
    with np.errstate(divide="ignore"):  # reml's infinite df: a normal quantile
        df = variance**2 / (run_a["variance"] ** 2 / run_a["df"] + run_b["variance"] ** 2 / run_b["df"])
    half = scipy_stats.t.ppf(0.975, df) * math.sqrt(variance)
    delta = b[-20:].mean() - a[-20:].mean()
    assert (got["delta"], got["variance"], got["df"]) == (pytest.approx(delta), pytest.approx(variance), df)
    assert (got["ci_low"], got["ci_high"]) == (pytest.approx(delta - half, rel=1e-4), pytest.approx(delta + half))
    assert got["claimable"] and got["reason"] is None


def test_arms_of_seeds_get_welchs_t_interval():
    a, b = [0.41, 0.45, 0.38], [0.52, 0.47, 0.55, 0.50]
    got = intervals.arm_interval(a, b, level=0.95)
    reference = scipy_stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert got["delta"] == pytest.approx(np.mean(b) - np.mean(a))
    assert (got["ci_low"], got["ci_high"]) == (
        pytest.approx(reference.low, rel=1e-3),
        pytest.approx(reference.high, rel=1e-3),
    )
    assert got["claimable"]


def test_too_few_epochs_or_runs_give_no_interval_and_say_why():
    epochs, values, nan = np.arange(4.0), np.array([0.1, 0.3, 0.2, 0.4]), np.full(4, np.nan)
    got = intervals.run_interval(epochs, values, nan, 3, method="reml", **OPTIONS)
    assert (got["estimate"], got["ci_low"], got["claimable"]) == (pytest.approx(0.3), None, False)
    assert got["reason"] == "too few epochs for an interval: 4 < 5"
    assert intervals.run_interval(epochs, values, nan, 3, method="iid", **OPTIONS)["claimable"]
    pair = intervals.pair_interval(epochs, values, nan, epochs, values, nan, 3, method="ar1", **OPTIONS)
    assert (pair["delta"], pair["ci_low"], pair["claimable"]) == (0, None, False)
    arms = intervals.arm_interval([0.4], [0.5, 0.6], level=0.95)
    assert (arms["ci_low"], arms["claimable"], arms["reason"]) == (
        None,
        False,
        "too few runs an arm for an interval: 1 < 2",
    )


def test_a_constant_window_has_no_interval():
    epochs, nan = np.arange(8.0), np.full(8, np.nan)
    got = intervals.pair_interval(
        epochs, np.full(8, 0.5), nan, epochs, np.full(8, 0.75), nan, 4, method="reml", **OPTIONS
    )
    assert (got["delta"], got["ci_low"], got["ci_high"]) == (0.25, None, None)


def test_structural_run_interval_is_the_fit_without_a_walk_and_its_t_quantile():
    values = ar1_curve(6, 150, 0.9)
    got = intervals.run_interval(np.arange(150), values, np.full(150, np.nan), 50, method="structural", **OPTIONS)
    fitted = structural.fit(values[None], 50, 2, walk=False)
    half = scipy_stats.t.ppf(0.975, fitted["df"][0]) * math.sqrt(fitted["variance"][0])
    assert (got["variance"], got["df"], got["ar_coefficient"]) == (
        pytest.approx(fitted["variance"][0], rel=1e-12),
        fitted["df"][0],
        fitted["phi"][0],
    )
    assert got["df"] <= 150 / 50 + 1 - 2
    assert (got["ci_low"], got["ci_high"]) == (
        pytest.approx(values[-50:].mean() - half, rel=1e-4),
        pytest.approx(values[-50:].mean() + half, rel=1e-4),
    )
    assert got["claimable"] and got["reason"] is None


def test_structural_contrast_fits_the_paired_difference_over_the_common_epochs():
    # Run a lacks epochs 10-19 and has a NaN at 70; run b starts at epoch 5: the difference is fitted on the epochs
    # both have, its walk counted from the runs' start (b's 5 epochs before epoch 5... a's 5 epochs 0-4).
    epochs_a = np.r_[np.arange(0, 10), np.arange(20, 120)]
    values_a = ar1_curve(7, 110, 0.9)
    values_a[60] = np.nan  # epoch 70
    epochs_b = np.arange(5, 120)
    values_b = ar1_curve(8, 115, 0.9) + 0.05
    nan = np.full(120, np.nan)
    got = intervals.pair_interval(epochs_a, values_a, nan, epochs_b, values_b, nan, 30, method="structural", **OPTIONS)
    common = np.array([e for e in range(5, 120) if e < 10 or (e >= 20 and e != 70)])
    difference = values_b[np.searchsorted(epochs_b, common)] - values_a[np.searchsorted(epochs_a, common)]
    fitted = structural.fit(difference[None], 30, 0, before=5)
    assert len(common) == 104
    assert got["delta"] == pytest.approx(values_b[-30:].mean() - values_a[-30:].mean())
    assert (got["variance"], got["df"]) == (pytest.approx(fitted["variance"][0], rel=1e-12), fitted["df"][0])
    half = scipy_stats.t.ppf(0.975, got["df"]) * math.sqrt(got["variance"])
    assert got["ci_high"] == pytest.approx(got["delta"] + half, rel=1e-4)
    assert got["claimable"]


def test_structural_claims_nothing_on_too_few_epochs_but_shows_its_interval():
    a, b, nan = ar1_curve(9, 40, 0.9), ar1_curve(10, 40, 0.9), np.full(40, np.nan)
    pair = intervals.pair_interval(np.arange(40), a, nan, np.arange(40), b, nan, 20, method="structural", **OPTIONS)
    assert pair["ci_low"] < pair["delta"] < pair["ci_high"]
    assert (pair["claimable"], pair["reason"]) == (False, "too few epochs for an honest interval: 40 < 50")
    run = intervals.run_interval(np.arange(40), a, nan, 20, method="structural", **OPTIONS)
    assert run["ci_low"] < run["estimate"] < run["ci_high"]
    assert (run["claimable"], run["reason"]) == (False, "too few epochs for an honest interval: 40 < 100")
