"""dim_runs: the bundled registry, --registry overrides column by column, and what run names tell."""

from pathlib import Path

import pytest

from pipelines.release.discover import RunFolder
from pipelines.release.registry import RegistryError, build_dim_runs, infer_from_name, read_registry


def runs(*names: str, release: str = "rel") -> list[RunFolder]:
    root = Path("/data") / release
    return [RunFolder(name, release, root, root / name) for name in names]


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
        ("run_id,group_size\na,8\nb,x\n", "line 3: `group_size` of run 'b' is not a whole number: 'x'"),
        ("run_id,group_size\na,8.5\n", "line 2: `group_size` of run 'a' is not a whole number: '8.5'"),
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
        (
            "run_id,arm_x\na,1\n",
            "unknown registry column(s) arm_x; known: "
            "run_id, reward_family, fp_per_group, group_size, ablation, label, arm",
        ),
    ],
)
def test_a_registry_value_no_build_can_use_is_refused_with_its_line(tmp_path, text, problem):
    registry = tmp_path / "runs[1].csv"  # a glob character in the name: read as given
    registry.write_text(text)
    with pytest.raises(RegistryError) as refused:
        read_registry(registry)
    assert str(refused.value) == f"{registry}{', ' if problem.startswith('line') else ': '}{problem}"


def test_the_edges_of_the_ranges_are_accepted(tmp_path):
    registry = tmp_path / "runs.csv"
    registry.write_text("run_id,group_size,fp_per_group\na,1,0\nb,1,1\nc,,8\n")
    assert read_registry(registry).rows() == [("a", 1, 0), ("b", 1, 1), ("c", None, 8)]
