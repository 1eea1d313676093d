"""In headless Chromium: column descriptions before the first materialization, the asset graph's "Materialize all",
then the quarantined file's check and a partition's own counts on their pages."""

import json
import time

import duckdb
import pytest
from ui_server import BROKEN_FILE, RUN_A, RUN_B, button, screenshot, wait_for

pytestmark = pytest.mark.slow


def page_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def open_page(driver, url: str, *texts: str) -> str:
    """Opens a page and waits until it shows every text; returns the page's text."""
    driver.get(url)
    wait_for(lambda: all(text in page_text(driver) for text in texts), f"{url} to show {texts}", driver)
    time.sleep(1)  # let late sections finish rendering for the screenshot
    return page_text(driver)


def test_column_descriptions_show_before_the_first_materialization(dagster_ui, browser):
    # Runs first in this session (pytest keeps the file's order): nothing has been materialized yet.
    if dagster_ui.first_backfill is None:
        assert dagster_ui.materializations(["fact_epochs"]) == []
    columns = {c["name"]: c for c in dagster_ui.column_schema(["fact_epochs"])}
    assert columns["epoch"]["description"] == "The training epoch (the document's `epoch`)."
    assert columns["n_trajectories"]["type"] == "bigint"
    open_page(browser, f"{dagster_ui.url}/assets/fact_epochs", "Columns", "Length of the document's trajectory arrays")
    screenshot(browser, "columns_before_materialization")


def test_materialize_all_in_the_browser(dagster_ui, browser):
    from selenium.webdriver.common.by import By

    dagster_ui.add_run_partitions([RUN_A, RUN_B])  # what the release sensor does when it finds the runs
    before = dagster_ui.latest_backfill_id()

    browser.get(f"{dagster_ui.url}/asset-groups")
    materialize = wait_for(lambda: button(browser, browser, "Materialize all"), "the Materialize all button", browser)
    for group in ("ingest", "models", "exports"):
        wait_for(lambda group=group: button(browser, browser, group), f"the {group} group", browser)
    time.sleep(1)  # let the graph finish laying out for the screenshot
    screenshot(browser, "asset_graph")
    materialize.click()

    # The run partitions make this a partition backfill: the dialog asks which partitions; take all of them.
    dialog = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "[role=dialog]"), "the launch dialog", browser)[-1]
    wait_for(lambda: button(browser, dialog, "All"), "the All partitions choice", browser).click()
    wait_for(lambda: "2 partitions" in dialog.text, "2 partitions selected", browser)
    screenshot(browser, "launch_dialog")
    wait_for(lambda: button(browser, dialog, "Launch backfill"), "the Launch backfill button", browser).click()

    backfill_id = wait_for(
        lambda: (latest := dagster_ui.latest_backfill_id()) != before and latest, "the backfill to be created", browser
    )
    state = dagster_ui.wait_for_backfill(backfill_id)
    browser.get(f"{dagster_ui.url}/runs/b/{backfill_id}")
    time.sleep(3)
    screenshot(browser, "backfill")
    state = dagster_ui.assert_succeeded(backfill_id)
    if dagster_ui.first_backfill is None:
        dagster_ui.first_backfill = state  # the webserver tests check the warehouse this click built
    with duckdb.connect(str(dagster_ui.warehouse / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("select count(distinct run_id) from fact_epochs").fetchone() == (2,)


def test_a_quarantined_file_turns_its_check_to_a_warning_naming_it(dagster_ui, materialized, browser):
    check = dagster_ui.asset_checks(["ingest_errors"])["input_loaded"]
    assert check["canExecuteIndividually"] == "CAN_EXECUTE"
    execution = check["executionForLatestMaterialization"]
    evaluation = execution["evaluation"]
    assert (execution["status"], evaluation["severity"]) == ("FAILED", "WARN")
    assert evaluation["description"] == f"1 input file(s) or entries not loaded: {RUN_A}/{BROKEN_FILE}"
    examples = json.loads(next(e["jsonString"] for e in evaluation["metadataEntries"] if e["label"] == "examples"))
    assert [(row["source_path"], row["error_kind"]) for row in examples] == [
        (f"{RUN_A}/{BROKEN_FILE}", "truncated_json")
    ]
    open_page(browser, f"{dagster_ui.url}/assets/ingest_errors?view=checks", "input_loaded", BROKEN_FILE)
    screenshot(browser, "quarantined_file_check")


def test_a_partition_page_shows_its_own_counts(dagster_ui, materialized, browser):
    # By hand from the fixture release: run a has 3 loaded epochs of 4 trajectories and 1 quarantined file; run b
    # 2 epochs of 8. Both were materialized by one run over the two partitions.
    own = {run: dagster_ui.materializations(["lake", "epochs"], [run])[0]["metadata"] for run in (RUN_A, RUN_B)}
    assert {
        run: (m["grpo/epochs"], m["grpo/trajectories"], m["grpo/files_quarantined"], m["dagster/row_count"])
        for run, m in own.items()
    } == {RUN_A: (3, 12, 1, 3), RUN_B: (2, 16, 0, 2)}
    open_page(browser, f"{dagster_ui.url}/assets/lake/epochs?view=partitions&partition={RUN_A}", "grpo/epochs")
    screenshot(browser, "partition_own_counts")
