"""The export assets against a hand-made build database: files land, a rebuild with no change rewrites nothing."""

import hashlib
import json
import logging

import dagster as dg
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipelines.definitions import defs
from pipelines.defs.exports import assets as export_assets
from pipelines.defs.exports import figures as figure_assets
from pipelines.defs.exports.assets import report, table_exports
from pipelines.defs.exports.figures import ablation_figures
from pipelines.defs.resources import WarehouseConfig
from pipelines.exports.figure import ablation_inputs
from pipelines.warehouse_db import open_build_db

LONER = {"run_id": "loner", "release": "rel", "reward_family": "binary", "fp_per_group": None, "group_size": 4}
LONER |= {"ablation": None, "label": None, "arm": "loner"}  # a run of no ablation


def write_build_db(warehouse, tables: dict[str, pl.DataFrame]) -> None:
    with open_build_db(warehouse) as con:
        for name, frame in tables.items():
            con.register("frame", frame.to_arrow())
            con.execute(f"create or replace table {name} as select * from frame")
            con.unregister("frame")


def build_tables(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    epochs = tables["epochs"]
    return {
        "dim_runs": tables["runs"],
        "epoch_metrics": epochs.drop("sample_entropy", "train_entropy"),
        "fact_epochs": epochs.select("run_id", "epoch", "sample_entropy", "train_entropy"),
        "run_summary": tables["summary"],
        "ablation_contrasts": tables["contrasts"],
        "snapshots": tables["snapshots"],
        # every file loaded: no quarantined file, no epoch entry without a document
        "file_inventory": pl.DataFrame(
            schema={"run_id": pl.String, "source_path": pl.String, "status": pl.String, "reason": pl.String}
        ),
        "unloaded_epochs": pl.DataFrame(
            schema={"run_id": pl.String, "epoch": pl.Int64, "reason": pl.String, "source_path": pl.String}
        ),
    }


def materialize(warehouse) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [ablation_figures, table_exports, report],
        resources={"warehouse": WarehouseConfig(warehouse_dir=str(warehouse))},
    )


def rewritten(result: dg.ExecuteInProcessResult) -> dict[str, object]:
    return {
        e.asset_key.to_user_string(): e.materialization.metadata["grpo/rewritten"].value
        for e in result.get_asset_materialization_events()
    }


def test_exports_land_and_an_unchanged_rebuild_rewrites_nothing(tmp_path, tables):
    write_build_db(tmp_path, build_tables(tables))
    first = materialize(tmp_path)
    assert first.success
    exports = tmp_path / "exports"
    assert sorted(p.name for p in (exports / "figures").iterdir()) == ["abl.png", "abl.svg", "other.png", "other.svg"]
    for name in ("run_summary", "ablation_contrasts", "snapshots", "epoch_metrics"):
        assert_frame_equal(
            pl.read_parquet(exports / f"{name}.parquet"),
            build_tables(tables)[name].sort(pl.all()),
            check_row_order=False,
        )
    text = (exports / "report.md").read_text()
    assert "(figures/abl.png)" in text and "claude-haiku-4-5-20251001-s_l1" in text

    stamps = {p: p.stat().st_mtime_ns for p in exports.rglob("*") if p.is_file()}
    second = materialize(tmp_path)
    assert rewritten(second) == {"ablation_figures": 0, "table_exports": 0, "report": False}
    assert {p: p.stat().st_mtime_ns for p in exports.rglob("*") if p.is_file()} == stamps
    versions = [
        {e.asset_key: e.materialization.tags.get("dagster/data_version") for e in r.get_asset_materialization_events()}
        for r in (first, second)
    ]
    assert versions[0] == versions[1]


def test_a_changed_table_rewrites_its_exports_and_drops_stale_figures(tmp_path, tables):
    figures = tmp_path / "exports" / "figures"
    figures.mkdir(parents=True)
    users = {figures / "paper_fig1.png": b"the user's own figure", figures / "other_old.svg": b"<svg/>"}
    for path, content in users.items():  # the user's files beside the figures: no build removes them
        path.write_bytes(content)
    write_build_db(tmp_path, build_tables(tables))
    materialize(tmp_path)
    changed = {
        **tables,
        "runs": tables["runs"].filter(pl.col("run_id") != "solo"),
        "summary": tables["summary"].with_columns(pl.col("matched_reward") + 0.01),
    }
    write_build_db(tmp_path, build_tables(changed))
    result = materialize(tmp_path)
    assert rewritten(result)["report"] is True
    assert sorted(p.name for p in figures.iterdir()) == ["abl.png", "abl.svg", "other_old.svg", "paper_fig1.png"]
    assert {path: path.read_bytes() for path in users} == users
    assert "Ablation `other`" not in (tmp_path / "exports" / "report.md").read_text()


def test_export_assets_sit_downstream_of_the_models_they_read():
    graph = defs().resolve_asset_graph()
    parents = {
        key: {p.to_user_string() for p in graph.get(dg.AssetKey(key)).parent_keys}
        for key in ("ablation_figures", "table_exports", "report", "paper_tables")
    }
    assert parents["ablation_figures"] >= {"epoch_metrics", "run_summary", "dim_runs", "fact_epochs"}
    assert parents["table_exports"] == {"dim_runs", "run_summary", "ablation_contrasts", "snapshots", "epoch_metrics"}
    assert parents["report"] >= {"run_summary", "ablation_contrasts", "snapshots", "dim_runs", "ablation_figures"}
    assert parents["report"] >= {"epoch_metrics", "file_inventory", "unloaded_epochs"}
    assert parents["paper_tables"] == {"dim_runs", "run_summary"}
    for key in parents:
        assert graph.get(dg.AssetKey(key)).group_name == "exports"


def record_fingerprints(warehouse, fingerprints: dict[str, str]) -> None:
    """What the model steps record for each table they build (refresh_model), by hand."""
    with open_build_db(warehouse) as con:
        con.execute("delete from bookkeeping.model_state")
        con.executemany("insert into bookkeeping.model_state values (?, ?, now())", list(fingerprints.items()))


@pytest.fixture
def renders(monkeypatch):
    """Counts the figures drawn, table files encoded and reports rendered from now on."""
    counts = {"figures": 0, "tables": 0, "report": 0}

    def counting(name, function, count=lambda *args: 1):
        def wrapper(*args, **kwargs):
            counts[name] += count(*args)
            return function(*args, **kwargs)

        return wrapper

    # draw_figures(jobs, workers): one figure per job, drawn in worker processes
    monkeypatch.setattr(
        figure_assets, "draw_figures", counting("figures", figure_assets.draw_figures, lambda jobs, *_: len(jobs))
    )
    monkeypatch.setattr(export_assets, "table_files", counting("tables", export_assets.table_files))
    monkeypatch.setattr(
        export_assets, "render_report_and_headlines", counting("report", export_assets.render_report_and_headlines)
    )
    return counts


def test_exports_whose_input_fingerprints_are_unchanged_are_not_rendered_again(tmp_path, tables, renders):
    built = build_tables(tables)
    write_build_db(tmp_path, built)
    record_fingerprints(tmp_path, {name: f"fp-{name}" for name in built})
    first = materialize(tmp_path)
    # two ablations, five exported tables, one report
    assert renders == {"figures": 2, "tables": 5, "report": 1}
    exports = tmp_path / "exports"
    stamps = {p: p.stat().st_mtime_ns for p in exports.rglob("*") if p.is_file()}

    second = materialize(tmp_path)
    assert renders == {"figures": 2, "tables": 5, "report": 1}  # nothing rendered again
    assert {p: p.stat().st_mtime_ns for p in exports.rglob("*") if p.is_file()} == stamps
    assert rewritten(second) == {"ablation_figures": 0, "table_exports": 0, "report": False}
    events = [
        {e.asset_key.to_user_string(): e.materialization for e in r.get_asset_materialization_events()}
        for r in (first, second)
    ]
    for key, materialization in events[1].items():
        assert materialization.tags["dagster/data_version"] == events[0][key].tags["dagster/data_version"]
        assert materialization.metadata["grpo/unchanged"].value is True
    # The preview's images are not stored again; the kept materialization points to the one that drew them.
    assert events[0]["ablation_figures"].metadata["preview"].value.count("data:image/jpeg;base64,") == 2
    assert events[1]["ablation_figures"].metadata["preview"].value == (
        f"Figures unchanged since run `{first.run_id[:8]}`, whose materialization shows them."
    )
    assert events[1]["table_exports"].metadata["rows/run_summary"].value == 4

    # a file the user deleted is written again, by its export only, and of the figures only its ablation's
    (exports / "figures" / "other.svg").unlink()
    materialize(tmp_path)
    assert renders == {"figures": 3, "tables": 5, "report": 1}
    assert (exports / "figures" / "other.svg").is_file()

    # a rebuilt table renders the exports that read it, and only those
    record_fingerprints(tmp_path, {**{name: f"fp-{name}" for name in built}, "snapshots": "fp-snapshots-2"})
    materialize(tmp_path)
    assert renders == {"figures": 3, "tables": 10, "report": 2}


def test_a_changed_run_redraws_its_own_ablation_only(tmp_path, tables, renders):
    built = build_tables(tables)
    write_build_db(tmp_path, built)
    record_fingerprints(tmp_path, {name: f"fp-{name}" for name in built})
    materialize(tmp_path)
    figures = tmp_path / "exports" / "figures"
    before = {p.name: p.read_bytes() for p in figures.iterdir()}
    assert renders["figures"] == 2

    # One epoch of `solo`, the one run of ablation `other`, changes: epoch_metrics is rebuilt.
    changed = {
        **tables,
        "epochs": tables["epochs"].with_columns(
            pl.when((pl.col("run_id") == "solo") & (pl.col("epoch") == 1))
            .then(pl.col("mean_reward") + 0.5)
            .otherwise(pl.col("mean_reward"))
            .alias("mean_reward")
        ),
    }
    write_build_db(tmp_path, build_tables(changed))
    record_fingerprints(tmp_path, {**{name: f"fp-{name}" for name in built}, "epoch_metrics": "fp-epoch_metrics-2"})
    result = materialize(tmp_path)
    assert renders["figures"] == 3  # `other` drawn again, `abl` kept
    after = {p.name: p.read_bytes() for p in figures.iterdir()}
    assert after["abl.png"] == before["abl.png"] and after["abl.svg"] == before["abl.svg"]
    assert after["other.png"] != before["other.png"]
    (materialization,) = [
        e.materialization
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "ablation_figures"
    ]
    assert materialization.metadata["grpo/rewritten"].value == 2  # other.png and other.svg

    # The figures are those a fresh build draws, and so is their data version, though `abl`'s files were not read.
    fresh = tmp_path / "fresh"
    write_build_db(fresh, build_tables(changed))
    fresh_result = materialize(fresh)
    assert {p.name: p.read_bytes() for p in (fresh / "exports" / "figures").iterdir()} == after
    assert figures_version(result) == figures_version(fresh_result)


def figures_version(result: dg.ExecuteInProcessResult) -> str:
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key == ablation_figures.key]
    return event.materialization.tags["dagster/data_version"]


def reference_digest(rows: tuple[pl.DataFrame, ...], params: dict) -> str:
    """One ablation's figure digest worked out from its own rows: the schema and row hashes of each frame."""
    digest = hashlib.sha256(json.dumps({"params": params, "code": export_assets.CODE_VERSION}, sort_keys=True).encode())
    for frame in rows:
        digest.update(repr(frame.schema).encode())
        digest.update(frame.hash_rows(seed=0).to_numpy().tobytes())
    return digest.hexdigest()[:16]


def test_the_digests_of_all_ablations_at_once_are_each_ablations_own(tables):
    # Runs out of order, one without an ablation, an epoch and a summary row of a run dim_runs does not have.
    runs = pl.concat([tables["runs"], pl.DataFrame([LONER], schema=tables["runs"].schema)]).reverse()
    epochs = pl.concat(
        [tables["epochs"], tables["epochs"].filter(pl.col("run_id") == "solo").with_columns(run_id=pl.lit("gone"))]
    )
    summary = pl.concat(
        [tables["summary"].filter(pl.col("run_id") == "solo").with_columns(run_id=pl.lit("loner")), tables["summary"]]
    )
    tables = {"runs": runs, "epochs": epochs, "summary": summary}
    params = {"final_window": 3}
    digests = figure_assets.figure_digests(tables, params)
    assert list(digests) == ["abl", "other", None]  # the report's order
    assert digests == {
        ablation: reference_digest(
            ablation_inputs(ablation, runs, epochs, summary), {**params, "code": figure_assets.FIGURES_CODE}
        )
        for ablation in digests
    }


def test_a_changed_parameter_renders_the_figures_again(tmp_path, tables, renders):
    built = build_tables(tables)
    write_build_db(tmp_path, built)
    record_fingerprints(tmp_path, {name: f"fp-{name}" for name in built})
    materialize(tmp_path)
    dg.materialize(
        [ablation_figures], resources={"warehouse": WarehouseConfig(warehouse_dir=str(tmp_path), ema_weight=0.5)}
    )
    assert renders["figures"] == 4


def test_the_metric_parameters_reach_the_figure_and_the_report(tmp_path, tables, monkeypatch):
    smoothings, draw = [], figure_assets.draw_figures

    def drawing(jobs, *args, **kwargs):
        smoothings.extend(job.smoothing for job in jobs)
        return draw(jobs, *args, **kwargs)

    monkeypatch.setattr(figure_assets, "draw_figures", drawing)
    write_build_db(tmp_path, build_tables(tables))
    config = WarehouseConfig(warehouse_dir=str(tmp_path), ema_weight=0.7, rolling_window=3, ci_level=0.8)
    assert dg.materialize([ablation_figures, report], resources={"warehouse": config}).success
    assert {(s.ema_weight, s.window, s.band_level) for s in smoothings} == {(0.7, 3, 0.8)}
    text = (tmp_path / "exports" / "report.md").read_text()
    assert "80% interval" in text and "95%" not in text


def test_a_changed_run_remakes_its_own_ablations_section_of_the_report_only(tmp_path, tables, monkeypatch):
    made = []
    section_parts = export_assets.section_parts

    def counting(ablation, *args):
        made.append(ablation)
        return section_parts(ablation, *args)

    monkeypatch.setattr(export_assets, "section_parts", counting)
    write_build_db(tmp_path, build_tables(tables))
    dg.materialize([report], resources={"warehouse": WarehouseConfig(warehouse_dir=str(tmp_path))})
    assert sorted(made) == ["abl", "other"]

    # `solo`, the one run of `other`, gets another matched reward and snapshot: the report's `abl` section is kept
    changed = {
        **tables,
        "summary": tables["summary"].with_columns(
            pl.when(pl.col("run_id") == "solo").then(0.25).otherwise(pl.col("matched_reward")).alias("matched_reward")
        ),
        "snapshots": tables["snapshots"].with_columns(
            pl.when(pl.col("run_id") == "solo")
            .then(pl.lit("m-new"))
            .otherwise(pl.col("model_name"))
            .alias("model_name")
        ),
    }
    write_build_db(tmp_path, build_tables(changed))
    made.clear()
    dg.materialize([report], resources={"warehouse": WarehouseConfig(warehouse_dir=str(tmp_path))})
    assert made == ["other"]
    text = (tmp_path / "exports" / "report.md").read_text()
    assert "0.250" in text and "m-new" in text

    fresh = tmp_path / "fresh"
    write_build_db(fresh, build_tables(changed))
    dg.materialize([report], resources={"warehouse": WarehouseConfig(warehouse_dir=str(fresh))})
    assert text == (fresh / "exports" / "report.md").read_text()


def test_a_figure_that_cannot_be_drawn_is_reported_the_others_built_and_it_is_drawn_once_it_can_be(
    tmp_path, tables, monkeypatch
):
    from pipelines.exports import figure as figure_module

    drawable = figure_module.ablation_figure

    def failing_for_abl(ablation, *args, **kwargs):
        if ablation == "abl":
            raise ValueError("bottom cannot be >= top\nsecond line")
        return drawable(ablation, *args, **kwargs)

    monkeypatch.setattr(figure_module, "ablation_figure", failing_for_abl)
    # no previews: the failed figure is drawn again because it failed, not because it has no preview yet
    monkeypatch.setattr(figure_assets, "PREVIEWS_SHOWN", 0)
    built = build_tables(tables)
    write_build_db(tmp_path, built)
    record_fingerprints(tmp_path, {name: f"fp-{name}" for name in built})  # unchanged inputs, as a model step says
    figures = tmp_path / "exports" / "figures"
    # Closed at the end: an instance left to the garbage collector warns about its temporary folder wherever that
    # happens, inside another test's check for warnings.
    with dg.DagsterInstance.ephemeral() as instance:

        def build() -> tuple[dict, list[str]]:
            config = WarehouseConfig(warehouse_dir=str(tmp_path))
            result = dg.materialize([ablation_figures], resources={"warehouse": config}, instance=instance)
            assert result.success
            (event,) = result.get_asset_materialization_events()
            warnings = [r.user_message for r in instance.all_logs(result.run_id) if r.level == logging.WARNING]
            return event.materialization.metadata["not_drawn"].value, warnings

        cause = "ValueError: bottom cannot be >= top"
        for _ in range(2):  # reported again by a build with no change, which tries it again
            not_drawn, warnings = build()
            assert not_drawn == {"abl": cause}
            assert warnings == [f"the figure of ablation 'abl' was not drawn: {cause}"]
            assert sorted(p.name for p in figures.iterdir()) == ["other.png", "other.svg"]
        monkeypatch.setattr(figure_module, "ablation_figure", drawable)
        assert build() == ({}, [])
        assert sorted(p.name for p in figures.iterdir()) == ["abl.png", "abl.svg", "other.png", "other.svg"]
