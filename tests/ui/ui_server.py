"""Helpers of the UI tests: a tiny hand-written release, `dg dev` in its own process group, the UI's GraphQL calls."""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCATION = "grpo_warehouse"
REPOSITORY = "__repository__"
RUN_PARTITIONS = "run_id"
STARTUP_TIMEOUT = 180
MATERIALIZE_TIMEOUT = 480  # a hang guard, generous for a loaded 2-core machine

# The fixture release, small enough to check by hand:
#   ui_run_a      (file layout)   epochs 0..2, 4 trajectories each, plus a truncated epoch_003 file
#   ui_run_b_4fp  (folder layout) epochs 0..1, 8 trajectories each; "_4fp" names 4 FP controls per group
RUN_A = "ui_run_a"
RUN_B = "ui_run_b_4fp"
BROKEN_FILE = "epoch_003_results.json"


def epoch_document(epoch: int, n: int) -> dict:
    """A valid epoch document with n trajectories (one group); rewards 0, 1/n, ..., (n-1)/n, GRPO advantages."""
    rewards = [i / n for i in range(n)]
    mean = sum(rewards) / n
    std = (sum((r - mean) ** 2 for r in rewards) / n) ** 0.5
    return {
        "epoch": epoch,
        "loss": 0.5,
        "mean_reward": sum(rewards) / n,
        "kl_sample_train": 0.0,
        "sample_entropy": 1.5,
        "train_entropy": 1.25,
        "snapshot_id": f"ft_snap_ui_{epoch:03d}",
        "trajectory_ids": [f"ft_traj_ui_{epoch:03d}_{i}" for i in range(n)],
        "rewards": rewards,
        "advantages": [(r - mean) / (std + 1e-6) for r in rewards],
    }


def write_release(root: Path) -> Path:
    """Writes the fixture release described above; returns its folder."""
    release = root / "ui_release"
    run_a = release / RUN_A
    run_a.mkdir(parents=True)
    for epoch in range(3):
        (run_a / f"epoch_{epoch:03d}_results.json").write_text(json.dumps(epoch_document(epoch, 4)))
    (run_a / BROKEN_FILE).write_text('{"epoch": 3, "loss": 0.5, "rewards": [0.0,')
    for epoch in range(2):
        folder = release / RUN_B / f"epoch_{epoch:03d}"
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(epoch_document(epoch, 8)))
    return release


ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM_FLAGS = [
    # As this machine runs Chromium (see .library/env/machines/python.md): no sandbox as root, no GPU, and none
    # of the background connections that a closed network refuses.
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1600,1000",
]
PAGE_TIMEOUT = 90
REQUIRE_BROWSER = "GRPO_TESTS_REQUIRE_BROWSER"


def find_browser() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        missing = (
            "headless browser test needs Debian's chromium and chromium-driver "
            f"(found chromium={chromium}, chromedriver={driver}); `apt-get install -y chromium chromium-driver`"
        )
        # CI sets this: there a browser test that does not run is a failure, not a skip.
        if os.environ.get(REQUIRE_BROWSER):
            pytest.fail(missing)
        pytest.skip(missing)
    return chromium, driver


def start_chromium(tmp_path, capabilities: dict | None = None):
    """Headless Chromium under WebDriver, with a profile of its own in tmp_path and any extra capabilities."""
    chromium, driver_path = find_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path, prefix='chromium-')}")
    for name, value in (capabilities or {}).items():
        options.set_capability(name, value)
    return webdriver.Chrome(service=Service(driver_path), options=options)


def screenshot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def wait_for(condition, what: str, driver, timeout: float = PAGE_TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.5)
    screenshot(driver, "timeout")
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def button(driver, scope, text: str):
    """The visible, enabled button whose label starts with text, or None."""
    from selenium.webdriver.common.by import By

    for element in scope.find_elements(By.TAG_NAME, "button"):
        try:
            if element.text.strip().startswith(text) and element.is_displayed() and element.is_enabled():
                return element
        except Exception:  # the page re-rendered under us; look again
            return None
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


AUTOMATION_SENSOR = "models_and_exports_automation"
RELEASE_SENSOR = "release_files_sensor"
RUN_FIELDS = "runId jobName status creationTime tags { key value }"


class DagsterQueries:
    """The GraphQL reads and launches of the catalog, sensor and run pages (mixed into DagsterUI)."""

    def sensor_selector(self, name: str) -> dict:
        return {**self.repository_selector(), "sensorName": name}

    def start_sensor(self, name: str) -> None:
        result = self.graphql(
            """mutation($selector: SensorSelector!) { startSensor(sensorSelector: $selector) {
                 __typename ... on PythonError { message } ... on UnauthorizedError { message } } }""",
            selector=self.sensor_selector(name),
        )["startSensor"]
        assert result["__typename"] == "Sensor", result

    def sensor(self, name: str) -> dict:
        """The sensor's description, status, cursor and latest ticks (newest first)."""
        return self.graphql(
            """query($selector: SensorSelector!) { sensorOrError(sensorSelector: $selector) { ... on Sensor {
                 description sensorState { status typeSpecificData { ... on SensorData { lastCursor } }
                   ticks(limit: 10) { timestamp status skipReason runIds } } } } }""",
            selector=self.sensor_selector(name),
        )["sensorOrError"]

    def runs(self, tags: dict | None = None) -> list[dict]:
        """Runs, newest first, with the given tags."""
        run_filter = {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]}
        return self.graphql(
            f"""query($filter: RunsFilter) {{ runsOrError(filter: $filter, limit: 100) {{
                 ... on Runs {{ results {{ {RUN_FIELDS} }} }} }} }}""",
            filter=run_filter,
        )["runsOrError"]["results"]

    def wait_for_runs(self, what: str, select, timeout: float = MATERIALIZE_TIMEOUT) -> list[dict]:
        """Waits until select(runs) is a non-empty list of runs that have all finished; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chosen = select(self.runs())
            if chosen and all(run["status"] in ("SUCCESS", "FAILURE", "CANCELED") for run in chosen):
                return chosen
            time.sleep(2)
        pytest.fail(f"timed out after {timeout} s waiting for {what}\n{self.log_tail()}")

    def launch_assets(self, paths: list[list[str]]) -> str:
        """Launches a run materializing the given unpartitioned assets, as an asset page's Materialize button does."""
        result = self.graphql(
            """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
                 __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
                 ... on InvalidSubsetError { message } ... on RunConfigValidationInvalid { errors { message } } } }""",
            params={
                "selector": {
                    **self.repository_selector(),
                    "jobName": "__ASSET_JOB",
                    "assetSelection": [{"path": path} for path in paths],
                },
                "mode": "default",
                "executionMetadata": {"tags": [{"key": "dagster/from_ui", "value": "true"}]},
            },
        )["launchRun"]
        assert result["__typename"] == "LaunchRunSuccess", result
        return result["run"]["runId"]

    def asset_checks(self, path: list[str]) -> dict[str, dict]:
        """Each check of an asset: whether it runs on its own, and its latest evaluation."""
        node = self.graphql(
            """query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
                 assetChecksOrError { ... on AssetChecks { checks { name canExecuteIndividually
                   executionForLatestMaterialization { status evaluation { severity description
                     metadataEntries { label ... on JsonMetadataEntry { jsonString } } } } } } } } } }""",
            key={"path": path},
        )["assetNodeOrError"]
        return {check["name"]: check for check in node["assetChecksOrError"]["checks"]}

    def materializations(self, path: list[str], partitions: list[str] | None = None) -> list[dict]:
        """An asset's materializations (of the given partitions), newest first, with their int and text metadata."""
        asset = self.graphql(
            """query($key: AssetKeyInput!, $partitions: [String!]) { assetOrError(assetKey: $key) { ... on Asset {
                 assetMaterializations(partitions: $partitions, limit: 20) { runId partition timestamp
                   metadataEntries { label ... on IntMetadataEntry { intValue } ... on TextMetadataEntry { text } }
                 } } } }""",
            key={"path": path},
            partitions=partitions,
        )["assetOrError"]
        return [
            {**m, "metadata": {e["label"]: e.get("intValue", e.get("text")) for e in m["metadataEntries"]}}
            for m in asset.get("assetMaterializations") or []
        ]

    def column_schema(self, path: list[str]) -> list[dict]:
        """The column schema an asset's definition declares (shown before any materialization)."""
        node = self.graphql(
            """query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
                 metadataEntries { label ... on TableSchemaMetadataEntry { schema { columns {
                   name type description } } } } } } }""",
            key={"path": path},
        )["assetNodeOrError"]
        entry = next(e for e in node["metadataEntries"] if e["label"] == "dagster/column_schema")
        return entry["schema"]["columns"]


class DagsterUI(DagsterQueries):
    """A running `dg dev` and the GraphQL calls the UI makes."""

    def __init__(self, url: str, process: subprocess.Popen, log: Path, warehouse: Path, release: Path):
        self.url = url
        self.process = process
        self.log = log
        self.warehouse = warehouse
        self.release = release
        self.first_backfill: dict | None = None  # the session's first successful "Materialize all"
        self.sensor_runs: dict | None = None  # test_automation's ingest and automation runs, once the sensors ran

    def graphql(self, query: str, **variables) -> dict:
        request = urllib.request.Request(
            f"{self.url}/graphql",
            data=json.dumps({"query": query, "variables": variables}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            body = json.load(response)
        assert not body.get("errors"), body["errors"]
        return body["data"]

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait_until_loaded(self) -> None:
        """Waits until the webserver answers and the code location has loaded (or failed to)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"dg dev exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                data = self.graphql(
                    "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus"
                    " locationOrLoadError { __typename ... on PythonError { message } } } } } }"
                )
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
                continue
            entries = data["workspaceOrError"].get("locationEntries") or []
            entry = next((e for e in entries if e["name"] == LOCATION), None)
            if entry and entry["loadStatus"] == "LOADED":
                loaded = entry["locationOrLoadError"]
                assert loaded["__typename"] == "RepositoryLocation", f"code location failed to load: {loaded}"
                return
            time.sleep(1)
        pytest.fail(f"dg dev did not load the code location within {STARTUP_TIMEOUT} s:\n{self.log_tail()}")

    def stop_sensors(self) -> list[str]:
        """Stops every running sensor (the release sensor, the automation sensor), so only the test launches runs."""
        sensors = self.graphql(
            """query($selector: RepositorySelector!) { sensorsOrError(repositorySelector: $selector) {
                 ... on Sensors { results { name sensorState { id status } } } } }""",
            selector=self.repository_selector(),
        )["sensorsOrError"]["results"]
        stopped = []
        for sensor in sensors:
            if sensor["sensorState"]["status"] == "RUNNING":
                result = self.graphql(
                    """mutation($id: String!) { stopSensor(id: $id) {
                         __typename ... on PythonError { message } ... on UnauthorizedError { message } } }""",
                    id=sensor["sensorState"]["id"],
                )["stopSensor"]
                assert result["__typename"] == "StopSensorMutationResult", result
                stopped.append(sensor["name"])
        return stopped

    def repository_selector(self) -> dict:
        return {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY}

    def add_run_partitions(self, run_ids: list[str]) -> None:
        """Adds run partitions as the launch dialog's "Add partition" does (idempotent)."""
        for run_id in run_ids:
            result = self.graphql(
                """mutation($selector: RepositorySelector!, $name: String!, $key: String!) {
                     addDynamicPartition(repositorySelector: $selector, partitionsDefName: $name, partitionKey: $key) {
                       __typename ... on PythonError { message } ... on UnauthorizedError { message } } }""",
                selector=self.repository_selector(),
                name=RUN_PARTITIONS,
                key=run_id,
            )["addDynamicPartition"]
            assert result["__typename"] in ("AddDynamicPartitionSuccess", "DuplicateDynamicPartitionError"), result

    def asset_keys(self) -> list[list[str]]:
        """Every materializable asset, as the asset graph's "Materialize all" selects them."""
        nodes = self.graphql("{ assetNodes { assetKey { path } isMaterializable } }")["assetNodes"]
        return [node["assetKey"]["path"] for node in nodes if node["isMaterializable"]]

    def run_partition_keys(self) -> list[str]:
        """The run partitions the launch dialog lists (those of the partitioned lake assets)."""
        nodes = self.graphql("{ assetNodes { assetKey { path } partitionKeys } }")["assetNodes"]
        return next(n["partitionKeys"] for n in nodes if n["assetKey"]["path"] == ["lake", "epochs"])

    def materialize_all(self, run_config: dict | None = None) -> str:
        """Launches what "Materialize all" launches with every run partition chosen: a partition backfill."""
        result = self.graphql(
            """mutation($params: LaunchBackfillParams!) {
                 launchPartitionBackfill(backfillParams: $params) {
                   __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message stack }
                   ... on PartitionKeysNotFoundError { message } ... on UnauthorizedError { message } } }""",
            params={
                "assetSelection": [{"path": path} for path in self.asset_keys()],
                "partitionNames": self.run_partition_keys(),
                "fromFailure": False,
                "tags": [{"key": "dagster/from_ui", "value": "true"}],
                **({"runConfigData": run_config} if run_config else {}),
            },
        )["launchPartitionBackfill"]
        assert result["__typename"] == "LaunchBackfillSuccess", result
        return result["backfillId"]

    def backfill(self, backfill_id: str) -> dict:
        return self.graphql(
            """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
                 __typename ... on PartitionBackfill { id status error { message }
                   runs(limit: 100) { runId status } } } }""",
            id=backfill_id,
        )["partitionBackfillOrError"]

    def latest_backfill_id(self) -> str | None:
        data = self.graphql("{ partitionBackfillsOrError(limit: 1) { ... on PartitionBackfills { results { id } } } }")[
            "partitionBackfillsOrError"
        ]
        results = data.get("results") or []
        return results[0]["id"] if results else None

    def wait_for_backfill(self, backfill_id: str) -> dict:
        """Waits until the backfill has finished; returns its final state."""
        deadline = time.monotonic() + MATERIALIZE_TIMEOUT
        while time.monotonic() < deadline:
            state = self.backfill(backfill_id)
            if state["status"] not in ("REQUESTED", "CANCELING", "FAILING"):
                return state
            time.sleep(2)
        pytest.fail(f"backfill {backfill_id} still running after {MATERIALIZE_TIMEOUT} s: {state}\n{self.log_tail()}")

    def assert_succeeded(self, backfill_id: str) -> dict:
        """Waits for the backfill; fails with the failed runs' errors unless it and every run of it succeeded."""
        state = self.wait_for_backfill(backfill_id)
        failed = [run for run in state["runs"] if run["status"] != "SUCCESS"]
        details = "\n".join(f"{run['runId']}: {run['status']}\n{self.run_logs(run['runId'])}" for run in failed)
        assert state["status"] == "COMPLETED_SUCCESS" and state["runs"] and not failed, (
            f"{state}\n{details}\n{self.log_tail()}"
        )
        return state

    def run_logs(self, run_id: str) -> str:
        """The error-level events of a run, for failure reports."""
        data = self.graphql(
            """query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events {
                 ... on MessageEvent { message level stepKey } } } } }""",
            id=run_id,
        )["logsForRun"]
        return "\n".join(
            f"{e.get('stepKey')}: {e['message']}"
            for e in data.get("events", [])
            if e.get("level") in ("ERROR", "CRITICAL")
        )


def stop_process_group(process: subprocess.Popen, grace: float = 5.0) -> None:
    """Stops a process started with start_new_session=True and everything it started."""
    try:
        pgid = os.getpgid(process.pid)
    except ProcessLookupError:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)  # raises once no process of the group is left
            except ProcessLookupError:
                process.poll()
                return
            process.poll()  # reap the leader so it does not linger as a zombie of the group
            time.sleep(0.2)
