"""The run explorer's page builder and asset, without a browser: what data a page carries, that it fetches nothing
and that its data cannot break out of its script element; files written only when their bytes change."""

import json
import math
from html.parser import HTMLParser

import dagster as dg
import polars as pl
import pytest
from test_export_assets import build_tables, record_fingerprints, write_build_db

from pipelines.defs.exports.assets import run_explorer
from pipelines.defs.resources import WarehouseConfig
from pipelines.exports.explorer import (
    MAX_ABLATIONS_ON_INDEX,
    ExplorerSettings,
    ExplorerTables,
    Page,
    ablation_payload,
    explorer_pages,
    library_cache,
    render_page,
    vega_bundle,
)
from pipelines.exports.figure import run_colours

SETTINGS = ExplorerSettings(ema_weight=0.8, snapshot_model_prefix="model-")


def explorer_tables(tables: dict[str, pl.DataFrame], breakdowns: pl.DataFrame | None = None) -> ExplorerTables:
    epochs = tables["epochs"].with_columns(snapshot_id=pl.format("s_{}_{}", "run_id", "epoch"))
    if breakdowns is None:
        breakdowns = pl.DataFrame(
            {
                "run_id": ["r_mid"],
                "window_start": [0],
                "window_end": [49],
                "breakdown": ["is_fp_control"],
                "level": ["true"],
                "n_epochs": [6],
                "n_trajectories": [12],
                "mean_reward": [0.25],
                "reward_std": [0.1],
            }
        )
    return ExplorerTables(
        runs=tables["runs"],
        epochs=epochs,
        summary=tables["summary"],
        contrasts=tables["contrasts"],
        snapshots=tables["snapshots"],
        breakdowns=breakdowns,
    )


class Elements(HTMLParser):
    """The start tags of a page and the text of each script element."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def parsed(page: bytes) -> Elements:
    elements = Elements()
    elements.feed(page.decode())
    return elements


def page_data(page: bytes) -> dict:
    elements = parsed(page)
    scripts = [attrs for tag, attrs in elements.tags if tag == "script"]
    data = [
        text for attrs, text in zip(scripts, elements.scripts, strict=True) if attrs.get("type") == "application/json"
    ]
    assert len(data) == 1
    return json.loads(data[0])


def test_an_ablation_carries_its_own_runs_epochs_in_order_and_no_nan(tables):
    epochs = (
        tables["epochs"]
        .with_columns(
            mean_reward=pl.when((pl.col("run_id") == "r_mid") & (pl.col("epoch") == 2))
            .then(math.nan)
            .otherwise(pl.col("mean_reward"))
        )
        .sample(fraction=1.0, shuffle=True, seed=3)
    )
    payload = ablation_payload("abl", explorer_tables({**tables, "epochs": epochs}))
    assert [r["run_id"] for r in payload["runs"]] == ["r_long", "r_mid", "r_short"]
    assert [r["label"] for r in payload["runs"]] == ["Long run", "Mid run", "r_short"]  # a missing label: the id
    assert [r["colour"] for r in payload["runs"]] == list(run_colours(["r_long", "r_mid", "r_short"]).values())
    assert set(payload["series"]) == {"r_long", "r_mid", "r_short"}
    mid = payload["series"]["r_mid"]
    assert mid["epoch"] == [0, 1, 2, 3, 4, 5]
    assert mid["mean_reward"][2] is None  # JSON has no NaN: the EMA passes a missing value through
    assert mid["mean_reward"][3] == pytest.approx(0.2 + 0.1 * 3)
    assert mid["snapshot_id"][4] == "s_r_mid_4"
    assert payload["runs"][0]["matched_reward"] == 0.7004 and payload["runs"][0]["matched_horizon"] == 1
    assert [(c["run_a"], c["run_b"]) for c in payload["contrasts"]] == [
        ("r_long", "r_mid"),
        ("r_long", "r_short"),
        ("r_mid", "r_short"),
    ]
    assert payload["contrasts"][2]["ci_high"] is None
    assert {s["run_id"] for s in payload["snapshots"]} == {"r_long", "r_mid", "r_short"}
    assert [b["level"] for b in payload["breakdowns"]] == ["true"]
    assert ablation_payload("other", explorer_tables(tables))["breakdowns"] == []


def test_interval_columns_are_carried_when_the_warehouse_has_them(tables):
    payload = ablation_payload("abl", explorer_tables(tables))
    assert (payload["runs"][1]["matched_ci_low"], payload["runs"][1]["matched_ci_high"]) == (0.41, 0.59)
    assert payload["runs"][2]["matched_ci_low"] is None  # no interval: null, and the column still said
    assert {k: payload["contrasts"][2][k] for k in ("ci_method", "unit", "resolved")} == {
        "ci_method": "reml",
        "unit": "epochs of one run",
        "resolved": False,
    }
    older = {
        **tables,
        "summary": tables["summary"].drop("matched_ci_low", "matched_ci_high"),
        "contrasts": tables["contrasts"].drop("ci_method", "unit", "resolved"),
    }
    plain = ablation_payload("abl", explorer_tables(older))
    assert "matched_ci_low" not in plain["runs"][0] and "resolved" not in plain["contrasts"][0]


def test_a_page_fetches_nothing_and_its_data_cannot_close_its_script(tables):
    hostile = "</script><img src=x onerror=alert(1)><!--"
    runs = tables["runs"].with_columns(
        label=pl.when(pl.col("run_id") == "r_mid").then(pl.lit(hostile)).otherwise(pl.col("label"))
    )
    pages = explorer_pages(explorer_tables({**tables, "runs": runs}), SETTINGS)
    assert list(pages) == ["index.html"]
    elements = parsed(pages["index.html"])
    assert [t for t, _ in elements.tags if t in ("img", "link", "iframe")] == []
    scripts = [attrs for tag, attrs in elements.tags if tag == "script"]
    assert len(scripts) == 3 and not any("src" in attrs for attrs in scripts)  # library, data, explorer: inline
    data = page_data(pages["index.html"])
    assert [a["name"] for a in data["ablations"]] == ["abl", "other"]
    assert data["ablations"][0]["runs"][1]["label"] == hostile
    assert data["settings"]["ema_weight"] == 0.8 and data["settings"]["snapshot_model_prefix"] == "model-"
    assert "vegaEmbed" in elements.scripts[0]


def test_the_same_tables_give_the_same_bytes(tables):
    shuffled = {name: frame.sample(fraction=1.0, shuffle=True, seed=1) for name, frame in tables.items()}
    assert explorer_pages(explorer_tables(tables), SETTINGS) == explorer_pages(explorer_tables(shuffled), SETTINGS)
    assert render_page("t", {"a": 1}) != render_page("t", {"a": 2})


def test_a_warehouse_without_runs_gets_a_page_saying_so(tables):
    empty = {name: frame.clear() for name, frame in tables.items()}
    pages = explorer_pages(explorer_tables(empty, breakdowns=pl.DataFrame()), SETTINGS)
    assert list(pages) == ["index.html"] and page_data(pages["index.html"])["ablations"] == []


def test_the_library_is_kept_under_its_version_and_read_back(tmp_path):
    bundle = vega_bundle(tmp_path)
    [kept] = tmp_path.iterdir()
    assert kept.name.startswith("vl-convert-") and kept.read_text() == bundle and "vegaEmbed" in bundle
    kept.write_text("window.kept = true;")
    assert vega_bundle(tmp_path) == "window.kept = true;"


def test_the_library_is_kept_in_the_users_cache_folder_for_every_warehouse(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert library_cache() == tmp_path / "grpo-warehouse"


def test_a_cache_that_cannot_be_written_still_gives_the_library(tmp_path):
    (tmp_path / "a file").write_text("")
    bundle = vega_bundle(tmp_path / "a file" / "cache")  # a folder cannot be made under a file
    assert "vegaEmbed" in bundle and bundle == vega_bundle()


def many_ablations(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """Each run an ablation of its own, plus two names that make the same file stem."""
    names = {"r_long": "a b", "r_mid": "a_b", "r_short": "third", "solo": "fourth"}
    extra = tables["runs"].filter(pl.col("run_id") == "solo").with_columns(run_id=pl.lit("fifth_run"))
    runs = pl.concat([tables["runs"], extra]).with_columns(
        ablation=pl.col("run_id").replace_strict({**names, "fifth_run": "fifth"})
    )
    # the contrasts of one of them (the runs they name are not its own: the page lists them as given)
    return {**tables, "runs": runs, "contrasts": tables["contrasts"].with_columns(ablation=pl.lit("a b"))}


def test_many_ablations_get_a_page_each_listed_on_the_index(tables):
    pages = explorer_pages(explorer_tables(many_ablations(tables)), SETTINGS)
    ablation_pages = sorted(p for p in pages if p != "index.html")
    assert len(ablation_pages) == 5 > MAX_ABLATIONS_ON_INDEX
    assert all(p.startswith("ablations/") and p.endswith(".html") for p in ablation_pages)
    assert "ablations/third.html" in ablation_pages and len({p.lower() for p in ablation_pages}) == 5
    index = page_data(pages["index.html"])
    assert index["ablations"] == []
    assert sorted(line["page"] for line in index["overview"]) == ablation_pages
    lines = {line["name"]: line for line in index["overview"]}
    assert [r["run_id"] for r in lines["third"]["runs"]] == ["r_short"] and lines["third"]["contrasts"] == []
    assert "series" not in lines["third"]  # the index carries no epochs
    for line in index["overview"]:
        own = page_data(pages[line["page"]])
        assert [a["name"] for a in own["ablations"]] == [line["name"]] and own["index"] == "../index.html"
        # the index makes its lines from the whole tables at once: the same runs and contrasts as the page's
        assert {key: own["ablations"][0][key] for key in ("name", "runs", "contrasts")} == {
            key: line[key] for key in ("name", "runs", "contrasts")
        }


def materialize(warehouse) -> dg.ExecuteInProcessResult:
    return dg.materialize([run_explorer], resources={"warehouse": WarehouseConfig(warehouse_dir=str(warehouse))})


def explorer_build_tables(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    built = build_tables(tables)
    explorer = explorer_tables(tables)
    return {
        **built,
        "fact_epochs": built["fact_epochs"].join(
            explorer.epochs.select("run_id", "epoch", "snapshot_id"), on=["run_id", "epoch"]
        ),
        "reward_breakdowns": explorer.breakdowns,
    }


def test_the_asset_writes_only_changed_pages_and_removes_stale_ones(tmp_path, tables):
    write_build_db(tmp_path, explorer_build_tables(many_ablations(tables)))
    first = materialize(tmp_path)
    folder = tmp_path / "exports" / "explorer"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.html"))[-1] == "index.html"
    assert len(list((folder / "ablations").glob("*.html"))) == 5
    metadata = first.get_asset_materialization_events()[0].materialization.metadata
    assert metadata["open"].value == (folder / "index.html").as_uri()
    assert metadata["grpo/rewritten"].value == 6

    stamps = {p: p.stat().st_mtime_ns for p in folder.rglob("*.html")}
    (tmp_path / "exports" / ".fingerprints.json").unlink()  # forget the fingerprints: render again, same bytes
    second = materialize(tmp_path)
    assert second.get_asset_materialization_events()[0].materialization.metadata["grpo/rewritten"].value == 0
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*.html")} == stamps

    write_build_db(tmp_path, explorer_build_tables(tables))  # two ablations: one page again
    materialize(tmp_path)
    assert [p.relative_to(folder).as_posix() for p in folder.rglob("*.html")] == ["index.html"]
    assert [a["name"] for a in page_data((folder / "index.html").read_bytes())["ablations"]] == ["abl", "other"]


# Per table a column of r_short's rows to change, and the pages that show it: r_short's ablation ("third"), and the
# index when the table is one the index lists (the runs' summaries, not their epochs or snapshots).
ONE_RUN_CHANGES = {
    "epoch_metrics": ("mean_reward", ["third · GRPO run explorer"]),
    "run_summary": ("final_reward", ["GRPO run explorer", "third · GRPO run explorer"]),
    "snapshots": ("epoch", ["third · GRPO run explorer"]),
}


@pytest.mark.parametrize("table", ONE_RUN_CHANGES)
def test_a_change_to_one_run_renders_the_pages_showing_it_alone(tmp_path, tables, monkeypatch, table):
    built = explorer_build_tables(many_ablations(tables))
    write_build_db(tmp_path / "kept", built)
    record_fingerprints(tmp_path / "kept", {name: "before" for name in built})
    materialize(tmp_path / "kept")
    column, showing = ONE_RUN_CHANGES[table]
    changed = pl.when(pl.col("run_id") == "r_short").then(pl.col(column) + 1).otherwise(pl.col(column))
    one_run_changed = {**built, table: built[table].with_columns(changed.alias(column))}
    write_build_db(tmp_path / "kept", one_run_changed)
    record_fingerprints(tmp_path / "kept", {name: "after" for name in built})
    rendered, render = [], Page.render
    monkeypatch.setattr(Page, "render", lambda page, library: rendered.append(page.title) or render(page, library))
    result = materialize(tmp_path / "kept")
    assert sorted(rendered) == showing
    assert result.get_asset_materialization_events()[0].materialization.metadata["grpo/rewritten"].value == len(showing)

    write_build_db(tmp_path / "fresh", one_run_changed)
    materialize(tmp_path / "fresh")
    kept, fresh = (tmp_path / name / "exports" / "explorer" for name in ("kept", "fresh"))
    pages = sorted(p.relative_to(fresh).as_posix() for p in fresh.rglob("*.html"))
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*.html")) == pages and len(pages) == 6
    assert all((kept / page).read_bytes() == (fresh / page).read_bytes() for page in pages)
