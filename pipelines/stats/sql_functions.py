"""The interval statistics of pipelines.stats.intervals as DuckDB functions, registered for the SQL models that call
them: run_summary and ablation_contrasts call them with each run's series, so the numbers exist once."""

from __future__ import annotations

import math
import sys
from collections.abc import Collection
from contextlib import AbstractContextManager

import duckdb
import numpy as np
from duckdb import sqltypes
from threadpoolctl import ThreadpoolController

from pipelines.stats import intervals

NUMBERS = duckdb.list_type(sqltypes.DOUBLE)
# What run_interval and pair_interval/arm_interval return, as the SQL sees it: df is null for a normal quantile (an
# infinite df), and p_value, the two-sided p-value of zero on the interval's own distribution, is added here.
RUN_FIELDS = {
    "estimate": sqltypes.DOUBLE,
    "variance": sqltypes.DOUBLE,
    "df": sqltypes.DOUBLE,
    "ci_low": sqltypes.DOUBLE,
    "ci_high": sqltypes.DOUBLE,
    "effective_n": sqltypes.DOUBLE,
    "ar_coefficient": sqltypes.DOUBLE,
    "claimable": sqltypes.BOOLEAN,
    "reason": sqltypes.VARCHAR,
}
CONTRAST_FIELDS = {
    "delta": sqltypes.DOUBLE,
    "variance": sqltypes.DOUBLE,
    "df": sqltypes.DOUBLE,
    "ci_low": sqltypes.DOUBLE,
    "ci_high": sqltypes.DOUBLE,
    "p_value": sqltypes.DOUBLE,
    "claimable": sqltypes.BOOLEAN,
    "reason": sqltypes.VARCHAR,
}
# What a numerically hopeless series (values whose spread overflows, say) may raise inside a fit: the row then has no
# interval and says why, and the build goes on.
FIT_FAILURES = (ArithmeticError, ValueError, np.linalg.LinAlgError)
SEEDS_POWER = 0.8  # the power a configuration-level claim is planned for
MAX_SEEDS = 10_000  # beyond this many seeds per arm, "more than MAX_SEEDS"


_blas: tuple[int, ThreadpoolController] | None = None  # the BLAS libraries loaded, and how many modules were then


def _one_blas_thread() -> AbstractContextManager:
    """The BLAS libraries numpy and scipy load held to one thread while a function runs: the functions run inside a
    build whose DuckDB threads and ingest processes already use the cores, and OpenBLAS's threads spinning beside them
    cost up to twenty times the CPU of one thread. The libraries are looked for again after a new module is imported
    (looking costs milliseconds; a call, tens of microseconds)."""
    global _blas
    if _blas is None or _blas[0] != len(sys.modules):
        _blas = (len(sys.modules), ThreadpoolController())
    return _blas[1].limit(limits=1, user_api="blas")


def _finite(value) -> float | None:
    """A float the SQL can hold: None for a missing or non-finite value (an infinite df is a normal quantile)."""
    return float(value) if value is not None and math.isfinite(value) else None


def p_value(delta, variance, df) -> float | None:
    """The two-sided p-value of a zero difference for delta with the given variance, on Student's t with df degrees
    of freedom (the normal's when df is infinite or None): the interval delta ± q·√variance excludes zero when this
    is below 1 − level (to within the closed form intervals.py takes t quantiles by, at few degrees of freedom)."""
    if delta is None or variance is None or not (math.isfinite(delta) and variance > 0 and math.isfinite(variance)):
        return None
    from scipy import special  # imported by the first build step that needs it, not by every process loading the code

    statistic = abs(delta) / math.sqrt(variance)
    if df is None or math.isinf(df):
        return float(2 * special.ndtr(-statistic))
    return float(2 * special.stdtr(df, -statistic))


def _failed(fields: dict, exc: Exception) -> dict:
    reason = f"no interval: the fit failed on these values ({type(exc).__name__}: {exc})"
    return {name: None for name in fields} | {"claimable": False, "reason": reason}


def _checked_method(method: str) -> str:
    if method not in intervals.METHODS:
        raise ValueError(f"ci_method must be one of {', '.join(intervals.METHODS)}, not {method!r}")
    return method


def _series(*lists) -> list[np.ndarray]:
    """Lists of the SQL as float arrays, a null (an epoch with no finite mean, or no spread of groups) as NaN."""
    return [np.asarray(values, dtype=float) for values in lists]


def run_interval(epochs, values, noise, window, method, level, fit_epochs) -> dict:
    """intervals.run_interval on one run's series, as a row of RUN_FIELDS."""
    options = {"method": _checked_method(method), "level": level, "fit_epochs": fit_epochs}
    try:
        with _one_blas_thread():
            fitted = intervals.run_interval(*_series(epochs, values, noise), window, **options)
    except FIT_FAILURES as exc:
        return _failed(RUN_FIELDS, exc)
    return {name: _finite(fitted[name]) for name in RUN_FIELDS if name not in ("claimable", "reason")} | {
        "claimable": bool(fitted["claimable"]),
        "reason": fitted["reason"],
    }


def _contrast_row(fitted: dict) -> dict:
    return {
        "delta": _finite(fitted["delta"]),
        "variance": _finite(fitted["variance"]),
        "df": _finite(fitted["df"]),
        "ci_low": _finite(fitted["ci_low"]),
        "ci_high": _finite(fitted["ci_high"]),
        "p_value": p_value(fitted["delta"], fitted["variance"], fitted["df"]),
        "claimable": bool(fitted["claimable"]),
        "reason": fitted["reason"],
    }


def pair_interval(a_epochs, a_values, a_noise, b_epochs, b_values, b_noise, window, method, level, fit_epochs) -> dict:
    """intervals.pair_interval on two runs' series (the contrast b − a), as a row of CONTRAST_FIELDS."""
    options = {"method": _checked_method(method), "level": level, "fit_epochs": fit_epochs}
    try:
        series = _series(a_epochs, a_values, a_noise, b_epochs, b_values, b_noise)
        with _one_blas_thread():
            fitted = intervals.pair_interval(*series, window, **options)
    except FIT_FAILURES as exc:
        return _failed(CONTRAST_FIELDS, exc)
    return _contrast_row(fitted)


def arm_interval(values_a, values_b, level) -> dict:
    """intervals.arm_interval on two arms' matched rewards (the contrast b − a), as a row of CONTRAST_FIELDS."""
    try:
        with _one_blas_thread():
            fitted = intervals.arm_interval(*_series(values_a, values_b), level=level)
    except FIT_FAILURES as exc:
        return _failed(CONTRAST_FIELDS, exc)
    return _contrast_row(fitted)


def two_sample_power(seeds: int, effect: float, level: float) -> float:
    """The power of a two-sided two-sample t test at `level` with `seeds` values an arm, for a difference of `effect`
    standard deviations of one value (the noncentral t distribution). Each tail as one minus a lower tail: the
    distribution function far below a large shift underflows to NaN."""
    from scipy import special

    df = 2 * seeds - 2
    critical = special.stdtrit(df, (1 + level) / 2)
    shift = effect * math.sqrt(seeds / 2)
    return float((1 - special.nctdtr(df, shift, critical)) + (1 - special.nctdtr(df, -shift, critical)))


def seeds_per_arm(delta, variance, level) -> int | None:
    """How many seeds an arm a two-sample t test at `level` needs to find a difference of delta with SEEDS_POWER,
    when one seed's value varies with `variance`; None without a difference or a spread, MAX_SEEDS + 1 beyond
    MAX_SEEDS."""
    if delta is None or variance is None or not (math.isfinite(delta) and delta != 0 and 0 < variance < math.inf):
        return None
    effect = abs(delta) / math.sqrt(variance)
    if two_sample_power(MAX_SEEDS, effect, level) < SEEDS_POWER:
        return MAX_SEEDS + 1
    low, high = 2, MAX_SEEDS  # power grows with the seeds: the fewest reaching SEEDS_POWER, by bisection
    while low < high:
        middle = (low + high) // 2
        if two_sample_power(middle, effect, level) >= SEEDS_POWER:
            high = middle
        else:
            low = middle + 1
    return low


SERIES = [NUMBERS] * 3  # epochs, values, noise variances
OPTIONS = [sqltypes.BIGINT, sqltypes.VARCHAR, sqltypes.DOUBLE, sqltypes.BIGINT]  # window, method, level, fit_epochs
FUNCTIONS = {
    "run_interval": (run_interval, SERIES + OPTIONS, duckdb.struct_type(RUN_FIELDS)),
    "pair_interval": (pair_interval, SERIES + SERIES + OPTIONS, duckdb.struct_type(CONTRAST_FIELDS)),
    "arm_interval": (arm_interval, [NUMBERS, NUMBERS, sqltypes.DOUBLE], duckdb.struct_type(CONTRAST_FIELDS)),
    "seeds_per_arm": (seeds_per_arm, [sqltypes.DOUBLE, sqltypes.DOUBLE, sqltypes.DOUBLE], sqltypes.BIGINT),
}


def register_functions(con: duckdb.DuckDBPyConnection, names: Collection[str] = tuple(FUNCTIONS)) -> None:
    """Makes the named FUNCTIONS (default all) callable from the SQL run on con, where they are not already: a
    function registered on a cursor is seen by the database's other cursors."""
    # Listing the database's functions costs tens of milliseconds: done only for a model that calls one of them.
    present = {
        name
        for (name,) in con.execute(
            "select function_name from duckdb_functions() where function_name in ?", [list(names)]
        ).fetchall()
    }
    for name in names:
        function, parameters, returns = FUNCTIONS[name]
        if name not in present:
            # "special": a null argument reaches the function, which returns null itself (seeds_per_arm, mostly)
            con.create_function(name, function, parameters, returns, null_handling="special")
