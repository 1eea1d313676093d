"""Per ablation, a Markdown and a LaTeX table of its configurations for a paper, under <warehouse>/exports/tables."""

import hashlib

import dagster as dg

from pipelines.code_versions import code_version
from pipelines.defs.exports.assets import (
    CODE_VERSION,
    GROUP,
    content_version,
    exports_dir,
    file_hashes,
    inputs_fingerprint,
    kept_result,
    read_tables,
)
from pipelines.defs.resources import WarehouseConfig
from pipelines.exports import paper
from pipelines.exports.figure import file_stem
from pipelines.exports.report import ordered_ablations
from pipelines.exports.state import export_fingerprint, kept_entry, record, remove_gone, write_exports

TABLES = "tables"
PAPER_INPUTS = ("dim_runs", "run_summary")
# This module's code version (code_versions): the paper tables' code, the exports' it imports, their libraries.
PAPER_CODE = code_version(__name__)


def table_stems(ablations: list[str | None]) -> dict[str | None, str]:
    """A file stem per ablation: its file-name-safe name, with a digest of the name where two would share one."""
    stems = {ablation: file_stem(ablation) for ablation in ablations}
    shared = {stem for stem in stems.values() if list(stems.values()).count(stem) > 1}
    return {
        ablation: f"{stem}-{hashlib.sha256(str(ablation).encode()).hexdigest()[:8]}" if stem in shared else stem
        for ablation, stem in stems.items()
    }


def paper_files(runs, summary, level: float) -> dict[str, bytes]:
    """The tables' files, by path under the exports folder: `tables/<ablation>.md` and `.tex` per ablation."""
    rows = paper.configurations(runs, summary, level)
    ablations = ordered_ablations(runs)
    files = {}
    for ablation, stem in table_stems(ablations).items():
        of_ablation = rows.filter(rows["ablation"].eq_missing(ablation))
        files[f"{TABLES}/{stem}.md"] = paper.markdown_table(ablation, of_ablation, level).encode()
        files[f"{TABLES}/{stem}.tex"] = paper.latex_table(ablation, of_ablation, level).encode()
    return files


@dg.asset(
    deps=[dg.AssetKey(name) for name in PAPER_INPUTS],
    group_name=GROUP,
    kinds={"markdown", "latex"},
    code_version=PAPER_CODE,
)
def paper_tables(context: dg.AssetExecutionContext, warehouse: WarehouseConfig) -> dg.MaterializeResult:
    """Per ablation, a Markdown and a LaTeX table of its configurations: seeds, matched reward, interval, IQM."""
    params = {"ci_level": warehouse.ci_level, "code": PAPER_CODE}
    folder, name = exports_dir(warehouse), paper_tables.key.to_user_string()
    entry = kept_entry(folder, name, inputs_fingerprint(warehouse, PAPER_INPUTS, params))
    if entry:
        return kept_result(context, entry, {"folder": dg.MetadataValue.path(str(folder / TABLES))})
    tables, inputs = read_tables(
        warehouse,
        {
            "runs": "select run_id, ablation, label, arm from dim_runs order by run_id",
            "summary": "select * from run_summary order by run_id",
        },
        PAPER_INPUTS,
    )
    files = paper_files(tables["runs"], tables["summary"], warehouse.ci_level)
    written = write_exports(folder, files)
    gone = remove_gone(folder, name, list(files))
    context.log.info(f"{len(files)} table file(s), {len(written)} rewritten, {len(gone)} of gone ablations removed")
    version = content_version(file_hashes(files))
    record(
        folder,
        name,
        export_fingerprint(inputs, params, CODE_VERSION),
        list(files),
        version.value,
        {"files": list(files)},
    )
    return dg.MaterializeResult(
        metadata={
            "folder": dg.MetadataValue.path(str(folder / TABLES)),
            "files": len(files),
            "grpo/rewritten": len(written),
        },
        data_version=version,
    )
