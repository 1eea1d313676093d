"""Incremental models (`materialized: incremental` on `unique_key: run_id` in their schema.yml): after a change to
some runs only their rows are computed again, and every table and every export file then holds what a build from
scratch of the same release holds."""

import json
import re
import shutil
import tempfile
from pathlib import Path

import duckdb
import pytest
from helpers import epoch_document, touch_later, write_epoch_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.defs.models.assets import MODELS, refresh_model
from pipelines.defs.resources import WarehouseConfig
from pipelines.models import ModelError, load_models, run_model, run_model_rows
from pipelines.settings import ENV_REGISTRY

INCREMENTAL = sorted(name for name, model in MODELS.items() if model.incremental_key)
# fact_trajectories and the incremental models that read it: rebuilt whole when its columns change
READING_TRAJECTORIES = (
    "fact_trajectories",
    "group_metrics",
    "reward_breakdowns",
    "epoch_trajectory_counts",
    "epoch_metrics",
)


def tables(warehouse) -> dict[str, list[tuple]]:
    """Every model's rows, as text, in a fixed order (an incremental refresh appends the rows it computes again)."""
    with duckdb.connect(str(warehouse / "warehouse.duckdb"), read_only=True) as con:
        return {
            name: sorted(tuple(map(str, row)) for row in con.execute(f"select * from {name}").fetchall())
            for name in MODELS
        }


def exports(warehouse) -> dict[str, bytes]:
    """Every export file (figures, report, table files, explorer pages) by its path in the exports folder; not the
    exports' own records of what they were made from."""
    folder = warehouse / "exports"
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.name.startswith(".")
    }


def refreshes(output: str) -> dict[str, str]:
    """What the build's log says it did to each incremental model: kept, rebuilt or so many runs computed again."""
    done = {}
    for name in INCREMENTAL:
        match = re.search(rf"^  \S+ +{name}: [\d,]+ rows \((.+)\)$", output, re.MULTILINE)
        done[name] = match.group(1) if match else None
    return done


def targeted(epoch: int, n: int = 4, **extras) -> dict:
    """An epoch of a multi-target run: per-trajectory target models and false-positive control flags."""
    return epoch_document(
        epoch, n, target_model=[f"m{i % 2}" for i in range(n)], is_fp_control=[i == 0 for i in range(n)], **extras
    )


@pytest.fixture
def release(tmp_path, write_epoch):
    """Three runs of three epochs: run_a multi-target, run_b in the folder layout, run_c plain."""
    root = tmp_path / "release"
    for epoch in range(3):
        write_epoch(root / "run_a", epoch, targeted(epoch))
        write_epoch(root / "run_b", epoch, layout="folder")
        write_epoch(root / "run_c", epoch)
    return root


def build_and_compare(tmp_path, build, capsys, release, changed: bool = True) -> dict[str, str]:
    """Builds the kept warehouse, checks every table against a build from scratch, and says what was done. With the
    release unchanged since the last call, the build from scratch is that call's: two of one release are alike
    (test_changed_runs_are_computed_again_and_the_tables_equal_a_build_from_scratch checks it on its first call)."""
    capsys.readouterr()
    assert build([release], tmp_path / "wh") == 0
    done = refreshes(capsys.readouterr().out)
    fresh = tmp_path / "fresh"
    if changed:
        shutil.rmtree(fresh, ignore_errors=True)
        assert build([release], fresh) == 0
    assert tables(tmp_path / "wh") == tables(fresh)
    assert exports(tmp_path / "wh") == exports(fresh)
    return done


@pytest.mark.slow
def test_changed_runs_are_computed_again_and_the_tables_equal_a_build_from_scratch(
    tmp_path, build, capsys, release, write_epoch
):
    # the first call compares two builds from scratch of one release: builds are deterministic
    assert set(build_and_compare(tmp_path, build, capsys, release).values()) == {"rebuilt"}

    write_epoch(release / "run_a", 3, targeted(3))  # a new epoch
    shutil.rmtree(release / "run_b" / "epoch_001")  # an epoch gone
    changed = write_epoch(release / "run_c", 1, epoch_document(1, n=3))  # an epoch rewritten, one trajectory fewer
    touch_later(changed)
    done = build_and_compare(tmp_path, build, capsys, release)
    assert done == {name: "3 run_id(s) computed again" for name in INCREMENTAL}

    write_epoch(release / "run_b", 1, layout="folder")  # one run only
    done = build_and_compare(tmp_path, build, capsys, release)
    assert done == {name: "1 run_id(s) computed again" for name in INCREMENTAL}

    # run_a, already the longest, one epoch longer: its summary alone is computed again, and its horizon is still
    # the ablation's (epoch 2, the others' last), which its own epochs alone would not give
    write_epoch(release / "run_a", 4, targeted(4))
    assert build_and_compare(tmp_path, build, capsys, release)["run_summary"] == "1 run_id(s) computed again"

    done = build_and_compare(tmp_path, build, capsys, release, changed=False)
    assert set(done.values()) == {"inputs unchanged, table kept"}

    # A parameter change rebuilds an incremental model whole, and a refresh after it keeps it.
    config = WarehouseConfig(releases=[str(release)], warehouse_dir=str(tmp_path / "wh"), ci_method="iid")
    _, done, metadata, _ = refresh_model(MODELS["run_summary"], config)
    assert (done, metadata["dagster/row_count"]) == ("rebuilt", 3)
    assert refresh_model(MODELS["run_summary"], config)[1] == "kept"


@pytest.mark.slow
def test_new_columns_and_new_runs_rebuild_what_they_reach(tmp_path, build, capsys, release, write_epoch):
    # a first build from scratch: the test above compares it with another
    assert build([release], tmp_path / "wh") == 0

    # A per-trajectory key no run had: fact_trajectories gains a column, so it and what reads it are rebuilt whole
    # (an incremental model's recorded inputs include the columns of the incremental models it reads).
    write_epoch(release / "run_c", 3, epoch_document(3, judge_score=[0.5, 0.25, 1.0, 0.0]))
    done = build_and_compare(tmp_path, build, capsys, release)
    assert done["epoch_copies"] == done["fact_epochs"] == "1 run_id(s) computed again"
    assert {done[name] for name in READING_TRAJECTORIES} == {"rebuilt"}

    # A run the warehouse has not seen: lake.runs and dim_runs gain its row, and each other run's rows are the same.
    # Only two epochs long, it moves the ablation's matched horizon to epoch 1, and so every run's summary and
    # matched window.
    for epoch in range(2):
        write_epoch(release / "run_d", epoch, targeted(epoch))
    assert build_and_compare(tmp_path, build, capsys, release) == {
        name: "1 run_id(s) computed again" for name in INCREMENTAL
    } | {"matched_series": "4 run_id(s) computed again", "run_summary": "4 run_id(s) computed again"}

    # A run gone: its rows leave every table.
    shutil.rmtree(release / "run_b")
    assert set(build_and_compare(tmp_path, build, capsys, release).values()) == {"1 run_id(s) computed again"}

    # The lake's extra columns are in name order, whichever runs bring them: without run_a, the runs left hold the
    # same keys (judge_score from run_c, target_model and is_fp_control from run_d), so nothing is rebuilt whole.
    # (In the order of the runs' files, judge_score would now come first, and every table holding it rebuilt.)
    shutil.rmtree(release / "run_a")
    assert set(build_and_compare(tmp_path, build, capsys, release).values()) == {"1 run_id(s) computed again"}


def test_an_unknown_incremental_key_is_refused_naming_the_file(tmp_path):
    (tmp_path / "marts").mkdir()
    (tmp_path / "marts" / "by_epoch.sql").write_text("-- Per epoch.\nselect 1 as epoch\n")
    declaration = (
        "models:\n  - name: by_epoch\n    config:\n      materialized: incremental\n"
        "      incremental_strategy: delete+insert\n      unique_key: {key}\n"
    )
    (tmp_path / "marts" / "schema.yml").write_text(declaration.format(key="epoch"))
    with pytest.raises(ModelError, match=r"schema\.yml: model `by_epoch`.*not 'epoch'"):
        load_models(tmp_path)
    (tmp_path / "marts" / "schema.yml").write_text(declaration.format(key="run_id"))
    model = load_models(tmp_path)["by_epoch"]
    assert (model.incremental_key, model.description) == ("run_id", "Per epoch.")


def test_the_runs_computed_again_see_only_their_rows_of_the_tables_they_read(tmp_path):
    """run_model_rows shows the model its inputs' rows of the chosen runs alone, also through a materialized CTE
    (which stops a filter on the query's result), and leaves the tables as they were once it is done."""
    (tmp_path / "marts").mkdir()
    (tmp_path / "marts" / "scores.sql").write_text("select 'a' as run_id, 1.0::double as score\n")
    (tmp_path / "marts" / "schema.yml").write_text(
        "models:\n  - name: totals\n    config: {materialized: incremental, incremental_strategy: delete+insert,"
        " unique_key: run_id}\n"
    )
    (tmp_path / "marts" / "totals.sql").write_text(
        "with seen as materialized (select * from scores)\n"
        "select run_id, sum(score) as total, (select count(*) from seen) as rows_seen from seen group by run_id\n"
    )
    models = load_models(tmp_path)
    con = duckdb.connect(str(tmp_path / "build.duckdb"))
    con.execute(
        "create table scores as select * from (values ('a', 1.0::double), ('a', 2.0), ('b', 4.0), ('c', 8.0)) "
        "as t(run_id, score)"
    )
    run_model(con, models["totals"])
    assert sorted(con.execute("select * from totals").fetchall()) == [("a", 3.0, 4), ("b", 4.0, 4), ("c", 8.0, 4)]

    con.execute("update scores set score = 16.0 where run_id = 'b'")
    assert run_model_rows(con, models["totals"], ["b"])
    # b's total from b's row alone (4 rows seen before, 1 now); a and c kept as they were
    assert sorted(con.execute("select * from totals").fetchall()) == [("a", 3.0, 4), ("b", 16.0, 1), ("c", 8.0, 4)]
    assert con.execute("select count(*) from scores").fetchone()[0] == 4
    assert con.execute("select count(*) from duckdb_views() where temporary and not internal").fetchone()[0] == 0


def _epochs(run: Path) -> dict[int, list[Path]]:
    """A run's epoch documents by epoch number, in both layouts."""
    found: dict[int, list[Path]] = {}
    for path in sorted(run.glob("epoch_*_results.json")) + sorted(run.glob("epoch_*/results.json")):
        number = int(re.search(r"epoch_(\d+)", path.relative_to(run).as_posix()).group(1))
        found.setdefault(number, []).append(path)
    return found


def write_registry(path: Path, which: int) -> None:
    """A registry CSV giving run_a and run_b other group sizes and ablations than their names tell."""
    path.write_text(
        "run_id,group_size,ablation,fp_per_group\n"
        f"run_a,{[2, 4, 8][which % 3]},{['abl', 'other'][which % 2]},1\n"
        f"run_b,{[4, 2][which % 2]},abl,2\n"
    )


def apply_edit(release: Path, kind: str, which: int) -> None:
    """One change a training job or a person makes to a release (or to the registry beside it), to the run and
    epoch `which` picks."""
    if kind == "registry":
        write_registry(release.parent / "registry.csv", which)
        return
    if kind == "root_entry":  # an entry at the release root, there or gone: a row of file_inventory without a run
        entry = release / ["notes.txt", "dangling"][which % 2]
        if entry.is_symlink() or entry.exists():
            entry.unlink()
        elif which % 2:  # a broken link: a problem of the release, a row of ingest_errors without a run too
            entry.symlink_to(release / "no_such_target")
        else:
            entry.write_text("not a run")
        return
    runs = sorted(p for p in release.iterdir() if p.is_dir())
    if kind == "new_run" or not runs:
        name = f"run_new{len(runs)}"
        for epoch in range(1 + which % 3):
            write_epoch_file(release / name, epoch, targeted(epoch) if which % 2 else None)
        return
    run = runs[which % len(runs)]
    epochs = _epochs(run)
    if kind == "drop_run":
        shutil.rmtree(run)
        return
    layout = "folder" if any(p.name == "results.json" for ps in epochs.values() for p in ps) else "file"
    if kind == "add" or not epochs:
        write_epoch_file(run, max(epochs, default=-1) + 1, layout=layout)
        return
    epoch = sorted(epochs)[which % len(epochs)]
    path = epochs[epoch][0]
    if kind == "duplicate":  # the same epoch again, in the other layout: the more recently written copy is kept
        write_epoch_file(run, epoch, epoch_document(epoch, n=2), layout="file" if layout == "folder" else "folder")
    elif kind == "remove":
        shutil.rmtree(path.parent) if path.name == "results.json" else path.unlink()
    elif kind == "rewrite":  # one trajectory fewer, other rewards
        path.write_text(json.dumps(epoch_document(epoch, n=3) | {"rewards": [1.0, 0.5, float(which % 5)]}))
        touch_later(path)
    elif kind == "damage":
        path.write_text('{"epoch": ' + str(epoch) + ', "rewards": [0.5,')
        touch_later(path)
    elif kind == "retype":  # an extra whose type differs from epoch to epoch: kept as JSON text while it does
        phase = [1, "warm", 2.5, {"stage": which}][which % 4]
        path.write_text(json.dumps(epoch_document(epoch) | {"phase": phase, "per_traj": [phase] * 4}))
        touch_later(path)
    elif kind == "new_key":  # a per-trajectory extra and a scalar extra no document had
        path.write_text(json.dumps(epoch_document(epoch) | {"judge_score": [0.5, 1.0, 0.0, 0.25], "lr": 1e-05}))
        touch_later(path)


EDITS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "add",
                "duplicate",
                "remove",
                "rewrite",
                "damage",
                "new_key",
                "retype",
                "registry",
                "new_run",
                "drop_run",
                "root_entry",
            ]
        ),
        st.integers(0, 11),
    ),
    min_size=3,
    max_size=3,
)


# Edit sequences the property below has shown to matter, each an item of its own so that workers share them.
FOUND = [
    [("new_key", 0), ("add", 0), ("add", 4)],  # a new key in a kept run's first epoch
    [("new_key", 1), ("rewrite", 4), ("rewrite", 4)],  # and the only document with a key rewritten
    [("root_entry", 1), ("add", 0), ("root_entry", 1)],  # a release's own problem, then gone
]


@pytest.mark.slow
@pytest.mark.parametrize("edits", FOUND)
def test_edits_that_once_differed_keep_the_warehouse_as_a_build_from_scratch(build, monkeypatch, edits):
    assert_each_build_equals_one_from_scratch(build, monkeypatch, edits)


@pytest.mark.slow
# Seven builds an example: one new sequence a run, beside the three above, keeps the suite's time in bounds.
@settings(
    max_examples=1, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(edits=EDITS)
def test_after_any_edits_the_kept_warehouse_equals_a_build_from_scratch(build, monkeypatch, edits):
    """Differential: whatever changes follow one another (epochs added, removed, rewritten, damaged, duplicated in
    the other layout, new keys, keys changing type, run attributes in the registry, runs new and gone), each
    build of the kept warehouse, incremental models and all, holds what a build from scratch of the same release
    holds."""
    assert_each_build_equals_one_from_scratch(build, monkeypatch, edits)


def assert_each_build_equals_one_from_scratch(build, monkeypatch, edits: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        release, registry = root / "release", root / "registry.csv"
        write_registry(registry, 0)
        # `build --registry` sets it for the code location; restored after the test, before the file is gone
        monkeypatch.setenv(ENV_REGISTRY, str(registry))
        for epoch in range(3):
            write_epoch_file(release / "run_a", epoch, targeted(epoch))
            write_epoch_file(release / "run_b", epoch, layout="folder")
            write_epoch_file(release / "run_c", epoch)
        assert build([release], root / "wh", "--registry", str(registry)) == 0
        for step, (kind, which) in enumerate(edits):
            apply_edit(release, kind, which)
            assert build([release], root / "wh", "--registry", str(registry)) == 0
            assert build([release], root / f"fresh{step}", "--registry", str(registry)) == 0
            assert tables(root / "wh") == tables(root / f"fresh{step}"), (step, kind, which)
            assert exports(root / "wh") == exports(root / f"fresh{step}"), (step, kind, which)
