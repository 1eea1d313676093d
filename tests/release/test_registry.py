"""dim_runs: the bundled registry, --registry overrides column by column, and what run names tell."""

from pathlib import Path

import polars as pl
import pytest

from pipelines.release.discover import RunFolder
from pipelines.release.registry import (
    RegistryError,
    build_dim_runs,
    infer_from_name,
    read_registry,
    seed_of,
    unmatched_registry_rows,
)
from pipelines.release.sample import RUN_SPECS, release_name, run_name


def runs(*names: str, release: str = "rel") -> list[RunFolder]:
    root = Path("/data") / release
    return [RunFolder(name, release, root, root / name) for name in names]


def by_run(dim, column: str) -> dict:
    return dict(zip(dim["run_id"], dim[column], strict=True))


def test_bundled_rows_for_the_published_runs():
    dim = build_dim_runs(runs("mt3_2f_grpo_mt_v3_2fp", "binary_v1_grpo_binary_v1_bs64", release="r"))
    rows = {r["run_id"]: r for r in dim.to_dicts()}
    assert rows["mt3_2f_grpo_mt_v3_2fp"] | {} == {
        "run_id": "mt3_2f_grpo_mt_v3_2fp",
        "release": "r",
        "reward_family": "intragroup_pairwise",
        "fp_per_group": 2,
        "group_size": 8,
        "ablation": "multi_target",
        "label": "PV2 intragroup pairwise, 2/8 FP",
        "arm": "mt3_2f_grpo_mt_v3_2fp",
        "baseline": False,
        "release_root": "/data/r",
    }
    assert rows["binary_v1_grpo_binary_v1_bs64"]["reward_family"] == "binary"
    assert rows["binary_v1_grpo_binary_v1_bs64"]["fp_per_group"] is None  # not published


@pytest.mark.parametrize(
    "name, family, fp",
    [
        ("new_run_4fp", None, 4),
        ("x_pw_1fp", "iterative_pairwise", 1),
        ("binary2_bs32", "binary", None),
        ("something_else", None, None),
        ("my4fpx", None, None),  # `4fp` only counts as a whole name part
    ],
)
def test_name_inference(name, family, fp):
    assert infer_from_name(name) == {"reward_family": family, "fp_per_group": fp}


def test_unknown_run_gets_inferred_values_and_defaults_never_a_failure():
    (row,) = build_dim_runs(runs("new_run_4fp", release="fresh")).to_dicts()
    assert (row["reward_family"], row["fp_per_group"], row["group_size"], row["ablation"], row["label"]) == (
        None,
        4,
        8,
        "fresh",
        "new_run_4fp",
    )


def test_registry_overrides_column_by_column(tmp_path):
    registry = tmp_path / "runs.csv"
    registry.write_text(
        "run_id,fp_per_group,label,group_size\n"
        "mt3_2f_grpo_mt_v3_2fp,3,My label,\n"  # an empty cell keeps what was there
        "new_run_4fp,,Fresh,16\n"
    )
    dim = build_dim_runs(runs("mt3_2f_grpo_mt_v3_2fp", "new_run_4fp"), [registry])
    rows = {r["run_id"]: r for r in dim.to_dicts()}
    published = rows["mt3_2f_grpo_mt_v3_2fp"]
    assert (published["fp_per_group"], published["label"], published["group_size"]) == (3, "My label", 8)
    assert (published["reward_family"], published["ablation"]) == ("intragroup_pairwise", "multi_target")
    fresh = rows["new_run_4fp"]
    assert (fresh["fp_per_group"], fresh["label"], fresh["group_size"], fresh["ablation"]) == (4, "Fresh", 16, "rel")


def test_registry_rows_for_runs_not_present_are_ignored(tmp_path):
    registry = tmp_path / "runs.csv"
    registry.write_text("run_id,label\nnot_here,X\n")
    assert build_dim_runs(runs("a"), [registry])["run_id"].to_list() == ["a"]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("label\nx\n", "no `run_id` column"),
        ("run_id,colour\na,red\n", "unknown registry column"),
        ("run_id,label\na,x\na,y\n", "listed twice"),
        ("run_id,fp_per_group\na,two\n", "not a whole number"),
    ],
)
def test_malformed_registry_gives_a_clear_error(tmp_path, text, fragment):
    registry = tmp_path / "bad.csv"
    registry.write_text(text)
    with pytest.raises(RegistryError, match=fragment) as info:
        read_registry(registry)
    assert str(registry) in str(info.value)


def test_a_registry_groups_seeds_into_arms(tmp_path):
    registry = tmp_path / "seeds.csv"
    registry.write_text("run_id,ablation,arm\nbase,abl,config\nbase_s001,abl,config\n")
    dim = build_dim_runs(runs("base", "base_s001", "other"), [registry])
    assert dict(zip(dim["run_id"], dim["arm"], strict=True)) == {
        "base": "config",
        "base_s001": "config",
        "other": "other",
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("run_id,group_size\na,8\nb,x\n", "line 3: `group_size` of run 'b' is not a whole number of 64 bits: 'x'"),
        ("run_id,group_size\na,8.5\n", "line 2: `group_size` of run 'a' is not a whole number of 64 bits: '8.5'"),
        (
            f"run_id,group_size\na,{2**64}\n",
            f"line 2: `group_size` of run 'a' is not a whole number of 64 bits: '{2**64}'",
        ),
        ("run_id,arm,run_id\na,x,b\n", "column(s) run_id appear more than once in the header"),
        ("run_id,arm\na,x\n".encode("utf-16"), "the registry is UTF-16 or UTF-32 text; save it as UTF-8"),
        ("run_id,group_size\na,0\n", "line 2: `group_size` of run 'a' must be 1 or more, not 0"),
        ("run_id,group_size\na,-4\n", "line 2: `group_size` of run 'a' must be 1 or more, not -4"),
        (
            "run_id,group_size,fp_per_group\na,4,4\nb,4,5\n",
            "line 3: `fp_per_group` of run 'b' must be from 0 to its group size, 4, not 5",
        ),
        ("run_id,fp_per_group\na,9\n", "line 2: `fp_per_group` of run 'a' must be from 0 to its group size, 8, not 9"),
        (
            "run_id,fp_per_group\na,-1\n",
            "line 2: `fp_per_group` of run 'a' must be from 0 to its group size, 8, not -1",
        ),
        ("run_id,label\na,x\nb,y\na,z\n", "line 4: run 'a' is listed twice (this is its second line)"),
        ("run_id,label\n,x\n", "line 2: no run_id"),
        ("run_id,baseline\na,yes\nb,maybe\n", "line 3: `baseline` of run 'b' is not true or false: 'maybe'"),
        (
            "run_id,arm_x\na,1\n",
            "unknown registry column(s) arm_x; known: "
            "run_id, reward_family, fp_per_group, group_size, ablation, label, arm, baseline",
        ),
    ],
)
def test_a_registry_value_no_build_can_use_is_refused_with_its_line(tmp_path, text, problem):
    registry = tmp_path / "runs[1].csv"  # a glob character in the name: read as given
    registry.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(RegistryError) as refused:
        read_registry(registry)
    assert str(refused.value) == f"{registry}{', ' if problem.startswith('line') else ': '}{problem}"


def test_the_edges_of_the_ranges_are_accepted(tmp_path):
    registry = tmp_path / "runs.csv"
    registry.write_text("run_id,group_size,fp_per_group\na,1,0\nb,1,1\nc,,8\n")
    assert read_registry(registry).rows() == [("a", 1, 0), ("b", 1, 1), ("c", None, 8)]


@pytest.mark.parametrize(
    ("name", "config", "seed"),
    [
        ("run_s1", "run", 1),
        ("run_s001", "run", 1),
        ("run-s12", "run", 12),
        ("run_seed3", "run", 3),
        ("run-seed3", "run", 3),
        ("run_seed_3", "run", 3),
        ("run-Seed-4", "run", 4),
        ("RUN_S5", "RUN", 5),
        ("a_s1_s2", "a_s1", 2),  # only the last suffix
        ("binary_v1_bs64", "binary_v1_bs64", None),  # `bs64` is not `_s64`
        ("run_seeds1", "run_seeds1", None),
        ("run_s_3", "run_s_3", None),
        ("run_s", "run_s", None),
        ("run.s1", "run.s1", None),
        ("_s1", "_s1", None),  # nothing before the suffix: no configuration to be a seed of
        ("s1", "s1", None),
    ],
)
def test_seed_suffixes(name, config, seed):
    assert seed_of(name) == (config, seed)


def sample_runs(scale: int) -> list[RunFolder]:
    """The run folders `grpo-warehouse sample --scale K` writes, each in its replicate's release folder."""
    return [
        RunFolder(run_name(spec.run_id, k), release_name(spec.release, k), Path("/s"), Path("/s") / "x")
        for k in range(scale)
        for spec in RUN_SPECS
    ]


def test_the_sample_at_scale_10_is_two_ablations_of_configurations_with_ten_seeds():
    dim = build_dim_runs(sample_runs(10))
    arms = dim.group_by("ablation", "arm").len().sort("ablation", "arm").rows()
    assert arms == [
        ("binary_baseline", "binary_v1_grpo_binary_v1_bs64", 10),
        ("multi_target", "mt3_2f_grpo_mt_v3_2fp", 10),
        ("multi_target", "mt3_4f_grpo_mt_v3_4fp", 10),
        ("multi_target", "mt3p1f_grpo_mt_v3_pw_1fp", 10),
        ("multi_target", "mt3p4f_grpo_mt_v3_pw_4fp", 10),
    ]
    seed_7 = dim.filter(pl.col("run_id") == "mt3_4f_grpo_mt_v3_4fp_s007").row(0, named=True)
    # the configuration's registry row, its label marked with the seed
    assert (seed_7["reward_family"], seed_7["fp_per_group"], seed_7["label"]) == (
        "intragroup_pairwise",
        4,
        "PV2 intragroup pairwise, 4/8 FP · seed 7",
    )
    assert dim["label"].n_unique() == 50


def test_seeds_without_a_registry_are_one_arm_in_their_ablation():
    dim = build_dim_runs(
        runs("lr3_seed_1", "lr3_seed_2", "lr4-s1", release="sweep")
        + runs("lr3_seed_3", release="sweep_s002")  # a replicate's release folder: the same ablation
        + runs("lr3_seed_0", release="elsewhere")  # another folder: its configuration's ablation, the first run's
        + runs("solo", release="sweep")
    )
    assert by_run(dim, "arm") == {
        "lr3_seed_0": "lr3",
        "lr3_seed_1": "lr3",
        "lr3_seed_2": "lr3",
        "lr3_seed_3": "lr3",
        "lr4-s1": "lr4",
        "solo": "solo",
    }
    assert by_run(dim, "ablation") == {
        "lr3_seed_0": "elsewhere",
        "lr3_seed_1": "elsewhere",
        "lr3_seed_2": "elsewhere",
        "lr3_seed_3": "elsewhere",
        "lr4-s1": "sweep",
        "solo": "sweep",
    }
    assert by_run(dim, "label")["lr3_seed_2"] == "lr3_seed_2"  # no registry label to mark


def test_a_registry_overrides_the_seed_rule(tmp_path):
    registry = tmp_path / "runs.csv"
    registry.write_text(
        "run_id,arm,ablation,label\n"
        "cfg,,abl,Config\n"  # the configuration's row: every seed of it
        "cfg_s2,,,Second\n"  # a seed's own row wins over its configuration's
        "stage_s1,stage_s1,,\n"  # `_s1` is a stage here, not a seed: its own arm
    )
    dim = build_dim_runs(runs("cfg", "cfg_s1", "cfg_s2", "stage_s1", "stage_s2"), [registry])
    assert by_run(dim, "arm") == {
        "cfg": "cfg",
        "cfg_s1": "cfg",
        "cfg_s2": "cfg",
        "stage_s1": "stage_s1",
        "stage_s2": "stage",
    }
    assert by_run(dim, "label") == {
        "cfg": "Config",
        "cfg_s1": "Config · seed 1",
        "cfg_s2": "Second",
        "stage_s1": "stage_s1",
        "stage_s2": "stage_s2",
    }
    assert set(by_run(dim, "ablation").items()) == {
        ("cfg", "abl"),
        ("cfg_s1", "abl"),
        ("cfg_s2", "abl"),
        ("stage_s1", "rel"),
        ("stage_s2", "rel"),
    }


def test_a_registry_marks_a_configuration_as_its_ablations_baseline(tmp_path):
    registry = tmp_path / "runs.csv"
    # a configuration's row marks every seed of it; any case of true/false, yes/no, 1/0; unsaid: false
    registry.write_text("run_id,baseline\ncfg,True\nsolo,no\nother_s1,1\n")
    dim = build_dim_runs(runs("cfg", "cfg_s1", "cfg_s2", "solo", "other_s1", "other_s2", "plain"), [registry])
    assert by_run(dim, "baseline") == {
        "cfg": True,
        "cfg_s1": True,
        "cfg_s2": True,
        "solo": False,
        "other_s1": True,  # a seed's own row marks that seed only
        "other_s2": False,
        "plain": False,
    }


def test_registry_rows_naming_no_run_are_reported_with_their_line(tmp_path):
    registry = tmp_path / "runs.csv"
    registry.write_text("run_id,label\nbase,B\ntypo_run,X\nbase_s9,Nine\nbase_s1,One\n")
    problems = unmatched_registry_rows(runs("base_s1", "base_s2"), [registry])
    # `base` is no run but the configuration of two: used; base_s9 is neither
    assert problems == [
        f"{registry}, line 3: run 'typo_run' is not in any release (nor a configuration whose seeds are); "
        "the row is not used",
        f"{registry}, line 4: run 'base_s9' is not in any release (nor a configuration whose seeds are); "
        "the row is not used",
    ]
