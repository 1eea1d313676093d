"""The exports under <warehouse>/exports: ablation figures, CSV/Parquet copies of the result tables, report.md, the
run explorer."""

import dataclasses
import hashlib
import json
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl

from pipelines.code_versions import code_version
from pipelines.defs.resources import WarehouseConfig
from pipelines.exports import explorer as explorer_module
from pipelines.exports import run_notes
from pipelines.exports.explorer import (
    ExplorerSettings,
    ExplorerTables,
    Page,
    explorer_contents,
    library_cache,
    library_versions,
    vega_bundle,
)
from pipelines.exports.explorer_data import EXPLORER_EPOCHS_SQL, histogram_sql, joined_epochs
from pipelines.exports.files import table_files, write_if_changed
from pipelines.exports.report import (
    ReportSettings,
    SectionParts,
    frame_table,
    ordered_ablations,
    render_report_and_headlines,
    section_parts,
)
from pipelines.exports.state import (
    export_fingerprint,
    kept_entry,
    record,
    recorded_metadata,
    refuse_users_files,
    remove_gone,
    write_exports,
)
from pipelines.exports.transcript_lists import LISTS_SQL
from pipelines.warehouse_db import model_fingerprints

GROUP = "exports"

FIGURES = "figures"
FIGURES_ASSET = dg.AssetKey("ablation_figures")  # defs/exports/figures.py
# Each exported table, in an order that makes its files byte-stable from one build to the next.
EXPORTED_TABLES = {
    "dim_runs": "run_id",
    "run_summary": "run_id",
    "ablation_contrasts": "ablation, run_a, run_b",
    "snapshots": "run_id, role",
    "epoch_metrics": "run_id, epoch",
}
RUNS_SQL = "select run_id, ablation, label, arm from dim_runs order by run_id"
FIGURE_RUNS_SQL = "select run_id, ablation, label, arm, reward_family from dim_runs order by run_id"
EPOCHS_SQL = """
select m.run_id, m.epoch, m.mean_reward, m.reward_ema, m.frac_zero_std_groups, e.sample_entropy, e.train_entropy
from epoch_metrics as m
left join fact_epochs as e using (run_id, epoch)
order by m.run_id, m.epoch
"""
# The model tables each export reads: their fingerprints (bookkeeping.model_state) key the export.
FIGURE_INPUTS = ("dim_runs", "epoch_metrics", "fact_epochs", "run_summary")
REPORT_INPUTS = (
    "dim_runs",
    "run_summary",
    "ablation_contrasts",
    "snapshots",
    "epoch_metrics",
    "file_inventory",
    "unloaded_epochs",
)
EXPLORER = "explorer"
EXPLORER_INPUTS = (
    "dim_runs",
    "epoch_metrics",
    "fact_epochs",
    "fact_trajectories",
    "run_summary",
    "ablation_contrasts",
    "snapshots",
    "reward_breakdowns",
    "trajectory_transcripts",
    "transcript_metrics",
    "matched_window_values",
)
EXPLORER_QUERIES = {
    "runs": RUNS_SQL,
    "epochs": EXPLORER_EPOCHS_SQL,
    "epoch_files": "select * from fact_epochs",  # loss, KL, the numeric extras, snapshot_id: joined_epochs
    "histograms": histogram_sql(),
    "summary": "select * from run_summary order by run_id",
    "contrasts": "select * from ablation_contrasts order by ablation, run_a, run_b",
    "snapshots": "select * from snapshots order by run_id",
    "breakdowns": "select * from reward_breakdowns order by run_id, breakdown, level, window_start",
    "transcripts": LISTS_SQL,
}
PREVIEWS_SHOWN = 4  # inline figure previews in the UI; more would bloat the event log


# The exports' code (code_versions): this module, the exports' modules it imports, the explorer's style and script,
# and the libraries that make their bytes (matplotlib, polars, ...) and the charting library bundled in the pages.
# A change to any of them makes the figures, the report and the pages again.
CODE_VERSION = hashlib.sha256(
    f"{code_version(__name__, files=sorted(explorer_module.ASSETS.iterdir()))} {library_versions()}".encode()
).hexdigest()[:16]


def exports_dir(warehouse: WarehouseConfig) -> Path:
    return warehouse.warehouse / "exports"


def read_tables(
    warehouse: WarehouseConfig, queries: dict[str, str], inputs=()
) -> tuple[dict[str, pl.DataFrame], dict[str, str | None]]:
    """Runs each query on the build database (polars frames), with the fingerprints of the inputs, read together."""
    with warehouse.build_db(read_only=True) as con:
        return {name: con.sql(query).pl() for name, query in queries.items()}, model_fingerprints(con, inputs)


def inputs_fingerprint(warehouse: WarehouseConfig, inputs, params: dict, code: str = CODE_VERSION) -> str | None:
    with warehouse.build_db(read_only=True) as con:
        return export_fingerprint(model_fingerprints(con, inputs), params, code)


def file_hashes(files: dict[str, bytes]) -> dict[str, str]:
    """Each file's SHA-256, in hex."""
    return {name: hashlib.sha256(content).hexdigest() for name, content in files.items()}


def content_version(hashes: dict[str, str]) -> dg.DataVersion:
    """The data version of an export's files, from their hashes (file_hashes): the same files, the same version."""
    digest = hashlib.sha256()
    for name in sorted(hashes):
        digest.update(name.encode() + b"\0" + bytes.fromhex(hashes[name]))
    return dg.DataVersion(digest.hexdigest()[:16])


def report_settings(warehouse: WarehouseConfig) -> ReportSettings:
    return ReportSettings(
        final_window=warehouse.final_window,
        ci_level=warehouse.ci_level,
        ci_method=warehouse.ci_method,
        figures_folder=FIGURES,
    )


def kept_result(context: dg.AssetExecutionContext, entry: dict, metadata: dict) -> dg.MaterializeResult:
    """The result of an export whose inputs are unchanged since it was written: its last metadata, nothing redone."""
    context.log.info(f"inputs unchanged; {len(entry['files'])} file(s) kept")
    return dg.MaterializeResult(
        metadata={**metadata, "grpo/unchanged": True}, data_version=dg.DataVersion(entry["data_version"])
    )


def _digest(parts: list[tuple[pl.Schema, np.ndarray]], salt: dict) -> str:
    """A digest of the frames given by their schemas and their rows' hashes, the salt and the code."""
    digest = hashlib.sha256(json.dumps({"params": salt, "code": CODE_VERSION}, sort_keys=True).encode())
    for schema, hashes in parts:
        digest.update(repr(schema).encode())
        digest.update(hashes.tobytes())  # stable within a polars version (CODE_VERSION)
    return digest.hexdigest()[:16]


def digests_by_ablation(
    runs: pl.DataFrame, frames: list[tuple[pl.DataFrame, bool]], salt: dict
) -> dict[str | None, str]:
    """Per ablation of runs (dim_runs), in the report's order, a digest of its rows of the frames: of each frame the
    schema and the hash of each of its rows that belongs to the ablation, in the frame's order, with salt (the
    parameters and the code). A row belongs by its own `ablation` column where the frame is given with True, else by
    the ablation of its run. Each frame is hashed in one pass and its hashes split by ablation, instead of being
    filtered for each ablation (a quarter of a second per export at 200 ablations)."""
    of_run = runs.select("run_id", "ablation")
    split = []
    for frame, by_own_ablation in frames:
        hashed = frame.select(hash=frame.hash_rows(seed=0), **({"ablation": "ablation"} if by_own_ablation else {}))
        if not by_own_ablation:
            hashed = hashed.with_columns(run_id=frame["run_id"]).join(
                of_run, on="run_id", how="inner", maintain_order="left"
            )
        grouped = hashed.group_by("ablation", maintain_order=True).agg("hash")
        split.append(dict(zip(grouped["ablation"].to_list(), grouped["hash"].to_list(), strict=True)))
    empty = np.array([], dtype=np.uint64)
    return {
        ablation: _digest(
            [
                (frame.schema, np.asarray(of.get(ablation, empty), dtype=np.uint64))
                for (frame, _), of in zip(frames, split, strict=True)
            ],
            salt,
        )
        for ablation in ordered_ablations(runs)
    }


def table_exports_metadata(folder: Path, rows: dict[str, int], summary: str, rewritten: int) -> dict:
    return {
        "folder": dg.MetadataValue.path(str(folder)),
        **{f"rows/{name}": n for name, n in rows.items()},
        "run_summary": dg.MetadataValue.md(summary),
        "grpo/rewritten": rewritten,
    }


@dg.asset(
    deps=[dg.AssetKey(name) for name in EXPORTED_TABLES],
    group_name=GROUP,
    code_version=CODE_VERSION,
    kinds={"csv", "parquet"},
)
def table_exports(context: dg.AssetExecutionContext, warehouse: WarehouseConfig) -> dg.MaterializeResult:
    """CSV and Parquet copies of dim_runs, run_summary, ablation_contrasts, snapshots and epoch_metrics."""
    params = {"tables": EXPORTED_TABLES}
    folder = exports_dir(warehouse)
    entry = kept_entry(
        folder, table_exports.key.to_user_string(), inputs_fingerprint(warehouse, EXPORTED_TABLES, params)
    )
    if entry:
        meta = entry["metadata"]
        return kept_result(context, entry, table_exports_metadata(folder, meta["rows"], meta["run_summary"], 0))
    frames, inputs = read_tables(
        warehouse,
        {name: f"select * from {name} order by {keys}" for name, keys in EXPORTED_TABLES.items()},
        EXPORTED_TABLES,
    )
    files = {f"{name}.{ext}": content for name, frame in frames.items() for ext, content in table_files(frame).items()}
    written = write_exports(folder, files)
    context.log.info(f"{len(files)} table file(s), {len(written)} rewritten")
    summary = frame_table(
        frames["run_summary"].select("run_id", "n_epochs", "final_reward", "matched_horizon", "matched_reward")
    )
    rows = {name: frame.height for name, frame in frames.items()}
    version = content_version(file_hashes(files))
    record(
        folder,
        table_exports.key.to_user_string(),
        export_fingerprint(inputs, params, CODE_VERSION),
        list(files),
        version.value,
        {"rows": rows, "run_summary": summary},
    )
    return dg.MaterializeResult(
        metadata=table_exports_metadata(folder, rows, summary, len(written)), data_version=version
    )


SECTIONS_NAME = ".report_sections.json"


def report_sections(
    folder: Path, tables: dict[str, pl.DataFrame], settings: ReportSettings, params: dict
) -> dict[str | None, SectionParts]:
    """Each ablation's section of the report: kept from the last report when its rows of the tables (its runs, their
    summaries and snapshots, its contrasts), the parameters and the code are those it was made from, made again
    otherwise. A new epoch file changes one ablation's section; making all 200 costs most of the report's time.
    The sections are kept in the exports folder, by digest."""
    runs = tables["runs"]
    frames = [
        (runs, True),
        (tables["summary"], False),
        (tables["contrasts"], True),
        (tables["snapshots"], False),
        (tables["problems"], False),
    ]
    digests = digests_by_ablation(runs, frames, params)
    path = folder / SECTIONS_NAME
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = {}  # none yet, or unreadable: every section is made again
    parts = {}
    for ablation, digest in digests.items():
        try:
            parts[ablation] = SectionParts(**kept[digest])
        except (KeyError, TypeError):
            parts[ablation] = section_parts(
                ablation,
                runs,
                tables["summary"],
                tables["contrasts"],
                tables["snapshots"],
                settings,
                tables["problems"],
            )
    made = {digest: dataclasses.asdict(parts[ablation]) for ablation, digest in digests.items()}
    write_if_changed(path, json.dumps(made, sort_keys=True).encode())
    return parts


def report_metadata(path: Path, headline: str, rewritten: bool) -> dict:
    return {
        "path": dg.MetadataValue.path(str(path)),
        "headline": dg.MetadataValue.md(headline),
        "grpo/rewritten": rewritten,
    }


@dg.asset(
    deps=[dg.AssetKey(name) for name in REPORT_INPUTS] + [FIGURES_ASSET],
    group_name=GROUP,
    code_version=CODE_VERSION,
    kinds={"markdown"},
)
def report(context: dg.AssetExecutionContext, warehouse: WarehouseConfig) -> dg.MaterializeResult:
    """report.md: per ablation, the winner at the compute-matched horizon, runs, contrasts, snapshots to call."""
    settings = report_settings(warehouse)
    params = {"settings": dataclasses.asdict(settings)}
    folder = exports_dir(warehouse)
    path = folder / "report.md"
    entry = kept_entry(folder, report.key.to_user_string(), inputs_fingerprint(warehouse, REPORT_INPUTS, params))
    if entry:
        return kept_result(context, entry, report_metadata(path, entry["metadata"]["headline"], False))
    tables, inputs = read_tables(
        warehouse,
        {
            "runs": RUNS_SQL,
            "summary": run_notes.SUMMARY_SQL,
            "contrasts": "select * from ablation_contrasts order by ablation, run_a, run_b",
            "snapshots": "select * from snapshots order by run_id, role",
            "problems": run_notes.PROBLEMS_SQL,
        },
        REPORT_INPUTS,
    )
    parts = report_sections(folder, tables, settings, params)
    text, headline = render_report_and_headlines(
        tables["runs"], tables["summary"], tables["contrasts"], tables["snapshots"], settings, parts
    )
    content = text.encode()
    rewritten = bool(write_exports(folder, {path.name: content}))
    context.log.info(f"{path} {'written' if rewritten else 'unchanged'}")
    version = content_version(file_hashes({"report.md": content}))
    record(
        folder,
        report.key.to_user_string(),
        export_fingerprint(inputs, params, CODE_VERSION),
        [path.name],
        version.value,
        {"headline": headline},
    )
    return dg.MaterializeResult(metadata=report_metadata(path, headline, rewritten), data_version=version)


def explorer_metadata(folder: Path, pages: list[str], size: int, rewritten: int) -> dict:
    index = folder / explorer_module.INDEX
    return {
        "open": dg.MetadataValue.url(index.as_uri()),
        "path": dg.MetadataValue.path(str(index)),
        "pages": dg.MetadataValue.json(sorted(pages)),
        "bytes": size,
        "grpo/rewritten": rewritten,
    }


def page_digests(pages: dict[str, Page], library: str) -> dict[str, tuple[Page, str]]:
    """Each page with a digest of everything its bytes are made of: its title and inputs (Page.inputs), the charting
    library, and the exports' code (the explorer's style and script, polars' version included)."""
    made_with = hashlib.sha256(library.encode() + CODE_VERSION.encode()).hexdigest()
    return {
        name: (page, hashlib.sha256(f"{page.title}\0{page.inputs}:{made_with}".encode()).hexdigest()[:16])
        for name, page in pages.items()
    }


def write_explorer_pages(
    folder: Path, pages: dict[str, tuple[Page, str]], before: dict[str, list], library: str
) -> list[str]:
    """Renders and writes the pages whose digest differs from the one recorded when they were last written, or whose
    file is gone or another size; returns the pages rewritten. At 100x a page is about a megabyte, nearly all of it
    the charting library: a change to one run renders its ablation's page and the index, not all 201."""
    written = []
    for name, (page, page_digest) in pages.items():
        path = folder / name
        recorded_digest, recorded_size = before.get(name, (None, None))
        if recorded_digest == page_digest and path.is_file() and path.stat().st_size == recorded_size:
            continue
        if write_if_changed(path, page.render(library)):
            written.append(name)
    return written


@dg.asset(
    deps=[dg.AssetKey(name) for name in EXPLORER_INPUTS],
    group_name=GROUP,
    code_version=CODE_VERSION,
    kinds={"html", "vega"},
)
def run_explorer(context: dg.AssetExecutionContext, warehouse: WarehouseConfig) -> dg.MaterializeResult:
    """The run explorer: offline HTML pages to hover, smooth, hide and zoom the reward curves of each ablation."""
    settings = ExplorerSettings(
        ema_weight=warehouse.ema_weight,
        final_window=warehouse.final_window,
        ci_level=warehouse.ci_level,
        breakdown_window=warehouse.breakdown_window,
        snapshot_model_prefix=warehouse.snapshot_model_prefix,
    )
    params = {"settings": dataclasses.asdict(settings)}
    exports, folder = exports_dir(warehouse), exports_dir(warehouse) / EXPLORER
    name = run_explorer.key.to_user_string()
    entry = kept_entry(exports, name, inputs_fingerprint(warehouse, EXPLORER_INPUTS, params))
    if entry:
        meta = entry["metadata"]
        return kept_result(context, entry, explorer_metadata(folder, meta["pages"], meta["bytes"], 0))
    tables, inputs = read_tables(warehouse, EXPLORER_QUERIES, EXPLORER_INPUTS)
    tables["epochs"] = joined_epochs(tables["epochs"], tables.pop("epoch_files"))
    library = vega_bundle(library_cache())
    pages = page_digests(explorer_contents(ExplorerTables(**tables), settings), library)
    before = recorded_metadata(exports, name).get("page_digests", {})
    refuse_users_files(
        exports, {f"{EXPLORER}/{page}": lambda page=page: pages[page][0].render(library) for page in pages}
    )
    written = write_explorer_pages(folder, pages, before, library)
    stale = remove_gone(exports, name, [f"{EXPLORER}/{page}" for page in pages])
    sizes = {page: (folder / page).stat().st_size for page in pages}
    size = sum(sizes.values())
    context.log.info(
        f"{len(pages)} explorer page(s), {size / 1e6:.1f} MB, {len(written)} rewritten, "
        f"{len(stale)} stale removed: {folder / explorer_module.INDEX}"
    )
    digests = {page: page_digest for page, (_, page_digest) in pages.items()}
    version = dg.DataVersion(hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()[:16])
    record(
        exports,
        name,
        export_fingerprint(inputs, params, CODE_VERSION),
        [f"{EXPLORER}/{page}" for page in pages],
        version.value,
        {
            "pages": sorted(pages),
            "bytes": size,
            "page_digests": {page: [page_digest, sizes[page]] for page, page_digest in digests.items()},
        },
    )
    return dg.MaterializeResult(
        metadata=explorer_metadata(folder, list(pages), size, len(written)), data_version=version
    )
