"""The simulation study behind the warehouse's intervals: per structure of reward curve, how often a 95% contrast
resolves a pair of runs with no true difference, how often it finds a true difference of 0.10, and how often a run's
own interval covers its quantity (the expected mean of its window).

    python -m pipelines.stats.study [--pairs 400] [--seed 1] [--quick]

Runs are simulated by pipelines.stats.simulate: by default 200 epochs of a learning curve plus an AR(1) drift (φ 0.9,
standard deviation 0.04) plus sampling noise from 16 GRPO groups (standard deviation 0.03), the window the last 50
epochs; each row changes one thing. The two runs of a pair are independent draws of the same process; with a true
difference the second run's curve is shifted by it. Arms of seeds compare the window means of k runs an arm. Rates
come with their Wilson 95% range. Prints the Markdown table that docs/statistics.md shows condensed.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from statistics import NormalDist

import numpy as np

from pipelines.stats import intervals, structural
from pipelines.stats.simulate import Structure, expected_levels, simulate

LEVEL = 0.95
DIFFERENCE = 0.10
WINDOW = 50
Z = NormalDist().inv_cdf(0.5 + LEVEL / 2)


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the study: a structure of curve, and the seeds of each arm (1: a contrast of two runs)."""

    label: str
    structure: Structure
    seeds: int = 1


ROWS = (
    Row("AR(1) φ 0", Structure(phi=0.0)),
    Row("AR(1) φ 0.5", Structure(phi=0.5)),
    Row("AR(1) φ 0.8", Structure(phi=0.8)),
    Row("AR(1) φ 0.9", Structure()),
    Row("AR(1) φ 0.95", Structure(phi=0.95)),
    Row("AR(1) φ 0.9, flat curve", Structure(trend=False)),
    Row("AR(1) φ 0.95, noise sd 0.0625", Structure(phi=0.95, noise_sd=0.0625)),
    Row("binary rewards (16 groups of 4)", Structure(binary=True)),
    Row("random walk, step sd 0.002", Structure(walk_sd=0.002)),
    Row("random walk, step sd 0.003", Structure(walk_sd=0.003)),
    Row("random walk, step sd 0.005", Structure(walk_sd=0.005)),
    Row("long memory d 0.3, sd 0.05", Structure(memory_d=0.3, memory_sd=0.05)),
    Row("long memory d 0.4, sd 0.05", Structure(memory_d=0.4, memory_sd=0.05)),
    Row("long memory d 0.4, sd 0.1", Structure(memory_d=0.4, memory_sd=0.1)),
    Row("slow component, ⅓ of the drift's variance, φ 0.99", Structure(slow_share=1 / 3)),
    Row("slow component, ½ of the drift's variance, φ 0.99", Structure(slow_share=0.5)),
    Row("level jump 0.05 in the window", Structure(jump=0.05)),
    Row("level jump 0.1 in the window", Structure(jump=0.1)),
    Row("level jump 0.2 in the window", Structure(jump=0.2)),
    Row("level jump 0.2 in half the runs", Structure(jump=0.2, jump_chance=0.5)),
    Row("short runs: 80 epochs", Structure(epochs=80)),
    Row("short runs: 50 epochs", Structure(epochs=50)),
    Row("short runs: 30 epochs", Structure(epochs=30)),
    Row("short runs: 12 epochs", Structure(epochs=12)),
    Row("AR(1) φ 0.95, short runs: 50 epochs", Structure(phi=0.95, epochs=50)),
    Row("arms of 2 seeds", Structure(), seeds=2),
    Row("arms of 3 seeds", Structure(), seeds=3),
    Row("arms of 5 seeds", Structure(), seeds=5),
    Row("arms of 3 seeds, random walk 0.005", Structure(walk_sd=0.005), seeds=3),
)
QUICK = ("AR(1) φ 0.9", "binary rewards (16 groups of 4)", "random walk, step sd 0.005", "long memory d 0.4, sd 0.05")
QUICK += ("slow component, ½ of the drift's variance, φ 0.99", "level jump 0.2 in the window", "short runs: 30 epochs")
QUICK += ("arms of 3 seeds",)


def structural_pairs(a: np.ndarray, b: np.ndarray, window: int, noise: np.ndarray):
    """The default: the paired difference's variance and degrees of freedom, its noise's variance measured;
    claimable from PAIR_MIN_EPOCHS."""
    fitted = structural.fit(b - a, window, degree=0, noise=noise)
    claimable = np.full(len(a), a.shape[1] >= intervals.PAIR_MIN_EPOCHS)
    return fitted["variance"], fitted["df"], claimable


def reml_pairs(a: np.ndarray, b: np.ndarray, window: int, noise: np.ndarray):
    """The previous default: each run's `reml` variance, summed, with a normal quantile."""
    epochs = np.arange(a.shape[1], dtype=float)
    variance = intervals.reml_fit(a, epochs, window)["variance"] + intervals.reml_fit(b, epochs, window)["variance"]
    return variance, np.full(len(a), np.inf), np.full(len(a), a.shape[1] >= intervals.MIN_FIT_EPOCHS)


def iid_pairs(a: np.ndarray, b: np.ndarray, window: int, noise: np.ndarray):
    """The window's epochs taken as independent: each run's window variance over n, Welch's degrees of freedom."""
    variance_a, variance_b = (x[:, -window:].var(axis=1, ddof=1) / window for x in (a, b))
    df = intervals.welch_df(variance_a, window - 1, variance_b, window - 1)
    return variance_a + variance_b, df, np.ones(len(a), dtype=bool)


METHODS = {"structural": structural_pairs, "reml": reml_pairs, "iid": iid_pairs}


def resolved(delta: np.ndarray, variance: np.ndarray, df: np.ndarray, claimable: np.ndarray) -> np.ndarray:
    """Whether each contrast is claimed: claimable and its interval excludes zero."""
    return claimable & (variance > 0) & (np.abs(delta) > intervals.interval_quantile(LEVEL, df) * np.sqrt(variance))


def oracle_power(null_deltas: np.ndarray) -> float:
    """The power of a z test that knows the contrast's variance (the null deltas' mean square): any method's ceiling."""
    shift = DIFFERENCE / math.sqrt(np.mean(null_deltas**2))
    return NormalDist().cdf(shift - Z) + NormalDist().cdf(-shift - Z)


def run_coverage(values: np.ndarray, structure: Structure, window: int) -> float:
    """The share of runs whose own interval covers the expected mean of their window."""
    fitted = structural.fit(values, window, degree=intervals.TREND_DEGREE, walk=False)
    error = np.abs(values[:, -window:].mean(axis=1) - expected_levels(structure)[-window:].mean())
    return float(np.mean(error <= intervals.interval_quantile(LEVEL, fitted["df"]) * np.sqrt(fitted["variance"])))


def pairs_row(rng: np.random.Generator, row: Row, pairs: int, methods: dict) -> dict:
    """Null rate, power and the claimable share per method, the oracle's power and the runs' coverage."""
    (a, noise_a), (b, noise_b) = simulate(rng, row.structure, pairs), simulate(rng, row.structure, pairs)
    window = min(WINDOW, row.structure.epochs)
    delta = b[:, -window:].mean(axis=1) - a[:, -window:].mean(axis=1)
    result = {"oracle": oracle_power(delta), "coverage": run_coverage(a, row.structure, window)}
    for name, method in methods.items():
        variance, df, claimable = method(a, b, window, (noise_a + noise_b).mean(axis=1))
        null, power = (resolved(d, variance, df, claimable) for d in (delta, delta + DIFFERENCE))
        result[name] = {"null": int(null.sum()), "power": int(power.sum()), "claimable": float(claimable.mean())}
        # what a short run's interval would claim without the bound: the evidence for it
        result[name]["null if claimed"] = int(resolved(delta, variance, df, np.ones(len(a), dtype=bool)).sum())
    return result


def seeds_row(rng: np.random.Generator, row: Row, pairs: int) -> dict:
    """Arms of row.seeds runs each compared by intervals.arm_interval (Welch's t over the runs' window means)."""
    window = min(WINDOW, row.structure.epochs)
    means = simulate(rng, row.structure, 2 * pairs * row.seeds)[0][:, -window:].mean(axis=1)
    arms_a, arms_b = means.reshape(2, pairs, row.seeds)
    counts = {"null": 0, "power": 0}
    for values_a, values_b in zip(arms_a, arms_b, strict=True):
        for key, shift in (("null", 0.0), ("power", DIFFERENCE)):
            found = intervals.arm_interval(values_a, values_b + shift, level=LEVEL)
            counts[key] += found["claimable"] and (found["ci_low"] > 0 or found["ci_high"] < 0)
    return {
        "oracle": oracle_power(arms_b.mean(axis=1) - arms_a.mean(axis=1)),
        "t over runs": counts | {"claimable": 1.0},
    }


def study(pairs: int, seed: int, rows=ROWS, methods=METHODS) -> list[tuple[Row, dict]]:
    rng = np.random.default_rng(seed)
    return [(row, seeds_row(rng, row, pairs) if row.seeds > 1 else pairs_row(rng, row, pairs, methods)) for row in rows]


def wilson(successes: int, trials: int) -> tuple[float, float]:
    """The Wilson score 95% range of a binomial proportion."""
    share, spread = successes / trials, Z * math.sqrt(successes * (trials - successes) / trials + Z * Z / 4) / trials
    centre, scale = share + Z * Z / (2 * trials), 1 + Z * Z / trials
    return (centre - spread) / scale, (centre + spread) / scale


def rate(successes: int, trials: int) -> str:
    low, high = wilson(successes, trials)
    return f"{successes / trials:.1%} ({low:.1%}–{high:.1%})"


HEADER = ["structure (no true difference / a true 0.10)", "default: null pairs resolved", "default: power 0.10"]
HEADER += ["oracle's power", "a run's interval covers", "reml: null resolved", "iid: null resolved"]


def markdown_line(row: Row, result: dict, pairs: int) -> str:
    """One row of the table: the default's null rate and power with their Wilson ranges, the oracle's power, the
    runs' coverage and the other methods' null rates."""
    default = result.get("structural") or result["t over runs"]
    unclaimed = ""
    if default["claimable"] < 1:
        would = default["null if claimed"] / pairs
        unclaimed = f" ({1 - default['claimable']:.0%} not claimable; {would:.1%} if they were)"
    cells = [row.label, rate(default["null"], pairs) + unclaimed]
    cells += [rate(default["power"], pairs), f"{result['oracle']:.0%}"]
    cells += [f"{result['coverage']:.1%}" if "coverage" in result else "—"]
    cells += [f"{result[name]['null'] / pairs:.1%}" if name in result else "—" for name in ("reml", "iid")]
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=400, help="simulated pairs per row (400: minutes of CPU)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a subset of the rows (the default's hardest)")
    args = parser.parse_args(argv)
    rows = [row for row in ROWS if row.label in QUICK] if args.quick else ROWS
    print(
        f"{args.pairs} pairs per row, seed {args.seed}, window the last {WINDOW} epochs (all of a shorter run), "
        f"nominal level {LEVEL:.0%}; default = structural (arms of seeds: Welch's t over the runs).\n"
    )
    print("| " + " | ".join(HEADER) + " |\n|" + "---|" * len(HEADER), flush=True)
    for row in rows:  # each row as it is done, from its own seed (the same in the quick subset)
        result = study(args.pairs, args.seed + ROWS.index(row), [row])[0][1]
        print(markdown_line(row, result, args.pairs), flush=True)


if __name__ == "__main__":
    main()
