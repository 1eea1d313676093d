"""The scale-out configuration: the Dask executor and the partitions per run it is given, and its refusals."""

import os
import socket
from pathlib import Path

import duckdb
import pytest
import s3fs
from helpers import epoch_document, write_epoch_file

import pipelines
from pipelines.build import _pieces
from pipelines.definitions import build_definitions
from pipelines.defs.resources import WarehouseConfig
from pipelines.distributed import local_cluster
from pipelines.release.objects import loopback_s3
from pipelines.settings import ConfigError


def test_dask_needs_a_scheduler_address(tmp_path):
    with pytest.raises(ConfigError, match="GRPO_DASK_ADDRESS"):
        WarehouseConfig.from_env({"GRPO_EXECUTOR": "dask", "GRPO_WAREHOUSE_DIR": str(tmp_path)})
    with pytest.raises(ConfigError, match="GRPO_EXECUTOR"):
        WarehouseConfig.from_env({"GRPO_EXECUTOR": "kubernetes", "GRPO_WAREHOUSE_DIR": str(tmp_path)})


def test_a_scheduler_nobody_answers_at_is_refused_before_the_build(tmp_path):
    with socket.socket() as unused:  # a port that was free a moment ago, nothing listening on it now
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    config = WarehouseConfig.from_env(
        {
            "GRPO_EXECUTOR": "dask",
            "GRPO_DASK_ADDRESS": f"tcp://127.0.0.1:{port}",
            "GRPO_WAREHOUSE_DIR": str(tmp_path / "wh"),
        }
    )
    with pytest.raises(ConfigError, match=f"GRPO_DASK_ADDRESS.*127.0.0.1:{port}: no Dask scheduler answers"):
        config.check_paths()


def test_dask_executor_runs_the_ingest_only_in_runs_of_n_partitions(tmp_path):
    config = WarehouseConfig.from_env(
        {
            "GRPO_EXECUTOR": "dask",
            "GRPO_DASK_ADDRESS": "tcp://127.0.0.1:8786",
            "GRPO_PARTITIONS_PER_RUN": "7",
            "GRPO_WAREHOUSE_DIR": str(tmp_path),
        }
    )
    definitions = build_definitions(config)
    assert definitions.resolve_job_def("ingest_runs").executor_def.name == "dask_executor"
    # The models write one DuckDB file: every other job stays in this process.
    assert definitions.resolve_job_def("refresh_warehouse").executor_def.name == "in_process"
    assert definitions.resolve_job_def("scan_releases").executor_def.name == "in_process"
    graph = definitions.resolve_asset_graph()
    policies = {graph.get(key).backfill_policy for key in graph.get_all_asset_keys() if graph.get(key).partitions_def}
    assert [policy.max_partitions_per_run for policy in policies] == [7]

    local = build_definitions(WarehouseConfig.from_env({"GRPO_WAREHOUSE_DIR": str(tmp_path)}))
    assert local.resolve_job_def("ingest_runs").executor_def.name == "in_process"
    graph = local.resolve_asset_graph()
    assert {
        graph.get(key).backfill_policy.max_partitions_per_run
        for key in graph.get_all_asset_keys()
        if graph.get(key).partitions_def
    } == {None}


def test_releases_in_the_environment_keep_their_bucket_urls(tmp_path):
    config = WarehouseConfig.from_env(
        {"GRPO_RELEASES": f"s3://lab/runs:{tmp_path}:s3://other/x/y", "GRPO_WAREHOUSE_DIR": str(tmp_path)}
    )
    assert config.releases == ["s3://lab/runs", str(tmp_path), "s3://other/x/y"]
    assert config.release_roots() == ["s3://lab/runs", tmp_path, "s3://other/x/y"]


def test_pieces_cut_a_block_into_ranges_of_at_most_n():
    keys = [f"k{i}" for i in range(7)]
    assert _pieces(keys, 3) == [["k0", "k1", "k2"], ["k3", "k4", "k5"], ["k6"]]
    assert _pieces(keys, 7) == [keys]


@pytest.fixture
def cluster(tmp_path):
    """moto's S3 server, a Dask scheduler and two single-threaded workers, each a process of its own on loopback;
    yields (the AWS variables that point at the server, the scheduler's address). Everything is stopped afterwards."""
    with loopback_s3() as aws:
        env = {
            **os.environ,
            **aws,
            "PYTHONPATH": os.pathsep.join([str(Path(pipelines.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
        }
        with local_cluster(2, tmp_path, env) as address:
            yield aws, address


def _tables(warehouse: Path) -> dict[str, list]:
    """Every table and view of a published warehouse, rows in a stated order; the release's location and the files'
    modification times left out (a bucket's URL and an object's last-modified time against a folder and a file's)."""
    with duckdb.connect(str(warehouse / "warehouse.duckdb"), read_only=True) as con:
        names = [
            name for (name,) in con.execute("select table_name from information_schema.tables order by 1").fetchall()
        ]
        tables = {}
        for name in names:
            columns = [
                c
                for (c,) in con.execute(
                    "select column_name from information_schema.columns where table_name = ? order by ordinal_position",
                    [name],
                ).fetchall()
                if c not in ("release_root", "mtime", "source_mtime")
            ]
            select = ", ".join(f'"{c}"' for c in columns)
            tables[name] = con.execute(f'select {select} from "{name}" order by all').fetchall()
    return tables


@pytest.mark.slow
def test_a_release_in_a_bucket_built_on_two_dask_workers_into_a_lake_in_a_bucket_equals_a_local_build(
    cluster, tmp_path, monkeypatch, capsys
):
    from pipelines.cli import main
    from pipelines.release.objects import filesystem

    aws, address = cluster
    release = tmp_path / "rel" / "lab"
    for n, run_id in enumerate(["seed 1", "seed=2", "Seed-3", "seed_4"]):
        for epoch in range(1, 4):
            write_epoch_file(release / run_id, epoch, epoch_document(epoch, n=2 + n), layout=("file", "folder")[n % 2])
    write_epoch_file(release / "seed_4", 4, "{damaged")
    assert main(["build", "--release", str(release), "--warehouse", str(tmp_path / "local"), "--workers", "1"]) == 0

    for name, value in aws.items():
        monkeypatch.setenv(name, value)
    filesystem.cache_clear()
    s3fs.S3FileSystem.clear_instance_cache()
    fs = filesystem()
    fs.mkdir("releases")
    fs.mkdir("lakes")
    fs.put(str(release), "releases/lab", recursive=True)
    monkeypatch.setenv("GRPO_EXECUTOR", "dask")
    monkeypatch.setenv("GRPO_DASK_ADDRESS", address)
    monkeypatch.setenv("GRPO_PARTITIONS_PER_RUN", "2")
    monkeypatch.setenv("GRPO_LAKE_DIR", "s3://lakes/lab")
    remote = ["build", "--release", "s3://releases/lab", "--warehouse", str(tmp_path / "remote")]
    try:
        assert main(remote) == 0
        lake = {name: info["ETag"] for name, info in fs.find("lakes/lab", detail=True).items()}
        capsys.readouterr()
        assert main(remote) == 0  # nothing changed: nothing ingested, no object put again
        out = capsys.readouterr().out
        assert "nothing to ingest" in out and "  Parquet lake: s3://lakes/lab\n" in out
        assert {name: info["ETag"] for name, info in fs.find("lakes/lab", detail=True).items()} == lake
    finally:
        filesystem.cache_clear()
        s3fs.S3FileSystem.clear_instance_cache()

    local, remote = _tables(tmp_path / "local"), _tables(tmp_path / "remote")
    assert local["fact_epochs"] and local["ingest_errors"]
    assert remote == local
    # The lake is in the bucket, a partition per run and table, and none in the warehouse folder.
    assert sum("/epochs/" in name for name in lake) == 4 and len(lake) == 3 + 4 * (1 + 4 + 1)
    assert not (tmp_path / "remote" / "lake").exists()
    # Both workers took run partitions: the four runs went as two Dagster runs of two.
    logs = [(tmp_path / f"worker-{n}.log").read_text() for n in (1, 2)]
    assert all("run_lake" in log for log in logs)


@pytest.mark.slow
def test_a_cluster_that_cannot_import_the_code_fails_the_build_on_one_line(tmp_path, capsys, monkeypatch):
    from pipelines.cli import main

    write_epoch_file(tmp_path / "rel" / "run a", 1, epoch_document(1))
    broken = tmp_path / "broken"
    (broken / "pipelines").mkdir(parents=True)
    (broken / "pipelines" / "__init__.py").write_text('raise ImportError("no pipelines on this node")\n')
    monkeypatch.chdir(tmp_path)  # the nodes' first import path is their working folder: not this repository
    with local_cluster(1, tmp_path / "cluster", {**os.environ, "PYTHONPATH": str(broken)}) as address:
        monkeypatch.setenv("GRPO_EXECUTOR", "dask")
        monkeypatch.setenv("GRPO_DASK_ADDRESS", address)
        status = main(["build", "--release", str(tmp_path / "rel"), "--warehouse", str(tmp_path / "wh")])
    out, err = capsys.readouterr()
    assert status == 2
    assert err == "grpo-warehouse build: the build failed: ImportError: no pipelines on this node\n"
    assert "Traceback" not in out + err and "Stack Trace" not in out + err
