"""The intervals of run_summary and ablation_contrasts (their level on nulls: test_claims_end_to_end.py): the SQL
against its numpy twin (pipelines.stats.intervals), the pieces against scipy/statsmodels/arch,
and hand-worked tiny cases."""

import duckdb
import numpy as np
import pytest
from autocorrelated import ablation_epochs, ar1_curves
from mart_fixture import build_marts, create_staging, epoch, rows
from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests
from statsmodels.tsa.stattools import acovf

from pipelines.stats import intervals

WINDOW = 50


def build(curves: np.ndarray, params: dict, ablation_size: int = 2) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    documents, runs = ablation_epochs(curves, ablation_size)
    create_staging(con, documents, runs, extras=False)
    build_marts(con, {"final_window": WINDOW, **params})
    return con


def test_sql_reml_equals_the_numpy_computation():
    # Four runs of 60 epochs, their φ from 0.5 to the grid's top: the Kalman filters in SQL against the T × T solve.
    curves = ar1_curves(seed=3, runs=4, epochs=60, phi=0.9, trend=True)
    con = build(curves, {"ci_method": "reml", "final_window": 20})
    got = rows(con, "select * from run_summary order by run_id")
    fitted = intervals.reml_fit(curves, np.arange(60.0), 20)
    assert sorted(set(fitted["phi"])) == [0.5, 0.87, 0.92]
    # 60 epochs fit φ up to (60 − 2)/(60 + 2) = 0.935, i.e. 0.92 on the grid, where two runs stop short of the φ
    # (0.95, 0.995) their likelihood would reach without that top
    assert list(intervals.reml_fit(curves, np.arange(60.0), 20, max_phi=0.995)["phi"]) == [0.87, 0.95, 0.995, 0.5]
    assert [r["matched_ar_coefficient"] for r in got] == list(fitted["phi"])
    assert [r["matched_std_error"] ** 2 for r in got] == pytest.approx(fitted["variance"], rel=1e-9)
    # a variance taken as known: a normal quantile, no degrees of freedom
    means = curves[:, -20:].mean(axis=1)
    half = scipy_stats.norm.ppf(0.975) * np.sqrt(fitted["variance"])
    assert [(r["matched_ci_df"], r["matched_ci_low"], r["matched_ci_high"]) for r in got] == [
        (None, pytest.approx(m - h, rel=1e-8), pytest.approx(m + h, rel=1e-8)) for m, h in zip(means, half, strict=True)
    ]
    contrasts = rows(con, "select * from ablation_contrasts order by run_a")
    half = scipy_stats.norm.ppf(0.975) * np.sqrt(fitted["variance"][0::2] + fitted["variance"][1::2])
    delta = means[1::2] - means[0::2]
    assert [(c["ci_method"], c["ci_low"], c["ci_high"]) for c in contrasts] == [
        ("reml", pytest.approx(d - h, rel=1e-8), pytest.approx(d + h, rel=1e-8))
        for d, h in zip(delta, half, strict=True)
    ]


def test_sql_intervals_equal_the_numpy_computation():
    curves = ar1_curves(seed=3, runs=6, epochs=120, phi=0.8, trend=True)
    con = build(curves, {"ci_method": "ar1"})
    got = rows(con, "select * from run_summary order by run_id")
    fitted = intervals.fit(curves, np.arange(120.0), WINDOW)
    df = intervals.run_df(fitted["fit_effective_n"])
    half = intervals.t_quantile(0.025, df) * np.sqrt(fitted["variance"])
    means = curves[:, -WINDOW:].mean(axis=1)
    assert [r["matched_std_error"] ** 2 for r in got] == pytest.approx(fitted["variance"], rel=1e-9)
    assert [r["matched_effective_n"] for r in got] == pytest.approx(fitted["effective_n"], rel=1e-9)
    assert [r["matched_ar_coefficient"] for r in got] == pytest.approx(fitted["phi"], rel=1e-9)
    assert [r["matched_ci_low"] for r in got] == pytest.approx(means - half, rel=1e-7)
    assert [r["matched_ci_high"] for r in got] == pytest.approx(means + half, rel=1e-7)
    contrasts = rows(con, "select * from ablation_contrasts order by run_a")
    variance_a, variance_b = fitted["variance"][0::2], fitted["variance"][1::2]
    welch = intervals.welch_df(variance_a, df[0::2], variance_b, df[1::2])
    half = intervals.t_quantile(0.025, welch) * np.sqrt(variance_a + variance_b)
    delta = means[1::2] - means[0::2]
    assert [c["ci_low"] for c in contrasts] == pytest.approx(delta - half, rel=1e-7)
    assert [c["ci_high"] for c in contrasts] == pytest.approx(delta + half, rel=1e-7)
    assert {(c["ci_method"], c["unit"]) for c in contrasts} == {("ar1", "epochs of one run")}


def test_numpy_pieces_match_statsmodels_and_scipy():
    curve = ar1_curves(seed=5, runs=1, epochs=90, phi=0.7, trend=True)
    epochs = np.arange(90.0)
    residuals = intervals.detrend(curve, epochs)[0]
    design = np.column_stack([np.ones(90), epochs, epochs**2])
    ols = curve[0] - design @ np.linalg.lstsq(design, curve[0], rcond=None)[0]
    assert residuals == pytest.approx(ols, abs=1e-12)
    assert intervals.autocovariances(residuals[None], 2)[0] == pytest.approx(
        acovf(residuals, nlag=2, fft=False), rel=1e-12
    )
    for df in (2.0, 2.7, 4.0, 9.5, 30.0, 1e4):
        assert intervals.t_quantile(0.025, df) == pytest.approx(scipy_stats.t.ppf(0.975, df), rel=5e-4)
        assert intervals.t_quantile(0.05, df) == pytest.approx(scipy_stats.t.ppf(0.95, df), rel=5e-4)


def test_window_variance_equals_the_double_sum_of_ar1_covariances():
    drift, phi, noise, n = 0.3, 0.85, 0.05, 7
    lags = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    direct = (drift * phi**lags).sum() / n**2 + noise / n
    assert intervals.window_variance(np.array(drift), np.array(phi), np.array(noise), n) == pytest.approx(direct)


def test_study_restricted_likelihood_matches_the_density_of_error_contrasts():
    # REML is the likelihood of the residual contrasts K'y (K an orthonormal basis orthogonal to the trend), with
    # σ² profiled out: −½[(T − p) log σ̂² + log|K'Σ0K|], σ̂² = y'K(K'Σ0K)⁻¹K'y / (T − p). Up to a constant.
    from scipy.linalg import null_space

    values = ar1_curves(seed=6, runs=2, epochs=40, phi=0.8, trend=True)
    steps = np.arange(40)
    design = np.vander((steps - steps.mean()) / steps.std(), 3)
    contrasts = null_space(design.T)

    def direct(phi: float, ratio: float) -> np.ndarray:
        covariance = contrasts.T @ (phi ** np.abs(np.subtract.outer(steps, steps)) + ratio * np.eye(40)) @ contrasts
        projected = values @ contrasts
        scale = np.einsum("ij,jk,ik->i", projected, np.linalg.inv(covariance), projected) / 37
        return -0.5 * (37 * np.log(scale) + np.linalg.slogdet(covariance)[1])

    points = [(0.0, 0.0), (0.5, 0.2), (0.9, 1.5), (0.99, 0.03)]
    ours = [intervals.reml_log_likelihood(values, steps * 3.0 + 1, phi, ratio)[0] for phi, ratio in points]
    theirs = [direct(phi, ratio) for phi, ratio in points]
    for index in range(1, len(points)):
        assert ours[index] - ours[0] == pytest.approx(theirs[index] - theirs[0], rel=1e-8, abs=1e-8)


def _window_run(run_id: str, values: list[float]) -> list[dict]:
    """One trajectory per epoch, so each epoch's mean reward is the value itself."""
    return [epoch(run_id, e, [v], [0.0]) for e, v in enumerate(values)]


def test_iqm_and_effective_n_by_hand():
    con = duckdb.connect()
    # Window of 8: sorted .1 .2 .3 .4 .5 .7 .8 .9, floor(8/4) = 2 dropped at each end -> (.3 + .4 + .5 + .7)/4.
    eight = [0.1, 0.9, 0.3, 0.5, 0.2, 0.8, 0.4, 0.7]
    # Window of 5 (three earlier epochs outside it): floor(5/4) = 1 dropped at each end -> (.2 + .3 + .6)/3.
    five = [0.5, 0.5, 0.5, 0.6, 0.2, 1.0, 0.3, 0.0]
    # Alternating around a flat line: the residuals' lag-1 autocovariance is negative, so φ = 0 and the window mean's
    # variance is γ0/n: effective n is exactly the window's size.
    alternating = [0.0, 1.0] * 6
    create_staging(
        con,
        _window_run("eight", eight) + _window_run("five", five) + _window_run("alt", alternating),
        [("eight", "e", 1), ("five", "f", 1), ("alt", "a", 1)],
        extras=False,
    )
    build_marts(con, {"final_window": 8})
    summary = {r["run_id"]: r for r in rows(con, "select * from run_summary")}
    assert summary["eight"]["matched_iqm"] == pytest.approx(1.9 / 4)
    assert summary["eight"]["matched_iqm"] == pytest.approx(scipy_stats.trim_mean(eight, 0.25))
    build_marts(con, {"final_window": 5})
    summary = {r["run_id"]: r for r in rows(con, "select * from run_summary")}
    assert summary["five"]["matched_iqm"] == pytest.approx(1.1 / 3)
    assert summary["alt"]["matched_effective_n"] == pytest.approx(5)
    assert summary["alt"]["matched_ar_coefficient"] == 0
    # Its variance is estimated from all 12 fitted epochs, independent ones: 11 degrees of freedom, not the window's 4.
    assert summary["alt"]["matched_ci_df"] == pytest.approx(11)
    # iid: the window's epochs are the effective n, and the interval is the t interval of 5 values.
    build_marts(con, {"final_window": 5, "ci_method": "iid"})
    summary = {r["run_id"]: r for r in rows(con, "select * from run_summary")}
    window = five[-5:]
    half = scipy_stats.t.ppf(0.975, 4) * np.std(window, ddof=1) / np.sqrt(5)
    assert summary["five"]["matched_effective_n"] == 5
    assert (summary["five"]["matched_ci_low"], summary["five"]["matched_ci_high"]) == (
        pytest.approx(np.mean(window) - half, rel=1e-6),
        pytest.approx(np.mean(window) + half, rel=1e-6),
    )


def _flat_runs(con, values: dict[str, float], runs: list[tuple], epochs: int = 6) -> None:
    """Runs whose every epoch's mean reward is their value."""
    documents = [doc for run, value in values.items() for doc in _window_run(run, [value] * epochs)]
    create_staging(con, documents, runs, extras=False)


def test_arms_of_seeds_are_compared_by_a_t_interval_on_their_runs():
    # Arm "low" has runs at 0 and 1, arm "high" runs at 2 and 3 (flat curves): the contrast is Welch's t test on
    # the runs' matched rewards, as scipy computes it.
    con = duckdb.connect()
    values = {"l0": 0.0, "l1": 1.0, "h0": 2.0, "h1": 3.0, "solo": 5.0, "x0": 20.0, "x1": 21.0, "y0": 0.0, "y1": 0.5}
    arms = {"l0": "low", "l1": "low", "h0": "high", "h1": "high", "solo": "one"}
    arms |= {"x0": "low", "x1": "low", "y0": "high", "y1": "high"}
    _flat_runs(con, values, [(run, "other" if run[0] in "xy" else "abl", 1, arm) for run, arm in arms.items()])
    build_marts(con, {"final_window": 4})
    found = rows(con, "select * from ablation_contrasts")
    contrasts = {(r["run_a"], r["run_b"]): r for r in found if r["ablation"] == "abl"}
    contrasts_of_other = {(r["run_a"], r["run_b"]): r for r in found if r["ablation"] == "other"}
    assert set(contrasts) == {("high", "low"), ("high", "solo"), ("low", "solo")}
    pair = contrasts["high", "low"]
    assert (pair["unit"], pair["ci_method"], pair["n_runs_a"], pair["n_runs_b"]) == ("runs", "t over runs", 2, 2)
    welch = scipy_stats.ttest_ind([0.0, 1.0], [2.0, 3.0], equal_var=False)
    low, high = welch.confidence_interval(0.95)
    assert pair["delta"] == pytest.approx(0.5 - 2.5)
    # (its half-width within the 5e-4 of the t quantile's closed form at 2 degrees of freedom)
    assert (pair["ci_low"] + pair["ci_high"]) / 2 == pytest.approx((low + high) / 2)
    assert pair["ci_high"] - pair["ci_low"] == pytest.approx(high - low, rel=5e-4)
    assert pair["p_value"] == pytest.approx(welch.pvalue)
    # two seeds an arm: t on 2 degrees of freedom, wide enough to include zero
    assert (pair["resolved"], pair["resolved_holm"], pair["resolved_reason"]) == (False, False, None)
    assert pair["prob_improvement"] == 0.0  # every run of "low" is below every run of "high"
    # Arms of the same names in another ablation are other arms.
    assert contrasts_of_other["high", "low"]["prob_improvement"] == 1.0
    assert contrasts_of_other["high", "low"]["delta"] == pytest.approx(20.5 - 0.25)
    # One run against an arm of two: the difference of their means, no interval, no claim, and why.
    lone = contrasts["high", "solo"]
    assert (lone["unit"], lone["delta"], lone["ci_low"], lone["ci_high"]) == ("runs", 2.5, None, None)
    assert (lone["resolved"], lone["resolved_holm"]) == (None, None)
    assert "too few runs" in lone["resolved_reason"]


def test_holm_adjusts_the_claims_of_an_ablation():
    # Three arms of three seeds, 0.25 apart with a spread of 0.1: every pair's interval excludes zero (p ≈ 0.038 for
    # neighbours), but after Holm's adjustment for the three claims only the far pair stays resolved (the
    # neighbours' 0.038 × 2 > 0.05); a second ablation's claim is a family of its own.
    con = duckdb.connect()
    levels = {"a": [0.0, 0.1, 0.2], "b": [0.25, 0.35, 0.45], "c": [0.5, 0.6, 0.7]}
    values = {f"{arm}{seed}": value for arm, seeds in levels.items() for seed, value in enumerate(seeds)}
    values |= {"z0": 0.0, "z1": 0.1, "z2": 0.2, "w0": 0.25, "w1": 0.35, "w2": 0.45}
    ablation = {"z": "alone", "w": "alone"}
    _flat_runs(con, values, [(run, ablation.get(run[0], "abl"), 1, run[0]) for run in values])
    build_marts(con, {"final_window": 4})
    found = rows(con, "select * from ablation_contrasts where ablation = 'abl' order by run_a, run_b")
    p_values = [scipy_stats.ttest_ind(levels[r["run_a"]], levels[r["run_b"]], equal_var=False).pvalue for r in found]
    assert [r["p_value"] for r in found] == pytest.approx(p_values)
    holm, *_ = multipletests(p_values, alpha=0.05, method="holm")
    assert [r["resolved"] for r in found] == [True, True, True]
    assert [r["resolved_holm"] for r in found] == list(holm) == [False, True, False]
    (alone,) = rows(con, "select * from ablation_contrasts where ablation = 'alone'")
    assert (alone["resolved"], alone["resolved_holm"]) == (True, True)


def test_ar1_intervals_are_the_same_at_any_thread_count():
    curves = ar1_curves(seed=9, runs=6, epochs=150, phi=0.9, trend=True)

    def tables(threads: int) -> list:
        con = duckdb.connect()
        con.execute(f"set threads = {threads}")
        documents, runs = ablation_epochs(curves, 3)
        create_staging(con, documents, runs, extras=False)
        build_marts(con, {"final_window": WINDOW})
        return [
            con.execute(f"select * from {table} order by all").fetchall()
            for table in ("run_summary", "ablation_contrasts")
        ]

    assert tables(4) == tables(1)


@pytest.mark.parametrize("ci_method", ["ar1", "reml"])
def test_two_flat_windows_have_no_interval_and_make_no_claim(ci_method):
    con = duckdb.connect()
    _flat_runs(con, {"flat_a": 0.5, "flat_b": 0.75}, [("flat_a", "abl", 1), ("flat_b", "abl", 1)], epochs=8)
    build_marts(con, {"final_window": 4, "ci_method": ci_method})
    (pair,) = rows(con, "select * from ablation_contrasts")
    assert (pair["delta"], pair["ci_low"], pair["ci_high"], pair["resolved"], pair["resolved_holm"]) == (
        0.25,
        None,
        None,
        None,
        None,
    )
    assert pair["resolved_reason"].startswith("no interval")


def test_an_interval_that_is_not_finite_makes_no_claim():
    # Rewards of ±1e308 have a finite mean (0) but a spread that overflows: the interval is not finite, so there is
    # none (DuckDB orders NaN above every number: "ci_low > 0" alone would call the lead resolved).
    con = duckdb.connect()
    create_staging(
        con,
        _window_run("huge", [1e308, -1e308] * 4) + _window_run("calm", [0.5, 0.4] * 4),
        [("huge", "abl", 1), ("calm", "abl", 1)],
        extras=False,
    )
    build_marts(con, {"final_window": 4})
    (pair,) = rows(con, "select * from ablation_contrasts")
    assert (pair["ci_low"], pair["ci_high"], pair["resolved"], pair["resolved_holm"]) == (None, None, None, None)
    assert pair["resolved_reason"].startswith("no interval")
