"""Runs a Dagster run's steps on the workers of an existing Dask cluster: dagster-dask's executor, arguments sealed.

dagster-dask submits each step with Dagster's run, job and execution-state records as arguments; current Dask reads a
tuple argument as a task to unpack, and those records are tuples that refuse to be iterated. Here the same per-step
function (dagster_dask.executor.query_on_dask_worker) gets them pickled in one bytes argument, which Dask passes on
as it is. Everything else is dagster-dask's executor: one Dask task per step, a step submitted after those it
depends on, the step's events sent back to the run.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import dagster as dg


def _step_on_worker(dependencies: list, sealed: bytes) -> list:
    """One step, on a Dask worker; dependencies (the futures of the steps before it) only order the tasks."""
    from dagster_dask.executor import query_on_dask_worker

    return query_on_dask_worker(dependencies, *pickle.loads(sealed))


def _executor_class():
    import dask.distributed

    # Dagster's private helpers, as dagster-dask's own execute uses them: pyproject.toml bounds dagster-dask (and with
    # it dagster) to the versions this was tested with.
    from dagster._core.errors import raise_execution_interrupts
    from dagster._utils import iterate_with_context
    from dagster_dask.executor import DaskExecutor, get_dask_resource_requirements

    class SealedDaskExecutor(DaskExecutor):
        def execute(self, plan_context, execution_plan):
            if not plan_context.instance.is_persistent:
                raise dg.DagsterInvariantViolationError(
                    "the Dask executor needs a persistent Dagster instance, which its workers open by reference"
                )
            job_name = plan_context.job_name
            with dask.distributed.Client(self.cluster_configuration["address"]) as client:
                futures: dict = {}
                for level in execution_plan.get_steps_to_execute_by_level():
                    for step in level:
                        dependencies = [
                            futures[key] for step_input in step.step_inputs for key in step_input.dependency_keys
                        ]
                        sealed = pickle.dumps(
                            (
                                plan_context.reconstructable_job,
                                plan_context.dagster_run,
                                plan_context.run_config,
                                [step.key],
                                plan_context.instance.get_ref(),
                                execution_plan.known_state,
                            )
                        )
                        futures[step.key] = client.submit(
                            _step_on_worker,
                            dependencies,
                            sealed,
                            key=f"{job_name}.{step.key}.{plan_context.run_id}",
                            resources=get_dask_resource_requirements(step.tags),
                            pure=False,
                        )
                done = dask.distributed.as_completed(list(futures.values()), with_results=True)
                for _, events in iterate_with_context(raise_execution_interrupts, done):
                    yield from events

    return SealedDaskExecutor


@dg.executor(
    name="dask",
    config_schema={"address": dg.Field(str, description="The scheduler, tcp://host:8786.")},
    requirements=dg.multiple_process_executor_requirements(),
)
def dask_cluster_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """Runs each step as a task on the Dask cluster whose scheduler is at `address`."""
    return _executor_class()("existing", {"address": init_context.executor_config["address"]})


@contextmanager
def local_cluster(
    workers: int, folder: Path, env: Mapping[str, str] | None = None, timeout: float = 60
) -> Iterator[str]:
    """A Dask scheduler and `workers` single-threaded workers, each a process of its own on loopback, logging into
    folder; yields the scheduler's address, and kills them all on leaving (for tests and the benchmark)."""
    from distributed import Client

    folder.mkdir(parents=True, exist_ok=True)
    scheduler_file = folder / "scheduler.json"
    env = dict(os.environ if env is None else env)

    def start(name: str, args: list[str]) -> subprocess.Popen:
        with (folder / f"{name}.log").open("wb") as log:
            return subprocess.Popen([sys.executable, "-m", *args], env=env, stdout=log, stderr=subprocess.STDOUT)

    scheduler = ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
    worker = ["distributed.cli.dask_worker", "--nthreads", "1", "--no-nanny", "--no-dashboard"]
    processes = []
    try:
        processes.append(start("scheduler", [*scheduler, "--scheduler-file", str(scheduler_file)]))
        processes += [
            start(f"worker-{n}", [*worker, "--scheduler-file", str(scheduler_file), "--name", f"worker-{n}"])
            for n in range(1, workers + 1)
        ]
        deadline = time.monotonic() + timeout
        while not scheduler_file.exists():
            if time.monotonic() > deadline or processes[0].poll() is not None:
                raise RuntimeError(f"the Dask scheduler did not start; see {folder / 'scheduler.log'}")
            time.sleep(0.2)
        address = json.loads(scheduler_file.read_text())["address"]
        with Client(address, timeout=timeout) as client:
            client.wait_for_workers(workers, timeout=max(1.0, deadline - time.monotonic()))
        yield address
    finally:
        for process in processes:
            process.kill()  # nothing of theirs is kept: no graceful close to wait for
        for process in processes:
            process.wait(timeout=30)
