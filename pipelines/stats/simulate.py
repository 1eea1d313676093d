"""Simulated reward curves of GRPO runs: a learning curve, an AR(1) drift, sampling noise from GRPO groups, and the
structures an AR(1) does not capture (a random walk, long memory, a slow component, a level jump, binary rewards).

Each epoch holds `groups` GRPO groups whose means scatter around the run's level, so the epoch's mean reward
carries sampling noise and, as in the warehouse's data, the spread of its group means estimates that noise's
variance (var of the group means / groups).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class Structure:
    """How a run's per-epoch mean reward is generated. The defaults are the AR(1) family: a learning curve plus an
    AR(1) drift of coefficient `phi` and standard deviation `drift_sd`, plus white sampling noise of `noise_sd`."""

    phi: float = 0.9
    drift_sd: float = 0.04
    noise_sd: float = 0.03
    epochs: int = 200
    trend: bool = True
    walk_sd: float = 0.0  # step sd of a random walk starting at zero at the run's first epoch
    memory_d: float = 0.0  # fractional integration of a long-memory component of sd `memory_sd`
    memory_sd: float = 0.03
    slow_share: float = 0.0  # a slow AR(1) component (coefficient slow_phi) of this share of the drift's variance
    slow_phi: float = 0.99
    jump: float = 0.0  # a level jump of this size at a uniformly drawn epoch of the last `jump_window` epochs
    jump_window: int = 50
    jump_chance: float = 1.0  # the share of runs that jump
    binary: bool = False  # each epoch's rewards are 0/1 draws (groups × group_size) at the run's level
    groups: int = 16
    group_size: int = 4


def learning_curve(epochs: int, trend: bool) -> np.ndarray:
    """The expected reward of every run at each epoch: a learning curve or a flat line."""
    t = np.arange(epochs)
    return 0.2 + 0.5 * (1 - np.exp(-t / 80)) if trend else np.full(epochs, 0.45)


def ar1(rng: np.random.Generator, runs: int, epochs: int, phi: float, sd: float) -> np.ndarray:
    """runs × epochs stationary AR(1) paths of coefficient phi and standard deviation sd."""
    innovations = rng.standard_normal((runs, epochs)) * sd * math.sqrt(1 - phi**2)
    path = np.empty((runs, epochs))
    path[:, 0] = rng.standard_normal(runs) * sd
    for t in range(1, epochs):
        path[:, t] = phi * path[:, t - 1] + innovations[:, t]
    return path


@functools.lru_cache(maxsize=16)
def _long_memory_factor(epochs: int, d: float) -> np.ndarray:
    """Cholesky factor of the autocorrelations of fractionally integrated noise: ρ(k) = ρ(k−1)(k − 1 + d)/(k − d)."""
    rho = np.ones(epochs)
    for k in range(1, epochs):
        rho[k] = rho[k - 1] * (k - 1 + d) / (k - d)
    lags = np.abs(np.subtract.outer(np.arange(epochs), np.arange(epochs)))
    return np.linalg.cholesky(rho[lags])


def long_memory(rng: np.random.Generator, runs: int, epochs: int, d: float, sd: float) -> np.ndarray:
    """runs × epochs stationary fractionally integrated noise (ARFIMA(0, d, 0)) of standard deviation sd, exact."""
    return rng.standard_normal((runs, epochs)) @ _long_memory_factor(epochs, d).T * sd


def levels(rng: np.random.Generator, structure: Structure, runs: int) -> np.ndarray:
    """runs × epochs expected rewards of each run's epochs: the learning curve plus every slow component."""
    s = structure
    level = learning_curve(s.epochs, s.trend) + ar1(rng, runs, s.epochs, s.phi, s.drift_sd)
    if s.walk_sd:
        level = level + np.cumsum(rng.standard_normal((runs, s.epochs)) * s.walk_sd, axis=1)
    if s.memory_d:
        level = level + long_memory(rng, runs, s.epochs, s.memory_d, s.memory_sd)
    if s.slow_share:
        level = level + ar1(rng, runs, s.epochs, s.slow_phi, s.drift_sd * math.sqrt(s.slow_share))
    if s.jump:
        start = s.epochs - min(s.jump_window, s.epochs)
        at = np.where(rng.random(runs) < s.jump_chance, rng.integers(start, s.epochs, size=runs), s.epochs)
        level = level + s.jump * (np.arange(s.epochs)[None, :] >= at[:, None])
    return level


def simulate(rng: np.random.Generator, structure: Structure, runs: int) -> tuple[np.ndarray, np.ndarray]:
    """runs × epochs mean rewards and each epoch's estimated sampling variance of its mean."""
    level = levels(rng, structure, runs)
    groups = structure.groups
    if structure.binary:
        chance = np.clip(level, 0.01, 0.99)[..., None, None]
        draws = rng.random((*level.shape, groups, structure.group_size)) < chance
        group_means = draws.mean(axis=3)
    else:
        group_means = level[..., None] + rng.standard_normal((*level.shape, groups)) * structure.noise_sd * math.sqrt(
            groups
        )
    return group_means.mean(axis=2), group_means.var(axis=2, ddof=1) / groups


def expected_levels(structure: Structure) -> np.ndarray:
    """Each epoch's expected reward over the structure's runs: the learning curve plus the jump's expected part."""
    s = structure
    expected = learning_curve(s.epochs, s.trend)
    if s.jump:
        start = s.epochs - min(s.jump_window, s.epochs)
        expected = expected + s.jump * s.jump_chance * np.clip(
            (np.arange(s.epochs) - start + 1) / (s.epochs - start), 0, 1
        )
    return expected
