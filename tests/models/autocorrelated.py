"""Generated runs whose per-epoch mean rewards drift as an AR(1) process, for the interval tests."""

import numpy as np
from mart_fixture import epoch


def ar1_curves(
    seed: int, runs: int, epochs: int, phi: float, drift_sd: float = 0.04, noise_sd: float = 0.03, trend: bool = False
) -> np.ndarray:
    """runs × epochs per-epoch mean rewards: a shared curve, an AR(1) drift, white noise; no run truly differs."""
    rng = np.random.default_rng(seed)
    drift = np.empty((runs, epochs))
    drift[:, 0] = rng.standard_normal(runs) * drift_sd
    innovations = rng.standard_normal((runs, epochs)) * drift_sd * np.sqrt(1 - phi**2)
    for t in range(1, epochs):
        drift[:, t] = phi * drift[:, t - 1] + innovations[:, t]
    t = np.arange(epochs)
    curve = 0.2 + 0.5 * (1 - np.exp(-t / 80)) if trend else np.full(epochs, 0.45)
    return curve + drift + rng.standard_normal((runs, epochs)) * noise_sd


def ablation_epochs(curves: np.ndarray, ablation_size: int = 2) -> tuple[list[dict], list[tuple]]:
    """Epoch documents whose two rewards average to each curve value (group size 2), and (run, ablation, size)
    rows: consecutive runs form ablations of ablation_size runs."""
    documents, runs = [], []
    for index, curve in enumerate(curves):
        run_id = f"run_{index:03d}"
        runs.append((run_id, f"ablation_{index // ablation_size:03d}", 2))
        documents += [epoch(run_id, e, [value - 0.1, value + 0.1], [-1.0, 1.0]) for e, value in enumerate(curve)]
    return documents, runs
