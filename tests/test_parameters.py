"""Each setting and parameter is declared once (pipelines/parameters.py): the resource's fields, their checks, the
variables, the names `build --param` takes, the names the SQL reads and the docs tables all follow from it."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_epoch_file

from pipelines.build import BuildError, _parameters
from pipelines.defs.models.assets import MODELS
from pipelines.defs.resources import WarehouseConfig
from pipelines.models import SQL_DIR, ModelError, load_models
from pipelines.parameters import DECLARED, PARAMETERS, with_docs_tables
from pipelines.settings import ENVIRONMENT, ConfigError

ROOT = Path(__file__).resolve().parent.parent
CONFIGURATION = ROOT / "docs" / "configuration.md"
_READ = re.compile(r"getvariable\s*\(\s*'([^']*)'\s*\)", re.IGNORECASE)


def names_read(path: Path) -> set[str]:
    """The getvariable names of a SQL file, its comments left out (a second reading, by regular expression)."""
    code = "\n".join(line.split("--")[0] for line in path.read_text().splitlines())
    return set(_READ.findall(code))


def test_every_name_the_sql_reads_is_a_declared_parameter():
    read_by_macros = names_read(SQL_DIR / "functions.sql")
    for model in MODELS.values():
        assert set(model.parameters) == names_read(model.path) | read_by_macros, model.name
    read = set().union(*(model.parameters for model in MODELS.values()))
    assert read <= set(PARAMETERS) and {"ci_method", "final_window", "ema_weight"} <= read


def test_a_model_reading_an_undeclared_name_is_refused_naming_its_file(tmp_path):
    (tmp_path / "marts").mkdir()
    (tmp_path / "marts" / "windowed.sql").write_text(
        "-- getvariable('in_a_comment')\nselect getvariable('final_window') as w\n"
    )
    assert load_models(tmp_path)["windowed"].parameters == ("final_window",)
    (tmp_path / "marts" / "windowed.sql").write_text("select getvariable('finall_window') as w\n")
    with pytest.raises(
        ModelError, match=r"windowed\.sql: reads getvariable\('finall_window'\), which is not a parameter"
    ):
        load_models(tmp_path)
    (tmp_path / "marts" / "windowed.sql").write_text("select getvariable('final_' || 'window') as w\n")
    with pytest.raises(ModelError, match=r"windowed\.sql: getvariable takes a parameter's name in quotes"):
        load_models(tmp_path)


def test_a_build_whose_sql_reads_an_undeclared_name_is_refused_on_one_line(tmp_path):
    """In a copy of the package and its models, one model reading a misspelt parameter: the build stops before any
    table is made, naming the file and the name, where DuckDB would have read NULL."""
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "pipelines", tree / "pipelines", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(SQL_DIR, tree / "sql")
    shutil.copy(ROOT / "pyproject.toml", tree)
    snapshots = tree / "sql" / "marts" / "snapshots.sql"
    snapshots.write_text(
        snapshots.read_text().replace("getvariable('snapshot_model_prefix')", "getvariable('snapshot_prefix')")
    )
    write_epoch_file(tmp_path / "release" / "run_a", 0)
    argv = ["build", "--release", str(tmp_path / "release"), "--warehouse", str(tmp_path / "wh")]
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; from pipelines.cli import main; sys.exit(main({argv!r}))"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr
        == f"grpo-warehouse build: {snapshots}: reads getvariable('snapshot_prefix'), which is not a parameter "
        f"(pipelines/parameters.py declares them: {', '.join(PARAMETERS)})\n"
    )
    assert not (tmp_path / "wh" / "warehouse.duckdb").exists()


def test_each_declaration_is_a_field_of_the_resource_with_its_default():
    fields = WarehouseConfig.model_fields
    assert set(fields) == set(DECLARED) | {"remove_releases"}
    defaults = WarehouseConfig()
    for name, declared in DECLARED.items():
        expected = list(declared.default) if isinstance(declared.default, tuple) else declared.default
        assert getattr(defaults, name) == expected, name
        assert fields[name].description == declared.what
    assert defaults.metric_parameters() == {name: getattr(defaults, name) for name in PARAMETERS}


def test_a_setting_has_a_variable_or_is_a_parameter_never_both():
    assert {field for field, _ in ENVIRONMENT.values()} | set(PARAMETERS) == set(DECLARED)
    assert not {field for field, _ in ENVIRONMENT.values()} & set(PARAMETERS)
    assert _parameters([f"{name}=1" for name in PARAMETERS]).keys() == set(PARAMETERS)
    with pytest.raises(BuildError, match="--param workers: not a parameter"):
        _parameters(["workers=2"])
    assert WarehouseConfig.from_env({"GRPO_SENSOR_INTERVAL": "7", "GRPO_RELEASES": "/a:s3://b/c"}).releases == [
        "/a",
        "s3://b/c",
    ]


@pytest.mark.parametrize("name", [name for name, p in DECLARED.items() if p.low is not None])
def test_a_value_past_a_declared_bound_is_refused_naming_the_setting(name):
    declared = DECLARED[name]
    step = 1 if isinstance(declared.default, int) else 1e-9
    below = type(declared.default)(declared.low - step)
    with pytest.raises(ConfigError, match=rf"^{name}\b.* must be .*, not {re.escape(str(below))}$"):
        WarehouseConfig(**{name: below}).check()
    if declared.high is not None:
        beyond = type(declared.default)(declared.high if declared.below_high else declared.high + step)
        with pytest.raises(ConfigError, match=rf"^{name} must be .*, not {re.escape(str(beyond))}$"):
            WarehouseConfig(**{name: beyond}).check()
    # the bound itself is allowed, with the other parameters its rule reads at values that allow it
    WarehouseConfig(**{name: type(declared.default)(declared.low), **ALLOWING.get(name, {})}).check()


# A parameter whose least value is allowed only beside these values of others.
ALLOWING = {"ci_fit_epochs": {"final_window": 5}, "bootstrap_reps": {"ci_level": 0.5}}


def test_the_docs_tables_are_made_from_the_declarations():
    text = CONFIGURATION.read_text()
    assert text.count("<!-- generated: ") == 2
    assert with_docs_tables(text) == text, "run: python -m pipelines.parameters docs/configuration.md"
    for name, declared in DECLARED.items():
        row = f"| `{declared.variable}` |" if declared.variable else f"| `{name}` |"
        assert text.count(row) == 1, name
