"""The shape of the package (docs/architecture.md "The house"): no import circle, and every
subpackage maps its modules in its docstring.

Read from the source with ``ast``, never by importing, so a circle that only bites in one import
order is still seen.
"""

import ast
import pathlib
import re

import llm_accounts

ROOT = pathlib.Path(llm_accounts.__file__).parent
PACKAGE = ROOT.name


def modules():
    """``{dotted name: (path, is_package)}`` for every module under llm_accounts/."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


def imported_from(name, path, is_package, known):
    """The modules of ours that ``name`` imports, at the top or inside a function alike (an
    import moved into a function to dodge a circle is still that circle). A module reading a name
    from a package it lives in is left out: Python runs that package's ``__init__`` before the
    module in any import order (``ledger``'s tunables, ``DEFAULT_MODEL_ENV``)."""
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            for alias in node.names:
                whole = f"{module}.{alias.name}"
                targets.add(whole if whole in known else module)
    return {
        target for target in targets
        if target in known and target != name and not name.startswith(target + ".")
    }


def circles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back():
    known = modules()
    graph = {name: imported_from(name, path, is_package, known) for name, (path, is_package) in known.items()}
    assert circles(graph) == []


def test_two_modules_importing_each_other_are_a_circle():
    # The check of the rule above: a circle it must find is found.
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert circles(graph) == [["a", "b"]]


def test_every_subpackage_has_a_docstring_mapping_its_modules():
    unmapped = {}
    for init in sorted(ROOT.rglob("__init__.py")):
        package = init.parent
        if package == ROOT:
            continue  # the llm hook module stays thin; docs/architecture.md maps the house
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        members = {path.stem for path in package.glob("*.py") if path.stem != "__init__"}
        members |= {path.name for path in package.iterdir() if (path / "__init__.py").is_file()}
        missing = sorted(m for m in members if not re.search(rf"``{m}``|\b{m}\.py\b", doc))
        if missing:
            unmapped[str(package.relative_to(ROOT.parent))] = missing
    assert unmapped == {}


def test_the_house_map_names_every_package():
    # docs/architecture.md opens with the map of the packages.
    text = (ROOT.parent / "docs" / "architecture.md").read_text()
    house = text.split("## The house", 1)[1].split("\n## ", 1)[0]
    packages = sorted(path.parent.name for path in ROOT.glob("*/__init__.py"))
    assert [p for p in packages if f"{p}/" not in house] == []
