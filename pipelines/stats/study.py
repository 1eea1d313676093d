"""The simulation study behind the warehouse's interval method: how often 95% contrast intervals exclude zero when
two runs have no true difference, and how often they find a true one, on autocorrelated reward curves.

    python -m pipelines.stats.study [--pairs 400] [--epochs 200] [--seed 1] [--drift-sd 0.04] [--noise-sd 0.03]

Each simulated run is T epochs. A run's level is a common curve (flat, or a learning trend 0.2 + 0.5(1 − e^(−t/80)))
plus an AR(1) drift of coefficient φ and standard deviation 0.04 (the policy's slow wander). An epoch holds 16 GRPO
groups whose means scatter independently around that level (a prompt's difficulty and its group's draws), so the
epoch's mean reward carries white sampling noise of standard deviation 0.03 and, as in real data, the spread of its
group means estimates that noise's variance (var of the group means / 16). Two runs of a pair are independent; with a
true difference the second run's curve is shifted by it. The compared quantity is the mean of the last `window` epochs
of each run. Prints Markdown tables (the ones in docs/statistics.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
from statistics import NormalDist

import numpy as np

from pipelines.stats import intervals

PHIS = (0.0, 0.5, 0.8, 0.9, 0.95, 0.98)
WINDOWS = (25, 50, 100)
DIFFERENCES = (0.05, 0.10, 0.15)
POWER_PHI = 0.9
DRIFT_SD = 0.04
NOISE_SD = 0.03
GROUPS = 16
LEVEL = 0.95
NORMAL = np.inf  # degrees of freedom that ask for a normal quantile


@dataclasses.dataclass(frozen=True)
class Runs:
    """Simulated runs (rows): per-epoch mean rewards, each epoch's estimated sampling variance of its mean (from the
    spread of its group means), and the true drift coefficient (for the diagnostic that is given it)."""

    values: np.ndarray
    noise_variance: np.ndarray
    phi: float

    @functools.cached_property
    def reml_terms(self) -> tuple[list[tuple[float, float]], np.ndarray, np.ndarray]:
        """The restricted likelihood's pieces at every point of the φ grid up to its top (the reml variants pick
        their points from these)."""
        grid = intervals.reml_grid(self.values.shape[1], max_phi=1.0)
        return grid, *intervals.reml_terms(self.values, np.arange(self.values.shape[1], dtype=float), grid)


def simulate(
    rng: np.random.Generator,
    pairs: int,
    epochs: int,
    phi: float,
    trend: bool,
    drift_sd: float = DRIFT_SD,
    noise_sd: float = NOISE_SD,
) -> Runs:
    """pairs runs of `epochs` epochs with no difference between them."""
    innovations = rng.standard_normal((pairs, epochs)) * drift_sd * math.sqrt(1 - phi**2)
    drift = np.empty((pairs, epochs))
    drift[:, 0] = rng.standard_normal(pairs) * drift_sd
    for t in range(1, epochs):
        drift[:, t] = phi * drift[:, t - 1] + innovations[:, t]
    t = np.arange(epochs)
    curve = 0.2 + 0.5 * (1 - np.exp(-t / 80)) if trend else np.full(epochs, 0.45)
    group_means = rng.standard_normal((pairs, epochs, GROUPS)) * noise_sd * math.sqrt(GROUPS)
    return Runs(curve + drift + group_means.mean(axis=2), group_means.var(axis=2, ddof=1) / GROUPS, phi)


def iid_variance(runs: Runs, window: int) -> tuple[np.ndarray, np.ndarray]:
    """The window's epochs as independent draws (what the plain bootstrap assumes), normal quantile."""
    return runs.values[:, -window:].var(axis=1, ddof=1) / window, np.full(len(runs.values), NORMAL)


def bartlett_variance(runs: Runs, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Whole-run long-run variance, Bartlett kernel, Andrews' AR(1) plug-in bandwidth, no trend removal."""
    values = runs.values
    size = values.shape[1]
    gamma1 = intervals.autocovariances(values, 1)
    rho = np.clip(gamma1[:, 1] / gamma1[:, 0], -0.99, 0.99)
    bandwidth = 1.1447 * (4 * rho**2 / ((1 - rho) ** 2 * (1 + rho) ** 2) * size) ** (1 / 3)
    lags = int(min(size - 1, bandwidth.max()))
    gamma = intervals.autocovariances(values, lags)
    weights = np.clip(1 - np.arange(1, lags + 1)[None, :] / (bandwidth[:, None] + 1), 0, None)
    return (gamma[:, 0] + 2 * (gamma[:, 1:] * weights).sum(axis=1)) / window, np.full(len(values), NORMAL)


def ar1_variance(runs: Runs, window: int) -> tuple[np.ndarray, np.ndarray]:
    """The warehouse's method (pipelines.stats.intervals)."""
    fitted = intervals.fit(runs.values, np.arange(runs.values.shape[1], dtype=float), window)
    return fitted["variance"], intervals.run_df(fitted["fit_effective_n"])


def reml_variance(runs: Runs, window: int, max_phi: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The `reml` method (intervals.reml_fit): the restricted-likelihood fit's window variance, normal quantile."""
    size = runs.values.shape[1]
    grid, squares, log_dets = runs.reml_terms
    top = intervals.reml_max_phi(size) if max_phi is None else max_phi
    kept = [index for index, (phi, _) in enumerate(grid) if phi <= top]
    fitted = intervals.reml_best(squares[kept], log_dets[kept], [grid[index] for index in kept], size, window)
    return fitted["variance"], np.full(len(runs.values), NORMAL)


def reml_uncapped_variance(runs: Runs, window: int) -> tuple[np.ndarray, np.ndarray]:
    """`reml` with φ fitted up to the grid's top (0.995) whatever the fit's length."""
    return reml_variance(runs, window, max_phi=intervals.REML_PHIS[-1])


def reml_known_noise_variance(runs: Runs, window: int) -> tuple[np.ndarray, np.ndarray]:
    """`reml` with the noise's variance measured instead of fitted: the fit's mean of each epoch's variance of its
    mean (from its group means). At a grid point (φ, ratio) the drift's variance is that over the ratio instead of
    profiled; (0, 0) is white noise of the measured variance alone; normal quantile."""
    size = runs.values.shape[1]
    residual_df = size - intervals.TREND_DEGREE - 1
    grid, squares, log_dets = runs.reml_terms
    phis, ratios = (np.array(column) for column in zip(*grid, strict=True))
    kept = (phis <= intervals.reml_max_phi(size)) & ((ratios > 0) | (phis == 0))
    phis, ratios, squares, log_dets = phis[kept], ratios[kept], squares[kept], log_dets[kept]
    noise = runs.noise_variance.mean(axis=1)
    scale = noise[None, :] / np.where(ratios > 0, ratios, 1)[:, None]
    best = (-0.5 * (residual_df * np.log(scale) + log_dets[:, None] + squares / scale)).argmax(axis=0)
    best_scale = scale[best, np.arange(len(noise))]
    variance = intervals.window_variance(best_scale, phis[best], best_scale * ratios[best], window)
    return variance, np.full(len(noise), NORMAL)


def each_run(method):
    """A method that fits each run alone, as one that fits a pair."""
    return lambda run_a, run_b, window: (method(run_a, window), method(run_b, window))


METHODS = {
    "iid": each_run(iid_variance),
    "whole-run Bartlett": each_run(bartlett_variance),
    "ar1": each_run(ar1_variance),
    "reml": each_run(reml_variance),
    "reml, φ to 0.995": each_run(reml_uncapped_variance),
    "reml, known noise": each_run(reml_known_noise_variance),
}


def excludes_zero(delta: np.ndarray, fit_a, fit_b) -> np.ndarray:
    """Whether each pair's 95% interval for delta, from the two runs' (variance, df), excludes zero."""
    (variance_a, df_a), (variance_b, df_b) = fit_a, fit_b
    df = intervals.welch_df(variance_a, df_a, variance_b, df_b)
    finite = np.isfinite(df)
    t = intervals.t_quantile((1 - LEVEL) / 2, np.where(finite, df, 1e9))
    quantile = np.where(finite, t, NormalDist().inv_cdf(0.5 + LEVEL / 2))
    return np.abs(delta) > quantile * np.sqrt(variance_a + variance_b)


def oracle_power(phi: float, window: int, difference: float, drift_sd: float, noise_sd: float) -> float:
    """Power of a z test that knows the true variance: the ceiling for any method."""
    variance = intervals.window_variance(drift_sd**2, phi, noise_sd**2, window)
    z = NormalDist().inv_cdf(0.5 + LEVEL / 2)
    shift = difference / math.sqrt(2 * variance)
    return NormalDist().cdf(shift - z) + NormalDist().cdf(-shift - z)


def cell(run_a: Runs, run_b: Runs, window: int, methods: dict) -> dict:
    """Null rate and, at POWER_PHI, power per method: every method's variance is shift-invariant, so the runs' fits
    serve for the shifted pairs too."""
    delta = run_b.values[:, -window:].mean(axis=1) - run_a.values[:, -window:].mean(axis=1)
    row = {}
    for name, method in methods.items():
        fit_a, fit_b = method(run_a, run_b, window)
        row[name] = excludes_zero(delta, fit_a, fit_b).mean()
        if run_a.phi == POWER_PHI:
            row[name, "power"] = [excludes_zero(delta + d, fit_a, fit_b).mean() for d in DIFFERENCES]
    return row


def study(
    pairs: int,
    epochs: int,
    seed: int,
    drift_sd: float = DRIFT_SD,
    noise_sd: float = NOISE_SD,
) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for trend in (False, True):
        for window in WINDOWS:
            for phi in PHIS:
                run_a, run_b = (simulate(rng, pairs, epochs, phi, trend, drift_sd, noise_sd) for _ in range(2))
                row = {"trend": trend, "window": window, "phi": phi, **cell(run_a, run_b, window, METHODS)}
                if phi == POWER_PHI:
                    row["oracle", "power"] = [oracle_power(phi, window, d, drift_sd, noise_sd) for d in DIFFERENCES]
                rows.append(row)
    return rows


def markdown_table(header: list[str], lines: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(x) + " |" for x in lines)]


def markdown(rows: list[dict]) -> str:
    names = list(METHODS)

    def label(row: dict) -> list[str]:
        return ["learning" if row["trend"] else "flat", str(row["window"])]

    def share(row: dict, key) -> str:
        return "/".join(f"{p:.0%}" for p in np.atleast_1d(row[key])) if key in row else "—"

    null_header = ["trend", "window", "φ", *[f"{name}: null excl. 0" for name in names]]
    null_lines = [[*label(row), f"{row['phi']:g}", *[share(row, name) for name in names]] for row in rows]
    differences = ", ".join(f"{d:g}" for d in DIFFERENCES)
    power_header = ["trend", "window", *[f"{name}: power {differences}" for name in [*names, "oracle"]]]
    powered = [row for row in rows if row["phi"] == POWER_PHI]
    power_lines = [[*label(row), *[share(row, (name, "power")) for name in [*names, "oracle"]]] for row in powered]
    caption = f"Power at φ = {POWER_PHI} (share of pairs with a true difference whose interval excludes zero):"
    return "\n".join(
        [*markdown_table(null_header, null_lines), "", caption, "", *markdown_table(power_header, power_lines)]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=400, help="simulated pairs per cell")
    parser.add_argument("--epochs", type=int, default=200, help="epochs per run (the window is the last ones)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--drift-sd", type=float, default=DRIFT_SD, help="standard deviation of the AR(1) drift")
    parser.add_argument("--noise-sd", type=float, default=NOISE_SD, help="standard deviation of the sampling noise")
    args = parser.parse_args(argv)
    print(
        f"{args.pairs} pairs per cell, {args.epochs} epochs per run, seed {args.seed}, drift sd {args.drift_sd:g}, "
        f"noise sd {args.noise_sd:g}, {GROUPS} groups an epoch, nominal level {LEVEL:.0%}.\n"
    )
    rows = study(args.pairs, args.epochs, args.seed, args.drift_sd, args.noise_sd)
    print(markdown(rows))


if __name__ == "__main__":
    main()
