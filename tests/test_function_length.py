"""Functions of the package and the benchmark harness stay under 60 lines, or say why beside them in a
`# Over 60 lines: ...` comment line."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = (ROOT / "pipelines", ROOT / "benchmarks")
LIMIT = 60
REASON = "# Over 60 lines:"


def long_functions_without_a_reason(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > LIMIT:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])  # 1-based: the line above is start-2
            if start < 2 or not lines[start - 2].strip().startswith(REASON):
                found.append(f"{path}:{node.lineno} {node.name}")
    return found


def test_every_function_over_60_lines_says_why():
    paths = sorted(path for folder in FOLDERS for path in folder.rglob("*.py"))
    assert len(paths) > 10 and [f for path in paths for f in long_functions_without_a_reason(path)] == []


def test_a_long_function_without_its_reason_is_found(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n")
    (tmp_path / "said.py").write_text(f"{REASON} a reason.\ndef long():\n{body}\n")
    (tmp_path / "short.py").write_text("def short():\n    return 1\n")
    found = {path.name: long_functions_without_a_reason(path) for path in sorted(tmp_path.glob("*.py"))}
    assert {name: len(f) for name, f in found.items()} == {"long.py": 1, "said.py": 0, "short.py": 0}
