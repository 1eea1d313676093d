"""In headless Chromium: the asset graph shows ingest, models and exports, and "Materialize all" succeeds."""

import os
import shutil
import tempfile
import time
from pathlib import Path

import duckdb
import pytest

from ui_server import RUN_A, RUN_B

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM_FLAGS = [
    # As this machine runs Chromium (see .library/env/machines/python.md): no sandbox as root, no GPU, and none
    # of the background connections that a closed network refuses.
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1600,1000",
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


@pytest.fixture
def browser(tmp_path):
    driver = start_chromium(tmp_path)
    try:
        yield driver
    finally:
        driver.quit()


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


def test_materialize_all_in_the_browser(dagster_ui, browser):
    from selenium.webdriver.common.by import By

    dagster_ui.add_run_partitions([RUN_A, RUN_B])  # what the release sensor does when it finds the runs
    before = dagster_ui.latest_backfill_id()

    browser.get(f"{dagster_ui.url}/asset-groups")
    materialize = wait_for(lambda: button(browser, browser, "Materialize all"), "the Materialize all button", browser)
    for group in ("ingest", "models", "exports"):
        wait_for(lambda: button(browser, browser, group), f"the {group} group", browser)
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
