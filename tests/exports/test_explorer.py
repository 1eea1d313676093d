"""The run explorer's page builder and asset, without a browser: what data a page carries, that it fetches nothing
and that its data cannot break out of its script element; files written only when their bytes change."""

import base64
import gzip
import json
import math
from html.parser import HTMLParser

import dagster as dg
import numpy as np
import polars as pl
import pytest
from helpers import empty_table
from test_export_assets import build_tables, record_fingerprints, write_build_db

from pipelines.defs.exports.assets import run_explorer
from pipelines.defs.resources import WarehouseConfig
from pipelines.exports.explorer import (
    MAX_ABLATIONS_ON_INDEX,
    MAX_RUNS_ON_INDEX,
    ExplorerSettings,
    ExplorerTables,
    Page,
    ablation_payload,
    explorer_pages,
    library_cache,
    render_page,
    vega_bundle,
)
from pipelines.exports.explorer_data import MAX_CONTRASTS_ON_PAGE, MAX_RUNS_ON_PAGE
from pipelines.exports.figure import run_colours

SETTINGS = ExplorerSettings(ema_weight=0.8, snapshot_model_prefix="model-")
BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


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


def inlined(page: bytes, element_id: str) -> str:
    """The text of a page's gzip-compressed, base64 script element."""
    elements = parsed(page)
    scripts = [attrs for tag, attrs in elements.tags if tag == "script"]
    [text] = [text for attrs, text in zip(scripts, elements.scripts, strict=True) if attrs.get("id") == element_id]
    return gzip.decompress(base64.b64decode(text)).decode()


def page_data(page: bytes) -> dict:
    return json.loads(inlined(page, "explorer-data"))


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
    claim = ("ci_method", "unit", "resolved", "resolved_holm", "resolved_reason")
    assert {k: payload["contrasts"][2][k] for k in claim} == {
        "ci_method": "structural",
        "unit": "epochs of one run",
        "resolved": None,
        "resolved_holm": None,
        "resolved_reason": "no interval: neither window varies, so there is no spread to estimate one from",
    }
    assert payload["contrasts"][0]["resolved_holm"] is True
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
    assert [attrs.get("type") for attrs in scripts] == ["application/gzip", "application/gzip", None]
    assert all(set(text) <= set(BASE64) for text in elements.scripts[:2])  # no '<' can end them early
    data = page_data(pages["index.html"])
    assert [a["name"] for a in data["ablations"]] == ["abl", "other"]
    assert data["ablations"][0]["runs"][1]["label"] == hostile
    assert data["settings"]["ema_weight"] == 0.8 and data["settings"]["snapshot_model_prefix"] == "model-"
    assert "vegaEmbed" in inlined(pages["index.html"], "explorer-library")


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
    ablation_pages = sorted(p for p in pages if p not in ("index.html", "all-runs.html"))
    assert len(ablation_pages) == 5 > MAX_ABLATIONS_ON_INDEX and len(pages) == 7
    assert all(p.startswith("ablations/") and p.endswith(".html") for p in ablation_pages)
    assert "ablations/third.html" in ablation_pages and len({p.lower() for p in ablation_pages}) == 5
    index = page_data(pages["index.html"])
    assert index["ablations"] == []
    assert sorted(line["page"] for line in index["overview"]) == ablation_pages
    lines = {line["name"]: line for line in index["overview"]}
    assert [r["run_id"] for r in lines["third"]["runs"]] == ["r_short"] and lines["third"]["contrasts"] == []
    assert "series" not in lines["third"]  # the index carries no epochs
    # all-runs.html overlays the runs of every ablation, coloured by ablation, their mean reward only
    overlay = page_data(pages["all-runs.html"])["overlay"]
    assert sorted(r["run_id"] for r in overlay["runs"]) == ["fifth_run", "r_long", "r_mid", "r_short", "solo"]
    assert {r["arm"] for r in overlay["runs"]} == {"a b", "a_b", "third", "fourth", "fifth"}
    assert len({r["colour"] for r in overlay["runs"]}) == 5 and overlay["metrics"] == ["mean_reward"]
    assert overlay["series"]["r_mid"]["mean_reward"] == pytest.approx([0.2 + 0.1 * i for i in range(6)])
    for line in index["overview"]:
        own = page_data(pages[line["page"]])
        assert [a["name"] for a in own["ablations"]] == [line["name"]] and own["index"] == "../index.html"
        # the index makes its lines from the whole tables at once: the same runs and contrasts as the page's
        assert {key: own["ablations"][0][key] for key in ("name", "runs", "contrasts")} == {
            key: line[key] for key in ("name", "runs", "contrasts")
        }


def materialize(warehouse) -> dg.ExecuteInProcessResult:
    return dg.materialize([run_explorer], resources={"warehouse": WarehouseConfig(warehouse_dir=str(warehouse))})


# Each epoch's four trajectories: rewards with a NaN (left out of the histogram) and advantages.
REWARDS = [0.0, 0.5, math.nan, 1.0]
ADVANTAGES = [-1.5, 0.25, 0.0, 1.5]


def trajectories(epochs: pl.DataFrame) -> pl.DataFrame:
    keys = epochs.select("run_id", "epoch")
    return keys.join(
        pl.DataFrame({"traj_index": range(4), "reward": REWARDS, "advantage": ADVANTAGES}), how="cross"
    ).with_columns(group_index=pl.lit(0), trajectory_id=pl.format("{}_{}_{}", "run_id", "epoch", "traj_index"))


def explorer_build_tables(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    built = build_tables(tables)
    explorer = explorer_tables(tables)
    return {
        **built,
        "fact_trajectories": trajectories(tables["epochs"]),
        "fact_epochs": built["fact_epochs"].join(
            explorer.epochs.select("run_id", "epoch", "snapshot_id"), on=["run_id", "epoch"]
        ),
        "reward_breakdowns": explorer.breakdowns,
        "trajectory_transcripts": empty_table("trajectory_transcripts"),
        "transcript_metrics": empty_table("transcript_metrics"),
        "matched_window_values": empty_table("matched_window_values"),
    }


def test_the_asset_writes_only_changed_pages_and_removes_stale_ones(tmp_path, tables):
    folder = tmp_path / "exports" / "explorer"
    (folder / "ablations").mkdir(parents=True)
    users = ["old.html", "ablations/mine.html"]  # the user's pages beside the explorer's: no build removes them
    for page in users:
        (folder / page).write_text("<p>the user's own page</p>")
    write_build_db(tmp_path, explorer_build_tables(many_ablations(tables)))
    first = materialize(tmp_path)
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.html"))[-2] == "index.html"
    assert len(list((folder / "ablations").glob("*.html"))) == 5 + 1
    metadata = first.get_asset_materialization_events()[0].materialization.metadata
    assert metadata["open"].value == (folder / "index.html").as_uri()
    assert metadata["grpo/rewritten"].value == 7

    stamps = {p: p.stat().st_mtime_ns for p in folder.rglob("*.html")}
    (tmp_path / "exports" / ".fingerprints.json").unlink()  # forget the fingerprints: render again, same bytes
    second = materialize(tmp_path)
    assert second.get_asset_materialization_events()[0].materialization.metadata["grpo/rewritten"].value == 0
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*.html")} == stamps

    write_build_db(tmp_path, explorer_build_tables(tables))  # two ablations: one page again
    materialize(tmp_path)
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.html")) == sorted(["index.html", *users])
    assert all((folder / page).read_text() == "<p>the user's own page</p>" for page in users)
    assert [a["name"] for a in page_data((folder / "index.html").read_bytes())["ablations"]] == ["abl", "other"]


# Per table a column of r_short's rows to change, and the pages that show it: r_short's ablation ("third"), the
# index when the table is one the index lists (the runs' summaries, not their epochs or snapshots), and all-runs.html,
# rendered on any change and rewritten when the runs' epochs or summaries change (it shows no snapshots).
ALL_RUNS_TITLE = "All runs · GRPO run explorer"
ONE_RUN_CHANGES = {
    "epoch_metrics": ("mean_reward", [ALL_RUNS_TITLE, "third · GRPO run explorer"], 2),
    "run_summary": ("final_reward", [ALL_RUNS_TITLE, "GRPO run explorer", "third · GRPO run explorer"], 3),
    "snapshots": ("epoch", [ALL_RUNS_TITLE, "third · GRPO run explorer"], 1),
}


@pytest.mark.parametrize("table", ONE_RUN_CHANGES)
def test_a_change_to_one_run_renders_the_pages_showing_it_alone(tmp_path, tables, monkeypatch, table):
    built = explorer_build_tables(many_ablations(tables))
    write_build_db(tmp_path / "kept", built)
    record_fingerprints(tmp_path / "kept", {name: "before" for name in built})
    materialize(tmp_path / "kept")
    column, showing, rewritten = ONE_RUN_CHANGES[table]
    changed = pl.when(pl.col("run_id") == "r_short").then(pl.col(column) + 1).otherwise(pl.col(column))
    one_run_changed = {**built, table: built[table].with_columns(changed.alias(column))}
    write_build_db(tmp_path / "kept", one_run_changed)
    record_fingerprints(tmp_path / "kept", {name: "after" for name in built})
    rendered, render = [], Page.render
    monkeypatch.setattr(Page, "render", lambda page, library: rendered.append(page.title) or render(page, library))
    result = materialize(tmp_path / "kept")
    assert sorted(rendered) == showing
    assert result.get_asset_materialization_events()[0].materialization.metadata["grpo/rewritten"].value == rewritten

    write_build_db(tmp_path / "fresh", one_run_changed)
    materialize(tmp_path / "fresh")
    kept, fresh = (tmp_path / name / "exports" / "explorer" for name in ("kept", "fresh"))
    pages = sorted(p.relative_to(fresh).as_posix() for p in fresh.rglob("*.html"))
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*.html")) == pages and len(pages) == 7
    assert all((kept / page).read_bytes() == (fresh / page).read_bytes() for page in pages)


def seeded_tables(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """Ablation abl as two configurations of two seeds (r_long and r_mid of arm r_long, named `Cfg A` by its run of
    that name; r_short and r_extra of `Cfg B`), with the contrast of their arms as ablation_contrasts gives it (unit
    `runs`, arm IQMs)."""
    extra = tables["runs"].filter(pl.col("run_id") == "r_short").with_columns(run_id=pl.lit("r_extra"))
    arms = {"r_long": "r_long", "r_mid": "r_long", "r_short": "r_short", "r_extra": "r_short", "solo": "solo"}
    labels = {
        "r_long": "Cfg A",
        "r_mid": "Cfg A · seed 1",
        "r_short": "Cfg B",
        "r_extra": "Cfg B · seed 1",
    }
    runs = pl.concat([tables["runs"], extra]).with_columns(
        arm=pl.col("run_id").replace_strict(arms),
        label=pl.col("run_id").replace_strict(labels, default=pl.col("label")),
    )
    summary = pl.concat(
        [
            tables["summary"],
            tables["summary"]
            .filter(pl.col("run_id") == "r_short")
            .with_columns(run_id=pl.lit("r_extra"), matched_reward=pl.lit(0.31)),
        ]
    )
    epochs = pl.concat(
        [
            tables["epochs"],
            tables["epochs"].filter(pl.col("run_id") == "r_short").with_columns(run_id=pl.lit("r_extra")),
        ]
    )
    contrasts = pl.DataFrame(
        {
            "ablation": ["abl"],
            "run_a": ["r_long"],
            "run_b": ["r_short"],
            "arm_a": ["r_long"],
            "arm_b": ["r_short"],
            "delta": [-0.27],
            "ci_low": [-0.4],
            "ci_high": [-0.1],
            "ci_method": ["stratified bootstrap"],
            "unit": ["runs"],
            "resolved": [True],
            "prob_improvement": [0.0],
            "matched_reward_a": [0.6002],
            "matched_reward_b": [0.33],
            "n_runs_a": [2],
            "n_runs_b": [2],
        }
    )
    return {**tables, "runs": runs, "summary": summary, "epochs": epochs, "contrasts": contrasts}


def test_configurations_of_seeds_carry_a_name_a_colour_and_their_value_from_the_contrasts(tables):
    payload = ablation_payload("abl", explorer_tables(seeded_tables(tables)))
    configs = {c["arm"]: c for c in payload["configurations"]}
    assert {a: (c["label"], c["runs"], c["n_runs"], c["value"]) for a, c in configs.items()} == {
        "r_long": ("Cfg A", ["r_long", "r_mid"], 2, 0.6002),
        "r_short": ("Cfg B", ["r_extra", "r_short"], 2, 0.33),
    }
    colours = {run["run_id"]: run["colour"] for run in payload["runs"]}
    assert colours["r_long"] == colours["r_mid"] == configs["r_long"]["colour"]
    assert colours["r_short"] == colours["r_extra"] == configs["r_short"]["colour"] != configs["r_long"]["colour"]
    assert {run["run_id"]: run["arm"] for run in payload["runs"]}["r_extra"] == "r_short"
    # one run per arm: no configurations, a colour per run
    assert ablation_payload("abl", explorer_tables(tables))["configurations"] == []


def test_every_numeric_epoch_column_is_carried_at_float32_precision_and_the_reward_at_full(tables):
    epochs = tables["epochs"].with_columns(
        loss=pl.lit(0.123456789),
        grad_norm=pl.when(pl.col("epoch") > 2).then(pl.lit(2.0)),
        reward_breakdown=pl.lit("{}"),
    )
    payload = ablation_payload("abl", explorer_tables({**tables, "epochs": epochs}))
    assert payload["metrics"][:4] == ["mean_reward", "frac_zero_std_groups", "sample_entropy", "train_entropy"]
    assert {"loss", "grad_norm", "n_trajectories", "reward_std"} <= set(payload["metrics"])
    assert not {"reward_ema", "reward_rolling", "reward_breakdown", "snapshot_id", "epoch"} & set(payload["metrics"])
    long = payload["series"]["r_long"]
    assert long["loss"][0] == 0.1234568  # 7 significant digits
    assert long["mean_reward"] == [0.1 + 0.1 * i for i in range(10)]  # every digit, as computed
    assert long["trajectories"] == [8 * (i + 1) for i in range(10)]  # the running sum of n_trajectories
    assert "grad_norm" not in payload["series"]["r_short"]  # no value in that run: left out
    assert long["grad_norm"][:4] == [None, None, None, 2.0]


def many_runs(n_arms: int, seeds: int) -> dict[str, pl.DataFrame]:
    """One ablation of n_arms configurations of seeds runs, of one epoch each; run k's matched reward is k / runs."""
    n = n_arms * seeds
    ids = [f"run_{k:05d}" for k in range(n)]
    runs = pl.DataFrame(
        {"run_id": ids, "ablation": "big", "label": ids, "arm": [f"arm_{k % n_arms:04d}" for k in range(n)]}
    )
    rewards = [k / n for k in range(n)]
    summary = pl.DataFrame({"run_id": ids, "matched_reward": rewards, "matched_horizon": [0] * n})
    epochs = pl.DataFrame({"run_id": ids, "epoch": [0] * n, "n_trajectories": [8] * n, "mean_reward": rewards})
    pairs = [(ids[i], ids[j]) for i in range(0, n, 7) for j in range(i + 1, min(n, i + 40))]
    contrasts = pl.DataFrame(
        {
            "ablation": "big",
            "run_a": [a for a, _ in pairs],
            "run_b": [b for _, b in pairs],
            "delta": [(int(b[4:]) - int(a[4:])) / n for a, b in pairs],
        }
    )
    empty = pl.DataFrame({"run_id": []}, schema={"run_id": pl.String})
    return {"runs": runs, "epochs": epochs, "summary": summary, "contrasts": contrasts, "snapshots": empty}


def test_two_ablations_of_many_runs_get_a_page_each_and_one_ablation_stays_on_the_index():
    def pages(n_runs: int, ablations: int) -> list[str]:
        tables = many_runs(n_runs, 1)
        half = pl.int_range(pl.len()) < n_runs // 2
        runs = tables["runs"].with_columns(
            ablation=pl.when(half | (ablations == 1)).then(pl.lit("a")).otherwise(pl.lit("b"))
        )
        return sorted(explorer_pages(explorer_tables({**tables, "runs": runs}, breakdowns=pl.DataFrame()), SETTINGS))

    assert pages(MAX_RUNS_ON_INDEX, 2) == ["index.html"]
    assert pages(MAX_RUNS_ON_INDEX + 2, 2) == ["ablations/a.html", "ablations/b.html", "all-runs.html", "index.html"]
    assert pages(3 * MAX_RUNS_ON_INDEX, 1) == ["index.html"]


def test_an_ablation_of_thousands_of_runs_is_summarised_and_its_page_stays_small():
    tables = many_runs(3000, 1)
    payload = ablation_payload("big", explorer_tables(tables, breakdowns=pl.DataFrame()))
    carried = [run["run_id"] for run in payload["runs"]]
    assert payload["n_runs"] == 3000 and len(carried) == MAX_RUNS_ON_PAGE and set(carried) == set(payload["series"])
    # the 30 best and the 30 worst runs by matched reward
    assert carried == [f"run_{k:05d}" for k in [*range(30), *range(2970, 3000)]]
    assert payload["n_contrasts"] == tables["contrasts"].height > MAX_CONTRASTS_ON_PAGE == len(payload["contrasts"])
    # the leader's rows first (run_02999 leads), then the largest differences
    rows = tables["contrasts"].to_dicts()
    leads = [r for r in rows if "run_02999" in (r["run_a"], r["run_b"])]
    largest = sorted((abs(r["delta"]) for r in rows if r not in leads), reverse=True)
    largest = largest[: MAX_CONTRASTS_ON_PAGE - len(leads)]
    shown = payload["contrasts"]
    assert sum("run_02999" in (c["run_a"], c["run_b"]) for c in shown) == len(leads) > 0
    others = [c for c in shown if "run_02999" not in (c["run_a"], c["run_b"])]
    assert sorted((abs(c["delta"]) for c in others), reverse=True) == pytest.approx(largest)
    page = explorer_pages(explorer_tables(tables, breakdowns=pl.DataFrame()), SETTINGS)["index.html"]
    assert len(page) < 1_000_000


def test_a_large_ablation_of_configurations_keeps_each_ones_best_middle_and_worst_seeds():
    payload = ablation_payload("big", explorer_tables(many_runs(20, 10), breakdowns=pl.DataFrame()))
    assert payload["n_runs"] == 200 and len(payload["runs"]) == 60
    config = next(c for c in payload["configurations"] if c["arm"] == "arm_0003")
    # arm_0003's seeds are runs 3, 23, ..., 183 (matched reward rising with k): 3 of them, best, middle and worst
    assert config["runs"] == ["run_00003", "run_00103", "run_00183"] and config["n_runs"] == 10


def test_histograms_of_each_epochs_rewards_and_advantages_bin_like_numpy(tmp_path, tables):
    write_build_db(tmp_path, explorer_build_tables(tables))
    materialize(tmp_path)
    data = page_data((tmp_path / "exports" / "explorer" / "index.html").read_bytes())
    histograms = data["ablations"][0]["histograms"]["r_mid"]
    assert histograms["epoch"] == list(range(6))  # 22 run × epochs in all: every epoch is kept
    for quantity, values in (("reward", REWARDS), ("advantage", ADVANTAGES)):
        finite = np.array([v for v in values if math.isfinite(v)])
        counts, _ = np.histogram(finite, bins=data["histogram_bins"], range=(finite.min(), finite.max()))
        h = histograms[quantity]
        at = h["epoch"].index(3)
        assert (h["lo"][at], h["hi"][at]) == (finite.min(), finite.max())
        assert list(zip(h["bin"][at], h["n"][at], strict=True)) == [(b, int(n)) for b, n in enumerate(counts) if n]
