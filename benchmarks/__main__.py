"""`python -m benchmarks`: times the ingest, rebuilds and the whole build against baselines (docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROG = "python -m benchmarks"


class _Parser(argparse.ArgumentParser):
    """argparse with a refusal on one line, as grpo-warehouse's own commands refuse."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}\n")


def parser() -> argparse.ArgumentParser:
    bench = _Parser(prog=PROG, description="Times the ingest, rebuilds and the whole build (docs/benchmarks.md).")
    bench.add_argument(
        "--scale",
        type=int,
        action="append",
        metavar="K",
        help="benchmark a sample release K times the published size; repeat for several (default 1 and 10)",
    )
    bench.add_argument(
        "--release",
        action="append",
        default=[],
        metavar="DIR",
        help="benchmark these release folders instead (a linked copy is modified, never the original)",
    )
    bench.add_argument("--workdir", metavar="DIR", help="where releases and lakes go (default: a temporary folder)")
    bench.add_argument("--workers", type=int, default=0, help="ingest processes (default: one per core)")
    bench.add_argument("--repeat", type=int, default=1, help="run each step N times and report medians")
    bench.add_argument("--json", metavar="FILE", help="write the raw results as JSON")
    bench.add_argument("--keep", action="store_true", help="keep the generated releases and lakes")
    bench.add_argument("--no-pandas", action="store_true", help="skip the naive pandas baseline (slow at 100x)")
    bench.add_argument("--no-serial", action="store_true", help="skip the 1-worker ingest (the parallel speedup)")
    bench.add_argument(
        "--no-build",
        action="store_true",
        help="skip the whole-build figures (Dagster and the models; most of the time at 100x)",
    )
    bench.add_argument(
        "--scale-out",
        action="store_true",
        help="also ingest from and into an S3 server on loopback (moto), build with the lake there, and build on two "
        "Dask workers (docs/scale-out.md)",
    )
    return bench


def refusal(args: argparse.Namespace) -> str | None:
    """Why the bench cannot run with these arguments, in one line; None when it can."""
    if any(k < 1 for k in args.scale or []):
        return "--scale must be 1 or more"
    if args.repeat < 1:
        return "--repeat must be 1 or more"
    for release in args.release:
        if not Path(release).is_dir():
            return f"release folder {release} does not exist or is not a folder"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "--child":  # one measured step, in the process the parent started for it
        from benchmarks.steps import child_main

        child_main(argv[1], argv[2])
        return 0
    args = parser().parse_args(argv)
    if (why := refusal(args)) is not None:
        print(f"{PROG}: {why}", file=sys.stderr)
        return 2
    from benchmarks.plan import DEFAULT_SCALES, run_bench

    scales = [] if args.release and not args.scale else (args.scale or list(DEFAULT_SCALES))
    try:
        run_bench(
            scales,
            args.release,
            args.workdir,
            args.workers,
            args.repeat,
            args.json,
            args.keep,
            with_pandas=not args.no_pandas,
            with_serial=not args.no_serial,
            with_build=not args.no_build,
            with_scale_out=args.scale_out,
        )
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
