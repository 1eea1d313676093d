"""Fixtures shared by every test: epoch files written in a tiny release, in-process builds, read-only queries and
the bundled sample's warehouse; how pytest-xdist's workers share the tests out."""

import os
from pathlib import Path

import duckdb
import pytest
from helpers import made_once, write_epoch_file
from xdist import is_xdist_worker

# Session fixtures that build a warehouse or start a server: under pytest-xdist the tests using one run on one worker
# (an xdist_group of its name), which makes it once.
SHARED_FIXTURES = ("sample_warehouse", "dagster_ui")


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker a core and one more, which the Dagster UI tests hold for minutes while they mostly wait on
    its daemon; PYTEST_XDIST_AUTO_NUM_WORKERS, when set, decides instead."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups from the marks
def pytest_collection_modifyitems(session, items):
    """On a pytest-xdist worker: the tests of a shared fixture grouped onto one worker, and the slow tests first, so
    that the workers share them out while short tests remain to fill the gaps."""
    if not is_xdist_worker(session):
        return
    for item in items:
        for fixture in SHARED_FIXTURES:
            if fixture in item.fixturenames:
                item.add_marker(pytest.mark.xdist_group(fixture))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def write_epoch():
    """write_epoch_file, as a fixture."""
    return write_epoch_file


@pytest.fixture
def build():
    """Runs `grpo-warehouse build` in-process on the given releases (one ingest process); returns the exit code."""
    from pipelines.cli import main

    def run(releases: list[Path], warehouse: Path, *args: str) -> int:
        argv = ["build", "--warehouse", str(warehouse), "--workers", "1", *args]
        for release in releases:
            argv += ["--release", str(release)]
        return main(argv)

    return run


@pytest.fixture
def query():
    """Runs a query on a published warehouse.duckdb, read-only; returns the rows as tuples."""

    def run(warehouse: Path, sql: str, *params) -> list[tuple]:
        with duckdb.connect(str(Path(warehouse) / "warehouse.duckdb"), read_only=True) as con:
            return con.execute(sql, list(params)).fetchall()

    return run


@pytest.fixture(scope="session")
def sample_warehouse(tmp_path_factory):
    """The bundled sample release's folders and a warehouse built from them, once for the whole run; tests only read
    it (a test that builds again copies it first)."""
    from pipelines.cli import main
    from pipelines.release.sample import sample_release_dirs, write_sample

    def make(out: Path) -> None:
        argv = ["build", "--warehouse", str(out / "wh")]
        for release in write_sample(out / "releases"):
            argv += ["--release", str(release)]
        assert main(argv) == 0

    out = made_once(tmp_path_factory, "sample", make)
    return sample_release_dirs(out / "releases"), out / "wh"


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 server on a free loopback port, the AWS variables pointing at it while the module's tests run."""
    import s3fs

    from pipelines.release.objects import filesystem, loopback_s3

    patch = pytest.MonkeyPatch()
    with loopback_s3() as aws:
        for name, value in aws.items():
            patch.setenv(name, value)
        filesystem.cache_clear()
        s3fs.S3FileSystem.clear_instance_cache()  # a lake's UPath reuses one made for another module's server
        try:
            yield aws
        finally:
            filesystem.cache_clear()
            s3fs.S3FileSystem.clear_instance_cache()
            patch.undo()


@pytest.fixture
def bucket(s3_server, request):
    """An empty bucket of the test's own; yields (s3fs filesystem, bucket name)."""
    from pipelines.release.objects import filesystem

    fs = filesystem()
    name = request.node.name.replace("_", "-")[:50].lower().strip("-")
    fs.mkdir(name)
    return fs, name
