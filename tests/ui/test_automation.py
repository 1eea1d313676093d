"""With the sensors running: a new epoch file is ingested by a named, tagged job and the models follow; the sensor's
page shows its description and a small cursor; a materialization that changes nothing requests no automation run.

Runs after the other UI tests (conftest orders it last): they launch everything themselves with the sensors off.
"""

import json
import os
import time

import pytest
from ui_server import AUTOMATION_SENSOR, RELEASE_SENSOR, RUN_B, epoch_document, screenshot, wait_for

pytestmark = pytest.mark.slow

REFRESHES = "grpo/refreshes"
LONG_AGO = 1_600_000_000  # an mtime that makes a file settled on the sensor's first look
AUTOMATION_TICKS = 2  # ticks of the automation sensor to watch for a run that should not come


def page_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def automation_runs(runs: list[dict]) -> list[dict]:
    return [
        run
        for run in runs
        if any(t["key"] == "dagster/sensor_name" and t["value"] == AUTOMATION_SENSOR for t in run["tags"])
    ]


def tags(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["tags"]}


@pytest.fixture
def new_epoch_ingested(dagster_ui, materialized) -> dict:
    """The sensors started, then a new epoch file of run b written: the sensor's ingest run and the automation run
    that follows it, once both have finished (once per session, shared by this module's tests)."""
    if dagster_ui.sensor_runs is None:
        dagster_ui.sensor_runs = ingest_a_new_epoch(dagster_ui)
    return dagster_ui.sensor_runs


def ingest_a_new_epoch(dagster_ui) -> dict:
    before = {run["runId"] for run in dagster_ui.runs()}
    dagster_ui.start_sensor(RELEASE_SENSOR)
    dagster_ui.start_sensor(AUTOMATION_SENSOR)
    path = dagster_ui.release / RUN_B / "epoch_002" / "results.json"
    path.parent.mkdir()
    path.write_text(json.dumps(epoch_document(2, 8)))
    os.utime(path, (LONG_AGO, LONG_AGO))
    [ingest] = dagster_ui.wait_for_runs(
        "the sensor's ingest run",
        lambda runs: [run for run in runs if run["runId"] not in before and run["jobName"] == "ingest_runs"],
    )
    follow = dagster_ui.wait_for_runs(
        "the automation run after the ingest",
        lambda runs: [run for run in automation_runs(runs) if run["runId"] not in before],
    )
    return {"ingest": ingest, "automation": follow}


def test_runs_carry_job_names_and_tags(dagster_ui, new_epoch_ingested, browser):
    ingest, follow = new_epoch_ingested["ingest"], new_epoch_ingested["automation"]
    assert ingest["status"] == "SUCCESS" and tags(ingest)["dagster/partition"] == RUN_B
    assert tags(ingest)[REFRESHES] == f"lake partition {RUN_B}: 1 new, changed or removed epoch file(s)"
    assert all(run["status"] == "SUCCESS" for run in follow)
    assert {tags(run)[REFRESHES] for run in follow} == {"the models and exports whose inputs changed"}
    assert dagster_ui.materializations(["lake", "epochs"], [RUN_B])[0]["metadata"]["grpo/epochs"] == 3
    browser.get(f"{dagster_ui.url}/runs")
    wait_for(lambda: "ingest_runs" in page_text(browser), "the runs list to show ingest_runs", browser)
    time.sleep(1)
    screenshot(browser, "runs_with_jobs_and_tags")
    browser.get(f"{dagster_ui.url}/assets/lake/epochs?view=partitions&partition={RUN_B}")
    wait_for(lambda: "ingest_runs" in page_text(browser), "the partition's job", browser)
    time.sleep(1)
    screenshot(browser, "partition_ingested_by_the_sensor")


def test_the_sensor_page_shows_a_description_and_a_small_cursor(dagster_ui, new_epoch_ingested, browser):
    sensor = dagster_ui.sensor(RELEASE_SENSOR)
    assert sensor["description"].startswith("Looks at the release folders every 5 s.")
    cursor = sensor["sensorState"]["typeSpecificData"]["lastCursor"]
    assert len(cursor.encode()) < 1024 and json.loads(cursor)["unsettled"] == {}
    skipped = [tick["skipReason"] for tick in sensor["sensorState"]["ticks"] if tick["status"] == "SKIPPED"]
    assert "no new, changed or removed epoch file in 2 run folder(s)" in skipped
    browser.get(f"{dagster_ui.url}/locations/grpo_warehouse/sensors/{RELEASE_SENSOR}")
    wait_for(lambda: "Looks at the release folders" in page_text(browser), "the sensor's description", browser)
    time.sleep(1)
    screenshot(browser, "release_sensor")


def test_a_materialization_that_changes_nothing_requests_no_automation_run(dagster_ui, new_epoch_ingested, browser):
    before = {run["runId"] for run in automation_runs(dagster_ui.runs())}
    run_id = dagster_ui.launch_assets([["dim_runs"]])  # its inputs are unchanged: the table is kept
    [run] = dagster_ui.wait_for_runs("the dim_runs run", lambda runs: [r for r in runs if r["runId"] == run_id])
    assert run["status"] == "SUCCESS"
    latest = dagster_ui.materializations(["dim_runs"])[0]
    assert (latest["runId"], latest["metadata"]["grpo/refresh"]) == (run_id, "kept")
    finished = time.time()
    # The automation sensor looks every 30 s: watch it evaluate the graph twice after the materialization.
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        ticks = dagster_ui.sensor(AUTOMATION_SENSOR)["sensorState"]["ticks"]
        if sum(tick["timestamp"] > finished for tick in ticks) >= AUTOMATION_TICKS:
            break
        time.sleep(3)
    else:
        pytest.fail(f"the automation sensor did not tick {AUTOMATION_TICKS} times in 150 s")
    assert [r for r in automation_runs(dagster_ui.runs()) if r["runId"] not in before] == []
    browser.get(f"{dagster_ui.url}/locations/grpo_warehouse/sensors/{AUTOMATION_SENSOR}")
    wait_for(lambda: "models and exports" in page_text(browser), "the automation sensor's page", browser)
    time.sleep(1)
    screenshot(browser, "automation_no_run_after_no_change")
