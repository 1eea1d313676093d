"""Fixtures of the UI tests: one `dg dev` (webserver + daemon) shared by the webserver and browser tests."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ui_server import (
    REPO,
    RUN_A,
    RUN_B,
    DagsterUI,
    free_port,
    start_chromium,
    stop_process_group,
    write_release,
)


def pytest_collection_modifyitems(items):
    """test_automation last: it starts the sensors, which the other UI tests keep off to launch runs themselves."""
    items.sort(key=lambda item: item.path.name == "test_automation.py")


@pytest.fixture(scope="session")
def dagster_ui(tmp_path_factory) -> DagsterUI:
    """`dg dev` from the repo root with a temporary DAGSTER_HOME holding the project's dagster.yaml."""
    root = tmp_path_factory.mktemp("dagster_ui")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    release = root / "ui_release"  # written once the sensors are stopped
    warehouse = root / "warehouse"
    port = free_port()
    venv_bin = Path(sys.executable).parent
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "GRPO_RELEASES": str(release),
        "GRPO_WAREHOUSE_DIR": str(warehouse),
        "GRPO_WORKERS": "1",
        "GRPO_SENSOR_INTERVAL": "5",  # the release sensor's look, when test_automation starts it
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": sys.prefix,  # dg warns when the active venv is not the one it runs from
    }
    env.pop("GRPO_REGISTRY", None)
    log = root / "dg_dev.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(venv_bin / "dg"), "dev", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    ui = DagsterUI(f"http://127.0.0.1:{port}", process, log, warehouse, release)
    try:
        ui.wait_until_loaded()
        # The release sensor would add the run partitions and ingest on its own, and the automation sensor would
        # rebuild the models after it: stopped, so that only the test's launches run. The release appears after.
        ui.stop_sensors()
        write_release(root)
        yield ui
    finally:
        stop_process_group(process)
        # Kept beside the screenshots, so a CI failure can be read after the temporary folder is gone.
        artifacts = Path(__file__).parent / "artifacts"
        artifacts.mkdir(exist_ok=True)
        shutil.copy(log, artifacts / "dg_dev.log")
        print(f"\ndg dev log: {artifacts / 'dg_dev.log'}")


@pytest.fixture
def materialized(dagster_ui) -> dict:
    """The session's first "Materialize all" has succeeded: the browser test's click if it ran first, else one
    launched here through GraphQL. Materializations are slow (the backfill daemon wakes every 30 s), so the
    tests share this one instead of each starting from an empty warehouse."""
    if dagster_ui.first_backfill is None:
        dagster_ui.add_run_partitions([RUN_A, RUN_B])
        dagster_ui.first_backfill = dagster_ui.assert_succeeded(dagster_ui.materialize_all())
    return dagster_ui.first_backfill


@pytest.fixture
def browser(tmp_path):
    driver = start_chromium(tmp_path)
    try:
        yield driver
    finally:
        driver.quit()
