"""The benchmark harness on a tiny release: every figure is measured and reported; the user's release is left alone."""

import json
from pathlib import Path

from helpers import epoch_document, write_epoch_file

from benchmarks.plan import add_epoch_file, run_bench
from benchmarks.report import format_table
from benchmarks.targets import build_ratios, check_targets
from pipelines.release.sample import write_epoch_in_layout


def tiny_release(root: Path) -> Path:
    """Two runs, one per layout: 3 + 2 documents of 4 trajectories, and a side file the ingest only inventories."""
    release = root / "release"
    for epoch in range(3):
        write_epoch_file(release / "run_file", epoch)
    for epoch in range(2):
        write_epoch_file(release / "run_folder", epoch, layout="folder")
    (release / "run_folder" / "epoch_000" / "config.json").write_text("{}")
    return release


def test_add_epoch_file_continues_each_layout(tmp_path):
    release = tiny_release(tmp_path)
    added_file = add_epoch_file([str(release)], 1)  # runs sorted by id: run_file, run_folder
    added_folder = add_epoch_file([str(release)], 2)
    assert added_file == release / "run_folder" / "epoch_002" / "results.json"
    assert added_folder == release / "run_file" / "epoch_003_results.json"
    assert json.loads(added_file.read_text()) == {**epoch_document(1), "epoch": 2}
    assert json.loads(added_folder.read_text()) == {**epoch_document(2), "epoch": 3}


def test_add_epoch_file_continues_a_folder_layout_with_its_own_name(tmp_path):
    release = tmp_path / "release"
    for epoch in range(2):
        write_epoch_in_layout(release / "run", "folder_epoch_results", epoch_document(epoch), b"{}")
    assert add_epoch_file([str(release)]) == release / "run" / "epoch_002" / "epoch_002_results.json"


def test_bench_reports_every_figure_without_touching_the_release(tmp_path):
    release = tiny_release(tmp_path)
    before = sorted(p.relative_to(release) for p in release.rglob("*"))
    lines: list[str] = []
    report = run_bench(
        [],
        [str(release)],
        str(tmp_path / "work"),
        workers=1,
        repeat=1,
        json_path=str(tmp_path / "bench.json"),
        keep=False,
        with_build=False,
        say=lines.append,
    )

    assert sorted(p.relative_to(release) for p in release.rglob("*")) == before
    summary = report["results"]["release"]["summary"]
    assert (summary["runs"], summary["files"], summary["trajectories"]) == (2, 5, 20)
    assert summary["no_change_files_parsed"] == 0
    assert summary["one_file_files_parsed"] == 1
    raw = report["results"]["release"]["raw"]
    assert raw["duckdb"][0]["result"]["trajectories"] == 20  # measured before the one-file figure adds a file
    assert raw["pandas"][0]["result"]["trajectories"] == 20
    assert raw["ingest_one_file"][0]["result"]["trajectories"] == 24  # the copied document adds its 4
    # The bench's steps take runs as quiet at once: the sensor's tick after the build lists neither run.
    assert {k: raw["sensor_tick"][0]["result"][k] for k in ("quiet_runs", "runs_to_ingest")} == {
        "quiet_runs": 2,
        "runs_to_ingest": 0,
    }
    for name in (
        "decode_lower_bound",
        "ingest_1_worker",
        "ingest_full",
        "ingest_no_change",
        "ingest_one_file",
        "sensor_tick",
        "duckdb",
        "pandas",
    ):
        measurement = raw[name][0]
        assert measurement["wall_seconds"] > 0 and measurement["peak_rss_bytes"] > 0, name
    text = "\n".join(lines)
    for figure in (
        "decode-only lower bound",
        "json.loads read-and-decode",
        "ingest, full",
        "1 worker",
        "no change",
        "one new epoch file",
        "sensor tick",
        "plain DuckDB",
        "pandas",
        "targets:",
    ):
        assert figure in text, figure
    assert json.loads((tmp_path / "bench.json").read_text())["machine"]["nproc"] >= 1
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())


def test_targets_are_judged_against_their_bars():
    def summary(ingest, decode, duckdb, one_file, peak, no_change_build, no_change_ingest):
        return {
            "ingest_vs_decode": ingest / decode,
            "duckdb_vs_ingest": duckdb / ingest,
            "one_file_share": one_file / ingest,
            "no_change_files_parsed": 0,
            "peak_tree_rss_bytes": {"ingest_full": peak, "build_full": peak},
            "seconds": {"ingest_no_change": 0.001},  # the work alone: not what the growth is judged on
            "process_seconds": {"build_no_change": no_change_build, "ingest_no_change": no_change_ingest},
        }

    results = {
        "scale 1x": {"scale": 1, "summary": summary(1.0, 0.5, 4.0, 0.5, 100 * 2**20, 6.0, 0.4)},
        "scale 100x": {"scale": 100, "summary": summary(90.0, 60.0, 150.0, 5.0, 2**30, 9.5, 0.58)},
    }
    verdicts = {(c["scale"], c["target"]): c["holds"] for c in check_targets(results)}
    assert verdicts[("scale 100x", "ingest / decode-only lower bound")] is True  # 1.5x
    assert verdicts[("scale 100x", "plain DuckDB / ingest")] is False  # 1.67x, bar 2x
    assert verdicts[("scale 100x", "peak memory, ingest (process tree)")] is False  # exactly 1 GiB
    assert verdicts[("scale 100x", "peak memory, whole build (process tree)")] is False
    assert not [target for _, target in verdicts if "one new epoch file" in target]  # reported, no bar to hold
    assert verdicts[("1x -> 100x", "no-change rebuild time growth (whole build, process wall)")] is False  # 1.58x
    assert verdicts[("1x -> 100x", "no-change rebuild time growth (ingest, process wall)")] is True  # 0.58 / 0.4
    assert ("scale 1x", "ingest / decode-only lower bound") not in verdicts  # the ratio targets start at 10x


def test_format_table_names_each_row():
    figures = ("decode_lower_bound", "ingest_full", "ingest_no_change", "ingest_one_file", "duckdb")
    per_figure = {name: 1.0 for name in figures}
    text = format_table(
        "release",
        {
            "seconds": per_figure,
            "process_seconds": per_figure,
            "cpu_seconds": per_figure,
            "peak_tree_rss_bytes": per_figure,
            "peak_rss_bytes": per_figure,
            "runs": 1,
            "files": 2,
            "bytes": 3,
            "trajectories": 4,
            "stdlib_fallbacks": 0,
            "no_change_files_parsed": 0,
            "duckdb_vs_ingest": 1.0,
            "one_file_share": 1.0,
        },
    )
    assert "plain DuckDB" in text and "whole build" not in text


def test_the_whole_build_is_judged_against_its_references_and_its_parts():
    steps = {
        "select_runs": 0.5,
        "release_runs": 0.25,
        "run_lake": 4.25,
        "fact_trajectories": 3.0,
        "ablation_figures": 6.0,
    }
    raw = {
        "build_full": [{"wall_seconds": 40.0, "result": {"steps": steps}}],
        "figures": [{"result": {"cpu_per_ablation": [0.9, 0.2, 0.35], "setup_cpu": 1.5}}],
        "query": [{"wall_seconds": w, "result": {"cpu_seconds": 0.1}} for w in (0.2, 0.5, 0.25)],
        "statistics": [{"result": {"statistics_cpu_seconds": 3.0, "runs_cpu_seconds": 1.0, "runs": 50, "pairs": 60}}],
    }
    summary = {
        "seconds": {"json_decode": 5.0, "ingest_full": 4.0},
        "process_seconds": {"build_full": 40.0, "ingest_full": 5.0},
        "build_full_steps": {"ingest": 5.0, "by_step": steps},
        "cpu_seconds": {"build_full": 60.0},
    }
    ratios = build_ratios(raw, summary)
    assert ratios["build_vs_json"] == 8.0 and ratios["build_vs_ingest"] == 8.0
    assert ratios["ingest_in_build"] == 1.25  # 5.0 s of ingest steps / 4.0 s alone
    assert (ratios["statistics_cpu"], ratios["statistics_share"]) == (3.0, 0.05)  # 3 s of the build's 60 s of CPU
    assert (ratios["figure_cpu_max"], ratios["figure_cpu_median"], ratios["query_seconds"]) == (0.9, 0.35, 0.25)
    assert ratios["figure_cpu_setup"] == 1.5  # apart from the ablations' median

    base = {
        "ingest_vs_decode": 1.0,
        "duckdb_vs_ingest": 3.0,
        "one_file_share": 0.01,
        "no_change_files_parsed": 0,
        "peak_tree_rss_bytes": {},
        "process_seconds": {},
    }
    verdicts = {
        (c["scale"], c["target"]): c["holds"]
        for c in check_targets(
            {
                "scale 10x": {"scale": 10, "summary": {**base, **ratios}},
                "scale 100x": {
                    "scale": 100,
                    "summary": {**base, **ratios, "build_one_file_share": 0.049, "build_one_file_cpu_share": 0.05},
                },
            }
        )
    }
    assert verdicts[("scale 10x", "fresh whole build / 1-process json.loads read-and-decode")] is True  # 8x
    assert ("scale 100x", "fresh whole build / 1-process json.loads read-and-decode") not in verdicts
    assert verdicts[("scale 100x", "fresh whole build / ingest alone (process wall)")] is False  # 8x, bar 3x
    assert ("scale 10x", "fresh whole build / ingest alone (process wall)") not in verdicts
    assert verdicts[("scale 10x", "ingest steps in the build / ingest alone")] is True  # exactly 1.25x
    assert not [target for _, target in verdicts if "one new epoch file" in target]  # reported, no bar to hold
    assert verdicts[("scale 10x", "interval statistics / fresh whole build (cpu)")] is True
    assert not [target for _, target in verdicts if "figure" in target]  # measured and reported, no bar to hold
    assert verdicts[("scale 10x", 'grpo-warehouse sql "select 1" (process wall, median)')] is True


def test_the_ingest_alone_is_the_faster_of_its_runs_before_and_after_the_build():
    raw = {"build_full": [{"wall_seconds": 30.0, "result": {"steps": {"run_lake": 6.0}, "ingest_call_seconds": 5.5}}]}
    summary = {
        "seconds": {"ingest_full": 5.0, "ingest_full_after": 4.0},
        "process_seconds": {"build_full": 30.0, "ingest_full": 6.0, "ingest_full_after": 7.5},
        "build_full_steps": {"ingest": 6.0, "by_step": {"run_lake": 6.0}},
    }
    ratios = build_ratios(raw, summary)
    assert ratios["ingest_in_build"] == 1.5  # 6.0 s of ingest steps / the faster ingest alone, 4.0 s after the build
    assert ratios["build_vs_ingest"] == 5.0  # 30 s / the faster process, 6.0 s before the build
    assert ratios["dagster_around_ingest_seconds"] == 0.5  # the step's 6.0 s less the 5.5 s of the call inside it
