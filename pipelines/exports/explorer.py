"""The run explorer: self-contained HTML pages to hover, smooth, hide and zoom the runs of each ablation, offline.

The pages are drawn by Vega-Lite in the browser. Its JavaScript (Vega, Vega-Lite and vega-embed, bundled by
vl-convert) and the page's own script (`explorer_assets/explorer.js`) are inlined, with the data as JSON, so a
page opens from file:// with no network and no server.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import polars as pl

from pipelines.exports.figure import file_stem, run_colours
from pipelines.exports.files import write_if_changed
from pipelines.exports.report import ordered_ablations

ASSETS = Path(__file__).with_name("explorer_assets")
INDEX = "index.html"
ABLATION_FOLDER = "ablations"
# Up to this many ablations share index.html; beyond it each has a page and index.html lists them.
MAX_ABLATIONS_ON_INDEX = 4
EPOCH_COLUMNS = ["epoch", "mean_reward", "frac_zero_std_groups", "sample_entropy", "train_entropy", "snapshot_id"]
SUMMARY_COLUMNS = [
    "n_epochs",
    "first_epoch",
    "last_epoch",
    "missing_epochs",
    "final_reward",
    "peak_reward_ema",
    "peak_epoch",
    "matched_horizon",
    "matched_epoch",
    "matched_reward",
    "matched_ci_low",
    "matched_ci_high",
    "matched_iqm",
    "matched_effective_n",
]
# The interval columns (matched_ci_*, matched_iqm, matched_effective_n; ci_method, unit, resolved) are shown when the
# warehouse's tables have them.
CONTRAST_COLUMNS = ["run_a", "run_b", "delta", "ci_low", "ci_high", "ci_method", "unit", "resolved", "prob_improvement"]
SNAPSHOT_COLUMNS = ["run_id", "role", "epoch", "snapshot_id", "model_name"]
ROLE_ORDER = {"final": 0, "best": 1, "matched": 2}
BREAKDOWN_COLUMNS = [
    "run_id",
    "breakdown",
    "level",
    "window_start",
    "window_end",
    "n_epochs",
    "n_trajectories",
    "mean_reward",
]


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

    epochs: epoch_metrics with fact_epochs' sample_entropy, train_entropy and snapshot_id.
    """

    runs: pl.DataFrame
    epochs: pl.DataFrame
    summary: pl.DataFrame
    contrasts: pl.DataFrame
    snapshots: pl.DataFrame
    breakdowns: pl.DataFrame


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


def _json_ready(frame: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """The columns of frame that it has, non-finite floats as null (JSON has no NaN), decimals as floats."""
    present = [c for c in columns if c in frame.columns]
    return frame.select(
        [
            pl.when(pl.col(c).cast(pl.Float64).is_finite()).then(pl.col(c).cast(pl.Float64)).alias(c)
            if frame.schema[c].is_float() or frame.schema[c].is_decimal()
            else pl.col(c)
            for c in present
        ]
    )


def _of_runs(frame: pl.DataFrame, run_ids: list[str]) -> pl.DataFrame:
    return frame.filter(pl.col("run_id").is_in(run_ids))


def _summaries(summary: pl.DataFrame) -> dict[str, dict]:
    """Each run's run_summary numbers as JSON values, by run id."""
    return {row["run_id"]: row for row in _json_ready(summary, ["run_id", *SUMMARY_COLUMNS]).to_dicts()}


def _run_entries(members: pl.DataFrame, summaries: dict[str, dict]) -> list[dict]:
    """Each run of an ablation: id, label, colour (the PNG figure's) and its run_summary numbers (_summaries)."""
    run_ids = members["run_id"].to_list()
    colours = run_colours(run_ids)
    return [
        {
            "run_id": run,
            "label": label or run,
            "colour": colours[run],
            **{k: v for k, v in summaries.get(run, {}).items() if k != "run_id"},
        }
        for run, label in zip(run_ids, members["label"].to_list(), strict=True)
    ]


def _contrast_rows(contrasts: pl.DataFrame) -> list[dict]:
    return _json_ready(contrasts.sort("run_a", "run_b"), CONTRAST_COLUMNS).to_dicts()


def _series(epochs: pl.DataFrame) -> dict[str, dict[str, list]]:
    """Per run, its epochs in order as columns (epoch, mean_reward, ...): compact JSON, one list per column."""
    columns = _json_ready(epochs.sort("run_id", "epoch"), ["run_id", *EPOCH_COLUMNS])
    return {
        run: frame.drop("run_id").to_dict(as_series=False)
        for (run,), frame in columns.partition_by("run_id", as_dict=True, maintain_order=True).items()
    }


def ablation_overview(ablation: str | None, tables: ExplorerTables) -> dict:
    """An ablation's runs and contrasts: its line on the index page, and the start of its section."""
    members = tables.runs.filter(pl.col("ablation").eq_missing(pl.lit(ablation, dtype=pl.String))).sort("run_id")
    contrasts = tables.contrasts.filter(pl.col("ablation").eq_missing(pl.lit(ablation, dtype=pl.String)))
    return {
        "name": ablation,
        "runs": _run_entries(members, _summaries(_of_runs(tables.summary, members["run_id"].to_list()))),
        "contrasts": _contrast_rows(contrasts),
    }


def index_lines(tables: ExplorerTables, names: dict[str | None, str]) -> list[dict]:
    """Each ablation's line on the index page (ablation_overview and its page), in names' order: made from the
    whole tables at once, not an ablation at a time (200 filters of each table at 100x)."""
    summaries = _summaries(tables.summary)
    members = tables.runs.sort("run_id").partition_by("ablation", as_dict=True, maintain_order=True)
    contrasts = {}
    if not tables.contrasts.is_empty():
        contrasts = tables.contrasts.partition_by("ablation", as_dict=True, maintain_order=True)
    return [
        {
            "name": ablation,
            "page": page,
            "runs": _run_entries(members[(ablation,)], summaries),
            "contrasts": _contrast_rows(contrasts[(ablation,)]) if (ablation,) in contrasts else [],
        }
        for ablation, page in names.items()
    ]


def ablation_payload(ablation: str | None, tables: ExplorerTables) -> dict:
    """What one ablation's section of a page is drawn from: its runs, their epochs, contrasts, snapshots."""
    overview = ablation_overview(ablation, tables)
    run_ids = [run["run_id"] for run in overview["runs"]]
    return {
        "name": ablation,
        "runs": overview["runs"],
        "series": _series(_of_runs(tables.epochs, run_ids)),
        "contrasts": overview["contrasts"],
        "snapshots": _json_ready(
            _of_runs(tables.snapshots, run_ids).sort(
                "run_id",
                pl.col("role").replace_strict(ROLE_ORDER, default=len(ROLE_ORDER), return_dtype=pl.Int64),
                "role",
            ),
            SNAPSHOT_COLUMNS,
        ).to_dicts(),
        "breakdowns": _json_ready(
            _of_runs(tables.breakdowns, run_ids).sort("run_id", "breakdown", "level", "window_start"), BREAKDOWN_COLUMNS
        ).to_dicts(),
    }


# The tables ablation_overview reads: an index page listing the ablations shows nothing else.
OVERVIEW_TABLES = ("runs", "summary", "contrasts")


def tables_digest(tables: ExplorerTables, names: tuple[str, ...] | None = None) -> str:
    """A digest of every row of the tables (the given ones, default all) and of their columns' types: the same digest,
    the same payloads. Stable within a polars version."""
    digest = hashlib.sha256()
    for name in names or [field.name for field in fields(tables)]:
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


def _script_json(payload: dict) -> str:
    """JSON safe inside a <script> element: no '<' can open a tag or close the element."""
    return json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")


def _asset(name: str) -> str:
    return (ASSETS / name).read_text(encoding="utf-8")


def render_page(title: str, payload: dict, library: str | None = None) -> bytes:
    """A whole page: the charting library (vega_bundle()), the explorer's style and script, the data; nothing
    fetched."""
    library = (library or vega_bundle()).replace("</script", "<\\/script")
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>\n{_asset('explorer.css')}</style>\n"
        f"<script>\n{library}\n</script>\n</head>\n<body>\n"
        '<div id="explorer">Loading… (this page needs JavaScript)</div>\n'
        f'<script type="application/json" id="explorer-data">{_script_json(payload)}</script>\n'
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
        for name in ("runs", "epochs", "summary", "contrasts", "snapshots", "breakdowns")
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
    common = {"settings": asdict(settings), "library": library_versions()}
    ablations = ordered_ablations(tables.runs)
    split = split_by_ablation(tables)
    digests = {ablation: tables_digest(split[ablation]) for ablation in ablations}

    def inputs(*parts) -> str:
        return hashlib.sha256(json.dumps([common, *parts], default=str).encode()).hexdigest()[:16]

    if len(ablations) <= MAX_ABLATIONS_ON_INDEX:

        def sections() -> dict:
            return {**common, "ablations": [ablation_payload(a, split[a]) for a in ablations]}

        return {INDEX: Page("GRPO run explorer", inputs([[a, digests[a]] for a in ablations]), sections)}
    names = page_names(ablations)

    def overview() -> dict:
        return {**common, "ablations": [], "overview": index_lines(tables, names)}

    listed = [[a, names[a], tables_digest(split[a], OVERVIEW_TABLES)] for a in ablations]
    pages = {INDEX: Page("GRPO run explorer", inputs(listed), overview)}
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
