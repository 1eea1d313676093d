"""Code versions: a digest of the package modules an output is made by and of the libraries that make its bytes.

An output's modules are those its making module imports, lazily or not, and what they import in turn: its import
closure inside the package, read from the source (ast), never listed by hand. A change to any of them, or a new
version of a library among them that makes bytes, changes the code version, and the output is made again.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterable
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# The libraries whose version can change the bytes the warehouse writes (Parquet files, tables, figures, pages).
BYTE_MAKERS = ("duckdb", "matplotlib", "numpy", "orjson", "polars", "pyarrow", "scipy")
# The start of an import statement at any indentation (lazy imports inside functions are indented).
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import\b|import[ \t]+\w)[^\n]*", re.MULTILINE)


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """The dotted name of a module file of the package."""
    return ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")


def module_file(name: str, package: Path = PACKAGE) -> Path | None:
    """The file of a module of the package by its dotted name (a package's __init__.py), None when there is none."""
    base = package.parent.joinpath(*name.split("."))
    return next((path for path in (base.with_suffix(".py"), base / "__init__.py") if path.is_file()), None)


def _import_statements(source: str) -> list[ast.AST]:
    """The import statements of a module, anywhere in it, parsed by ast: each on its own (every build process reads
    the package, and parsing whole modules costs ten times as much), or the whole module when one of them does not
    parse alone (a statement continued by a backslash, say)."""
    try:
        statements = []
        for match in _IMPORT.finditer(source):
            text = match.group(0)
            if "(" in text and ")" not in text:  # names in parentheses over several lines
                text = source[match.start() : source.index(")", match.end()) + 1]
            statements.append(ast.parse(text.strip()))
        return statements
    except (SyntaxError, ValueError):
        return [ast.parse(source)]


def imported_names(path: Path, package: Path = PACKAGE) -> set[str]:
    """Every module name the file's import statements name: `import a.b` names a.b; `from a import b` names a and
    a.b (b may be a module); relative imports are resolved against the file's own package."""
    name = module_name(path, package)
    own_package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = set()
    for tree in _import_statements(path.read_text()):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = own_package.rsplit(".", node.level - 1)[0] if node.level > 1 else own_package
                    base = f"{parent}.{base}".rstrip(".")
                names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def import_graph(package: Path = PACKAGE) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Each module of the package: the package modules it imports (with their parent packages, which importing a
    module runs), and the top-level names of the other modules it imports."""
    files = {module_name(path, package): path for path in sorted(package.rglob("*.py"))}
    graph = {}
    for module, path in files.items():
        inside, outside = set(), set()
        for name in imported_names(path, package):
            parts = name.split(".")
            if parts[0] != package.name:
                outside.add(parts[0])
            inside |= {".".join(parts[:end]) for end in range(1, len(parts) + 1)} & files.keys()
        graph[module] = (frozenset(inside), frozenset(outside))
    return graph


def closure(roots: Iterable[str], graph: dict[str, tuple[frozenset[str], frozenset[str]]]) -> set[str]:
    """The roots and every package module they import, directly or through others."""
    seen, todo = set(), list(roots)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ((), ()))[0])
    return seen


def package_modules(name: str, package: Path = PACKAGE) -> tuple[str, ...]:
    """The modules of a subpackage (`pipelines.lake`): its __init__ and every module under it."""
    folder = package.parent.joinpath(*name.split("."))
    return tuple(sorted(module_name(path, package) for path in folder.rglob("*.py")))


@cache
def _graph() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    return import_graph(PACKAGE)


def _library_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def code_version(
    *roots: str,
    files: Iterable[Path] = (),
    package: Path = PACKAGE,
    graph: dict[str, tuple[frozenset[str], frozenset[str]]] | None = None,
) -> str:
    """The code version of what the root modules make: a digest of each module of their closure (its name and
    source), of the given files (data the code reads, by name and content), and of the version of each library of
    BYTE_MAKERS those modules import. graph: the package's import_graph, when the caller has it."""
    if graph is None:
        graph = _graph() if package == PACKAGE else import_graph(package)
    if unknown := [root for root in roots if root not in graph]:
        raise ValueError(f"not a module of {package}: {', '.join(unknown)}")
    modules = sorted(closure(roots, graph))
    digest = hashlib.sha256()
    for module in modules:
        digest.update(f"{module}\0".encode() + module_file(module, package).read_bytes() + b"\0")
    for path in sorted(files):
        digest.update(f"{Path(path).name}\0".encode() + Path(path).read_bytes() + b"\0")
    imported = set().union(*(graph[module][1] for module in modules if module in graph))
    for library in sorted(imported.intersection(BYTE_MAKERS)):
        digest.update(f"{library}={_library_version(library)}\0".encode())
    return digest.hexdigest()[:16]
