"""The intervals of a window mean of an autocorrelated curve that run_summary and ablation_contrasts call (through
DuckDB Python functions): `structural` (the default, in pipelines/stats/structural.py), `reml`, `ar1` and `iid`.

For `reml` and `ar1` a run's per-epoch mean rewards y_t are modelled as a smooth trend plus an AR(1) drift plus
white sampling noise (ARMA(1,1) around the trend). `reml` fits that model by its exact restricted likelihood over
a grid of φ and noise-to-drift ratios (reml_fit, below) and takes mean ± z · √V, V as in step 4. `ar1` fits it by
moments, over the run up to the end of its matched window:
1. a quadratic in the epoch is fitted and removed (a learning trend would otherwise read as slow drift);
2. the autocovariances γ0, γ1, γ2 of the residuals give φ = γ2/γ1 (white noise leaves γ1, γ2 alone), the drift's
   variance s² = γ1/φ and the noise's r = γ0 − s²;
3. φ is corrected for the downward bias of an AR fit on T detrended values, φ ← φ̂ + (3 + 5φ)/T (three rounds);
4. the variance of the mean of the last n values follows from the model exactly,
   V = s²/n · [(1+φ)/(1−φ) − 2φ(1−φⁿ)/(n(1−φ)²)] + r/n, and the window's effective n is γ0 / V;
5. the interval is mean ± t · √V with t Student's quantile on the fit's effective n − 1 degrees of freedom (γ0
   over the same variance for all T fitted values, minus one): V is estimated from the T values of the fit, so its
   uncertainty is that of the fit's independent values, not the window's; for a difference of two runs' means the
   Welch–Satterthwaite combination of the two.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

import numpy as np

from pipelines.stats import structural

TREND_DEGREE = 2
MAX_PHI = 0.995
BIAS_ROUNDS = 3
MIN_DF = 1.0


def detrend(values: np.ndarray, epochs: np.ndarray, degree: int = TREND_DEGREE) -> np.ndarray:
    """Residuals of a least-squares polynomial in the epoch, per row (rows are runs)."""
    span = epochs.max() - epochs.min()
    scaled = (epochs - epochs.min()) / (span if span else 1) * 2 - 1
    design = np.vander(scaled, degree + 1)
    beta, *_ = np.linalg.lstsq(design, values.T, rcond=None)
    return values - (design @ beta).T


def autocovariances(residuals: np.ndarray, lags: int) -> np.ndarray:
    """γ_k = Σ x_t x_{t+k} / T for k = 0..lags, per row, around each row's mean."""
    centred = residuals - residuals.mean(axis=1, keepdims=True)
    size = centred.shape[1]
    return np.stack([(centred[:, k:] * centred[:, : size - k]).sum(axis=1) / size for k in range(lags + 1)], axis=1)


def window_variance(drift: np.ndarray, phi: np.ndarray, noise: np.ndarray, n) -> np.ndarray:
    """Variance of the mean of n consecutive values of an AR(1) of variance `drift` and coefficient phi, plus white
    noise of variance `noise`."""
    n = np.asarray(n, dtype=float)
    ratio = (1 + phi) / (1 - phi) - 2 * phi * (1 - phi**n) / (n * (1 - phi) ** 2)
    return drift / n * ratio + noise / n


def debiased_phi(raw_phi: np.ndarray, size: int) -> np.ndarray:
    """φ̂ corrected for the downward bias of an AR fit on `size` detrended values, φ ← φ̂ + (3 + 5φ)/T (three rounds;
    the (1 + 3φ)/T of a fitted mean, with one term more per fitted trend coefficient), capped at MAX_PHI."""
    phi = raw_phi
    for _ in range(BIAS_ROUNDS):
        phi = np.minimum(raw_phi + ((TREND_DEGREE + 1) + (TREND_DEGREE + 3) * phi) / size, MAX_PHI)
    return phi


def summarise(gamma0, drift, phi, noise, size: int, window: int) -> dict[str, np.ndarray]:
    """The window mean's variance and effective n, and the whole fit's effective n, of a fitted drift + noise model."""
    variance = window_variance(drift, phi, noise, window)
    fit_effective_n = gamma0 / window_variance(drift, phi, noise, size)
    return {"phi": phi, "variance": variance, "effective_n": gamma0 / variance, "fit_effective_n": fit_effective_n}


def fit(values: np.ndarray, epochs: np.ndarray, window: int) -> dict[str, np.ndarray]:
    """Per row: the AR coefficient, the window mean's variance, the window's effective n (the last `window` values)
    and the whole fit's."""
    gamma = autocovariances(detrend(values, epochs), 2)
    drifting = (gamma[:, 1] > 0) & (gamma[:, 2] > 0)
    raw_phi = np.where(drifting, np.minimum(gamma[:, 2] / np.where(drifting, gamma[:, 1], 1), MAX_PHI), 0.0)
    phi = np.where(drifting, debiased_phi(raw_phi, values.shape[1]), 0.0)
    drift = np.where(drifting, np.minimum(gamma[:, 1] / np.where(drifting, raw_phi, 1), gamma[:, 0]), 0.0)
    return summarise(gamma[:, 0], drift, phi, gamma[:, 0] - drift, values.shape[1], window)


# `reml` (the default): the exact restricted likelihood of the same model, maximised over a grid of φ and
# noise-to-drift ratios (the grid sql/marts/run_summary.sql holds)
REML_PHIS = (0.0, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.84, 0.87, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 0.995)
REML_NOISE_RATIOS = (0.0, 0.03, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.5, 4.0, 8.0, 20.0)


def reml_max_phi(size: int) -> float:
    """The largest φ fitted to `size` epochs: the one whose correlation time (1 + φ)/(1 − φ) is half the fit. A
    slower drift cannot be told from the trend over those epochs, and letting the fit reach it piles estimates up at
    the grid's edge, where the window variance is several times too wide."""
    return (size - 2) / (size + 2)


def reml_grid(size: int, max_phi: float | None = None) -> list[tuple[float, float]]:
    """The (φ, noise ratio) points fitted to `size` epochs (white noise alone is one point: its ratio is not
    identified)."""
    top = reml_max_phi(size) if max_phi is None else max_phi
    return [(phi, ratio) for phi in REML_PHIS if phi <= top for ratio in REML_NOISE_RATIOS if phi > 0 or ratio == 0]


@functools.lru_cache(maxsize=256)
def _reml_projection(epochs: tuple[float, ...], phi: float, noise_ratio: float) -> tuple[np.ndarray, float]:
    """For errors of covariance σ²(φ^|i−j| + noise_ratio·I) over the values in order: the matrix taking values to
    their whitened residuals around the generalised least-squares quadratic trend, and log|Σ/σ²| + log|X'(Σ/σ²)⁻¹X|.
    Cached: the study fits many runs on the same epochs."""
    steps = np.arange(len(epochs))
    epochs_array = np.asarray(epochs)
    design = np.vander((epochs_array - epochs_array.mean()) / (epochs_array.std() or 1), TREND_DEGREE + 1)
    chol = np.linalg.cholesky(phi ** np.abs(np.subtract.outer(steps, steps)) + noise_ratio * np.eye(len(epochs)))
    whitening = np.linalg.inv(chol)
    basis, upper = np.linalg.qr(whitening @ design)
    log_det = 2 * np.log(np.diag(chol)).sum() + 2 * np.log(np.abs(np.diag(upper))).sum()
    return whitening - basis @ (basis.T @ whitening), log_det


def reml_terms(values: np.ndarray, epochs: np.ndarray, grid: list[tuple[float, float]]):
    """Per grid point (rows of the result) and run (columns): the residual sum of squares y'Py of the values around
    the generalised least-squares trend, in units of σ²; and per grid point log|Σ/σ²| + log|X'(Σ/σ²)⁻¹X|."""
    # the trend's design is standardised, so runs whose epochs differ by a shift share one projection
    epochs = np.asarray(epochs, dtype=float)
    key = tuple(epochs - epochs[0])
    projections = [_reml_projection(key, phi, ratio) for phi, ratio in grid]
    squares = np.stack([((projection @ values.T) ** 2).sum(axis=0) for projection, _ in projections])
    return squares, np.array([log_det for _, log_det in projections])


def reml_log_likelihood(values: np.ndarray, epochs: np.ndarray, phi: float, noise_ratio: float):
    """Per row, the restricted log-likelihood (up to a constant) of a quadratic trend in the epoch plus errors of
    covariance σ²(φ^|i−j| + noise_ratio·I) over the values in order, σ² profiled out; also σ²'s estimate."""
    squares, log_dets = reml_terms(values, epochs, [(phi, noise_ratio)])
    residual_df = values.shape[1] - TREND_DEGREE - 1
    scale = squares[0] / residual_df
    return -0.5 * (residual_df * np.log(scale) + log_dets[0]), scale


def reml_best(squares: np.ndarray, log_dets: np.ndarray, grid: list[tuple[float, float]], size: int, window: int):
    """Per run, from reml_terms over `size` values: the grid point of highest restricted likelihood (σ² profiled
    out; the first of equals), its φ and the window mean's variance."""
    residual_df = size - TREND_DEGREE - 1
    scales = squares / residual_df
    with np.errstate(divide="ignore"):  # a constant curve: every point is equally likely, the first is taken
        best = (-0.5 * (residual_df * np.log(scales) + log_dets[:, None])).argmax(axis=0)
    phis, ratios = (np.array(column)[best] for column in zip(*grid, strict=True))
    scale = scales[best, np.arange(squares.shape[1])]
    return {"phi": phis, "variance": window_variance(scale, phis, scale * ratios, window)}


def reml_fit(values: np.ndarray, epochs: np.ndarray, window: int, max_phi: float | None = None) -> dict:
    """Per row: the grid point of highest restricted likelihood (φ up to reml_max_phi of the fit's size, or
    max_phi), its φ and the window mean's variance."""
    grid = reml_grid(values.shape[1], max_phi)
    squares, log_dets = reml_terms(values, epochs, grid)
    return reml_best(squares, log_dets, grid, values.shape[1], window)


def t_quantile(p: float, df) -> np.ndarray:
    """Student's t quantile with upper tail probability p (< 0.5) on df > 0.5 degrees of freedom, real df allowed:
    Hill's closed form (Algorithm 396, as R's qt uses it), the formula sql/functions.sql holds."""
    df = np.asarray(df, dtype=float)
    two_tailed = 2 * p
    a = 1 / (df - 0.5)
    b = 48 / (a * a)
    c = ((20700 * a / b - 98) * a - 16) * a + 96.36
    d = ((94.5 / (b + c) - 3) / b + 1) * np.sqrt(a * math.pi / 2) * df
    y = (d * two_tailed) ** (2 / df)
    x = NormalDist().inv_cdf(two_tailed / 2)
    c = np.where(df < 5, c + 0.3 * (df - 4.5) * (x + 0.6), c)
    c = (((0.05 * d * x - 5) * x - 7) * x - 2) * x + b + c
    large = (((((0.4 * x * x + 6.3) * x * x + 36) * x * x + 94.5) / c - x * x - 3) / b + 1) * x
    large = a * large * large
    large = np.where(large > 0.002, np.expm1(large), 0.5 * large * large + large)
    small = ((1 / (((df + 6) / (df * y) - 0.089 * d - 0.822) * (df + 2) * 3) + 0.5 / (df + 4)) * y - 1) * (df + 1) / (
        df + 2
    ) + 1 / y
    return np.sqrt(df * np.where(y > 0.05 + a, large, small))


def welch_df(variance_a, df_a, variance_b, df_b) -> np.ndarray:
    """Welch–Satterthwaite degrees of freedom of a difference of two estimates."""
    variance_a, variance_b = np.asarray(variance_a, dtype=float), np.asarray(variance_b, dtype=float)
    total = variance_a + variance_b
    with np.errstate(divide="ignore"):  # infinite df (a normal quantile) gives 0 terms
        return total**2 / (variance_a**2 / df_a + variance_b**2 / df_b)


def run_df(fit_effective_n) -> np.ndarray:
    """Degrees of freedom of a run's estimated window variance: the fit's effective n − 1, at least MIN_DF."""
    return np.maximum(np.asarray(fit_effective_n) - 1, MIN_DF)


# The interface the SQL models call (through DuckDB Python functions): one run's interval, a contrast of two runs,
# and a contrast of two arms of seeds.
METHODS = ("structural", "reml", "ar1", "iid")
MIN_FIT_EPOCHS = 5
# The fewest fitted epochs at which `structural` holds its level (docs/statistics.md, by simulation up to φ = 0.95):
# a contrast's null pairs resolved at most 10% of the time, a run's interval covering its quantity 93% of the time.
PAIR_MIN_EPOCHS = 50
RUN_MIN_EPOCHS = 100


def too_short(size: int, fewest: int) -> str | None:
    """The reason a fit of `size` epochs backs no claim, or None."""
    return f"too few epochs for an honest interval: {size} < {fewest}" if size < fewest else None


def interval_quantile(level: float, df) -> float | np.ndarray:
    """The half-width's multiplier at `level`: Student's t on df degrees of freedom, the normal's when df is inf."""
    from scipy import stats as scipy_stats  # imported by the first step that needs it: 1 s of every process's start

    return scipy_stats.t.ppf(0.5 + level / 2, df)[()]


def _bounds(estimate: float, variance: float, df: float, level: float) -> tuple[float | None, float | None]:
    """estimate ± q·√variance; no interval without spread (a constant window) or without a variance."""
    if not variance > 0:
        return None, None
    half = interval_quantile(level, df) * math.sqrt(variance)
    return estimate - half, estimate + half


def _run_fit(fit_values: np.ndarray, fit_epochs: np.ndarray, size: int, before: int, method: str) -> dict:
    """The variance of the mean of the fit's last `size` values, its degrees of freedom, the window's effective n
    and the AR coefficient."""
    if method == "iid":
        variance = float(fit_values[-size:].var(ddof=1)) / size
        return {"variance": variance, "df": float(max(size - 1, MIN_DF)), "effective_n": float(size), "phi": None}
    # a constant curve has no spread (its residuals would be rounding alone)
    gamma0 = float(autocovariances(detrend(fit_values[None], fit_epochs), 0)[0, 0]) if np.ptp(fit_values) else 0.0
    if method == "structural":
        fitted = structural.fit(fit_values[None], size, degree=TREND_DEGREE, before=before, walk=False)
        variance, phi, df = float(fitted["variance"][0]), float(fitted["phi"][0]), float(fitted["df"][0])
    elif method == "ar1":
        moments = fit(fit_values[None], fit_epochs, size)
        variance, phi = float(moments["variance"][0]), float(moments["phi"][0])
        df = float(run_df(moments["fit_effective_n"][0])) if gamma0 > 0 else float(max(size - 1, MIN_DF))
    elif method == "reml":
        fitted = reml_fit(fit_values[None], fit_epochs, size)
        variance, phi, df = float(fitted["variance"][0]), float(fitted["phi"][0]), math.inf
    else:
        raise ValueError(f"ci_method must be one of {', '.join(METHODS)}, not {method}")
    variance = variance if gamma0 > 0 else 0.0
    effective_n = gamma0 / variance if variance > 0 else float(size)
    return {"variance": variance, "df": df, "effective_n": effective_n, "phi": phi}


def _fit_span(epochs, values, fit_epochs: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The last `fit_epochs` epochs with a finite value and those values, and how many loaded epochs precede them."""
    epochs, values = np.asarray(epochs, dtype=float), np.asarray(values, dtype=float)
    kept = np.isfinite(values[-fit_epochs:])
    return epochs[-fit_epochs:][kept], values[-fit_epochs:][kept], max(len(values) - fit_epochs, 0)


def run_interval(epochs, values, noise_variance, window: int, *, method: str, level: float, fit_epochs: int) -> dict:
    """A run's window mean (the last `window` of its epochs up to the horizon) and its interval at `level`, the model
    fitted to the last `fit_epochs` of those epochs with a finite value. noise_variance (each epoch's sampling
    variance of its mean) is not used by these methods."""
    values = np.asarray(values, dtype=float)
    window_values = values[-window:][np.isfinite(values[-window:])]
    fit_epoch_numbers, fit_values, before = _fit_span(epochs, values, fit_epochs)
    estimate = float(window_values.mean()) if len(window_values) else math.nan
    result = {"estimate": estimate, "variance": None, "df": None, "ci_low": None, "ci_high": None}
    result |= {"effective_n": None, "ar_coefficient": None, "claimable": False}
    if len(window_values) < 2 or (method != "iid" and len(fit_values) < MIN_FIT_EPOCHS):
        fewest = 2 if len(window_values) < 2 else MIN_FIT_EPOCHS
        have = len(window_values) if len(window_values) < 2 else len(fit_values)
        return result | {"reason": f"too few epochs for an interval: {have} < {fewest}"}
    fitted = _run_fit(fit_values, fit_epoch_numbers, len(window_values), before, method)
    ci_low, ci_high = _bounds(estimate, fitted["variance"], fitted["df"], level)
    reason = too_short(len(fit_values), RUN_MIN_EPOCHS) if method == "structural" else None
    return result | {
        "variance": fitted["variance"],
        "df": fitted["df"],
        "ci_low": ci_low,
        "ci_high": ci_high,
        "effective_n": fitted["effective_n"],
        "ar_coefficient": fitted["phi"],
        "claimable": reason is None,
        "reason": reason,
    }


def _measured_noise(noise, size: int) -> np.ndarray:
    """Each epoch's sampling variance of its mean as an array (NaN where unknown or not given)."""
    return np.full(size, np.nan) if noise is None else np.asarray(noise, dtype=float).reshape(-1)[:size]


def _paired_fit(a_epochs, a_values, a_noise, b_epochs, b_values, b_noise, window: int, fit_epochs: int) -> dict:
    """`structural` on the paired difference b − a over the two runs' common epochs with finite values: the variance
    of its window mean (the last `window` common epochs), its degrees of freedom and the fit's size. The noise's
    variance is taken as measured (the mean over the fit of the two runs' epochs' sampling variances) when at least
    half the fit's epochs have it in both runs."""
    runs = []
    for epochs, values, noise in ((a_epochs, a_values, a_noise), (b_epochs, b_values, b_noise)):
        epochs, values = np.asarray(epochs, dtype=float), np.asarray(values, dtype=float)
        finite = np.isfinite(values)
        runs.append((epochs, epochs[finite], values[finite], _measured_noise(noise, len(values))[finite]))
    (epochs_a, kept_a, values_a, noise_a), (epochs_b, kept_b, values_b, noise_b) = runs
    common, in_a, in_b = np.intersect1d(kept_a, kept_b, assume_unique=True, return_indices=True)
    difference = (values_b[in_b] - values_a[in_a])[-fit_epochs:]
    size, window = len(difference), min(window, len(difference))
    if size < MIN_FIT_EPOCHS or window < 2:
        return {"size": size, "variance": None}
    noise = (noise_a[in_a] + noise_b[in_b])[-fit_epochs:]
    measured = np.nanmean(noise) if np.isfinite(noise).sum() * 2 >= size else math.nan
    # the walk counts the runs' loaded epochs from their start
    before = max(int((epochs_a < common[-size]).sum()), int((epochs_b < common[-size]).sum()))
    fitted = structural.fit(difference[None], window, degree=0, before=before, noise=np.array([measured]))
    return {"size": size, "variance": float(fitted["variance"][0]), "df": float(fitted["df"][0])}


def _window_mean(values, window: int) -> tuple[float, int]:
    """The mean of the finite values among the last `window`, and their count."""
    values = np.asarray(values, dtype=float)[-window:]
    finite = values[np.isfinite(values)]
    return (float(finite.mean()) if len(finite) else math.nan), len(finite)


def pair_interval(
    a_epochs, a_values, a_noise, b_epochs, b_values, b_noise, window: int, *, method: str, level: float, fit_epochs: int
) -> dict:
    """The contrast b − a of two runs' window means. `structural`: the paired difference of the two curves over
    their common epochs, fitted as one series (a learning curve common to both cancels); the others: delta ±
    q·√(V_a + V_b), q on the two variances' Welch df."""
    if method != "structural":
        return _separate_pair(
            a_epochs, a_values, a_noise, b_epochs, b_values, b_noise, window, method, level, fit_epochs
        )
    (mean_a, count_a), (mean_b, count_b) = _window_mean(a_values, window), _window_mean(b_values, window)
    result = {"delta": mean_b - mean_a, "variance": None, "df": None, "ci_low": None, "ci_high": None}
    result["claimable"] = False
    if min(count_a, count_b) < 2:
        return result | {"reason": f"too few epochs for an interval: {min(count_a, count_b)} < 2"}
    paired = _paired_fit(a_epochs, a_values, a_noise, b_epochs, b_values, b_noise, window, fit_epochs)
    if paired["variance"] is None:
        return result | {"reason": f"too few common epochs for an interval: {paired['size']} < {MIN_FIT_EPOCHS}"}
    reason = too_short(paired["size"], PAIR_MIN_EPOCHS)
    ci_low, ci_high = _bounds(result["delta"], paired["variance"], paired["df"], level)
    return result | {
        "variance": paired["variance"],
        "df": paired["df"],
        "ci_low": ci_low,
        "ci_high": ci_high,
        "claimable": reason is None,
        "reason": reason,
    }


def _separate_pair(a_epochs, a_values, a_noise, b_epochs, b_values, b_noise, window, method, level, fit_epochs):
    """A contrast from each run's own fit: delta ± q·√(V_a + V_b), q on the two variances' Welch df."""
    options = {"method": method, "level": level, "fit_epochs": fit_epochs}
    run_a = run_interval(a_epochs, a_values, a_noise, window, **options)
    run_b = run_interval(b_epochs, b_values, b_noise, window, **options)
    result = {"delta": run_b["estimate"] - run_a["estimate"], "variance": None, "df": None, "ci_low": None}
    result |= {"ci_high": None, "claimable": False}
    if run_a["variance"] is None or run_b["variance"] is None:
        return result | {"reason": run_a["reason"] or run_b["reason"]}
    variance = run_a["variance"] + run_b["variance"]
    df = float(welch_df(run_a["variance"], run_a["df"], run_b["variance"], run_b["df"])) if variance else math.inf
    ci_low, ci_high = _bounds(result["delta"], variance, df, level)
    return result | {
        "variance": variance,
        "df": df,
        "ci_low": ci_low,
        "ci_high": ci_high,
        "claimable": True,
        "reason": None,
    }


def arm_interval(values_a, values_b, *, level: float) -> dict:
    """The contrast of two arms of seeds (configurations): the difference of their runs' mean matched rewards, with
    Welch's t interval on the runs' values (each arm's spread over seeds is the unit of uncertainty)."""
    values_a, values_b = (np.asarray(v, dtype=float)[np.isfinite(v)] for v in (values_a, values_b))
    delta = float(values_b.mean() - values_a.mean()) if len(values_a) and len(values_b) else math.nan
    result = {"delta": delta, "variance": None, "df": None, "ci_low": None, "ci_high": None, "claimable": False}
    if len(values_a) < 2 or len(values_b) < 2:
        return result | {"reason": f"too few runs an arm for an interval: {min(len(values_a), len(values_b))} < 2"}
    variance_a, variance_b = values_a.var(ddof=1) / len(values_a), values_b.var(ddof=1) / len(values_b)
    variance = float(variance_a + variance_b)
    df = float(welch_df(variance_a, len(values_a) - 1, variance_b, len(values_b) - 1)) if variance > 0 else math.inf
    ci_low, ci_high = _bounds(delta, variance, df, level)
    return result | {
        "variance": variance,
        "df": df,
        "ci_low": ci_low,
        "ci_high": ci_high,
        "claimable": True,
        "reason": None,
    }
