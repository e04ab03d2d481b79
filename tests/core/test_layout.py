"""The tree's shape, read from the source with ``ast`` (nothing is imported): each layer imports
only what README's Layout table lets it, no import cycle between pypto's modules, and no module
longer than a reader can hold unless it is a table.

Imports inside functions count: a cycle hidden behind a lazy import is still two modules that
cannot be understood (or moved) one without the other.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "pypto"
MAX_LINES = 500
TABLE_MARK = "is a table"  # what a longer module's docstring says of itself


def _modules():
    """{dotted name: path} of every Python and Cython module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.pyx")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _targets(module, path, node, known):
    """The pypto modules an import statement names (the deepest that exists)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if path.stem == "__init__" else module.split(".")[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join(package + ([node.module] if node.module else []))
        # "from a import b" imports the module a.b where it is one, else a name of a
        names = [f"{base}.{alias.name}" for alias in node.names]
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            yield name


def import_graph():
    """{module: set of pypto modules it imports anywhere in its source}."""
    known = _modules()
    graph = {}
    for module, path in known.items():
        graph[module] = set()
        if path.suffix != ".py":
            continue  # Cython modules import only the standard library and cimports
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module].update(_targets(module, path, node, known))
    return graph


def cycles(graph):
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


# README's Layout table, "may import": layer -> the layers it may import. A layer is a folder
# (pypto._core) or a top-level module; "*" is anything.
PUBLIC = {"pypto", "pypto.tensor", "pypto.error", "pypto.config", "pypto.pypto_impl"}
PUBLIC |= {"pypto.frontend", "pypto.testing", "pypto.sweep", "pypto.device", "pypto.torch"}
MAY_IMPORT = {
    "pypto._dtypes": {"pypto.error"},
    "pypto._version": set(),
    "pypto.pypto_impl": {"pypto._dtypes"},
    "pypto.error": set(),
    "pypto._core": {"pypto._dtypes", "pypto.error", "pypto.tensor", "pypto.pypto_impl"},
    "pypto.tensor": {"pypto._core", "pypto._dtypes", "pypto.error"},
    "pypto.config": {"pypto.pypto_impl", "pypto._core", "pypto.error"},
    "pypto.frontend": {"pypto._core", "pypto.error", "pypto.tensor"},
    "pypto._convbp": {"pypto._core", "pypto.device", "pypto._kernels", "pypto.error"}
    | {"pypto.tensor"},
    "pypto._kernels": {"pypto._core", "pypto._dtypes", "pypto.error", "pypto._version"},
    "pypto._kernels.kernel": set(),
    "pypto._npu": {"pypto._core", "pypto._dtypes", "pypto.error", "pypto.tensor"}
    | {"pypto.pypto_impl", "pypto._version", "pypto._npu.kernel"},
    "pypto._npu.kernel": set(),
    "pypto.device": {"pypto._core", "pypto._npu", "pypto._kernels", "pypto.error"},
    "pypto._golden": {"pypto._core", "pypto._dtypes", "pypto.error", "pypto.tensor"}
    | {"pypto.pypto_impl", "pypto._version", "pypto._convbp", "pypto._kernels"},
    "pypto.testing": {"pypto._golden", "pypto.error"},
    "pypto._sweep": {"pypto._core", "pypto._dtypes", "pypto._golden", "pypto.error"}
    | {"pypto.tensor", "pypto._version"},
    "pypto.sweep": {"pypto._sweep"},
    "pypto.torch": PUBLIC
    | {"pypto._core", "pypto._dtypes", "pypto._golden", "pypto._convbp", "pypto._version"},
    "pypto": PUBLIC | {"pypto._core", "pypto._dtypes", "pypto._convbp", "pypto._version"},
    "pypto._cli": "*",
    "pypto.bench": "*",
    "pypto.__main__": "*",
}


def layer_of(module):
    """The layer of a module: its folder under pypto/ (two levels for the kernels' folders), or
    the top-level module itself."""
    parts = module.split(".")
    if len(parts) > 2 and parts[2] == "kernel" and parts[1] in ("_kernels", "_npu"):
        return ".".join(parts[:3])
    if len(parts) > 1 and ".".join(parts[:2]) in MAY_IMPORT:
        return ".".join(parts[:2])
    return module


def test_each_layer_imports_only_what_the_layout_table_allows():
    found = []
    for module, targets in import_graph().items():
        layer = layer_of(module)
        allowed = MAY_IMPORT.get(layer)
        assert allowed is not None, f"{module}: layer {layer} is missing from MAY_IMPORT"
        if allowed == "*":
            continue
        for target in sorted(targets):
            other = layer_of(target)
            if other != layer and other not in allowed:
                found.append(f"{module} imports {target}")
    assert not found, "imports the Layout table does not allow:\n" + "\n".join(found)


def test_the_graph_reader_sees_the_imports_it_must():
    """The reader resolves relative, absolute and function-level imports (else the cycle test
    below could pass on a graph with no edges)."""
    graph = import_graph()
    assert "pypto._kernels.loading" in graph["pypto._kernels.dispatch"]  # from .loading import
    assert "pypto._kernels.loading" in graph["pypto._kernels.amx"]  # inside _child_main
    assert "pypto.error" in graph["pypto._sweep.cases"]  # from ..error import FeError
    assert "pypto._golden.case" in graph["pypto._sweep.cases"]  # inside a function
    assert sum(len(targets) for targets in graph.values()) > 200


def test_cycles_are_found_when_there_are_some():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules():
    found = cycles(import_graph())
    assert not found, (
        "modules that import each other (move what both need one floor down): "
        + "; ".join(" <-> ".join(component) for component in found)
    )


def _name(path):
    return str(path.relative_to(PACKAGE.parent))


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=_name)
def test_no_module_is_longer_than_a_reader_can_hold(path):
    lines = len(path.read_text().splitlines())
    if lines <= MAX_LINES:
        return
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert TABLE_MARK in docstring, (
        f"{_name(path)} has {lines} lines (at most {MAX_LINES}): split it "
        f"by concept, or, if it is one table, say in its docstring that it {TABLE_MARK}"
    )
