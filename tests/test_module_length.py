"""Modules of the package and the benchmark harness stay at 600 lines or under: a longer one is split by concern."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = (ROOT / "pipelines", ROOT / "benchmarks")
LIMIT = 600


def long_modules(paths) -> list[str]:
    return [f"{path}: {n} lines" for path in paths if (n := len(path.read_text().splitlines())) > LIMIT]


def test_no_module_is_over_600_lines():
    paths = sorted(path for folder in FOLDERS for path in folder.rglob("*.py"))
    assert len(paths) > 10 and long_modules(paths) == []


def test_a_module_over_the_limit_is_found(tmp_path):
    for name, lines in (("at_limit.py", LIMIT), ("over.py", LIMIT + 1)):
        (tmp_path / name).write_text("".join(f"x{i} = {i}\n" for i in range(lines)))
    assert [found.split(":")[0] for found in long_modules(sorted(tmp_path.glob("*.py")))] == [str(tmp_path / "over.py")]
