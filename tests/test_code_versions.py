"""What is made again after a code change is derived from the code: each output's code version follows the package
modules its making module imports (their closure), and nothing else; a changed code version really makes the output
again, and an unchanged one keeps it."""

import hashlib
import modulefinder
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_epoch_file

from pipelines import code_versions
from pipelines.code_versions import PACKAGE, code_version, import_graph, module_name
from pipelines.exports.explorer import ASSETS, library_versions
from pipelines.models import load_models

ROOT = PACKAGE.parent
EXPLORER_FILES = sorted(ASSETS.iterdir())
# Each output the warehouse keeps from one build to the next, and the modules that make it (with data files they read).
OUTPUTS = {
    "lake partitions": (tuple(module_name(p) for p in sorted((PACKAGE / "lake").glob("*.py"))), ()),
    "release tables": (("pipelines.defs.ingest.assets",), ()),
    "lake views": (("pipelines.warehouse_db",), ()),
    "models": (("pipelines.defs.models.assets",), ()),
    "checks": (("pipelines.defs.models.checks",), ()),
    "exports": (("pipelines.defs.exports.assets",), EXPLORER_FILES),
    "figures": (("pipelines.defs.exports.figures",), ()),
    "paper tables": (("pipelines.defs.exports.paper_tables",), ()),
    "sensor cursor": (("pipelines.defs.ingest.sensors",), ()),
}


def found_by_modulefinder(roots: tuple[str, ...]) -> tuple[set[str], set[str]]:
    """A second reading of what the roots import, from their bytecode (modulefinder, lazy imports included): the
    package modules, and the top-level names of the libraries they import."""
    modules, libraries = set(roots), set()
    for root in roots:
        finder = modulefinder.ModuleFinder(path=[str(ROOT)])  # the package only: other modules are not found
        base = ROOT.joinpath(*root.split("."))
        finder.run_script(str(base / "__init__.py" if base.is_dir() else base.with_suffix(".py")))
        modules |= {name for name in finder.modules if name.split(".")[0] == "pipelines"}
        libraries |= {name.split(".")[0] for name in finder.badmodules}
    return modules, libraries


@pytest.fixture(scope="module")
def expected() -> dict[str, tuple[set[str], set[str]]]:
    return {output: found_by_modulefinder(roots) for output, (roots, _) in OUTPUTS.items()}


def test_each_closure_is_the_one_a_second_reading_finds(expected):
    graph = import_graph()
    for output, (roots, _) in OUTPUTS.items():
        assert code_versions.closure(roots, graph) == expected[output][0], output
    assert "pipelines.release.objects" in expected["lake partitions"][0]  # imported inside a function only
    assert "pipelines.exports.figure" not in expected["models"][0]


def test_each_output_carries_the_code_version_of_what_makes_it():
    from pipelines.definitions import build_definitions
    from pipelines.defs.exports import assets as exports
    from pipelines.defs.exports.figures import FIGURES_CODE
    from pipelines.defs.exports.paper_tables import PAPER_CODE
    from pipelines.defs.ingest.assets import RUN_TABLES
    from pipelines.defs.ingest.sensors import CURSOR_FORMAT
    from pipelines.defs.models import checks
    from pipelines.defs.models.assets import MODELS, MODELS_CODE
    from pipelines.defs.resources import WarehouseConfig
    from pipelines.lake.manifest import lake_version
    from pipelines.warehouse_db import VIEWS_VERSION

    versions = {output: code_version(*roots, files=files) for output, (roots, files) in OUTPUTS.items()}
    assert lake_version() == versions["lake partitions"]
    assert VIEWS_VERSION == versions["lake views"]
    assert MODELS_CODE == versions["models"]
    assert checks.CODE_VERSION == versions["checks"]
    assert CURSOR_FORMAT == versions["sensor cursor"]
    assert PAPER_CODE == versions["paper tables"]
    assert FIGURES_CODE == versions["figures"]
    made_with = f"{versions['exports']} {library_versions()}"
    assert exports.CODE_VERSION == hashlib.sha256(made_with.encode()).hexdigest()[:16]
    graph = build_definitions(WarehouseConfig()).resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        name, node = key.path[-1], graph.get(key)
        assert node.code_version, f"{name}: no code version; give it code_versions.code_version of its module"
        if key.path[0] == "lake":
            assert node.code_version == versions["lake partitions" if name in RUN_TABLES else "release tables"]
        elif name == "paper_tables":
            assert node.code_version == PAPER_CODE
        elif name == "ablation_figures":
            assert node.code_version == FIGURES_CODE
        elif node.group_name == "exports" and name != "warehouse_duckdb":
            assert node.code_version == exports.CODE_VERSION, name
        else:
            assert node.code_version == (MODELS[name].code_version(MODELS_CODE) if name in MODELS else MODELS_CODE)


def test_a_change_to_any_module_changes_the_code_version_of_what_it_makes_and_nothing_else(tmp_path, expected):
    """Each module of the package in turn gets a statement that does nothing, in a copy of the package: the outputs
    whose code version moves are exactly those whose making module imports it, directly or not (modulefinder's
    reading); so for the explorer's style and script."""
    copy = tmp_path / "pipelines"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))

    def versions() -> dict[str, str]:
        graph = import_graph(copy)
        return {
            output: code_version(
                *roots, files=[copy / f.relative_to(PACKAGE) for f in files], package=copy, graph=graph
            )
            for output, (roots, files) in OUTPUTS.items()
        }

    before = versions()
    changed_by = {}
    for path in sorted(copy.rglob("*.py")) + [copy / f.relative_to(PACKAGE) for f in EXPLORER_FILES]:
        original = path.read_bytes()
        path.write_bytes(original + (b"\npass\n" if path.suffix == ".py" else b"\n/* */\n"))
        after = versions()
        path.write_bytes(original)
        changed_by[path] = {output for output in OUTPUTS if after[output] != before[output]}
    assert len(changed_by) > 50
    for path, changed in changed_by.items():
        if path.suffix == ".py":
            module = module_name(path, copy)
            assert changed == {output for output in OUTPUTS if module in expected[output][0]}, module
        else:
            assert changed == {"exports"}, path.name
    assert changed_by[copy / "release" / "flatten.py"] >= {"lake partitions", "models", "exports"}
    assert changed_by[copy / "exports" / "figure.py"] == {"exports", "figures", "paper tables"}
    assert changed_by[copy / "cli.py"] == set()


def test_a_new_version_of_a_library_changes_what_its_importers_make(monkeypatch, expected):
    before = {output: code_version(*roots, files=files) for output, (roots, files) in OUTPUTS.items()}
    real = code_versions._library_version
    monkeypatch.setattr(code_versions, "_library_version", lambda name: "9.9" if name == "matplotlib" else real(name))
    after = {output: code_version(*roots, files=files) for output, (roots, files) in OUTPUTS.items()}
    changed = {output for output in OUTPUTS if after[output] != before[output]}
    assert changed == {output for output in OUTPUTS if "matplotlib" in expected[output][1]}
    assert changed == {"exports", "figures", "paper tables"}


def test_a_change_to_a_models_sql_changes_its_code_version_alone(tmp_path):
    from pipelines.defs.models.assets import MODELS, MODELS_CODE
    from pipelines.warehouse_db import LAKE_VIEWS

    shutil.copytree(ROOT / "sql", tmp_path / "sql")
    (tmp_path / "sql" / "marts" / "snapshots.sql").write_text(MODELS["snapshots"].sql + "\n-- a comment\n")
    edited = load_models(tmp_path / "sql", frozenset(LAKE_VIEWS))
    changed = {
        name for name in MODELS if edited[name].code_version(MODELS_CODE) != MODELS[name].code_version(MODELS_CODE)
    }
    assert changed == {"snapshots"}


def build_in(tree: Path, release: Path, warehouse: Path) -> str:
    """`grpo-warehouse build` run by the code of a copy of the package; its output."""
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "build", "--release", str(release), "--warehouse", str(warehouse)]
        + ["--workers", "1"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "HOME": str(tree)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def parsed(output: str) -> int:
    return sum(int(files) for files in re.findall(r"(\d+) file\(s\) parsed", output))


@pytest.mark.slow
def test_a_changed_code_version_makes_again_and_an_unchanged_one_keeps(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(PACKAGE, tree / "pipelines", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "sql", tree / "sql")
    shutil.copy(ROOT / "pyproject.toml", tree)
    for run in ("run_a", "run_b"):
        for epoch in range(3):
            write_epoch_file(tmp_path / "release" / run, epoch)
    first = build_in(tree, tmp_path / "release", tmp_path / "wh")
    assert parsed(first) == 6

    # A figure module changed: the lake and the tables are kept, the figures are drawn again.
    with (tree / "pipelines" / "exports" / "figure.py").open("a") as figure:
        figure.write("\npass\n")
    second = build_in(tree, tmp_path / "release", tmp_path / "wh")
    assert parsed(second) == 0 and "nothing to ingest" in second
    assert re.search(r"^  sql_models +fact_epochs: 6 rows \(inputs unchanged, table kept\)$", second, re.MULTILINE)
    assert re.search(r"^  ablation_figures +1 ablation\(s\), 1 drawn", second, re.MULTILINE)

    # The decoder changed: every file is parsed again, and every table made again.
    with (tree / "pipelines" / "release" / "decode.py").open("a") as decode:
        decode.write("\npass\n")
    third = build_in(tree, tmp_path / "release", tmp_path / "wh")
    assert parsed(third) == 6
    assert "table kept" not in third
