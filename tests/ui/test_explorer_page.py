"""The run explorer in headless Chromium, from file:// with the network off: the sample release's page draws every
ablation without a console error, its smoothing reproduces reward_ema, and each control (hover, zoom, hide, metric,
x axis, log scale, sort, filter, downloads, histograms, the all-runs view) shows what the warehouse holds; a page of
configurations of seeds draws and compares configurations."""

import csv
import io
import json
import time
from pathlib import Path
from xml.etree import ElementTree

import duckdb
import numpy as np
import pytest
from oracles import tensorboard_ema
from selenium.webdriver.common.by import By
from ui_server import ARTIFACTS, start_chromium

pytestmark = pytest.mark.slow

PAGE_BUDGET = 5_000_000  # bytes, for the sample release
READY_TIMEOUT = 60


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


def drawn_rows(driver, section: int, key: str, dataset: str = "main_0") -> dict[float, float]:
    """The points the main chart of a section is drawing for a line (a run or a configuration): x -> y."""
    rows = driver.execute_script(
        "return window.explorer.sections[arguments[0]].views.curves.data(arguments[2])"
        ".filter(r => r.key === arguments[1]).map(r => [r.x, r.y]);",
        section,
        key,
        dataset,
    )
    return dict(map(tuple, rows))


def drawn_keys(driver, section: int, dataset: str = "main_0") -> list[str]:
    return driver.execute_script(
        "return [...new Set(window.explorer.sections[arguments[0]].views.curves.data(arguments[1]).map(r => r.key))]"
        ".sort();",
        section,
        dataset,
    )


def run_async(driver, script: str, *args):
    """Runs script (the body of an async function) in the page and returns what it returns."""
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        f"(async () => {{ {script} }})()"
        ".then(v => done({ok: v === undefined ? null : v}), e => done({error: String(e)}));",
        *args,
    )
    assert "error" not in result, result["error"]
    return result["ok"]


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


def warehouse_rows(warehouse) -> dict:
    with duckdb.connect(str(warehouse / "warehouse.duckdb"), read_only=True) as con:
        return {
            "runs": con.sql("select run_id, ablation from dim_runs order by run_id").fetchall(),
            "ablations": [
                a for (a,) in con.sql("select ablation from dim_runs group by 1 order by count(*) desc, 1").fetchall()
            ],
            "epochs": con.sql(
                "select m.run_id, m.epoch, m.mean_reward, m.reward_ema, e.snapshot_id, e.loss, e.n_trajectories "
                "from epoch_metrics m join fact_epochs e using (run_id, epoch) order by m.run_id, m.epoch"
            ).fetchall(),
            "matched": dict(con.sql("select run_id, matched_reward from run_summary").fetchall()),
            "trajectories": con.sql("select run_id, epoch, reward, advantage from fact_trajectories").fetchall(),
        }


def open_page(driver, page):
    driver.get(page.as_uri())
    run_async(driver, "await window.explorer.ready; await window.explorer.drawAll();")


def test_the_explorer_works_offline_and_reproduces_the_warehouse(sample_warehouse, offline_browser):
    driver = offline_browser
    _, warehouse = sample_warehouse
    page = warehouse / "exports" / "explorer" / "index.html"
    assert page.stat().st_size < PAGE_BUDGET
    rows = warehouse_rows(warehouse)
    runs, ablations, epochs = rows["runs"], rows["ablations"], rows["epochs"]
    open_page(driver, page)
    sections = driver.execute_script("return window.explorer.sections.map(s => s.ablation.name)")
    assert sections == [*ablations, None]  # and the all-runs view
    colours = driver.execute_script(
        "return Object.fromEntries(window.explorer.sections.slice(0, -1)"
        ".flatMap(s => s.ablation.runs.map(r => [r.run_id, r.colour])))"
    )
    assert sorted(colours) == [run for run, _ in runs]
    for run, ablation in runs:  # every run of every ablation is drawn: its points, its lines
        assert marks_of(driver, ablations.index(ablation), colours[run]) > 100, run

    smoothing_reproduces_reward_ema(driver, runs, ablations, epochs)
    hovered = hover_reads_an_epoch(driver, runs, ablations, epochs)
    wheel_zooms_every_panel(driver, runs, ablations, epochs)
    a_click_hides_a_run(driver, runs, ablations, colours)
    trajectories_of_an_epoch(driver, rows, hovered)
    metric_axis_and_scale(driver, runs, ablations, epochs)
    table_sorts_and_filters(driver, runs, ablations, rows["matched"])
    downloads_are_what_is_drawn(driver)
    all_runs_overlaid(driver, runs, ablations)
    transcript_lengths_beside_the_reward(driver, warehouse, runs, ablations)

    # Nothing was fetched: every request of the page was the page itself.
    events = [json.loads(entry["message"])["message"] for entry in driver.get_log("performance")]
    requested = [
        event["params"]["request"]["url"]
        for event in events
        if event["method"] == "Network.requestWillBeSent" and event["params"].get("documentURL") == page.as_uri()
    ]  # not the browser's own new-tab page
    assert requested and all(url == page.as_uri() or url.startswith(("data:", "blob:")) for url in requested), requested
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    driver.set_window_size(1600, min(driver.execute_script("return document.body.scrollHeight") + 40, 6000))
    time.sleep(0.5)
    driver.save_screenshot(str(ARTIFACTS / "explorer.png"))
    transcripts_listed_with_links_to_their_files(driver, warehouse, runs, ablations)  # last: it leaves the page


BINARY_RUN = "binary_v1_grpo_binary_v1_bs64"


def binary_run_transcripts(warehouse, columns: str, matched_window: bool = False) -> list[tuple]:
    """columns (of t: trajectory_transcripts, f: fact_trajectories, r: dim_runs) of the binary run's trajectories
    with a transcript, of its matched window's epochs only when asked."""
    window = " and epoch in (select epoch from matched_window_values where run_id = $run)" if matched_window else ""
    with duckdb.connect(str(warehouse / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(
            f"select {columns} from trajectory_transcripts as t "
            "join fact_trajectories as f using (run_id, epoch, traj_index) join dim_runs as r using (run_id) "
            f"where run_id = $run and t.transcript_path is not null{window}",
            {"run": BINARY_RUN},
        ).fetchall()


def transcript_lengths_beside_the_reward(driver, warehouse, runs, ablations):
    """Under the binary run's reward, its transcripts' length per epoch with transcripts, unsmoothed: the mean
    characters of content (solid) and that of the top third of finite rewards, ties by position (dashed), worked out
    here from the trajectories' rows."""
    run, section = BINARY_RUN, ablations.index(dict(runs)[BINARY_RUN])
    rows = binary_run_transcripts(warehouse, "t.epoch, t.traj_index, t.content_chars, f.reward")
    by_epoch: dict[int, list] = {}
    for epoch, traj_index, chars, reward in rows:
        by_epoch.setdefault(epoch, []).append((reward, traj_index, chars))
    mean = {e: np.mean([c for _, _, c in v]) for e, v in by_epoch.items()}
    finite = {e: [r for r in v if r[0] is not None and np.isfinite(r[0])] for e, v in by_epoch.items()}
    top = {
        e: np.mean([c for _, _, c in sorted(v, key=lambda r: (-r[0], r[1]))[: -(-len(v) // 3)]])
        for e, v in finite.items()
        if v
    }
    assert len(mean) > 10
    for dataset, expected in (("transcripts_0", mean), ("transcripts_1", top)):
        drawn = drawn_rows(driver, section, run, dataset)
        assert sorted(drawn) == sorted(expected), dataset
        assert all(drawn[e] == pytest.approx(expected[e], rel=1e-6) for e in expected), dataset


def transcripts_listed_with_links_to_their_files(driver, warehouse, runs, ablations):
    """The binary run's matched window lists the five highest- and lowest-reward trajectories among its transcripts
    there (ranked here from the warehouse's rows, ties by epoch and position), each with its transcript's first line
    as its file holds it; an epoch's lists hold that epoch's; a link opens the transcript's file."""
    section = ablations.index(dict(runs)[BINARY_RUN])
    columns = "t.epoch, t.traj_index, t.trajectory_id, f.reward, r.release_root || '/' || t.transcript_path"
    rows = binary_run_transcripts(warehouse, columns, matched_window=True)
    by_reward = sorted(rows, key=lambda r: (-r[3], r[0], r[1])), sorted(rows, key=lambda r: (r[3], r[0], r[1]))
    listed = """return [...document.querySelectorAll(`#ablation-${arguments[0]} .transcript-lists li`)].map(li => [
        li.querySelector('code').textContent, li.querySelector('.first-line').textContent, li.querySelector('a').href
    ]);"""
    entries = driver.execute_script(listed, section)
    assert [e[0] for e in entries] == [r[2] for r in by_reward[0][:5]] + [r[2] for r in by_reward[1][:5]]
    top = json.loads(Path(by_reward[0][0][4]).read_text())
    first = next(m["content"] for m in top["messages"] if m["role"] != "system").split("\n")[0]
    assert entries[0][1] == (first if len(first) <= 120 else first[:119] + "…")
    assert entries[0][2] == Path(by_reward[0][0][4]).as_uri()

    scope = driver.find_element(By.CSS_SELECTOR, f"#ablation-{section} select[aria-label='epochs of the transcripts']")
    last = scope.find_elements(By.TAG_NAME, "option")[-1]
    epoch = last.get_attribute("value")
    last.click()
    epochs = driver.execute_script(
        f"return [...document.querySelectorAll('#ablation-{section} .transcript-lists li')].map(li => li.textContent)"
    )
    assert epoch == "490" and len(epochs) == 6 and all(f"epoch {epoch} ·" in text for text in epochs)

    link = driver.find_element(By.CSS_SELECTOR, f"#ablation-{section} .transcript-lists a")
    target, trajectory_id = link.get_attribute("href"), link.find_element(By.XPATH, "..").text.split(" · ")[2]
    link.click()
    wait_until(driver, "return location.href === arguments[0]", "the transcript's file", target)
    assert trajectory_id in driver.find_element(By.TAG_NAME, "body").text


def smoothing_reproduces_reward_ema(driver, runs, ablations, epochs):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    weight = driver.execute_script("return window.explorer.weight")
    multi = ablations[0]
    run = next(r for r, a in runs if a == multi)
    # The slider, by keyboard, to 0: the smoothed line is the per-epoch means themselves.
    slider = driver.find_element(By.ID, "smoothing")
    slider.send_keys(Keys.HOME)
    wait_until(driver, "return window.explorer.weight === 0", "the slider at 0")
    time.sleep(0.3)
    means = {e[1]: e[2] for e in epochs if e[0] == run}
    assert drawn_rows(driver, 0, run) == pytest.approx(means, rel=1e-12, abs=1e-15)
    # Back to the configured weight: the line is reward_ema, and TensorBoard's formula computed here.
    driver.execute_script(
        "arguments[0].value = arguments[1];arguments[0].dispatchEvent(new Event('input', {bubbles: true}));",
        slider,
        str(weight),
    )
    wait_until(driver, "return window.explorer.weight === arguments[0]", "the configured weight", weight)
    time.sleep(0.3)
    for run_id in {r for r, *_ in epochs}:
        own = [e for e in epochs if e[0] == run_id]
        independent = tensorboard_ema([e[2] for e in own], weight)
        drawn = drawn_rows(driver, ablations.index(dict(runs)[run_id]), run_id)
        for (_, epoch, _, reward_ema, *_), expected in list(zip(own, independent, strict=True))[::37]:
            assert drawn[epoch] == pytest.approx(reward_ema, rel=1e-12, abs=1e-15), (run_id, epoch)
            assert drawn[epoch] == pytest.approx(expected, rel=1e-12, abs=1e-15), (run_id, epoch)


def pointer_to(driver, x: float, y: float):
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    pointer = ActionBuilder(driver)
    pointer.pointer_action.move_to_location(int(x), int(y))
    pointer.perform()


def chart_box(driver, section: int = 0) -> list[float]:
    return driver.execute_script(
        "const svg = document.querySelector(`#ablation-${arguments[0]} .curves svg`); svg.scrollIntoView();"
        "const box = svg.getBoundingClientRect(); return [box.left, box.top, box.width, box.height];",
        section,
    )


def hover_reads_an_epoch(driver, runs, ablations, epochs) -> int:
    """The readout names the epoch under the pointer, each run's values there and its snapshot's model, inside the
    chart; it follows the pointer into the flat-groups panel. Returns the epoch read."""
    from selenium.webdriver.common.by import By

    run = next(r for r, a in runs if a == ablations[0])
    left, top, width, height = chart_box(driver)
    pointer_to(driver, left + 0.6 * width, top + 200)  # in the reward panel
    wait_until(driver, "return !document.querySelector('#ablation-0 .readout').hidden", "the hover readout")
    readout = driver.find_element(By.CSS_SELECTOR, "#ablation-0 .readout").text
    hovered = int(readout.split("\n")[0].split(" ")[1])
    snapshot = next(e[4] for e in epochs if e[0] == run and e[1] == hovered)
    assert f"claude-haiku-4-5-20251001-{snapshot}" in readout
    reward_ema = next(e[3] for e in epochs if e[0] == run and e[1] == hovered)
    assert f"{reward_ema:.4f}" in readout
    inside = driver.execute_script(
        "const box = document.querySelector('#ablation-0 .readout').getBoundingClientRect();"
        "const host = document.querySelector('#ablation-0 .curves-host').getBoundingClientRect();"
        "return box.left >= host.left - 1 && box.right <= host.right + 1 && box.bottom <= host.bottom + 1;"
    )
    assert inside
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / "explorer_hover.png"))
    flat = driver.execute_script(
        "const box = document.querySelector('#ablation-0 .flat_strips_voronoi')"
        ".getBoundingClientRect(); return [box.left, box.top, box.width, box.height];"
    )
    pointer_to(driver, flat[0] + 0.3 * flat[2], flat[1] + 0.5 * flat[3])
    wait_until(
        driver,
        "return !document.querySelector('#ablation-0 .readout').hidden"
        " && !document.querySelector('#ablation-0 .readout').innerText.startsWith(arguments[0])",
        "the readout of another epoch",
        f"epoch {hovered} ",
    )
    pointer_to(driver, left + 0.6 * width, top + 200)
    wait_until(driver, "return !document.querySelector('#ablation-0 .readout').hidden", "the hover readout again")
    return int(driver.find_element(By.CSS_SELECTOR, "#ablation-0 .readout").text.split("\n")[0].split(" ")[1])


def wheel_zooms_every_panel(driver, runs, ablations, epochs):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin

    left, top, width, _ = chart_box(driver)
    pointer_to(driver, 5, 5)
    ActionChains(driver).scroll_from_origin(
        ScrollOrigin.from_viewport(int(left + 0.7 * width), int(top + 200)), 0, -300
    ).perform()
    wait_until(driver, "return (window.explorer.sections[0].views.curves.signal('zoom') || {}).x", "a zoomed x axis")
    zoomed = driver.execute_script(
        "const view = window.explorer.sections[0].views.curves;"
        "return [view.signal('zoom').x, view.scale('main_x').domain(),"
        " view.scale('flat_x').domain(), view.scale('entropy_x').domain()];"
    )
    span = max(e[1] for e in epochs if dict(runs)[e[0]] == ablations[0]) - min(e[1] for e in epochs)
    assert zoomed[0][1] - zoomed[0][0] < 0.9 * span
    assert zoomed[1] == pytest.approx(zoomed[0]) and zoomed[2] == pytest.approx(zoomed[0])
    assert zoomed[3] == pytest.approx(zoomed[0])


def a_click_hides_a_run(driver, runs, ablations, colours):
    from selenium.webdriver.common.by import By

    run = next(r for r, a in runs if a == ablations[0])
    pointer_to(driver, 5, 5)  # off the chart: no hover marks
    wait_until(driver, "return document.querySelector('#ablation-0 .readout').hidden", "the readout gone")
    before = marks_of(driver, 0, colours[run])
    others = {r: marks_of(driver, 0, colours[r]) for r, a in runs if a == ablations[0] and r != run}
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


def trajectories_of_an_epoch(driver, rows, hovered):
    """A click on the chart shows the histograms of an epoch's trajectories: numpy's bins of the warehouse's values."""
    left, top, width, _ = chart_box(driver)
    pointer_to(driver, left + 0.6 * width, top + 200)
    wait_until(driver, "return !document.querySelector('#ablation-0 .readout').hidden", "the hover readout")
    driver.execute_script("document.querySelector('#ablation-0 .curves').click()")
    wait_until(driver, "return window.explorer.sections[0].histogram !== null", "a histogram")
    shown = driver.execute_script("return window.explorer.sections[0].histogram")
    bins = driver.execute_script("return window.explorer.data.histogram_bins")
    for quantity, column in (("reward", 2), ("advantage", 3)):
        values = np.array([t[column] for t in rows["trajectories"] if t[:2] == (shown["run_id"], shown["epoch"])])
        values = values[np.isfinite(values)]
        counts, edges = np.histogram(values, bins=bins, range=(values.min(), values.max()))
        drawn = [(r["start"], r["n"]) for r in shown["rows"] if r["quantity"] == quantity]
        expected = [(edges[i], int(n)) for i, n in enumerate(counts) if n]
        assert [n for _, n in drawn] == [n for _, n in expected]
        assert [s for s, _ in drawn] == pytest.approx([s for s, _ in expected])
    assert abs(shown["epoch"] - hovered) <= 20  # the nearest kept epoch to the one clicked


def metric_axis_and_scale(driver, runs, ablations, epochs):
    """Another epoch column (loss), the x axis by trajectories seen, a log y axis: each as the warehouse says."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run = next(r for r, a in runs if a == ablations[0])
    own = [e for e in epochs if e[0] == run]
    weight = driver.execute_script("return window.explorer.weight")
    Select(driver.find_element(By.CSS_SELECTOR, "#ablation-0 select[aria-label='metric']")).select_by_value("loss")
    wait_until(driver, "return window.explorer.sections[0].state.metric === 'loss'", "the loss plotted")
    run_async(driver, "await window.explorer.sections[0].drawing;")
    time.sleep(0.5)
    expected = dict(zip([e[1] for e in own], tensorboard_ema([e[5] for e in own], weight), strict=True))
    assert drawn_rows(driver, 0, run) == pytest.approx(expected, rel=1e-6)  # 7 significant digits
    Select(driver.find_element(By.CSS_SELECTOR, "#ablation-0 select[aria-label='x axis']")).select_by_value(
        "trajectories"
    )
    wait_until(driver, "return window.explorer.sections[0].state.x === 'trajectories'", "x by trajectories")
    time.sleep(0.5)
    assert sorted(drawn_rows(driver, 0, run)) == [float(x) for x in np.cumsum([e[6] for e in own])]
    driver.find_element(By.CSS_SELECTOR, "#ablation-0 input[aria-label='log y axis']").click()
    wait_until(driver, "return window.explorer.sections[0].state.log", "a log axis")
    time.sleep(0.5)
    assert driver.execute_script("return window.explorer.sections[0].views.curves.scale('main_y').type") == "log"
    run_async(driver, "await window.explorer.update(0, {metric: 'mean_reward', x: 'epoch', log: false});")


def table_sorts_and_filters(driver, runs, ablations, matched):
    from selenium.webdriver.common.by import By

    members = [r for r, a in runs if a == ablations[0]]
    header = driver.find_element(By.CSS_SELECTOR, "#ablation-0 th[data-sort='matched_reward']")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", header)
    header.click()
    order = driver.execute_script(
        "return [...document.querySelectorAll('#ablation-0 tr.run')].map(tr => tr.dataset.run)"
    )
    assert order == sorted(members, key=lambda r: -matched[r])
    header.click()
    order = driver.execute_script(
        "return [...document.querySelectorAll('#ablation-0 tr.run')].map(tr => tr.dataset.run)"
    )
    assert order == sorted(members, key=lambda r: matched[r])
    box = driver.find_element(By.CSS_SELECTOR, "#ablation-0 input[aria-label='filter runs']")
    box.send_keys(members[1][-6:])  # a run id's end
    wait_until(driver, "return window.explorer.sections[0].state.filter.length > 0", "the filter")
    run_async(driver, "await window.explorer.update(0, {});")
    assert drawn_keys(driver, 0) == [members[1]]
    shown = driver.execute_script(
        "return [...document.querySelectorAll('#ablation-0 tr.run')].filter(tr => !tr.hidden).map(tr => tr.dataset.run)"
    )
    assert shown == [members[1]]
    box.clear()
    run_async(driver, "await window.explorer.update(0, {filter: ''});")
    assert drawn_keys(driver, 0) == sorted(members)


def downloads_are_what_is_drawn(driver):
    text = driver.execute_script("return window.explorer.visibleCsv(0)")
    table = list(csv.DictReader(io.StringIO(text)))
    drawn = driver.execute_script(
        "return window.explorer.sections[0].views.curves.data('main_0').map(r => [r.key, r.x, r.y])"
    )
    assert sorted((r["run_id"], float(r["epoch"]), float(r["smoothed"])) for r in table) == sorted(map(tuple, drawn))
    svg = run_async(driver, "return await window.explorer.image(0, 'svg');")
    assert ElementTree.fromstring(svg).tag.endswith("svg")
    png = run_async(driver, "return await window.explorer.image(0, 'png');")
    assert png.startswith("data:image/png;base64,") and len(png) > 10_000


def all_runs_overlaid(driver, runs, ablations):
    """The last section overlays every ablation's runs, a line per ablation, each run's line on demand."""
    last = len(ablations)
    keys = drawn_keys(driver, last)
    assert len(keys) == len(ablations)  # grouped by ablation
    run_async(driver, "await window.explorer.update(arguments[0], {grouped: false});", last)
    assert drawn_keys(driver, last) == sorted(r for r, _ in runs)


@pytest.fixture
def seeded_page(tmp_path):
    """A page of the export tests' tables as configurations of seeds (test_explorer.seeded_tables), one of them
    with a hostile name, and an ablation of one configuration."""
    import importlib.util
    import sys

    import polars as pl

    exports = Path(__file__).parents[1] / "exports"
    sys.path.insert(0, str(exports))
    spec = importlib.util.spec_from_file_location("export_tables", exports / "conftest.py")
    fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixture)
    from test_explorer import explorer_tables, many_ablations, seeded_tables

    from pipelines.exports.explorer import ExplorerSettings, explorer_pages

    names = {
        "runs": "RUNS",
        "epochs": "EPOCHS",
        "summary": "SUMMARY",
        "contrasts": "CONTRASTS",
        "snapshots": "SNAPSHOTS",
    }
    plain = {name: getattr(fixture, constant) for name, constant in names.items()}
    tables = seeded_tables(plain)
    solo = tables["runs"].filter(pl.col("run_id") == "solo")
    runs = pl.concat([tables["runs"], solo.with_columns(run_id=pl.lit("solo_s1"))]).with_columns(
        arm=pl.when(pl.col("ablation") == "other").then(pl.lit("solo")).otherwise(pl.col("arm")),
        label=pl.col("label").replace({"Cfg A · seed 1": HOSTILE + " · seed 1"}),  # Cfg A: what the two share
    )
    epochs = pl.concat(
        [tables["epochs"], tables["epochs"].filter(pl.col("run_id") == "solo").with_columns(run_id=pl.lit("solo_s1"))]
    )
    pages = explorer_pages(explorer_tables({**tables, "runs": runs, "epochs": epochs}), ExplorerSettings())
    path = tmp_path / "index.html"
    path.write_bytes(pages["index.html"])
    # and the all-runs page of a warehouse of many ablations
    many = explorer_pages(explorer_tables(many_ablations(plain)), ExplorerSettings())
    (tmp_path / "many").mkdir()
    (tmp_path / "many" / "all-runs.html").write_bytes(many["all-runs.html"])
    return path


HOSTILE = "Cfg A, a long name with <img src=x onerror=alert(1)></script> and more"


def test_configurations_are_drawn_and_compared_as_configurations(seeded_page, offline_browser):
    driver = offline_browser
    open_page(driver, seeded_page)
    headlines = driver.execute_script("return [...document.querySelectorAll('.headline')].map(p => p.textContent)")
    assert "configuration Cfg A leads" in headlines[0] and "against 0.330 for Cfg B (2 seeds)" in headlines[0]
    assert "seed" not in headlines[0].split("leads")[0].replace("configuration", "")  # never two seeds of one
    assert headlines[1] == "All 2 runs are seeds of one configuration (Solo run): there is nothing to compare it with."
    assert driver.execute_script("return document.querySelectorAll('img').length") == 0  # names are text
    assert HOSTILE in driver.find_element(By.CSS_SELECTOR, "#ablation-0 table.runs").text

    # grouped by default: a line and a band per configuration, the IQM and quartiles of its seeds' smoothed values
    assert drawn_keys(driver, 0) == drawn_keys(driver, 0, "main_bands") == ["r_long", "r_short"]
    weight = driver.execute_script("return window.explorer.weight")
    long, mid = (tensorboard_ema([0.1 * k + start for k in range(n)], weight) for start, n in ((0.1, 10), (0.2, 6)))
    # two seeds: the IQM keeps both (a quarter of 2 is 0), so the line is their mean where both have the epoch
    assert drawn_rows(driver, 0, "r_long")[3] == pytest.approx((long[3] + mid[3]) / 2, rel=1e-12)
    assert drawn_rows(driver, 0, "r_long")[8] == pytest.approx(long[8], rel=1e-12)  # only r_long reaches epoch 8
    run_async(driver, "await window.explorer.update(0, {seeds: true});")
    assert drawn_keys(driver, 0, "main_0_faint") == ["r_extra", "r_long", "r_mid", "r_short"]
    run_async(driver, "await window.explorer.update(0, {only: 'r_short'});")
    assert drawn_keys(driver, 0) == ["r_short"] and drawn_keys(driver, 0, "main_0_faint") == ["r_extra", "r_short"]
    run_async(driver, "await window.explorer.update(0, {only: null, grouped: false});")
    assert drawn_keys(driver, 0) == ["r_extra", "r_long", "r_mid", "r_short"]

    # a long label loses its middle, never its end (the seed)
    short = driver.execute_script("return window.explorer.shortLabel(arguments[0])", HOSTILE + " · seed 1")
    assert short.endswith("and more · seed 1") and len(short) <= 44
    # the hover box lists a few lines, highest first, and counts the others
    rows = driver.execute_script("window.explorer.readoutRows = 3; return window.explorer.readoutAt(0, 1)")
    assert len(rows) == 4 and rows[-1] == "1 more"
    # at epoch 1, r_short and r_extra (Cfg B's seeds, 0.3 then 0.4) lead r_mid (0.2 then 0.3)
    assert [row[:5] for row in rows[:3]] == ["Cfg B", "Cfg B", "Cfg A"] and rows[2].startswith("Cfg A, a long")

    # all-runs.html of a warehouse of many ablations: a line per ablation, each run on demand (the one of no
    # epochs has none)
    open_page(driver, seeded_page.parent / "many" / "all-runs.html")
    assert drawn_keys(driver, 0) == ["a b", "a_b", "fourth", "third"]
    run_async(driver, "await window.explorer.update(0, {grouped: false});")
    assert drawn_keys(driver, 0) == ["r_long", "r_mid", "r_short", "solo"]
