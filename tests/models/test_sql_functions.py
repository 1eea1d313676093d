"""The interval statistics as the SQL models call them (pipelines/stats/sql_functions.py): once per run and per
pair, with BLAS on one thread, a failed fit reported on its row, the seeds a claim would need, and the models' code
versions following the statistics' code."""

import functools
import math

import duckdb
import numpy as np
import pytest
from autocorrelated import ablation_epochs, ar1_curves
from mart_fixture import build_marts, create_staging, rows
from statsmodels.stats.power import tt_ind_solve_power
from threadpoolctl import threadpool_info

from pipelines.code_versions import closure, import_graph
from pipelines.stats import intervals, sql_functions


def built(curves: np.ndarray, ablation_size: int, **params) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    documents, runs = ablation_epochs(curves, ablation_size)
    create_staging(con, documents, runs, extras=False)
    build_marts(con, {"final_window": 20, **params})
    return con


def test_each_run_and_each_pair_is_fitted_once_with_blas_on_one_thread(monkeypatch):
    calls = {"run_interval": 0, "pair_interval": 0}
    threads = set()

    def counted(name):
        function, parameters, returns = sql_functions.FUNCTIONS[name]

        @functools.wraps(function)  # DuckDB reads the number of arguments from the signature
        def call(*args):
            calls[name] += 1
            return function(*args)

        monkeypatch.setitem(sql_functions.FUNCTIONS, name, (call, parameters, returns))

    def blas_threads(*args, **kwargs):
        threads.update(library["num_threads"] for library in threadpool_info() if library["user_api"] == "blas")
        return fit(*args, **kwargs)

    counted("run_interval")
    counted("pair_interval")
    fit = intervals.run_interval
    monkeypatch.setattr(intervals, "run_interval", blas_threads)
    # two ablations of three runs: 6 runs and 3 + 3 pairs, whose fits' numbers each model reads several times
    con = built(ar1_curves(seed=2, runs=6, epochs=60, phi=0.8), 3)
    assert calls == {"run_interval": 6, "pair_interval": 6}
    assert threads == {1}
    assert con.execute("select count(*), count(ci_low), count(p_value) from ablation_contrasts").fetchone() == (6, 6, 6)


def test_a_fit_that_fails_leaves_its_row_without_an_interval_and_says_why(monkeypatch):
    real = intervals.run_interval

    def failing(epochs, values, *args, **kwargs):
        if values[0] == first:
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        return real(epochs, values, *args, **kwargs)

    curves = ar1_curves(seed=4, runs=2, epochs=40, phi=0.5)
    first = curves[0, 0]
    monkeypatch.setattr(intervals, "run_interval", failing)
    con = built(curves, 2)
    summary = rows(con, "select * from run_summary order by run_id")
    assert [(r["matched_ci_low"], r["matched_ci_high"]) for r in summary][0] == (None, None)
    assert summary[0]["matched_ci_note"] == (
        "no interval: the fit failed on these values (LinAlgError: Matrix is not positive definite)"
    )
    assert summary[1]["matched_ci_low"] is not None and summary[1]["matched_ci_note"] is None


def test_an_unknown_method_fails_the_model_naming_it():
    with pytest.raises(Exception, match="ci_method must be one of .*not 'bootstrap'"):
        built(ar1_curves(seed=4, runs=2, epochs=40, phi=0.5), 2, ci_method="bootstrap")


@pytest.mark.parametrize("effect", [0.3, 0.5, 0.8, 1.0, 1.5, 2.5])
def test_seeds_per_arm_is_the_two_sample_t_tests_sample_size(effect):
    # statsmodels' solver on the same noncentral t power: the smallest whole number of seeds reaching 80%
    expected = math.ceil(tt_ind_solve_power(effect_size=effect, alpha=0.05, power=0.8))
    assert sql_functions.seeds_per_arm(-effect * 0.02, 0.02**2, 0.95) == expected


def test_seeds_per_arm_for_a_large_difference_is_two_seeds_by_simulation():
    # A difference of 6 standard deviations: two seeds an arm already find it in 80% of simulated experiments (the
    # noncentral t's far tail underflows to NaN in scipy, which must not push the answer up).
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 20000, 2))
    b += 6
    difference = b.mean(axis=1) - a.mean(axis=1)
    pooled = np.sqrt((a.var(axis=1, ddof=1) + b.var(axis=1, ddof=1)) / 2 * (2 / 2))
    found = np.mean(np.abs(difference / pooled) > 4.302653)  # t quantile, 2 degrees of freedom
    assert found >= 0.8
    assert sql_functions.seeds_per_arm(6.0, 1.0, 0.95) == 2
    assert sql_functions.seeds_per_arm(0.0, 1.0, 0.95) is None
    assert sql_functions.seeds_per_arm(1e-4, 1.0, 0.95) == sql_functions.MAX_SEEDS + 1


def test_the_models_code_version_holds_the_statistics_modules():
    # the code version every model's fingerprint holds is that of the modules the models' assets import, where the
    # functions the SQL calls live: a change to the statistics computes the tables again
    modules = closure(["pipelines.defs.models.assets"], import_graph())
    assert {"pipelines.stats.sql_functions", "pipelines.stats.intervals"} <= modules
