"""The run explorer of the sample release in headless Chromium, from file:// with the network off: it draws every
ablation without a console error, its smoothing reproduces reward_ema, hovering reads an epoch, hiding a run
removes its marks."""

import json
import time

import duckdb
import pytest
from oracles import tensorboard_ema
from ui_server import ARTIFACTS, start_chromium

pytestmark = pytest.mark.slow

PAGE_BUDGET = 5_000_000  # bytes, for the sample release
READY_TIMEOUT = 60


@pytest.fixture(scope="module")
def sample_warehouse(tmp_path_factory):
    from pipelines.cli import main

    warehouse = tmp_path_factory.mktemp("explorer") / "warehouse"
    assert main(["build", "--warehouse", str(warehouse), "--workers", "1"]) == 0
    return warehouse


@pytest.fixture
def offline_browser(tmp_path):
    """Chromium with its console and network logged, and the network off."""
    driver = start_chromium(tmp_path, {"goog:loggingPrefs": {"browser": "ALL", "performance": "ALL"}})
    driver.set_script_timeout(READY_TIMEOUT)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd(
        "Network.emulateNetworkConditions",
        {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0},
    )
    try:
        yield driver
    finally:
        driver.quit()


def drawn_rows(driver, section: int, run_id: str) -> dict[int, dict]:
    """The rows the reward chart of a section is drawing for a run, by epoch (the page's own data)."""
    rows = driver.execute_script(
        "return window.explorer.sections[arguments[0]].views.curves.data('epochs')"
        ".filter(r => r.run_id === arguments[1]).map(r => [r.epoch, r.reward, r.smoothed]);",
        section,
        run_id,
    )
    return {epoch: {"reward": reward, "smoothed": smoothed} for epoch, reward, smoothed in rows}


def marks_of(driver, section: int, colour: str) -> int:
    """SVG marks of the reward and signal panels stroked or filled in a run's colour."""
    return driver.execute_script(
        """
        const colour = arguments[1].toLowerCase();
        const svg = document.querySelector(`#ablation-${arguments[0]} .curves svg`);
        return [...svg.querySelectorAll('path, circle')].filter(node =>
            (node.getAttribute('stroke') || '').toLowerCase() === colour ||
            (node.getAttribute('fill') || '').toLowerCase() === colour).length;""",
        section,
        colour,
    )


def wait_until(driver, script: str, what: str, *args, timeout: float = 10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if driver.execute_script(script, *args):
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def test_the_explorer_works_offline_and_reproduces_the_warehouse(sample_warehouse, offline_browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver = offline_browser
    page = sample_warehouse / "exports" / "explorer" / "index.html"
    assert page.stat().st_size < PAGE_BUDGET
    with duckdb.connect(str(sample_warehouse / "warehouse.duckdb"), read_only=True) as con:
        runs = con.sql("select run_id, ablation from dim_runs order by run_id").fetchall()
        ablations = [
            a for (a,) in con.sql("select ablation from dim_runs group by 1 order by count(*) desc, 1").fetchall()
        ]
        epochs = con.sql(
            "select m.run_id, m.epoch, m.mean_reward, m.reward_ema, e.snapshot_id from epoch_metrics m "
            "join fact_epochs e using (run_id, epoch) order by m.run_id, m.epoch"
        ).fetchall()

    driver.get(page.as_uri())
    assert (
        driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "window.explorer.ready.then(() => done(true), error => done(String(error)));"
        )
        is True
    )
    sections = driver.execute_script("return window.explorer.sections.map(s => s.ablation.name)")
    assert sections == ablations
    colours = driver.execute_script(
        "return Object.fromEntries(window.explorer.sections"
        ".flatMap(s => s.ablation.runs.map(r => [r.run_id, r.colour])))"
    )
    assert sorted(colours) == [run for run, _ in runs]
    for run, ablation in runs:  # every run of every ablation is drawn: its points, its line
        assert marks_of(driver, ablations.index(ablation), colours[run]) > 100, run
    weight = driver.execute_script("return window.explorer.weight")

    # The slider, by keyboard, to 0: the smoothed line is the per-epoch means themselves.
    multi = ablations[0]
    run = next(r for r, a in runs if a == multi)
    slider = driver.find_element(By.ID, "smoothing")
    slider.send_keys(Keys.HOME)
    wait_until(driver, "return window.explorer.weight === 0", "the slider at 0")
    assert all(row["smoothed"] == row["reward"] for row in drawn_rows(driver, 0, run).values())

    # Back to the configured weight: the line is reward_ema, and TensorBoard's formula computed here.
    driver.execute_script(
        "arguments[0].value = arguments[1];arguments[0].dispatchEvent(new Event('input', {bubbles: true}));",
        slider,
        str(weight),
    )
    wait_until(driver, "return window.explorer.weight === arguments[0]", "the configured weight", weight)
    time.sleep(0.2)
    for run_id in {r for r, _, _, _, _ in epochs}:
        rows = [e for e in epochs if e[0] == run_id]
        independent = tensorboard_ema([e[2] for e in rows], weight)
        drawn = drawn_rows(driver, ablations.index(dict(runs)[run_id]), run_id)
        for (_, epoch, _, reward_ema, _), expected in list(zip(rows, independent, strict=True))[::37]:
            assert drawn[epoch]["smoothed"] == pytest.approx(reward_ema, rel=1e-12, abs=1e-15), (run_id, epoch)
            assert drawn[epoch]["smoothed"] == pytest.approx(expected, rel=1e-12, abs=1e-15), (run_id, epoch)

    # Hover: the readout names the epoch under the pointer, each run's values there and its snapshot's model.
    left, top, width = driver.execute_script(
        "const svg = document.querySelector('#ablation-0 .curves svg'); svg.scrollIntoView();"
        "const box = svg.getBoundingClientRect(); return [box.left, box.top, box.width];"
    )
    pointer = ActionBuilder(driver)
    pointer.pointer_action.move_to_location(int(left + 0.6 * width), int(top + 200))  # in the reward panel
    pointer.perform()
    wait_until(driver, "return !document.querySelector('#ablation-0 .readout').hidden", "the hover readout")
    readout = driver.find_element(By.CSS_SELECTOR, "#ablation-0 .readout").text
    hovered = int(readout.split("\n")[0].removeprefix("epoch "))
    snapshot = next(e[4] for e in epochs if e[0] == run and e[1] == hovered)
    assert f"claude-haiku-4-5-20251001-{snapshot}" in readout
    reward_ema = next(e[3] for e in epochs if e[0] == run and e[1] == hovered)
    assert f"{reward_ema:.3f}" in readout
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / "explorer_hover.png"))

    # The side panels share the hover: the readout follows the pointer into the flat-groups panel.
    flat = driver.execute_script(
        "const box = document.querySelector('#ablation-0 .flat_strips_voronoi')"
        ".getBoundingClientRect(); return [box.left, box.top, box.width, box.height];"
    )
    pointer.pointer_action.move_to_location(int(flat[0] + 0.3 * flat[2]), int(flat[1] + 0.5 * flat[3]))
    pointer.perform()
    wait_until(
        driver,
        "return !document.querySelector('#ablation-0 .readout').hidden"
        " && !document.querySelector('#ablation-0 .readout').innerText.startsWith(arguments[0])",
        "the readout of another epoch",
        f"epoch {hovered}\n",
    )

    # The wheel zooms the epoch axis of every panel at once.
    pointer.pointer_action.move_to_location(5, 5)
    pointer.perform()
    ActionChains(driver).scroll_from_origin(
        ScrollOrigin.from_viewport(int(left + 0.7 * width), int(top + 200)), 0, -300
    ).perform()
    wait_until(
        driver, "return (window.explorer.sections[0].views.curves.signal('zoom') || {}).epoch", "a zoomed epoch axis"
    )
    zoomed = driver.execute_script(
        "const view = window.explorer.sections[0].views.curves;"
        "return [view.signal('zoom').epoch, view.scale('reward_x').domain(),"
        " view.scale('flat_x').domain(), view.scale('entropy_x').domain()];"
    )
    span = max(e[1] for e in epochs if dict(runs)[e[0]] == multi) - min(e[1] for e in epochs)
    assert zoomed[0][1] - zoomed[0][0] < 0.9 * span
    assert zoomed[1] == pytest.approx(zoomed[0]) and zoomed[2] == pytest.approx(zoomed[0])
    assert zoomed[3] == pytest.approx(zoomed[0])

    # A click on a run's row hides its marks, and another shows them again.
    pointer.pointer_action.move_to_location(5, 5)  # off the chart: no hover marks
    pointer.perform()
    wait_until(driver, "return document.querySelector('#ablation-0 .readout').hidden", "the readout gone")
    before = marks_of(driver, 0, colours[run])
    others = {r: marks_of(driver, 0, colours[r]) for r, a in runs if a == multi and r != run}
    row = driver.find_element(By.CSS_SELECTOR, f"#ablation-0 tr.run[data-run='{run}']")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)  # clear of the sticky toolbar
    row.click()
    wait_until(driver, "return window.explorer.sections[0].hidden.has(arguments[0])", "the run hidden", run)
    time.sleep(0.3)
    assert marks_of(driver, 0, colours[run]) == 0
    assert {r: marks_of(driver, 0, colours[r]) for r in others} == others
    row.click()
    time.sleep(0.3)
    assert marks_of(driver, 0, colours[run]) == before

    # Nothing was fetched: every request of the page was the page itself.
    events = [json.loads(entry["message"])["message"] for entry in driver.get_log("performance")]
    requested = [
        event["params"]["request"]["url"]
        for event in events
        if event["method"] == "Network.requestWillBeSent" and event["params"].get("documentURL") == page.as_uri()
    ]  # not the browser's own new-tab page
    assert requested and all(url == page.as_uri() or url.startswith("data:") for url in requested), requested
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    driver.set_window_size(1600, min(driver.execute_script("return document.body.scrollHeight") + 40, 6000))
    time.sleep(0.5)
    driver.save_screenshot(str(ARTIFACTS / "explorer.png"))
