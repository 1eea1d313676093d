"""The ablation figures under <warehouse>/exports/figures: one PNG and SVG per ablation, drawn again only where its
rows, the parameters or the figure code changed."""

import base64
import dataclasses
import json
from pathlib import Path

import dagster as dg
import polars as pl

from pipelines.code_versions import code_version
from pipelines.defs.exports.assets import (
    EPOCHS_SQL,
    FIGURE_INPUTS,
    FIGURE_RUNS_SQL,
    FIGURES,
    FIGURES_ASSET,
    GROUP,
    PREVIEWS_SHOWN,
    content_version,
    digests_by_ablation,
    exports_dir,
    file_hashes,
    inputs_fingerprint,
    kept_result,
    read_tables,
)
from pipelines.defs.resources import WarehouseConfig
from pipelines.exports.escape import md_text
from pipelines.exports.figure import (
    NEEDED_EPOCH_COLUMNS,
    Drawing,
    FigureJob,
    Smoothing,
    ablation_inputs,
    draw_figures,
)
from pipelines.exports.state import (
    export_fingerprint,
    kept_entry,
    record,
    recorded_metadata,
    remove_gone,
    still_there,
    write_exports,
)

# This module's code version (code_versions): the figures' code, the exports' it imports, the libraries that make
# their bytes. A change to any of them draws the figures again, and nothing else.
FIGURES_CODE = code_version(__name__)
RECORD = FIGURES_ASSET.to_user_string()  # its entry in the exports' record


def figure_digests(tables: dict[str, pl.DataFrame], params: dict) -> dict[str | None, str]:
    """Per ablation, a digest of what its figure is drawn from: its rows (ablation_inputs: its runs by run id, their
    epochs, their summaries), the parameters, the code."""
    runs = tables["runs"].sort("run_id", maintain_order=True)
    frames = [(runs, True), (tables["epochs"].select(NEEDED_EPOCH_COLUMNS), False), (tables["summary"], False)]
    return digests_by_ablation(runs, frames, {**params, "code": FIGURES_CODE})


def figures_metadata(folder: Path, files: list[str], previews: str, rewritten: int, failures: dict[str, str]) -> dict:
    return {
        "preview": dg.MetadataValue.md(previews),
        "folder": dg.MetadataValue.path(str(folder)),
        "files": dg.MetadataValue.json(sorted(files)),
        "grpo/rewritten": rewritten,
        "not_drawn": dg.MetadataValue.json(failures),
    }


# key, digest, the kept files (name -> size and name -> hash, as recorded), the kept preview
FigurePlan = tuple[str, str, "dict[str, dict] | None", "str | None"]


def kept_drawing(folder: Path, last: dict, digest: str, shown: bool) -> dict[str, dict] | None:
    """The sizes and hashes of an ablation's files as last drawn ({"files": ..., "hashes": ...}), if they were drawn
    from this digest (with a preview when one is shown) and are all still there at their size; None: draw it."""
    sizes, hashes = last.get("files"), last.get("hashes")
    if last.get("digest") != digest or last.get("failed") or (shown and not last.get("preview")):
        return None
    if not isinstance(sizes, dict) or not isinstance(hashes, dict) or sizes.keys() != hashes.keys():
        return None
    return {"files": sizes, "hashes": hashes} if still_there(folder, sizes) else None


def plan_figures(
    tables: dict[str, pl.DataFrame], params: dict, before: dict, folder: Path, job
) -> tuple[list[FigurePlan], list[FigureJob]]:
    """Per ablation, in the report's order, what it keeps from its last drawing, and the figures to draw.

    An ablation whose rows, parameters and code are those of its last drawing keeps its files, unread: one changed
    run redraws its own ablation, not all of them. `job(ablation, rows, preview)` makes the FigureJob of one to draw.
    """
    plans: list[FigurePlan] = []
    jobs: list[FigureJob] = []
    for ablation, digest in figure_digests(tables, params).items():
        key, shown = json.dumps(ablation), len(plans) < PREVIEWS_SHOWN
        last = before.get(key, {})
        kept = kept_drawing(folder, last, digest, shown)
        if kept is None:
            jobs.append(
                job(ablation, ablation_inputs(ablation, tables["runs"], tables["epochs"], tables["summary"]), shown)
            )
        plans.append((key, digest, kept, last.get("preview") if kept is not None else None))
    return plans, jobs


def collect_figures(
    plans: list[FigurePlan], drawings: list[Drawing]
) -> tuple[dict[str, bytes], dict[str, str], list[str], dict[str, dict]]:
    """The figure files drawn now, every figure file's hash (those kept included), the UI previews and the
    per-ablation record, from the kept files and the new drawings. An ablation whose figure failed has no files and
    its record says why (`failed`): the next build draws it again."""
    drawn_in_order = iter(drawings)
    drawn_files: dict[str, bytes] = {}
    hashes: dict[str, str] = {}
    previews: list[str] = []
    ablations: dict[str, dict] = {}
    for index, (key, digest, kept, preview) in enumerate(plans):
        failure = None
        if kept is None:
            drawing = next(drawn_in_order)
            drawn_files.update(drawing.files)
            kept = {
                "files": {name: len(data) for name, data in drawing.files.items()},
                "hashes": file_hashes(drawing.files),
            }
            failure = drawing.failure
            if drawing.preview is not None:
                name = md_text(json.loads(key) or "unassigned")
                preview = (
                    f"**{name}**\n\n![{name}](data:image/jpeg;base64,{base64.b64encode(drawing.preview).decode()})"
                )
        hashes.update(kept["hashes"])
        if index < PREVIEWS_SHOWN and preview is not None:
            previews.append(preview)
        ablations[key] = {"digest": digest, **kept, "preview": preview, **({"failed": failure} if failure else {})}
    return drawn_files, hashes, previews, ablations


def figure_failures(ablations: dict[str, dict]) -> dict[str, str]:
    """Per ablation (its name) whose figure could not be drawn, why: one line."""
    return {json.loads(key): entry["failed"] for key, entry in ablations.items() if entry.get("failed")}


def report_failures(context: dg.AssetExecutionContext, failures: dict[str, str]) -> None:
    for ablation, cause in failures.items():
        context.log.warning(f"the figure of ablation {ablation!r} was not drawn: {cause}")


def kept_figures(context: dg.AssetExecutionContext, entry: dict | None, folder: Path) -> dg.MaterializeResult | None:
    """The result of the figures kept whole (their inputs unchanged since they were drawn), or None: plan them.
    Only when every figure was drawn: one that failed is tried again, and reported again if it fails."""
    if not entry or figure_failures(entry["metadata"].get("ablations", {})):
        return None
    # Not the preview again (up to a few hundred kB of images): every materialization's metadata is stored.
    meta = entry["metadata"]
    drawn = f"run `{meta['drawn_in_run'][:8]}`" if meta.get("drawn_in_run") else "an earlier materialization"
    previews = f"Figures unchanged since {drawn}, whose materialization shows them."
    return kept_result(context, entry, figures_metadata(folder, meta["files"], previews, 0, {}))


@dg.asset(
    deps=[dg.AssetKey(name) for name in FIGURE_INPUTS],
    group_name=GROUP,
    code_version=FIGURES_CODE,
    kinds={"matplotlib", "png", "svg"},
)
def ablation_figures(context: dg.AssetExecutionContext, warehouse: WarehouseConfig) -> dg.MaterializeResult:
    """One figure per ablation (PNG and SVG): reward curves, zero-variance groups and entropy of its runs."""
    smoothing = Smoothing(warehouse.ema_weight, warehouse.rolling_window, warehouse.ci_level, warehouse.ci_method)
    params = {
        "smoothing": dataclasses.asdict(smoothing),
        "final_window": warehouse.final_window,
        "previews": PREVIEWS_SHOWN,
    }
    exports, folder = exports_dir(warehouse), exports_dir(warehouse) / FIGURES
    entry = kept_entry(exports, RECORD, inputs_fingerprint(warehouse, FIGURE_INPUTS, params, FIGURES_CODE))
    if kept := kept_figures(context, entry, folder):
        return kept
    tables, inputs = read_tables(
        warehouse,
        {"runs": FIGURE_RUNS_SQL, "epochs": EPOCHS_SQL, "summary": "select * from run_summary order by run_id"},
        FIGURE_INPUTS,
    )
    last = recorded_metadata(exports, RECORD)
    before = last.get("ablations", {})
    plans, jobs = plan_figures(
        tables,
        params,
        before,
        folder,
        lambda ablation, rows, shown: FigureJob(ablation, rows, smoothing, warehouse.final_window, preview=shown),
    )
    drawn, files, previews, ablations = collect_figures(plans, draw_figures(jobs, warehouse.workers))
    written = write_exports(exports, {f"{FIGURES}/{name}": content for name, content in drawn.items()})
    stale = remove_gone(exports, RECORD, [f"{FIGURES}/{name}" for name in files])
    failures = figure_failures(ablations)
    context.log.info(
        f"{len(ablations)} ablation(s), {len(jobs) - len(failures)} drawn, {len(failures)} not drawn, the others' "
        f"unchanged; {len(files)} figure file(s), {len(written)} rewritten, {len(stale)} stale removed"
    )
    report_failures(context, failures)
    preview = "\n\n".join(previews) or "no ablations"
    version = content_version(files)
    record(
        exports,
        RECORD,
        export_fingerprint(inputs, params, FIGURES_CODE),
        [f"{FIGURES}/{name}" for name in files],
        version.value,
        # the run that drew a figure last: with every figure kept, the record (and its file) stays as it was
        {
            "files": sorted(files),
            "preview": preview,
            "ablations": ablations,
            "drawn_in_run": context.run.run_id if jobs else last.get("drawn_in_run", context.run.run_id),
        },
    )
    return dg.MaterializeResult(
        metadata=figures_metadata(folder, list(files), preview, len(written), failures), data_version=version
    )
