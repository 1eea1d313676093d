"""The package's modules import one another without a cycle, lazy imports inside functions included."""

from pipelines.code_versions import PACKAGE, closure, import_graph


def test_no_module_of_the_package_imports_itself_through_others():
    graph = import_graph(PACKAGE)
    assert "pipelines.lake.runs" in graph["pipelines.build"][0]  # the graph sees lazy imports

    cycles = sorted(module for module in graph if module in closure(graph[module][0], graph))
    assert cycles == []
