"""The simulation study behind the warehouse's interval method: how often 95% contrast intervals exclude zero when
two runs have no true difference, and how often they find a true one, on autocorrelated reward curves.

    python -m pipelines.stats.study [--pairs 1000] [--epochs 200] [--seed 1] [--drift-sd 0.04] [--noise-sd 0.03]

Each simulated run is T per-epoch mean rewards: a common curve (flat, or a learning trend 0.2 + 0.5(1 − e^(−t/80))),
an AR(1) drift of coefficient φ and standard deviation 0.04 (the policy's slow wander), and white sampling noise of
standard deviation 0.03 (the epoch's finite batch). Two runs of a pair are independent; with a true difference the
second run's curve is shifted by it. The compared quantity is the mean of the last `window` epochs of each run.
Prints a Markdown table (the one in docs/statistics.md).
"""

from __future__ import annotations

import argparse
import math
from statistics import NormalDist

import numpy as np

from pipelines.stats import intervals

PHIS = (0.0, 0.5, 0.8, 0.9, 0.95)
WINDOWS = (25, 50, 100)
DIFFERENCES = (0.05, 0.10, 0.15)
POWER_PHI = 0.9
DRIFT_SD = 0.04
NOISE_SD = 0.03
LEVEL = 0.95


def simulate(
    rng: np.random.Generator,
    pairs: int,
    epochs: int,
    phi: float,
    trend: bool,
    drift_sd: float = DRIFT_SD,
    noise_sd: float = NOISE_SD,
) -> np.ndarray:
    """pairs × epochs per-epoch mean rewards of independent runs with no difference between them."""
    innovations = rng.standard_normal((pairs, epochs)) * drift_sd * math.sqrt(1 - phi**2)
    drift = np.empty((pairs, epochs))
    drift[:, 0] = rng.standard_normal(pairs) * drift_sd
    for t in range(1, epochs):
        drift[:, t] = phi * drift[:, t - 1] + innovations[:, t]
    t = np.arange(epochs)
    curve = 0.2 + 0.5 * (1 - np.exp(-t / 80)) if trend else np.full(epochs, 0.45)
    return curve + drift + rng.standard_normal((pairs, epochs)) * noise_sd


def iid_variance(values: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """The window's epochs as independent draws (what the plain bootstrap assumes), normal quantile."""
    return values[:, -window:].var(axis=1, ddof=1) / window, np.full(len(values), np.inf)


def bartlett_variance(values: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Whole-run long-run variance, Bartlett kernel, Andrews' AR(1) plug-in bandwidth, no trend removal."""
    size = values.shape[1]
    gamma1 = intervals.autocovariances(values, 1)
    rho = np.clip(gamma1[:, 1] / gamma1[:, 0], -0.99, 0.99)
    bandwidth = 1.1447 * (4 * rho**2 / ((1 - rho) ** 2 * (1 + rho) ** 2) * size) ** (1 / 3)
    lags = int(min(size - 1, bandwidth.max()))
    gamma = intervals.autocovariances(values, lags)
    weights = np.clip(1 - np.arange(1, lags + 1)[None, :] / (bandwidth[:, None] + 1), 0, None)
    return (gamma[:, 0] + 2 * (gamma[:, 1:] * weights).sum(axis=1)) / window, np.full(len(values), np.inf)


def ar1_variance(values: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """The warehouse's method (pipelines.stats.intervals)."""
    fitted = intervals.fit(values, np.arange(values.shape[1], dtype=float), window)
    return fitted["variance"], intervals.run_df(fitted["fit_effective_n"])


def ar1_normal_variance(values: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """The same variance with a normal quantile: shows what the small-sample t quantile is for."""
    return ar1_variance(values, window)[0], np.full(len(values), np.inf)


METHODS = {
    "iid": iid_variance,
    "whole-run Bartlett": bartlett_variance,
    "ar1": ar1_variance,
    "ar1, normal quantile": ar1_normal_variance,
}


def excludes_zero(method, run_a: np.ndarray, run_b: np.ndarray, window: int) -> np.ndarray:
    variance_a, df_a = method(run_a, window)
    variance_b, df_b = method(run_b, window)
    delta = run_b[:, -window:].mean(axis=1) - run_a[:, -window:].mean(axis=1)
    df = intervals.welch_df(variance_a, df_a, variance_b, df_b)
    finite = np.isfinite(df)
    quantile = np.where(
        finite, intervals.t_quantile((1 - LEVEL) / 2, np.where(finite, df, 1e9)), NormalDist().inv_cdf(0.5 + LEVEL / 2)
    )
    return np.abs(delta) > quantile * np.sqrt(variance_a + variance_b)


def oracle_power(phi: float, window: int, difference: float, drift_sd: float, noise_sd: float) -> float:
    """Power of a z test that knows the true variance: the ceiling for any method."""
    variance = intervals.window_variance(drift_sd**2, phi, noise_sd**2, window)
    z = NormalDist().inv_cdf(0.5 + LEVEL / 2)
    shift = difference / math.sqrt(2 * variance)
    return NormalDist().cdf(shift - z) + NormalDist().cdf(-shift - z)


def study(pairs: int, epochs: int, seed: int, drift_sd: float = DRIFT_SD, noise_sd: float = NOISE_SD) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for trend in (False, True):
        for window in WINDOWS:
            for phi in PHIS:
                run_a, run_b = (simulate(rng, pairs, epochs, phi, trend, drift_sd, noise_sd) for _ in range(2))
                row = {"trend": trend, "window": window, "phi": phi}
                for name, method in METHODS.items():
                    row[name] = excludes_zero(method, run_a, run_b, window).mean()
                    if phi == POWER_PHI:
                        row[name, "power"] = [
                            excludes_zero(method, run_a, run_b + d, window).mean() for d in DIFFERENCES
                        ]
                if phi == POWER_PHI:
                    row["oracle", "power"] = [oracle_power(phi, window, d, drift_sd, noise_sd) for d in DIFFERENCES]
                rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    names = list(METHODS)
    header = ["trend", "window", "φ", *[f"{name}: null excl. 0" for name in names]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append(
            "| "
            + " | ".join(
                [
                    "learning" if row["trend"] else "flat",
                    str(row["window"]),
                    f"{row['phi']:g}",
                    *[f"{row[name]:.0%}" for name in names],
                ]
            )
            + " |"
        )
    powered = [row for row in rows if row["phi"] == POWER_PHI]
    header = [
        "trend",
        "window",
        *[f"{name}: power {', '.join(f'{d:g}' for d in DIFFERENCES)}" for name in [*names, "oracle"]],
    ]
    lines += [
        "",
        f"Power at φ = {POWER_PHI} (share of pairs with a true difference whose interval excludes zero):",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in powered:
        lines.append(
            "| "
            + " | ".join(
                [
                    "learning" if row["trend"] else "flat",
                    str(row["window"]),
                    *["/".join(f"{p:.0%}" for p in row[name, "power"]) for name in [*names, "oracle"]],
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000, help="simulated pairs per cell")
    parser.add_argument("--epochs", type=int, default=200, help="epochs per run (the window is the last ones)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--drift-sd", type=float, default=DRIFT_SD, help="standard deviation of the AR(1) drift")
    parser.add_argument("--noise-sd", type=float, default=NOISE_SD, help="standard deviation of the sampling noise")
    args = parser.parse_args(argv)
    print(
        f"{args.pairs} pairs per cell, {args.epochs} epochs per run, seed {args.seed}, drift sd {args.drift_sd:g}, "
        f"noise sd {args.noise_sd:g}, nominal level {LEVEL:.0%}.\n"
    )
    print(markdown(study(args.pairs, args.epochs, args.seed, args.drift_sd, args.noise_sd)))


if __name__ == "__main__":
    main()
