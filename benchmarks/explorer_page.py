"""Measures explorer pages in headless Chromium: bytes, time until usable, and time per smoothing-slider change.

    python benchmarks/explorer_page.py WAREHOUSE/exports/explorer/index.html [more pages] [--changes 12]

"Usable" is the time from navigation to the page's first section drawn and its controls wired
(window.explorer.ready; the others are drawn as they near the screen); a slider change is the time from setting a
weight until every drawn section's charts have their new rows. Both are wall-clock times inside the browser: on a
loaded machine they are noisy, so each is reported as the median of several, with the CPU time of the browser's
processes (Linux's /proc) beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "ui"))

LOADS = 3


def browser():
    from ui_server import start_chromium

    return start_chromium(Path(tempfile.mkdtemp(prefix="explorer-bench-")))


def cpu_seconds(driver) -> float:
    """The CPU time (user and system) of the browser's processes so far: chromedriver's descendants in /proc."""
    parents, times = {}, {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def descends(pid: int) -> bool:
        while pid in parents and pid > 1:
            pid = parents[pid]
            if pid == driver.service.process.pid:
                return True
        return False

    return sum(cpu for pid, cpu in times.items() if descends(pid))


def load(driver, page: Path) -> tuple[float, float]:
    """Seconds until the page is usable: wall time from navigation start, and the renderer's CPU time."""
    driver.get("about:blank")
    before = cpu_seconds(driver)
    driver.get(page.as_uri())
    ready = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "window.explorer.ready.then(() => done(performance.now()), e => done(String(e)));"
    )
    if not isinstance(ready, int | float):
        raise SystemExit(f"{page}: the explorer failed to draw: {ready}")
    return ready / 1000, cpu_seconds(driver) - before


def slider(driver, changes: int) -> tuple[list[float], float]:
    """Seconds per smoothing change (weights spread over the slider), and the renderer's CPU per change."""
    before = cpu_seconds(driver)
    times = driver.execute_async_script(
        """
        const [changes, done] = [arguments[0], arguments[arguments.length - 1]];
        (async () => {
          const times = [];
          for (let i = 0; i < changes; i++) {
            const start = performance.now();
            await window.explorer.setWeight(0.5 + 0.45 * i / changes);
            await new Promise(requestAnimationFrame); // the frame that shows it
            times.push((performance.now() - start) / 1000);
          }
          done(times);
        })();""",
        changes,
    )
    return times, (cpu_seconds(driver) - before) / changes


def measure(page: Path, changes: int) -> dict:
    driver = browser()
    driver.set_script_timeout(300)
    try:
        loads = [load(driver, page) for _ in range(LOADS)]
        runs = driver.execute_script("return window.explorer.sections.map(s => s.ablation.runs.length)")
        times, cpu = slider(driver, changes)
    finally:
        driver.quit()
    return {
        "page": str(page),
        "bytes": page.stat().st_size,
        "runs_per_section": runs,
        "usable_s_median": statistics.median(wall for wall, _ in loads),
        "usable_cpu_s_median": statistics.median(cpu for _, cpu in loads),
        "slider_s_median": statistics.median(times),
        "slider_s_max": max(times),
        "slider_cpu_s_per_change": cpu,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--changes", type=int, default=12, help="slider changes timed per page")
    args = parser.parse_args(argv)
    for page in args.pages:
        print(json.dumps(measure(page.resolve(), args.changes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
