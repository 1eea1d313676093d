"""A step run in a fresh Python process and measured: wall time, CPU, and peak memory of its whole process tree.

The child reports its own high-water mark (VmHWM) and the parent samples the tree's RSS (the ingest's pool workers
included), so that a step's peak memory is its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

QUERY_REPEAT = 5  # the query is timed this many times, median reported
CHECKOUT = Path(__file__).resolve().parents[1]  # the checkout this harness is in, and whose package it measures


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(c) for c in handle.read().split()]
    except OSError:
        pass
    return found


def status_bytes(pid: int, field_name: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(field_name):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree_rss(pid: int) -> tuple[int, int]:
    """The RSS of a process and all its descendants: (sum, largest single process)."""
    total = largest = 0
    stack = [pid]
    while stack:
        current = stack.pop()
        rss = status_bytes(current, "VmRSS:")
        total += rss
        largest = max(largest, rss)
        stack += _children(current)
    return total, largest


@dataclass
class Measurement:
    step: str
    wall_seconds: float  # the child process, interpreter start and imports included
    peak_rss_bytes: int  # the largest single process of the tree (its VmHWM, or sampled for pool workers)
    peak_tree_rss_bytes: int  # the whole tree (child + pool workers), sampled every 50 ms; shared pages counted twice
    result: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """The work itself as the child timed it (imports excluded); the wall time when the child did not say."""
        return self.result.get("seconds", self.wall_seconds)


def step_environment() -> dict[str, str]:
    """The steps' environment. The releases measured were written minutes ago, and a run counts as quiet (settled
    from its folder stamps) an hour after its last write: unless GRPO_QUIET_SECONDS is set, the steps take runs as
    quiet at once, so the rebuild figures are those of a release left alone for longer, as a published one is."""
    from pipelines.settings import ENV_QUIET_SECONDS

    return {ENV_QUIET_SECONDS: "0", **os.environ, "PYTHONPATH": checkout_path()}


def checkout_path() -> str:
    """PYTHONPATH with the checkout first: a step's process imports this harness and this copy of the package,
    installed or not, wherever the bench was started from."""
    return os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))


def measure(step: str, log_dir: Path, **kwargs) -> Measurement:
    """Runs one step in a fresh process and measures it, once what earlier steps wrote is on the disk: otherwise a
    step after a fresh build at 100x (GBs written) waits seconds for the kernel writing them back."""
    log_dir.mkdir(parents=True, exist_ok=True)
    os.sync()
    stamp = f"{step}_{time.monotonic_ns()}"
    out_path, err_path = log_dir / f"{stamp}.out", log_dir / f"{stamp}.err"
    command = [sys.executable, "-m", "benchmarks", "--child", step, json.dumps(kwargs)]
    peak_tree = peak_single = 0
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True, env=step_environment())
        finished = threading.Event()

        def sample() -> None:
            nonlocal peak_tree, peak_single
            while not finished.is_set():
                tree, single = _tree_rss(process.pid)
                peak_tree, peak_single = max(peak_tree, tree), max(peak_single, single)
                finished.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            _, status = os.waitpid(process.pid, 0)
        except BaseException:  # interrupted: take the step and its pool workers down too
            os.killpg(process.pid, signal.SIGTERM)
            finished.set()
            raise
        wall = time.perf_counter() - started
        finished.set()
        sampler.join()
        process.returncode = os.waitstatus_to_exitcode(status)
    output = out_path.read_text(errors="replace")
    line = next((ln for ln in reversed(output.splitlines()) if ln.startswith("BENCH_RESULT ")), None)
    if process.returncode != 0 or line is None:
        tail = "\n".join(err_path.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"bench step {step} failed (exit {process.returncode}); see {err_path}:\n{tail}")
    result = json.loads(line.removeprefix("BENCH_RESULT "))
    peak = max(result.get("vmhwm_bytes", 0), peak_single)
    return Measurement(step, wall, peak, max(peak_tree, peak), result)


def measure_query(warehouse: Path) -> Measurement:
    """`grpo-warehouse sql "select 1"` as a user runs it (the console script's own two lines), timed from outside:
    its wall time and CPU, interpreter start-up and imports included."""
    import resource

    command = [
        sys.executable,
        "-c",
        "import sys; from pipelines.cli import main; sys.exit(main())",
        "sql",
        "select 1",
        "--warehouse",
        str(warehouse),
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=step_environment())
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return Measurement("query", wall, 0, 0, {"seconds": wall, "cpu_seconds": cpu})
