"""The `structural` interval of a window mean: a random walk from the run's start + an AR(1) drift + white noise,
fitted by restricted likelihood on the series' cosine transform, with a t quantile of few degrees of freedom.

A curve of T epochs (values in epoch order, around a polynomial trend of `degree`: 0 for the paired difference of
two runs, 2 for one run's learning curve) is modelled as y_t = trend + w_t + u_t + e_t: w a random walk starting at
zero at the run's first epoch (steps of variance κs²), u an AR(1) of coefficient φ and variance s², e white noise of
variance ρs². The cosine transform (DCT-II) of the series has nearly independent coefficients, of variance s²·h_j at
frequency λ_j = πj/T: h_j = (1 − φ²)/(1 − 2φ cos λ_j + φ²) + ρ + κ/(2 − 2 cos λ_j) (exactly so for the walk, whose
demeaned path has the cosines as its Karhunen–Loève basis). Their restricted likelihood (the trend's columns
projected out, s² profiled out) is maximised over a grid of (φ, ρ, κ); one run's fit has no walk (κ = 0), which a
learning curve cannot be told from. The variance of the mean of the last n values follows from the fitted model
exactly, the walk's part counted from the run's start: V = s²·[AR(1) term + ρ/n + κ·(a + (n + 1)(2n + 1)/(6n))], a
the epochs before the window. The quantile is Student's t on the fit's effective n − 1 degrees of freedom (the
detrended values' variance over the model's variance of the mean of all T), at most T/n + 1 − degree: the variance
of a window's mean is learnt from the fit's slowest swings, of which T epochs hold about T/n (less those the trend
takes), whatever the fitted model says.
"""

from __future__ import annotations

import functools

import numpy as np

PHIS = (0.0, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.84, 0.87, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 0.995)
NOISE_RATIOS = (0.0, 0.03, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.5, 4.0, 8.0, 20.0)
WALK_RATIOS = (0.0, 0.0003, 0.001, 0.002, 0.003, 0.005, 0.007, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1)
MIN_DF = 1.0


@functools.cache
def grid(walk: bool = True) -> np.ndarray:
    """The (φ, ρ, κ) points fitted, one per row (white noise alone has no separate noise ratio); κ = 0 alone
    without a walk."""
    walks = WALK_RATIOS if walk else (0.0,)
    return np.array([(p, r, k) for p in PHIS for r in NOISE_RATIOS if p > 0 or r == 0 for k in walks])


@functools.lru_cache(maxsize=32)
def spectra(size: int, walk: bool = True) -> np.ndarray:
    """h_j of every grid point (rows) at the frequencies πj/size, j = 1..size − 1 (columns)."""
    points = grid(walk)
    phi, noise, walk = points[:, 0:1], points[:, 1:2], points[:, 2:3]
    cosines = np.cos(np.pi * np.arange(1, size) / size)[None, :]
    return (1 - phi**2) / (1 - 2 * phi * cosines + phi**2) + noise + walk / (2 - 2 * cosines)


@functools.lru_cache(maxsize=32)
def cosine_basis(size: int) -> np.ndarray:
    """The orthonormal DCT-II's basis vectors j = 1..size − 1 (rows): each is orthogonal to a constant."""
    return np.cos(np.pi * np.outer(np.arange(1, size), np.arange(size) + 0.5) / size) * np.sqrt(2 / size)


@functools.lru_cache(maxsize=32)
def trend_terms(size: int, degree: int, walk: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cosine transform of the trend's non-constant columns (x, x², … on [−1, 1]; size − 1 × degree), and per
    grid point X'H⁻¹X and log|X'H⁻¹X|."""
    scaled = np.linspace(-1, 1, size)
    design = cosine_basis(size) @ np.stack([scaled**k for k in range(1, degree + 1)], axis=1)
    gram = np.einsum("gj,jk,jl->gkl", 1 / spectra(size, walk), design, design)
    return design, gram, np.linalg.slogdet(gram)[1]


def log_likelihoods(values: np.ndarray, degree: int, walk: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Per row of values (columns: grid points): the restricted log-likelihood up to a constant, s² profiled out, and
    s²'s estimate."""
    size = values.shape[1]
    inverse = 1 / spectra(size, walk)
    coefficients = values @ cosine_basis(size).T
    squares = coefficients**2 @ inverse.T
    log_det = np.log(spectra(size, walk)).sum(axis=1)[None, :]
    if degree:
        design, gram, gram_log_det = trend_terms(size, degree, walk)
        cross = np.stack([(coefficients * design[:, k]) @ inverse.T for k in range(degree)], axis=-1)
        squares = squares - (cross * np.linalg.solve(gram[None], cross[..., None])[..., 0]).sum(axis=-1)
        log_det = log_det + gram_log_det[None, :]
    residual_df = size - 1 - degree
    scale = np.maximum(squares, 0) / residual_df
    with np.errstate(divide="ignore"):  # a constant series: every point is equally likely, the first is taken
        return -0.5 * (residual_df * np.log(scale) + log_det), scale


def mean_variance_units(points: np.ndarray, n, before) -> np.ndarray:
    """The variance, per unit s², of the mean of n consecutive values `before` values after the walk's start, at
    each (φ, ρ, κ) row of points."""
    phi, noise, walk = points[..., 0], points[..., 1], points[..., 2]
    n = np.asarray(n, dtype=float)
    drifting = np.where(phi > 0, phi, 0.5)  # φ = 0 is white: its term is 1
    autoregressive = (1 + drifting) / (1 - drifting) - 2 * drifting * (1 - drifting**n) / (n * (1 - drifting) ** 2)
    return np.where(phi > 0, autoregressive, 1.0) / n + noise / n + walk * (before + (n + 1) * (2 * n + 1) / (6 * n))


def detrended_variance(values: np.ndarray, degree: int) -> np.ndarray:
    """The variance of each row around its least-squares polynomial trend of `degree` (sum of squares over T)."""
    design = np.vander(np.linspace(-1, 1, values.shape[1]), degree + 1)
    beta, *_ = np.linalg.lstsq(design, values.T, rcond=None)
    return ((values - (design @ beta).T) ** 2).mean(axis=1)


# the drift's variance searched, relative to the series' own variance, when the noise's is known
SCALE_STEPS = 2.0 ** (np.arange(-20, 9) / 2)


def known_noise_likelihoods(values: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of values around their mean (columns: the (φ, κ) points of grid() with no fitted noise), the
    log-likelihood of the cosine coefficients with the white noise's variance known (`noise`, one per row) and the
    drift's variance s² searched over SCALE_STEPS; and that s²."""
    size = values.shape[1]
    points = grid()[:, 1] == 0
    shapes = spectra(size)[points]
    squares = (values @ cosine_basis(size).T)[:, None, :] ** 2
    best, best_scale = np.full((len(values), len(shapes)), -np.inf), np.zeros((len(values), len(shapes)))
    for step in SCALE_STEPS:
        scale = values.var(axis=1) * step
        spectrum = scale[:, None, None] * shapes[None] + noise[:, None, None]
        likelihood = -0.5 * (np.log(spectrum) + squares / spectrum).sum(axis=2)
        better = likelihood > best
        best, best_scale = np.where(better, likelihood, best), np.where(better, scale[:, None], best_scale)
    return best, best_scale


def best_points(values: np.ndarray, degree: int, walk: bool, noise: np.ndarray | None):
    """Per row: the fitted s², the best (φ, ρ, κ) point and the known noise's variance (0 where it is fitted).
    The noise is taken as known for the rows of a paired difference (degree 0) whose `noise` is finite."""
    rows = np.arange(len(values))
    likelihoods, scales = log_likelihoods(values, degree, walk)
    best = likelihoods.argmax(axis=1)
    scale, points, known = scales[rows, best], grid(walk)[best], np.zeros(len(values))
    measured = np.zeros(len(values), dtype=bool) if noise is None or degree else np.isfinite(noise) & walk
    for chunk in np.array_split(np.flatnonzero(measured), max(1, measured.sum() // 64)):
        if len(chunk):
            likelihoods, scales = known_noise_likelihoods(values[chunk], noise[chunk])
            choice = likelihoods.argmax(axis=1)
            scale[chunk], points[chunk] = scales[np.arange(len(chunk)), choice], grid()[grid()[:, 1] == 0][choice]
            known[chunk] = noise[chunk]
    return scale, points, known


def fit(
    values: np.ndarray, window: int, degree: int, before: int = 0, walk: bool = True, noise: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Per row of values (a curve of T epochs whose walk started `before` epochs ahead of the first; no walk unless
    `walk`; its white noise's variance `noise`, per row, where known): the variance of the mean of the last
    `window` values, its degrees of freedom, the window's effective n (the detrended values' variance over V), and
    the fitted φ and κ."""
    size = values.shape[1]
    scale, points, known = best_points(values, degree, walk, noise)
    # a constant series has no spread (its fitted scale would be rounding alone)
    spread = detrended_variance(values, degree)
    variance = scale * mean_variance_units(points, window, before + size - window) + known / window
    variance = np.where(np.ptp(values, axis=1) > 0, variance, 0.0)
    whole = scale * mean_variance_units(points, size, before) + known / size
    most = max(size / window + 1 - degree, MIN_DF)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.minimum(np.where(whole > 0, np.maximum(spread / whole - 1, MIN_DF), MIN_DF), most)
        effective_n = np.where(variance > 0, spread / variance, float(window))
    return {"variance": variance, "df": df, "effective_n": effective_n, "phi": points[:, 0], "walk": points[:, 2]}
