"""A value no build can use is refused before any work starts, on one line naming it, with exit status 2; a build
that would remove runs by mistake is refused; a failure inside a Dagster step reaches the user as its own cause."""

import dagster as dg
import pytest
from helpers import epoch_document, write_epoch_file

from pipelines.build import failure_reason
from pipelines.cli import main
from pipelines.defs.resources import WarehouseConfig
from pipelines.lake.paths import register_run
from pipelines.lake.runs import ingest_runs
from pipelines.release.releases import find_run_folders
from pipelines.removals import removal_refusal
from pipelines.settings import ConfigError


@pytest.fixture
def release(tmp_path):
    for run in ("run_a", "run_b"):
        write_epoch_file(tmp_path / "rel" / run, 0, epoch_document(0, n=2))
    return tmp_path / "rel"


CASES = [
    (["--workers", "-1"], {}, "--workers must be 0 (one per core) or more, not -1"),
    (["--workers", str(2**64)], {}, f"--workers must be a 64-bit integer, not {2**64}\n"),
    (["--wait", "-5"], {}, "--wait must be 0 or more seconds, not -5.0"),
    (["--wait", "nan"], {}, "--wait must be 0 or more seconds, not nan"),
    ([], {"GRPO_WORKERS": "two"}, "GRPO_WORKERS='two' is not a whole number"),
    (
        [],
        {"GRPO_WORKERS": "-3"},
        "workers (GRPO_WORKERS) must be 0 or more (ingest processes; 0: one per core), not -3",
    ),
    ([], {"GRPO_QUIET_SECONDS": "1h"}, "GRPO_QUIET_SECONDS='1h' is not a whole number"),
    ([], {"GRPO_SETTLE_SECONDS": "-1"}, "settle_seconds (GRPO_SETTLE_SECONDS) must be 0 or more (seconds), not -1"),
    ([], {"GRPO_SENSOR_INTERVAL": "0"}, "sensor_interval_seconds (GRPO_SENSOR_INTERVAL) must be 1 or more"),
    (
        [],
        {"GRPO_DUCKDB_MEMORY_LIMIT": "lots"},
        "duckdb_memory_limit (GRPO_DUCKDB_MEMORY_LIMIT) 'lots' is not a DuckDB memory size such as 512MB or 2GB",
    ),
    (["--release", "{tmp}/missing"], {}, "release folder {tmp}/missing does not exist"),
    # An empty value (an unset shell variable) would otherwise build the bundled sample, or use the defaults.
    (["--release", ""], {}, "--release is given an empty value: name a folder or file, or leave the flag out"),
    (["--release", "{tmp}/rel", " "], {}, "--release is given an empty value"),
    (["--warehouse", ""], {}, "--warehouse is given an empty value"),
    (["--registry", ""], {}, "--registry is given an empty value"),
    (["--lake", ""], {}, "--lake is given an empty value"),
    (
        ["--release", "{tmp}/rel/run_a"],
        {},
        "release folder {tmp}/rel/run_a holds epoch documents itself: it is a run folder; give the folder that holds "
        "the run folders instead (--release {tmp}/rel)",
    ),
    (
        ["--release", "{tmp}"],
        {},
        "release folder {tmp} holds releases, whose folders hold the runs: give each (--release {tmp}/rel)",
    ),
    (["--registry", "{tmp}/missing.csv"], {}, "{tmp}/missing.csv: cannot read the registry: No such file or directory"),
    (["--warehouse", "{tmp}/a_file"], {}, "the warehouse {tmp}/a_file is a file, not a folder"),
    (["--warehouse", "{tmp}/a_file/wh"], {}, "cannot write in the warehouse folder {tmp}/a_file/wh: Not a directory"),
    (
        ["--warehouse", "{tmp}/x?y"],
        {},
        "the warehouse path {tmp}/x?y holds a `?`, after which DuckDB reads a database path as options: choose another",
    ),
    (["--warehouse", "{tmp}/x\\y"], {}, "the warehouse path {tmp}/x\\y holds a backslash, which DuckDB reads as a"),
    (["--param", "ci_method=bayes"], {}, "ci_method: Input should be 'structural', 'reml', 'ar1' or 'iid'"),
    (["--param", "ema_weight=1.5"], {}, "ema_weight must be 0 or more and below 1, not 1.5"),
    (["--param", "final_window=ten"], {}, "final_window: Input should be a valid integer"),
    (["--param", "warehouse_dir=/tmp"], {}, "--param warehouse_dir: not a parameter; the parameters are ema_weight,"),
    (["--param", "ci_method"], {}, "--param takes NAME=VALUE, not 'ci_method'"),
    # Degenerate parameters: an average that never moves, intervals too narrow to back a claim, fits of too few epochs.
    (["--param", "ema_weight=1"], {}, "ema_weight must be 0 or more and below 1, not 1.0"),
    (["--param", "ci_level=0.01"], {}, "ci_level must be 0.5 or more and below 1, not 0.01"),
    (["--param", "ci_fit_epochs=4", "--param", "final_window=2"], {}, "ci_fit_epochs must be 5 or more (epochs)"),
    (["--param", "sample_seed=-1"], {}, "sample_seed must be 0 or more, not -1"),
    (["--param", "final_window=300"], {}, "ci_fit_epochs (200) must be final_window (300) or more: the interval"),
    # Beyond the 64 bits SQL reads a parameter in (a BIGINT), where the models would fail to bind it.
    (["--param", f"ci_fit_epochs={2**64}"], {}, f"ci_fit_epochs must be a 64-bit integer, from {-(2**63)} to"),
    ([], {"GRPO_QUIET_SECONDS": f"-{2**63 + 1}"}, "quiet_seconds (GRPO_QUIET_SECONDS) must be a 64-bit integer"),
    # Malformed URLs and folders the warehouse writes in
    ([], {"GRPO_LAKE_DIR": "s3:"}, "the lake 's3:' is not a bucket prefix s3://bucket/prefix, the only URL read (a"),
    (["--lake", "s3:/bucket"], {}, "the lake 's3:/bucket' is not a bucket prefix s3://bucket/prefix"),
    (["--release", "s3://"], {}, "release 's3://' is not a bucket prefix s3://bucket/prefix, the only URL read\n"),
    (["--release", "S3://bucket/x"], {}, "release 'S3://bucket/x' is not a bucket prefix"),
    (["--release", "gs://bucket/x"], {}, "release 'gs://bucket/x' is not a bucket prefix"),
    (["--warehouse", "s3://bucket/wh"], {}, "the warehouse 's3://bucket/wh' is a URL: the warehouse is a folder"),
    (["--release", "{tmp}/rel", "--warehouse", "{tmp}/rel/"], {}, "release folder {tmp}/rel is the warehouse folder:"),
    (["--lake", "{tmp}/rel/lake"], {}, "the lake {tmp}/rel/lake is inside release folder {tmp}/rel: its folders"),
]


@pytest.mark.parametrize(("args", "environment", "message"), CASES)
def test_a_bad_value_is_refused_on_one_line_before_any_work(
    tmp_path, release, capsys, monkeypatch, args, environment, message
):
    (tmp_path / "a_file").write_text("")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    argv = ["build", *args] if "--release" in args else ["build", "--release", str(release), *args]
    if "--warehouse" not in args:
        argv += ["--warehouse", str(tmp_path / "wh")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"grpo-warehouse build: {message.replace('{tmp}', str(tmp_path))}"), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "wh").exists()  # checked before any work: not even the warehouse folder made


def test_a_release_inside_the_warehouses_exports_is_refused(tmp_path, capsys):
    release = tmp_path / "wh" / "exports" / "rel"
    write_epoch_file(release / "run_a", 0, epoch_document(0, n=2))
    assert main(["build", "--release", str(release), "--warehouse", str(tmp_path / "wh")]) == 2
    assert capsys.readouterr().err == (
        f"grpo-warehouse build: release folder {release} is inside the warehouse's exports {tmp_path}/wh/exports: "
        "its folders would be read as runs; give the folder of run folders\n"
    )
    assert sorted(p.name for p in (tmp_path / "wh").iterdir()) == ["exports"]  # no lake, no database


def test_sql_refuses_max_rows_below_one(capsys):
    assert main(["sql", "select 1", "--max-rows", "0"]) == 2
    assert capsys.readouterr().err == "grpo-warehouse sql: --max-rows must be 1 or more, not 0\n"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("ema_weight", 1.5, "ema_weight must be 0 or more and below 1, not 1.5"),
        ("ci_level", 1.0, "ci_level must be 0.5 or more and below 1, not 1.0"),
        ("rolling_window", -2, "rolling_window must be 1 or more (epochs), not -2"),
        ("max_file_bytes", 0, "max_file_bytes must be 1 or more (bytes), not 0"),
        ("reward_tolerance", float("nan"), "reward_tolerance must be a finite number, not nan"),
    ],
)
def test_every_parameter_is_checked(field, value, message):
    with pytest.raises(ConfigError) as refused:
        WarehouseConfig(**{field: value}).check()
    assert str(refused.value) == message


def test_a_flag_overrides_a_bad_variable(monkeypatch):
    config = WarehouseConfig.from_env({"GRPO_WORKERS": "many", "GRPO_SETTLE_SECONDS": "5"}, workers=2)
    assert (config.workers, config.settle_seconds) == (2, 5)


@pytest.fixture
def refusal(tmp_path, release):
    """removal_refusal for a lake that took the release's runs, given the release folders of a later build."""
    lake = tmp_path / "lake"
    runs, _, _ = find_run_folders([release])
    ingest_runs(list(runs.values()), lake, 1 << 20, workers=1)

    def refusal(roots, remove=()):
        runs, _, _ = find_run_folders(roots)
        return removal_refusal(roots, runs, lake, remove)

    return refusal


def test_runs_of_a_release_that_is_missing_empty_or_left_out_are_not_removed(tmp_path, release, refusal):
    # One run folder gone from a release that still holds runs: it leaves, as it always did.
    (release / "run_b").rename(tmp_path / "run_b_moved")
    assert refusal([release]) is None
    (release / "run_a").rename(tmp_path / "run_a_moved")
    assert refusal([release]) == (
        f"release folder {release} holds no run folder: refusing to remove the warehouse's 2 run(s) of release "
        "'rel' (run_a, run_b) (an unmounted disk? a typo?); to remove them, add --remove-release rel"
    )
    release.rmdir()
    assert refusal([release]).startswith(f"release folder {release} does not exist: refusing to remove")
    other = tmp_path / "other"
    write_epoch_file(other / "run_c", 0)
    assert refusal([other]) == (
        "the warehouse holds 2 run(s) of release 'rel' (run_a, run_b), and no release given is 'rel': refusing to "
        "remove them; to remove them, add --remove-release rel"
    )
    assert refusal([other], remove=["rel"]) is None
    assert refusal([release], remove=["rel"]) is None


def test_a_run_whose_first_ingest_failed_may_leave_with_its_folder(tmp_path, release, refusal):
    lake = tmp_path / "lake"
    register_run(lake, "run_c")  # as a first ingest does before it parses, and one that failed leaves it
    assert refusal([release]) is None  # run_c, of no release, is no reason to refuse
    (release / "run_b").rename(tmp_path / "run_b_moved")
    (release / "run_a").rename(tmp_path / "run_a_moved")
    assert refusal([release]).endswith(
        "2 run(s) of release 'rel' (run_a, run_b) (an unmounted disk? a typo?); "
        "to remove them, add --remove-release rel"
    )


def test_runs_are_not_removed_when_their_release_name_now_stands_for_another_folder(tmp_path, release, refusal):
    # Another folder named like the release, with runs of its own: the warehouse's runs did not leave it.
    other = tmp_path / "b" / "rel"
    write_epoch_file(other / "run_c", 0)
    assert refusal([other]) == (
        f"release 'rel' is now read from {other}, but the warehouse's 2 run(s) of release 'rel' (run_a, run_b) came "
        f"from {release}: refusing to remove them (another folder of the same name?); to remove them, add "
        "--remove-release rel"
    )
    assert refusal([other], remove=["rel"]) is None
    # The same folder through a link, and the release moved whole: a run deleted from it leaves as usual.
    link = tmp_path / "d" / "rel"
    link.parent.mkdir()
    link.symlink_to(release)
    (release / "run_b").rename(tmp_path / "run_b_moved")
    assert refusal([link]) is None
    moved = tmp_path / "c" / "rel"
    moved.parent.mkdir()
    release.rename(moved)
    assert refusal([moved]) is None


def test_a_warehouse_inside_a_release_is_not_a_run(tmp_path, release):
    (release / "wh" / "lake").mkdir(parents=True)
    runs, entries, _ = find_run_folders([release], warehouse=release / "wh")
    assert sorted(runs) == ["run_a", "run_b"]
    assert [(e.source_path, e.reason) for e in entries] == [
        ("rel/wh", "the warehouse folder, or a folder holding it; not a run")
    ]
    runs, _, _ = find_run_folders([release], warehouse=release / "wh" / "lake")  # a folder holding it, too
    assert sorted(runs) == ["run_a", "run_b"]


def test_a_step_failure_is_reported_by_its_own_error(tmp_path):
    missing = tmp_path / "gone" / "file"

    @dg.asset
    def reads_a_file():
        return missing.read_text()

    @dg.asset
    def refuses():
        raise ConfigError("the registry says no")

    assert failure_reason(dg.materialize([reads_a_file], raise_on_error=False)) == (
        f"the build failed in reads_a_file: FileNotFoundError: [Errno 2] No such file or directory: '{missing}'"
    )
    assert failure_reason(dg.materialize([refuses], raise_on_error=False)) == (
        "the build failed in refuses: the registry says no"
    )


def test_a_worker_process_failure_is_reported_by_its_error_not_its_traceback_text():
    from concurrent.futures.process import _RemoteTraceback

    @dg.asset
    def ingests_in_a_pool():  # as a ProcessPoolExecutor raises a worker's error: its traceback text as the cause
        raise OSError(28, "No space left on device") from _RemoteTraceback('\n"""\nTraceback (most recent call last)')

    assert failure_reason(dg.materialize([ingests_in_a_pool], raise_on_error=False)) == (
        "the build failed in ingests_in_a_pool: OSError: [Errno 28] No space left on device"
    )


@pytest.mark.slow
def test_an_emptied_release_keeps_the_warehouse_until_removal_is_asked_for(tmp_path, release, build, query, capsys):
    wh = release / "wh"  # a warehouse inside its release is not ingested as a run
    assert build([release], wh) == 0
    assert query(wh, "select run_id from dim_runs order by 1") == [("run_a",), ("run_b",)]
    for run in ("run_a", "run_b"):
        (release / run).rename(tmp_path / run)  # an unmounted disk: the release is there, its runs are not
    capsys.readouterr()
    assert build([release], wh) == 2
    assert "refusing to remove the warehouse's 2 run(s) of release 'rel'" in capsys.readouterr().err
    assert query(wh, "select count(*) from fact_epochs") == [(2,)]
    assert build([release], wh, "--remove-release", "rel") == 0
    assert query(wh, "select count(*) from dim_runs") == [(0,)]
    assert query(wh, "select count(*) from fact_epochs") == [(0,)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["build", "--workers", "abc"], "grpo-warehouse build: argument --workers: invalid int value: 'abc'"),
        (["build", "--wrkers", "2"], "grpo-warehouse: unrecognized arguments: --wrkers 2"),
        (["sql"], "grpo-warehouse sql: the following arguments are required: query"),
    ],
)
def test_a_flag_argparse_cannot_read_is_refused_on_one_line_without_the_usage_block(capsys, argv, message):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err == message + "\n"


def test_an_export_never_overwrites_a_file_the_warehouse_did_not_write(tmp_path, release, capsys, query):
    wh = tmp_path / "wh"
    (wh / "exports" / "figures").mkdir(parents=True)
    users = {wh / "exports" / "report.md": b"my own notes", wh / "exports" / "figures" / "rel.png": b"my own figure"}
    for path, content in users.items():
        path.write_bytes(content)
    assert main(["build", "--release", str(release), "--warehouse", str(wh), "--workers", "1"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "is not a file this warehouse wrote, so it is kept and the export is not written" in line
    assert {path: path.read_bytes() for path in users} == users
    # the rest is built: the tables, their exports, the explorer
    assert query(wh, "select count(*) from fact_epochs") == [(2,)]
    assert (wh / "exports" / "run_summary.csv").is_file() and (wh / "exports" / "explorer" / "index.html").is_file()

    for path in users:  # moved away: the next build writes the exports
        path.rename(path.with_name(f"mine_{path.name}"))
    assert main(["build", "--release", str(release), "--warehouse", str(wh), "--workers", "1"]) == 0
    assert (wh / "exports" / "report.md").read_bytes().startswith(b"#")
    assert (wh / "exports" / "figures" / "rel.png").read_bytes().startswith(b"\x89PNG")
    assert (wh / "exports" / "figures" / "mine_rel.png").read_bytes() == b"my own figure"


def test_a_failing_model_is_named_and_only_the_models_reading_it_wait(tmp_path, monkeypatch, capsys, build):
    from pipelines.defs.models import assets

    # The first model another reads; the models reading it, directly or not; the models it does not reach.
    failing = next(name for name, model in assets.MODELS.items() if model.model_deps)
    failing = next(iter(assets.MODELS[failing].model_deps))
    reached = {failing}
    for name, model in assets.MODELS.items():  # dependency order: a model follows what it reads
        if reached & set(model.model_deps):
            reached.add(name)
    unreached = set(assets.MODELS) - reached
    refresh_model = assets.refresh_model

    def refresh(model, *args, **kwargs):
        if model.name == failing:
            raise ValueError("a bad cast")
        return refresh_model(model, *args, **kwargs)

    monkeypatch.setattr(assets, "refresh_model", refresh)
    write_epoch_file(tmp_path / "rel" / "run_a", 0)
    assert build([tmp_path / "rel"], tmp_path / "wh") == 2
    assert capsys.readouterr().err == (
        f"grpo-warehouse build: the build failed in sql_models: {failing}: ValueError: a bad cast "
        f"({len(reached) - 1} model(s) reading it not refreshed)\n"
    )
    config = WarehouseConfig(releases=[str(tmp_path / "rel")], warehouse_dir=str(tmp_path / "wh"))
    with config.build_db(read_only=True) as con:
        found = con.execute("select table_name from duckdb_tables() where schema_name = 'main'").fetchall()
    tables = {name for (name,) in found}
    assert unreached and unreached <= tables
    assert not reached & tables
    assert not (tmp_path / "wh" / "warehouse.duckdb").exists()
    # The step's error keeps the model's own as its cause, which the UI shows with its traceback.
    result = dg.materialize([assets.sql_models], resources={"warehouse": config}, raise_on_error=False)
    [failure] = [event.event_specific_data.error for event in result.all_events if event.is_step_failure]
    causes = []
    while failure is not None:
        causes.append(failure.cls_name)
        failure = failure.cause
    assert causes[-2:] == ["ModelsFailed", "ValueError"]
