"""grpo-warehouse: build the warehouse, write the sample release, query the tables."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from pipelines.build import BuildError, build_warehouse, configure
from pipelines.release.discover import LAYOUTS
from pipelines.settings import DEFAULT_WAREHOUSE, ENV_LAKE, ENV_WAREHOUSE, published_path, warehouse_dir


class CommandError(Exception):
    """A reason the command could not do its work, printed on one line."""


def _warehouse_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--warehouse",
        default=None,
        help=f"warehouse folder (default: ${ENV_WAREHOUSE} or ./{DEFAULT_WAREHOUSE})",
    )


class _Parser(argparse.ArgumentParser):
    """argparse with a refusal on one line (its usage block is what --help is for); subcommands' parsers too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("grpo-warehouse")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(version unknown: not installed)"


# Over 60 lines: one declaration per command and flag, the CLI's reference read top to bottom.
def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="grpo-warehouse", description=__doc__)
    top.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = top.add_subparsers(dest="command", required=True)

    build = commands.add_parser("build", help="materialize every asset against the releases")
    build.add_argument(
        "--release",
        action="extend",
        nargs="+",  # --release DIR/* as a shell expands it
        default=[],
        metavar="DIR",
        help="a release folder of run folders; several after one flag or the flag repeated (default: the bundled "
        "sample release)",
    )
    build.add_argument("--registry", metavar="FILE", help="CSV of run attributes overriding what run names tell")
    build.add_argument(
        "--lake",
        metavar="DIR",
        help=f"where the Parquet lake is: a folder or a bucket prefix s3://bucket/prefix (default: ${ENV_LAKE} or "
        "the warehouse's lake folder)",
    )
    build.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes for the ingest and the figures (default: $GRPO_WORKERS, or one per core)",
    )
    build.add_argument(
        "--remove-release",
        action="append",
        default=[],
        metavar="NAME",
        help="let every run of this release (by its folder name) leave the warehouse; without it, a "
        "build that would remove all of a release's runs is refused",
    )
    build.add_argument(
        "--full-scan",
        action="store_true",
        help="look at every epoch file, also of runs whose folders have not changed since they went "
        "quiet (finds files rewritten in place; the nightly refresh does this)",
    )
    build.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a run loaded no epoch or far fewer than its epoch entries, a release "
        "loaded none, or a registry row names no run (for scheduled refreshes that should page someone)",
    )
    build.add_argument(
        "--wait",
        type=float,
        default=600,
        metavar="SECONDS",
        help="how long to wait for another build of the same warehouse to finish (default 600)",
    )
    build.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a metric or check parameter, e.g. ci_method=reml or final_window=100; repeat for several "
        "(docs/configuration.md lists them)",
    )
    _warehouse_arg(build)

    sample = commands.add_parser("sample", help="write the deterministic sample releases")
    sample.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help="the folder to write the releases in: a new or empty folder, or one an earlier sample wrote (it holds "
        "its .sample.json); anything else is refused, never overwritten",
    )
    sample.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help="the random seed, 0 or more (default 0): the same seed and scale write the same bytes",
    )
    sample.add_argument("--scale", type=int, default=1, help="write K times as many runs (for benchmarks)")
    sample.add_argument(
        "--layout",
        choices=LAYOUTS,
        help="place every run's epoch documents this way, with transcript-like files beside them "
        "(default: the multi-target release flat, the binary one in epoch folders)",
    )

    show = commands.add_parser("show", help="print a trajectory's transcript, headed by its run, epoch and reward")
    show.add_argument("trajectory_id", help="the trajectory's id (fact_trajectories.trajectory_id)")
    show.add_argument("--run", metavar="RUN_ID", help="the run, when the id is in several")
    show.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: the messages, wrapped; json: the record as its file holds it",
    )
    show.add_argument("--width", type=int, default=None, help="wrap text at N columns (default: the terminal's)")
    _warehouse_arg(show)

    sql = commands.add_parser("sql", help="run a read-only query against the published warehouse")
    sql.add_argument(
        "query",
        help='DuckDB SQL, e.g. "select * from run_summary"; several statements separated by ; with --format table',
    )
    sql.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="table (default: a boxed table of at most --max-rows rows), csv or json (every row, one result)",
    )
    sql.add_argument(
        "--max-rows",
        type=int,
        default=100,
        metavar="N",
        help="rows shown by --format table (default 100; csv and json print all)",
    )
    _warehouse_arg(sql)
    return top


# Flags naming a folder or file, where an empty value (an unset shell variable, "$REL") would fall back to the
# default: the bundled sample release built in place of the user's, without a word.
_PATH_FLAGS = ("release", "warehouse", "registry", "lake")


def _refuse_empty_paths(args) -> None:
    for flag in _PATH_FLAGS:
        value = getattr(args, flag, None)
        if any(item is not None and not item.strip() for item in (value if isinstance(value, list) else [value])):
            raise CommandError(f"--{flag} is given an empty value: name a folder or file, or leave the flag out")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        _refuse_empty_paths(args)
        if args.command == "build":
            return run_build(args)
        if args.command == "sample":
            return run_sample(args)
        if args.command == "show":
            return run_show(args)
        return run_sql(args)
    except (CommandError, BuildError) as exc:
        print(f"grpo-warehouse {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"grpo-warehouse {args.command}: interrupted", file=sys.stderr)
        return 130


def run_sample(args) -> int:
    import shlex

    from pipelines.release.sample import SampleRefusal, write_sample

    if args.scale < 1:
        raise CommandError(f"--scale must be 1 or more, not {args.scale}")
    if args.seed < 0:
        raise CommandError(f"--seed must be 0 or more, not {args.seed}")
    started = time.perf_counter()
    try:
        folders = write_sample(
            args.out, seed=args.seed, scale=args.scale, progress=lambda msg: print(msg, flush=True), layout=args.layout
        )
    except SampleRefusal as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:
        raise CommandError(f"cannot write {exc.filename or args.out}: {exc.strerror or exc}") from None
    print(
        f"wrote {len(folders)} release folder(s) under {args.out.absolute()} in {time.perf_counter() - started:.1f} s:"
    )
    for folder in folders:
        print(f"  {folder}")
    releases = " ".join(f"--release {shlex.quote(str(folder.absolute()))}" for folder in folders)
    print(f"build its warehouse with:\n  grpo-warehouse build {releases}")
    return 0


def run_build(args) -> int:
    if not args.wait >= 0:  # also refuses NaN
        raise CommandError(f"--wait must be 0 or more seconds, not {args.wait}")
    config = configure(
        args.release, args.registry, args.workers, args.warehouse, args.remove_release, args.param, args.lake
    )
    not_loading = build_warehouse(config, args.full_scan, args.wait)
    if args.strict and not_loading:
        print(f"grpo-warehouse build: --strict: {'; '.join(not_loading)}", file=sys.stderr)
        return 1
    return 0


# Types polars holds exactly as DuckDB gives them; any other scalar is written as DuckDB's own text of it (wide and
# exact numbers, intervals, variants, time zones, infinite dates), which is what --format table shows.
_CSV_AS_IS = {"BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"}
_CSV_AS_IS |= {"FLOAT", "DOUBLE", "VARCHAR", "UUID"}


def _csv_columns(relation):
    """The relation with list/struct/map columns as JSON text (CSV cannot hold them) and each scalar polars would not
    hold exactly as DuckDB's text of it."""
    columns = []
    for name, kind in zip(relation.columns, relation.types, strict=True):
        quoted = '"' + name.replace('"', '""') + '"'
        if kind.id in ("list", "array", "struct", "map", "union"):
            columns.append(f"to_json({quoted}) as {quoted}")
        elif kind.id.upper() not in _CSV_AS_IS:
            columns.append(f"cast({quoted} as varchar) as {quoted}")
        else:
            columns.append(quoted)
    return relation.project(", ".join(columns))


def run_show(args) -> int:
    import shutil

    import duckdb

    from pipelines.show import ShowError, find_trajectory, read_record, render

    path = published_path(Path(args.warehouse or warehouse_dir()))
    if not path.exists():
        raise CommandError(f"no warehouse at {path}; run `grpo-warehouse build` first")
    if args.width is not None and args.width < 20:
        raise CommandError(f"--width must be 20 or more, not {args.width}")
    try:
        trajectory = find_trajectory(path, args.trajectory_id, args.run)
        if trajectory.transcript_path is None and args.format == "json":
            raise ShowError(f"trajectory {args.trajectory_id} has no transcript in its run's files")
        data, record = None, None
        if trajectory.transcript_path is not None:
            data, record = read_record(trajectory, args.trajectory_id)
    except (ShowError, duckdb.Error) as exc:
        raise CommandError(str(exc).splitlines()[0]) from None
    if args.format == "json":
        sys.stdout.write(data.decode("utf-8", "replace") + "\n")  # the record's JSON text, as its file holds it
    else:
        width = args.width or min(shutil.get_terminal_size((100, 40)).columns, 120)
        sys.stdout.write(render(trajectory, args.trajectory_id, record, width))
    return 0


def run_sql(args) -> int:
    import duckdb

    if args.max_rows < 1:
        raise CommandError(f"--max-rows must be 1 or more, not {args.max_rows}")
    path = published_path(Path(args.warehouse or warehouse_dir()))
    if not path.exists():
        raise CommandError(f"no warehouse at {path}; run `grpo-warehouse build` first")
    # Read-only, and no file access beyond the warehouse file: a query can neither write nor read elsewhere.
    config = {"enable_external_access": False, "lock_configuration": True}
    try:
        with duckdb.connect(str(path), read_only=True, config=config) as con:
            statements = con.extract_statements(args.query)
            if not statements:
                raise CommandError('the query is empty: give a SQL statement, e.g. "select * from run_summary"')
            if len(statements) > 1 and args.format != "table":
                raise CommandError(
                    f"--format {args.format} prints one result, and the query holds "
                    f"{len(statements)} statements: run them one at a time, or with --format table"
                )
            for number, statement in enumerate(statements):
                relation = con.sql(statement.query)
                if relation is None:  # a statement with no result (SET, PRAGMA, ...)
                    continue
                if len(statements) > 1:
                    print(f"{'' if number == 0 else chr(10)}-- statement {number + 1}: {statement.query.strip()}")
                # DuckDB counts rows in 64 bits; no result holds more, so a larger --max-rows shows them all.
                _print_result(relation, args.format, min(args.max_rows, sys.maxsize))
    except duckdb.Error as exc:  # DuckDB's whole message: the hint, the candidates and the caret under the error
        raise CommandError(str(exc).strip()) from None
    return 0


def _print_result(relation, output_format: str, max_rows: int) -> None:
    import shutil

    if output_format == "csv":
        sys.stdout.write(_csv_columns(relation).pl().write_csv())
    elif output_format == "json":
        _write_json(relation)
    else:
        width = shutil.get_terminal_size((200, 40)).columns
        relation.show(max_width=width, max_rows=max_rows)


# A JSON string, or a token DuckDB's to_json writes for a non-finite float, which JSON has no number for.
_JSON_NON_FINITE = re.compile(r'"(?:[^"\\]|\\.)*"|-?Infinity|NaN')


def _write_json(relation) -> None:
    """The rows as a JSON list of records, each written by DuckDB's to_json (every type exactly: wide integers and
    decimals as their digits, intervals and timestamps as DuckDB's text, a variant as its value). NaN and the
    infinities are written as the strings "NaN", "Infinity" and "-Infinity", so that a null stays the only null."""
    alias = "row"
    while alias in relation.columns:  # a column of that name would be read in place of the row
        alias += "_"
    rows = relation.query(alias, f'select to_json("{alias}") from "{alias}"')
    records = (_JSON_NON_FINITE.sub(_quoted_token, record) for (record,) in rows.fetchall())
    sys.stdout.write("[" + ",".join(records) + "]\n")


def _quoted_token(match: re.Match) -> str:
    token = match.group(0)
    return token if token.startswith('"') else f'"{token}"'


if __name__ == "__main__":
    sys.exit(main())
