"""What a contrast's interval supports, in the report's words: which quantity it is about, under which assumption,
and whether a claim is made (after Holm's adjustment for the ablation's claims) or why not."""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from pipelines.exports.escape import md_text
from pipelines.stats.sql_functions import MAX_SEEDS


def finite(value) -> bool:
    """A value that is there and not NaN."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def interval_name(contrast: dict, level: str) -> str:
    """How a contrast's interval was computed, in words."""
    if contrast["unit"] == "runs":
        return f"{level} t interval over seeds"
    if contrast["ci_method"] == "iid":
        return f"{level} iid interval"
    return f"{level} interval (`{contrast['ci_method']}`, which allows for autocorrelated epochs)"


@dataclass(frozen=True)
class Claims:
    """What an ablation's contrasts say about the claims made in it: how many (the family Holm's adjustment runs
    over), and whether its arms of several seeds show how much seeds vary."""

    count: int
    seeds_vary: bool

    @classmethod
    def of(cls, contrasts: pl.DataFrame) -> Claims:
        count = contrasts["resolved_holm"].is_not_null().sum() if "resolved_holm" in contrasts.columns else 0
        sizes = [contrasts[column] for column in ("n_runs_a", "n_runs_b") if column in contrasts.columns]
        return cls(int(count), any((size >= 2).any() for size in sizes))


def seeds_sentence(contrast: dict, claims: Claims) -> str:
    """How many seeds an arm a claim of this size about the configurations would need, and from what."""
    needed = contrast.get("seeds_needed")
    if needed is None:
        return "seeds (several runs per arm, the registry's `arm` column) would make it one."
    if needed > MAX_SEEDS:
        count = f"more than {MAX_SEEDS:,} seeds an arm"
    elif claims.seeds_vary:
        count = f"about {needed} seeds an arm"
    else:
        count = f"at least {needed} seeds an arm"
    basis = (
        "the spread between the seeds of this ablation's arms"
        if claims.seeds_vary
        else "these runs' own variances, and seeds vary at least as much"
    )
    return f"one about them, of this size, would need {count} (a two-sample t test at 80% power, from {basis})."


def verdict(contrast: dict, level: str, claims: Claims = Claims(1, False)) -> str:
    """What the interval supports, after Holm's adjustment for the ablation's claims: resolved only when a method
    that holds its level here excludes zero; and about which quantity (these runs, or the configurations)."""
    reason = contrast.get("resolved_reason")
    if not (finite(contrast["ci_low"]) and finite(contrast["ci_high"])):
        if contrast["unit"] == "runs":
            return (
                " There is no interval: one of the two arms has a single run, which shows nothing of its "
                "configuration's spread; more seeds of it would."
            )
        return f" There is no interval ({md_text(reason or 'too few epochs in a window to estimate one')})."
    excludes = contrast["ci_low"] > 0 or contrast["ci_high"] < 0
    if contrast["ci_method"] == "iid":
        return (
            " This interval treats autocorrelated epochs as independent and is far too narrow, so it resolves "
            "nothing" + (" even though it excludes zero." if excludes else "; it includes zero anyway.")
        )
    if contrast["unit"] == "runs":
        scope = (
            " The claim is about the configurations: their mean matched reward over seeds, the seeds taken as "
            "independent draws."
        )
    else:
        scope = (
            " The claim is about these two runs, not about their configurations (the expected means of their "
            "windows, were the same runs replayed): " + seeds_sentence(contrast, claims)
        )
    resolved = contrast.get("resolved_holm")
    if resolved is None:
        because = md_text(reason or "the method cannot back one here")
        return f" The interval is shown, but no claim is made: {because}." + scope
    adjusted = f" after Holm's adjustment for the ablation's {claims.count} claims" if claims.count > 1 else ""
    if resolved:
        return f" The interval excludes zero{adjusted}: the lead is resolved at {level}." + scope
    if excludes:
        return f" The interval excludes zero, but not{adjusted}: the lead is not resolved at {level}." + scope
    return f" The interval includes zero: the lead is not resolved at {level}." + scope


def interval_kind(ci_method: str) -> str:
    if ci_method == "iid":
        return "treats the window's epochs as independent, which they are not: too narrow"
    return (
        "allows for autocorrelated epochs: it is for the expected mean of the run's window were the same run "
        "replayed, assuming its curve is a smooth trend plus stationary drift and noise"
    )


def method_sentence(ci_method: str) -> str:
    seeds = "; arms of several seeds by Student's t on their runs' matched rewards"
    if ci_method == "iid":
        return (
            "`iid`: the window's epochs taken as independent, which per-epoch rewards are not, so no lead is called "
            "resolved" + seeds
        )
    caveat = {"ar1": ", too liberal when the drift is slow", "reml": ", too liberal when a curve varies slowly"}
    shape = (
        "their paired difference is a random walk from the runs' start plus stationary drift and noise"
        if ci_method == "structural"
        else "each curve is a smooth trend plus stationary drift and noise"
    )
    return (
        f"`{ci_method}`{caveat.get(ci_method, '')}: for the difference of two runs' expected window means, were the "
        f"same runs replayed, assuming {shape} (docs/statistics.md shows how often "
        "it excludes zero between runs with no true difference, by the curves' shape)" + seeds + "; a lead is "
        "resolved after Holm's adjustment for its ablation's claims"
    )
