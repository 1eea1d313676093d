"""The exports under <warehouse>/exports: ablation figures, CSV/Parquet copies of the result tables, report.md."""

import base64
import hashlib
from pathlib import Path

import dagster as dg
import polars as pl

from pipelines.defs.resources import WarehouseConfig
from pipelines.exports.figure import Smoothing, ablation_figure, figure_files, render
from pipelines.exports.files import table_files, write_if_changed
from pipelines.exports.report import ReportSettings, frame_table, ordered_ablations, render_headlines, render_report
from pipelines.warehouse_db import open_build_db

GROUP = "exports"
FIGURES = "figures"
# Each exported table, in an order that makes its files byte-stable from one build to the next.
EXPORTED_TABLES = {
    "run_summary": "run_id",
    "ablation_contrasts": "ablation, run_a, run_b",
    "snapshots": "run_id, role",
    "epoch_metrics": "run_id, epoch",
}
RUNS_SQL = "select run_id, ablation, label from dim_runs order by run_id"
EPOCHS_SQL = """
select m.run_id, m.epoch, m.mean_reward, m.reward_ema, m.frac_zero_std_groups, e.sample_entropy, e.train_entropy
from epoch_metrics as m
left join fact_epochs as e using (run_id, epoch)
order by m.run_id, m.epoch
"""
PREVIEWS_SHOWN = 4  # inline figure previews in the UI; more would bloat the event log


def exports_dir(warehouse: WarehouseConfig) -> Path:
    return warehouse.warehouse / "exports"


def read_tables(warehouse: WarehouseConfig, queries: dict[str, str]) -> dict[str, pl.DataFrame]:
    """Runs each query on the build database and returns polars frames; the lock is released before returning."""
    with open_build_db(warehouse.warehouse, read_only=True) as con:
        return {name: con.sql(query).pl() for name, query in queries.items()}


def content_version(files: dict[str, bytes]) -> dg.DataVersion:
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return dg.DataVersion(digest.hexdigest()[:16])


def report_settings(warehouse: WarehouseConfig) -> ReportSettings:
    return ReportSettings(final_window=warehouse.final_window, ci_level=warehouse.ci_level, figures_folder=FIGURES)


@dg.asset(
    deps=[dg.AssetKey(name) for name in ("epoch_metrics", "run_summary", "dim_runs", "fact_epochs")],
    group_name=GROUP,
    kinds={"matplotlib", "png", "svg"},
)
def ablation_figures(context: dg.AssetExecutionContext, warehouse: WarehouseConfig) -> dg.MaterializeResult:
    """One figure per ablation (PNG and SVG): reward curves, zero-variance groups and entropy of its runs."""
    tables = read_tables(warehouse, {"runs": RUNS_SQL, "epochs": EPOCHS_SQL,
                                     "summary": "select * from run_summary order by run_id"})
    smoothing = Smoothing(ema_weight=warehouse.ema_weight, window=warehouse.rolling_window,
                          band_level=warehouse.ci_level)
    folder = exports_dir(warehouse) / FIGURES
    files: dict[str, bytes] = {}
    previews: list[str] = []
    for ablation in ordered_ablations(tables["runs"]):
        fig = ablation_figure(ablation, tables["runs"], tables["epochs"], tables["summary"], smoothing,
                              final_window=warehouse.final_window)
        files.update(figure_files(ablation, fig))
        if len(previews) < PREVIEWS_SHOWN:
            image = base64.b64encode(render(fig, "jpeg", dpi=60)).decode()
            previews.append(f"**{ablation}**\n\n![{ablation}](data:image/jpeg;base64,{image})")
    written = [name for name, content in files.items() if write_if_changed(folder / name, content)]
    stale = [p for p in folder.glob("*") if p.suffix in (".png", ".svg") and p.name not in files]
    for path in stale:
        path.unlink()
    context.log.info(f"{len(files)} figure file(s), {len(written)} rewritten, {len(stale)} stale removed")
    return dg.MaterializeResult(
        metadata={
            "preview": dg.MetadataValue.md("\n\n".join(previews) or "no ablations"),
            "folder": dg.MetadataValue.path(str(folder)),
            "files": dg.MetadataValue.json(sorted(files)),
            "grpo/rewritten": len(written),
        },
        data_version=content_version(files),
    )


@dg.asset(
    deps=[dg.AssetKey(name) for name in EXPORTED_TABLES],
    group_name=GROUP,
    kinds={"csv", "parquet"},
)
def table_exports(context: dg.AssetExecutionContext, warehouse: WarehouseConfig) -> dg.MaterializeResult:
    """CSV and Parquet copies of run_summary, ablation_contrasts, snapshots and epoch_metrics."""
    frames = read_tables(warehouse, {name: f"select * from {name} order by {keys}"
                                     for name, keys in EXPORTED_TABLES.items()})
    folder = exports_dir(warehouse)
    files = {f"{name}.{ext}": content for name, frame in frames.items() for ext, content in table_files(frame).items()}
    written = [name for name, content in files.items() if write_if_changed(folder / name, content)]
    context.log.info(f"{len(files)} table file(s), {len(written)} rewritten")
    summary = frames["run_summary"].select("run_id", "n_epochs", "final_reward", "matched_horizon", "matched_reward")
    return dg.MaterializeResult(
        metadata={
            "folder": dg.MetadataValue.path(str(folder)),
            **{f"rows/{name}": frame.height for name, frame in frames.items()},
            "run_summary": dg.MetadataValue.md(frame_table(summary)),
            "grpo/rewritten": len(written),
        },
        data_version=content_version(files),
    )


@dg.asset(
    deps=[dg.AssetKey(name) for name in ("dim_runs", "run_summary", "ablation_contrasts", "snapshots")]
    + [ablation_figures.key],
    group_name=GROUP,
    kinds={"markdown"},
)
def report(context: dg.AssetExecutionContext, warehouse: WarehouseConfig) -> dg.MaterializeResult:
    """report.md: per ablation, the winner at the compute-matched horizon, runs, contrasts, snapshots to call."""
    tables = read_tables(warehouse, {
        "runs": RUNS_SQL,
        "summary": "select * from run_summary order by run_id",
        "contrasts": "select * from ablation_contrasts order by ablation, run_a, run_b",
        "snapshots": "select * from snapshots order by run_id, role",
    })
    settings = report_settings(warehouse)
    text = render_report(tables["runs"], tables["summary"], tables["contrasts"], tables["snapshots"], settings)
    path = exports_dir(warehouse) / "report.md"
    content = text.encode()
    rewritten = write_if_changed(path, content)
    context.log.info(f"{path} {'written' if rewritten else 'unchanged'}")
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(path)),
            "headline": dg.MetadataValue.md(render_headlines(tables["runs"], tables["summary"], tables["contrasts"],
                                                             settings)),
            "grpo/rewritten": rewritten,
        },
        data_version=content_version({"report.md": content}),
    )

