"""The run explorer: self-contained HTML pages to plot, smooth, group, filter and download the runs of each ablation.

The pages are drawn by Vega-Lite in the browser. Its JavaScript (Vega, Vega-Lite and vega-embed, bundled by
vl-convert) and the page's data are inlined gzip-compressed (the browser's DecompressionStream inflates them), with
the page's own script (`explorer_assets/explorer.js`), so a page opens from file:// with no network and no server.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import html
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import polars as pl

from pipelines.exports.explorer_data import (
    BREAKDOWN_COLUMNS,
    HISTOGRAM_BINS,
    MAX_RUNS_ON_PAGE,
    ROLE_ORDER,
    SNAPSHOT_COLUMNS,
    SNAPSHOT_RUNS,
    arm_values,
    bounded_contrasts,
    carried_runs,
    configurations,
    histograms,
    json_ready,
    metric_columns,
    run_entries,
    series,
    summaries,
)
from pipelines.exports.figure import file_stem, run_colours
from pipelines.exports.files import write_if_changed
from pipelines.exports.report import ordered_ablations
from pipelines.exports.transcript_lists import transcript_lists

ASSETS = Path(__file__).with_name("explorer_assets")
INDEX = "index.html"
ABLATION_FOLDER = "ablations"
ALL_RUNS = "all-runs.html"
# Up to this many ablations share index.html, when they hold this many runs between them; beyond either each has a
# page (of about 1.5 MB at 40 runs), index.html lists them and all-runs.html overlays their best runs.
MAX_ABLATIONS_ON_INDEX = 4
MAX_RUNS_ON_INDEX = 20


@dataclass(frozen=True)
class ExplorerSettings:
    """The metric parameters the pages quote and reproduce (they come from the warehouse configuration)."""

    ema_weight: float = 0.9
    final_window: int = 50
    ci_level: float = 0.95
    breakdown_window: int = 50
    snapshot_model_prefix: str = ""


@dataclass(frozen=True)
class ExplorerTables:
    """The warehouse tables a page is built from, as polars frames with the tables' columns.

    epochs: epoch_metrics with the columns of fact_epochs it lacks (explorer_data.joined_epochs).
    histograms: run × epoch × quantity × bin (explorer_data.histogram_sql).
    transcripts: the trajectories the transcript lists show (transcript_lists.LISTS_SQL).
    """

    runs: pl.DataFrame
    epochs: pl.DataFrame
    summary: pl.DataFrame
    contrasts: pl.DataFrame
    snapshots: pl.DataFrame
    breakdowns: pl.DataFrame
    histograms: pl.DataFrame = field(default_factory=pl.DataFrame)
    transcripts: pl.DataFrame = field(default_factory=pl.DataFrame)


@functools.cache
def _bundled() -> str:
    import vl_convert

    return vl_convert.javascript_bundle()


def vega_bundle(cache: Path | None = None) -> str:
    """Vega, Vega-Lite and vega-embed as one script: vl-convert's bundle, the same bytes for one vl-convert version.

    Making it takes seconds of CPU, so it is kept in the folder cache, if given, under that version; a cache that
    cannot be written only means making it again next time.
    """
    import vl_convert

    kept = Path(cache) / f"vl-convert-{vl_convert.__version__}.js" if cache is not None else None
    if kept is not None and kept.is_file():
        return kept.read_text(encoding="utf-8")
    bundle = _bundled()
    if kept is not None:
        try:
            write_if_changed(kept, bundle.encode())
        except OSError:
            pass
    return bundle


def library_cache() -> Path:
    """Where the bundle is kept for every warehouse of the user: their cache folder (platformdirs; on Linux
    $XDG_CACHE_HOME/grpo-warehouse, default ~/.cache/grpo-warehouse), as matplotlib keeps its font cache. A fresh
    warehouse then does not pay for the bundle again."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("grpo-warehouse"))


def library_versions() -> str:
    import vl_convert

    return (
        f"vl-convert {vl_convert.__version__}, Vega {vl_convert.get_vega_version()}, "
        f"Vega-Lite {vl_convert.get_vegalite_versions()[-1]}, vega-embed {vl_convert.get_vega_embed_version()}"
    )


def _of_runs(frame: pl.DataFrame, run_ids: list[str]) -> pl.DataFrame:
    return frame.filter(pl.col("run_id").is_in(run_ids)) if "run_id" in frame.columns else frame


def _of_ablation(frame: pl.DataFrame, ablation: str | None) -> pl.DataFrame:
    return frame.filter(pl.col("ablation").eq_missing(pl.lit(ablation, dtype=pl.String)))


def _with_arms(members: pl.DataFrame) -> pl.DataFrame:
    """The runs with an arm each (a run of no arm is its own), by run id."""
    arm = pl.col("arm").fill_null(pl.col("run_id")) if "arm" in members.columns else pl.col("run_id")
    return members.with_columns(arm.alias("arm")).sort("run_id")


def ablation_overview(members: pl.DataFrame, summary: dict[str, dict], contrasts: pl.DataFrame) -> dict:
    """What an ablation's headline and tables are made from: its carried runs (explorer_data.carried_runs), its
    configurations, its contrasts (bounded), and how many runs and contrasts it has in all."""
    members = _with_arms(members)
    matched = {run: entry.get("matched_reward") for run, entry in summary.items()}
    carried = carried_runs(members, matched)
    values = arm_values(contrasts)
    configs = configurations(members, carried, values)
    colours = {c["arm"]: c["colour"] for c in configs} or run_colours(members["run_id"].to_list())
    runs = run_entries(members, carried, summary, colours)
    if configs:
        scored = [c for c in configs if c["value"] is not None]
        leader = max(scored, key=lambda c: c["value"])["arm"] if scored else None
    else:
        scored_runs = [r for r in runs if r.get("matched_reward") is not None]
        leader = max(scored_runs, key=lambda r: r["matched_reward"])["run_id"] if scored_runs else None
    return {
        "runs": runs,
        "configurations": configs,
        "contrasts": bounded_contrasts(contrasts, leader),
        "n_runs": members.height,
        "n_contrasts": contrasts.height,
    }


def _rows(frame: pl.DataFrame, order: list, columns: list[str]) -> list[dict]:
    """frame's rows in order as JSON-ready dicts of the columns it has; none for an empty frame, which may lack its
    columns."""
    return [] if frame.is_empty() else json_ready(frame.sort(order), columns).to_dicts()


def ablation_payload(ablation: str | None, tables: ExplorerTables) -> dict:
    """What one ablation's section of a page is drawn from: its overview (ablation_overview), the epoch series
    and histograms of its carried runs, their snapshots and reward breakdowns."""
    members = _of_ablation(tables.runs, ablation)
    summary = summaries(_of_runs(tables.summary, members["run_id"].to_list()))
    overview = ablation_overview(members, summary, _of_ablation(tables.contrasts, ablation))
    run_ids = [run["run_id"] for run in overview["runs"]]
    epochs = _of_runs(tables.epochs, run_ids)
    metrics = metric_columns(epochs)
    return {
        "name": ablation,
        **overview,
        "metrics": metrics,
        "series": series(epochs, metrics, snapshots=len(run_ids) <= SNAPSHOT_RUNS),
        "histograms": histograms(_of_runs(tables.histograms, run_ids)),
        "snapshots": _rows(
            _of_runs(tables.snapshots, run_ids),
            [
                "run_id",
                pl.col("role").replace_strict(ROLE_ORDER, default=len(ROLE_ORDER), return_dtype=pl.Int64),
                "role",
            ],
            SNAPSHOT_COLUMNS,
        ),
        "breakdowns": _rows(
            _of_runs(tables.breakdowns, run_ids), ["run_id", "breakdown", "level", "window_start"], BREAKDOWN_COLUMNS
        ),
        "transcripts": {} if tables.transcripts.is_empty() else transcript_lists(_of_runs(tables.transcripts, run_ids)),
    }


def index_lines(tables: ExplorerTables, names: dict[str | None, str]) -> list[dict]:
    """Each ablation's line on the index page (ablation_overview and its page), in names' order: made from the
    whole tables at once, not an ablation at a time (200 filters of each table at 100x)."""
    summary = summaries(tables.summary)
    members = tables.runs.partition_by("ablation", as_dict=True, maintain_order=True)
    contrasts = {}
    if not tables.contrasts.is_empty():
        contrasts = tables.contrasts.partition_by("ablation", as_dict=True, maintain_order=True)
    return [
        {
            "name": ablation,
            "page": page,
            **ablation_overview(
                members[(ablation,)],
                {run: summary[run] for run in members[(ablation,)]["run_id"] if run in summary},
                contrasts.get((ablation,), tables.contrasts.clear()),
            ),
        }
        for ablation, page in names.items()
    ]


def overlay_payload(tables: ExplorerTables, lines: list[dict], limit: int = MAX_RUNS_ON_PAGE) -> dict:
    """The all-runs view of an index that lists its ablations: the mean reward of up to limit runs of every
    ablation, taken in turn from each one's best (each ablation's first run, then its second, ...), coloured by
    ablation."""
    ranked = [
        sorted(line["runs"], key=lambda r: (r.get("matched_reward") is None, -(r.get("matched_reward") or 0.0)))
        for line in lines
    ]
    chosen = []
    for rank in range(max((len(runs) for runs in ranked), default=0)):
        chosen += [(line, runs[rank]) for line, runs in zip(lines, ranked, strict=True) if rank < len(runs)]
    chosen = chosen[:limit]
    colours = run_colours([line["name"] or "" for line in lines])
    runs = [{**run, "arm": line["name"] or "", "colour": colours[line["name"] or ""]} for line, run in chosen]
    run_ids = [run["run_id"] for run in runs]
    epochs = _of_runs(tables.epochs, run_ids)
    metrics = [c for c in ("mean_reward",) if c in epochs.columns]
    configs = [
        {
            "arm": line["name"] or "",
            "label": line["name"] or "unassigned",
            "colour": colours[line["name"] or ""],
            "runs": [r for r in run_ids if r in {x["run_id"] for x in line["runs"]}],
            "n_runs": line["n_runs"],
            "value": None,
        }
        for line in lines
    ]
    return {
        "name": None,
        "runs": sorted(runs, key=lambda r: r["run_id"]),
        "configurations": [c for c in configs if c["runs"]],
        "metrics": metrics,
        "series": series(epochs, metrics, snapshots=False),
        "n_runs": sum(line["n_runs"] for line in lines),
    }


# The tables ablation_overview reads: an index page listing the ablations shows nothing else.
OVERVIEW_TABLES = ("runs", "summary", "contrasts")


def tables_digest(tables: ExplorerTables, names: tuple[str, ...] | None = None) -> str:
    """A digest of every row of the tables (the given ones, default all) and of their columns' types: the same digest,
    the same payloads. Stable within a polars version."""
    digest = hashlib.sha256()
    for name in names or [column.name for column in fields(tables)]:
        frame = getattr(tables, name)
        digest.update(f"{name}:{frame.height}:{frame.schema!r};".encode())
        if frame.width:
            digest.update(frame.hash_rows(seed=0).to_numpy().tobytes())
    return digest.hexdigest()[:16]


def page_names(ablations: list[str | None]) -> dict[str | None, str]:
    """Each ablation's page under ablations/, file-name safe and distinct (a short hash settles a clash of stems)."""
    stems = [file_stem(a) for a in ablations]
    names = {}
    for ablation, stem in zip(ablations, stems, strict=True):
        if stems.count(stem) > 1:
            stem += "-" + hashlib.sha256(repr(ablation).encode()).hexdigest()[:8]
        names[ablation] = f"{ABLATION_FOLDER}/{stem}.html"
    return names


def packed(text: str) -> str:
    """text gzip-compressed (no timestamp: the same text, the same bytes) in base64, which holds no '<' and so
    cannot close a script element."""
    return base64.b64encode(gzip.compress(text.encode(), compresslevel=9, mtime=0)).decode("ascii")


@functools.lru_cache(maxsize=2)
def _packed_library(library: str) -> str:
    return packed(library)


def page_json(payload: dict) -> str:
    return json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _asset(name: str) -> str:
    return (ASSETS / name).read_text(encoding="utf-8")


def render_page(title: str, payload: dict, library: str | None = None) -> bytes:
    """A whole page: the charting library (vega_bundle()), the explorer's style and script, the data; nothing
    fetched."""
    library = _packed_library(library or vega_bundle())
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>\n{_asset('explorer.css')}</style>\n</head>\n<body>\n"
        '<div id="explorer">Loading… (this page needs JavaScript and a browser of 2023 or later)</div>\n'
        f'<script type="application/gzip" id="explorer-library">{library}</script>\n'
        f'<script type="application/gzip" id="explorer-data">{packed(page_json(payload))}</script>\n'
        f"<script>\n{_asset('explorer.js')}</script>\n</body>\n</html>\n"
    ).encode()


@dataclass(frozen=True)
class Page:
    """One explorer page before it is rendered: its title, a digest of what its data is made from, and its data,
    made only when the page is rendered."""

    title: str
    inputs: str  # the settings and a tables_digest of the rows it shows: the same inputs, the same data
    payload: Callable[[], dict]

    def render(self, library: str | None = None) -> bytes:
        """The whole page (render_page); library: vega_bundle() when not given."""
        return render_page(self.title, self.payload(), library)


def split_by_ablation(tables: ExplorerTables) -> dict[str | None, ExplorerTables]:
    """Each ablation's rows of every table, split in one pass per table: filtering each table once per ablation
    grows with ablations x rows (200 ablations of 232,500 epochs at 100x)."""
    ablation_of = tables.runs.select("run_id", pl.col("ablation").alias("_ablation"))

    def parts(frame: pl.DataFrame, by_run: bool = True) -> dict[str | None, pl.DataFrame]:
        if frame.is_empty():  # an empty table may not even have its columns
            return {}
        keyed = (
            frame.join(ablation_of, on="run_id", how="inner")
            if by_run
            else frame.with_columns(_ablation=pl.col("ablation"))
        )
        return {key: part for (key,), part in keyed.partition_by("_ablation", as_dict=True, include_key=False).items()}

    split = {
        name: parts(getattr(tables, name), by_run=name != "contrasts")
        for name in ("runs", "epochs", "summary", "contrasts", "snapshots", "breakdowns", "histograms", "transcripts")
    }
    return {
        ablation: ExplorerTables(**{name: split[name].get(ablation, getattr(tables, name).clear()) for name in split})
        for ablation in split["runs"]
    }


def explorer_contents(tables: ExplorerTables, settings: ExplorerSettings) -> dict[str, Page]:
    """File name (relative to the explorer folder) -> page: index.html, plus ablations/<name>.html when many.

    Each page's data is made only if it is rendered: at 100x, making all 200 ablations' data costs more than
    digesting their rows, and a new epoch file changes one ablation's page and the index.
    """
    common = {"settings": asdict(settings), "library": library_versions(), "histogram_bins": HISTOGRAM_BINS}
    ablations = ordered_ablations(tables.runs)
    split = split_by_ablation(tables)
    digests = {ablation: tables_digest(split[ablation]) for ablation in ablations}

    def inputs(*parts) -> str:
        return hashlib.sha256(json.dumps([common, *parts], default=str).encode()).hexdigest()[:16]

    if len(ablations) == 1 or (len(ablations) <= MAX_ABLATIONS_ON_INDEX and tables.runs.height <= MAX_RUNS_ON_INDEX):

        def sections() -> dict:
            return {**common, "ablations": [ablation_payload(a, split[a]) for a in ablations]}

        return {INDEX: Page("GRPO run explorer", inputs([[a, digests[a]] for a in ablations]), sections)}
    names = page_names(ablations)

    def overview() -> dict:
        return {**common, "ablations": [], "overview": index_lines(tables, names), "all_runs": ALL_RUNS}

    def all_runs() -> dict:
        overlay = overlay_payload(tables, index_lines(tables, names))
        return {**common, "ablations": [], "overlay": overlay, "index": INDEX}

    listed = [[a, names[a], tables_digest(split[a], OVERVIEW_TABLES)] for a in ablations]
    pages = {
        INDEX: Page("GRPO run explorer", inputs(listed), overview),
        ALL_RUNS: Page("All runs · GRPO run explorer", inputs([[a, digests[a]] for a in ablations]), all_runs),
    }
    for ablation in ablations:
        pages[names[ablation]] = Page(
            f"{ablation or 'unassigned'} · GRPO run explorer",
            inputs(ablation, digests[ablation]),
            functools.partial(_ablation_page, common, ablation, split[ablation]),
        )
    return pages


def _ablation_page(common: dict, ablation: str | None, tables: ExplorerTables) -> dict:
    return {**common, "ablations": [ablation_payload(ablation, tables)], "index": f"../{INDEX}"}


def explorer_pages(tables: ExplorerTables, settings: ExplorerSettings, library: str | None = None) -> dict[str, bytes]:
    """File name (relative to the explorer folder) -> bytes of every page (explorer_contents, rendered).

    library: the charting library's script (vega_bundle() when not given).
    """
    library = library or vega_bundle()
    return {name: page.render(library) for name, page in explorer_contents(tables, settings).items()}
