"""The package's modules import one another without a cycle, lazy imports inside functions included."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pipelines"


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def imports_of(path: Path) -> set[str]:
    """The package modules a file imports anywhere in it: `from pipelines import x` counts as importing x."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pipelines":
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if alias.name.split(".")[0] == "pipelines"]
        found |= {name for name in names if (PACKAGE.parent / name.replace(".", "/")).with_suffix(".py").exists()}
    return found


def test_no_module_of_the_package_imports_itself_through_others():
    graph = {module_name(path): imports_of(path) for path in PACKAGE.rglob("*.py")}
    assert "pipelines.lake.runs" in graph["pipelines.build"]  # the graph sees lazy imports

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    cycles = sorted(module for module in graph if module in reachable(module))
    assert cycles == []
