"""grpo-warehouse: build the warehouse, write the sample release, query the tables."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from pipelines.release.discover import LAYOUTS
from pipelines.settings import DEFAULT_WAREHOUSE, ENV_REGISTRY, ENV_RELEASES, ENV_WAREHOUSE, ENV_WORKERS, published_path


class CommandError(Exception):
    """A reason the command could not do its work, printed on one line."""


def _warehouse_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--warehouse",
        default=os.environ.get(ENV_WAREHOUSE, DEFAULT_WAREHOUSE),
        help=f"warehouse folder (default: ${ENV_WAREHOUSE} or ./{DEFAULT_WAREHOUSE})",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="grpo-warehouse", description=__doc__)
    commands = top.add_subparsers(dest="command", required=True)

    build = commands.add_parser("build", help="materialize every asset against the releases")
    build.add_argument("--release", action="append", default=[], metavar="DIR",
                       help="a release folder of run folders; repeat for several (default: the bundled sample release)")
    build.add_argument("--registry", metavar="FILE", help="CSV of run attributes overriding what run names tell")
    build.add_argument("--workers", type=int, default=0, help="ingest processes (default: one per core)")
    build.add_argument("--full-scan", action="store_true",
                       help="look at every epoch file, also of runs whose folders have not changed since they went "
                            "quiet (finds files rewritten in place; the nightly refresh does this)")
    build.add_argument("--wait", type=float, default=600, metavar="SECONDS",
                       help="how long to wait for another build of the same warehouse to finish (default 600)")
    _warehouse_arg(build)

    sample = commands.add_parser("sample", help="write the deterministic sample releases")
    sample.add_argument("--out", required=True, type=Path, metavar="DIR")
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--scale", type=int, default=1, help="write K times as many runs (for benchmarks)")
    sample.add_argument("--layout", choices=LAYOUTS,
                        help="place every run's epoch documents this way, with transcript-like files beside them "
                             "(default: the multi-target release flat, the binary one in epoch folders)")

    bench = commands.add_parser("bench", help="time ingest, rebuilds and the whole build against baselines")
    bench.add_argument("--scale", type=int, action="append", metavar="K",
                       help="benchmark a sample release K times the published size; repeat for several (default 1 and 10)")
    bench.add_argument("--release", action="append", default=[], metavar="DIR",
                       help="benchmark these release folders instead (a linked copy is modified, never the original)")
    bench.add_argument("--workdir", metavar="DIR", help="where releases and lakes go (default: a temporary folder)")
    bench.add_argument("--workers", type=int, default=0, help="ingest processes (default: one per core)")
    bench.add_argument("--repeat", type=int, default=1, help="run each step N times and report medians")
    bench.add_argument("--json", metavar="FILE", help="write the raw results as JSON")
    bench.add_argument("--keep", action="store_true", help="keep the generated releases and lakes")
    bench.add_argument("--no-pandas", action="store_true", help="skip the naive pandas baseline (slow at 100x)")
    bench.add_argument("--no-serial", action="store_true", help="skip the 1-worker ingest (the parallel speedup)")
    bench.add_argument("--no-build", action="store_true",
                       help="skip the whole-build figures (Dagster and the models; most of the time at 100x)")

    sql = commands.add_parser("sql", help="run a read-only query against the published warehouse")
    sql.add_argument("query")
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")
    sql.add_argument("--max-rows", type=int, default=100, metavar="N",
                     help="rows shown by --format table (default 100; csv and json print all)")
    _warehouse_arg(sql)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "build":
            return run_build(args)
        if args.command == "sample":
            return run_sample(args)
        if args.command == "bench":
            from pipelines.bench import main as run_bench

            return run_bench(args)
        return run_sql(args)
    except CommandError as exc:
        print(f"grpo-warehouse {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"grpo-warehouse {args.command}: interrupted", file=sys.stderr)
        return 130


def run_sample(args) -> int:
    from pipelines.release.sample import write_sample

    if args.scale < 1:
        raise CommandError("--scale must be 1 or more")
    started = time.perf_counter()
    folders = write_sample(args.out, seed=args.seed, scale=args.scale, progress=lambda msg: print(msg, flush=True),
                           layout=args.layout)
    print(f"wrote {len(folders)} release folder(s) under {args.out.absolute()} in {time.perf_counter() - started:.1f} s:")
    for folder in folders:
        print(f"  {folder}")
    return 0


def run_build(args) -> int:
    from filelock import FileLock, Timeout

    for release in args.release:
        if not Path(release).is_dir():
            raise CommandError(f"release folder {release} does not exist or is not a folder")
    if args.registry and not Path(args.registry).is_file():
        raise CommandError(f"registry file {args.registry} does not exist")
    # The code location reads its configuration from the environment, as it does under `dg dev`.
    os.environ[ENV_WAREHOUSE] = str(Path(args.warehouse).absolute())
    if args.release:
        os.environ[ENV_RELEASES] = os.pathsep.join(str(Path(r).absolute()) for r in args.release)
    else:
        os.environ.pop(ENV_RELEASES, None)
    if args.registry:
        os.environ[ENV_REGISTRY] = str(Path(args.registry).absolute())
    if args.workers:
        os.environ[ENV_WORKERS] = str(args.workers)

    warehouse = Path(args.warehouse).absolute()
    warehouse.mkdir(parents=True, exist_ok=True)
    lock = FileLock(warehouse / ".build.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"another build of {warehouse} is running; waiting up to {args.wait:.0f} s for it to finish", flush=True)
        try:
            lock.acquire(timeout=args.wait)
        except Timeout:
            raise CommandError(f"another build of {warehouse} is still running after {args.wait:.0f} s") from None
    try:
        return _build_locked(warehouse, args.full_scan)
    finally:
        lock.release()


# Merge two blocks of run partitions to ingest into one Dagster run when fewer than this many unchanged partitions
# lie between them: a separate run costs about as much as Dagster recording that many partitions' materializations.
MAX_PARTITION_GAP = 25


def _build_locked(warehouse: Path, full_scan: bool = False) -> int:
    import dagster as dg

    from pipelines.definitions import defs as load_defs
    from pipelines.defs.ingest.partitions import run_partitions, run_range_tags
    from pipelines.defs.resources import WarehouseConfig
    from pipelines.lake import select_runs
    from pipelines.release.discover import find_run_folders
    from pipelines.warehouse_db import lake_dir

    started = time.perf_counter()
    config = WarehouseConfig.from_env()
    if not config.releases:
        print(f"no --release given: building the bundled sample release (in {config.sample_dir})", flush=True)
    roots = config.release_roots()
    runs, _, problems = find_run_folders(roots)
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    # Only the runs whose lake partitions are out of date are handed to run_lake: for every selected partition and
    # lake table Dagster stores a planned-materialization event when it creates the run and a materialization in
    # the step (4 x 500 of each at 100x, ~15 s), which would otherwise grow with the release, not with the change.
    stale = set(select_runs(runs.values(), lake_dir(warehouse), config.max_file_bytes, full_scan).stale)
    print(f"found {len(runs)} run(s) in {len(roots)} release(s); {_describe(stale & set(runs), stale - set(runs))}",
          flush=True)

    definitions = load_defs()
    job = definitions.resolve_job_def("refresh_warehouse")
    persistent = bool(os.environ.get("DAGSTER_HOME"))
    instance = dg.DagsterInstance.get() if persistent else dg.DagsterInstance.ephemeral()
    with instance:
        known = set(instance.get_dynamic_partitions(run_partitions.name))
        new = set(runs) - known
        # A partition new to a kept instance is materialized once, even if the lake already holds the run (built
        # with another instance), so that the models' automation does not wait on a partition that looks missing.
        selected = stale | new if persistent else stale
        if new:
            # The selected partitions last: a range of consecutive keys, so one Dagster run, covers them all.
            instance.add_dynamic_partitions(run_partitions.name, sorted(new, key=lambda key: (key in selected, key)))
        keys = instance.get_dynamic_partitions(run_partitions.name)
        blocks = _partition_blocks(keys, selected, MAX_PARTITION_GAP)
        run_config = {"loggers": {"terminal": {"config": {"log_level": "INFO"}}}}
        lake_keys = _asset_keys(definitions, partitioned=True)
        # Blocks apart from the last are ingested on their own; the last goes with every other asset.
        for block in blocks[:-1]:
            result = job.execute_in_process(instance=instance, run_config=run_config, raise_on_error=False,
                                            tags=run_range_tags(block[0], block[-1]), asset_selection=lake_keys)
            if not result.success:
                break
        else:
            if blocks:
                result = job.execute_in_process(instance=instance, run_config=run_config, raise_on_error=False,
                                                tags=run_range_tags(blocks[-1][0], blocks[-1][-1]))
            else:
                result = job.execute_in_process(instance=instance, run_config=run_config, raise_on_error=False,
                                                asset_selection=_asset_keys(definitions, partitioned=False))
    if not result.success:
        failure = next((e for e in result.all_events if e.is_step_failure), None)
        reason = failure.event_specific_data.error.message.strip().splitlines()[-1] if failure else "the run failed"
        step = f" in {failure.step_key}" if failure else ""
        raise CommandError(f"the build failed{step}: {reason}")
    print_summary(warehouse, time.perf_counter() - started)
    return 0


def _describe(stale: set[str], gone: set[str]) -> str:
    def listed(names: set[str]) -> str:
        names = sorted(names)
        return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    parts = [f"{len(stale)} run(s) to ingest (new, changed or removed files): {listed(stale)}"] if stale else []
    parts += [f"{len(gone)} run(s) gone from the releases, leaving the lake: {listed(gone)}"] if gone else []
    return "; ".join(parts) or "the lake is up to date with every run, nothing to ingest"


def _partition_blocks(keys: list[str], selected: set[str], max_gap: int) -> list[list[str]]:
    """The selected keys as blocks of consecutive keys in the instance's order, each block one partition range; two
    blocks with fewer than max_gap unselected keys between them become one (the keys between included)."""
    blocks: list[list[str]] = []
    previous = -1
    for index, key in enumerate(keys):
        if key not in selected:
            continue
        if blocks and index - previous - 1 < max_gap:
            blocks[-1].extend(keys[previous + 1: index + 1])
        else:
            blocks.append([key])
        previous = index
    return blocks


def _asset_keys(definitions, partitioned: bool) -> list:
    """The keys of the partitioned assets (the run lake), or of every other asset."""
    graph = definitions.resolve_asset_graph()
    return [key for key in graph.get_all_asset_keys() if (graph.get(key).partitions_def is not None) == partitioned]


def print_summary(warehouse: Path, seconds: float) -> None:
    import duckdb

    path = published_path(warehouse)
    with duckdb.connect(str(path), read_only=True) as con:
        def count(sql: str) -> int:
            return con.execute(sql).fetchone()[0]

        runs = count("select count(*) from dim_runs")
        epochs = count("select count(*) from fact_epochs")
        trajectories = count("select count(*) from fact_trajectories")
        quarantined = count("select count(*) from file_inventory where status = 'quarantined'")
        problems = count("select count(*) from ingest_errors")
    print(
        f"\nwarehouse built in {seconds:.1f} s: {runs} runs, {epochs:,} epochs, {trajectories:,} trajectories, "
        f"{quarantined} file(s) quarantined, {problems} row(s) in ingest_errors"
    )
    print(f"  DuckDB file: {path}")
    print(f"  Parquet lake: {warehouse / 'lake'}")
    if (warehouse / "exports").is_dir():
        print(f"  exports: {warehouse / 'exports'}")
    if (warehouse / "exports" / "explorer" / "index.html").is_file():
        print(f"  run explorer: {warehouse / 'exports' / 'explorer' / 'index.html'} (open it in a browser)")
    print('  try: grpo-warehouse sql "select * from run_summary"')


def _portable(relation, nested_as_json: bool):
    """The relation with DECIMAL columns as DOUBLE (JSON numbers), and list/struct/map columns as JSON text if asked
    (CSV cannot hold them)."""
    nested = ("[]", "STRUCT", "MAP", "UNION")
    columns = []
    for name, kind in zip(relation.columns, relation.types):
        quoted = '"' + name.replace('"', '""') + '"'
        if nested_as_json and any(marker in str(kind) for marker in nested):
            columns.append(f"to_json({quoted}) as {quoted}")
        elif str(kind).startswith("DECIMAL"):
            columns.append(f"cast({quoted} as double) as {quoted}")
        else:
            columns.append(quoted)
    return relation.project(", ".join(columns))


def run_sql(args) -> int:
    import shutil

    import duckdb

    path = published_path(Path(args.warehouse))
    if not path.exists():
        raise CommandError(f"no warehouse at {path}; run `grpo-warehouse build` first")
    # Read-only, and no file access beyond the warehouse file: a query can neither write nor read elsewhere.
    config = {"enable_external_access": False, "lock_configuration": True}
    try:
        with duckdb.connect(str(path), read_only=True, config=config) as con:
            relation = con.sql(args.query)
            if relation is None:  # a statement with no result (SET, PRAGMA, ...)
                return 0
            if args.format == "csv":
                sys.stdout.write(_portable(relation, nested_as_json=True).pl().write_csv())
            elif args.format == "json":
                sys.stdout.write(_portable(relation, nested_as_json=False).pl().write_json() + "\n")
            else:
                width = shutil.get_terminal_size((200, 40)).columns
                relation.show(max_width=width, max_rows=args.max_rows)
    except duckdb.Error as exc:
        raise CommandError(str(exc).splitlines()[0]) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
