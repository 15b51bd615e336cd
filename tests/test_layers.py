"""The package's shape: layers you can see in the folder tree, each importing only from layers below it,
and no import cycles (imports under TYPE_CHECKING and inside functions count too)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "storelib"

#: Each layer, bottom first; a module may import from its own layer and the layers before it.
LAYERS = [
    ["storelib.model"],
    ["storelib.encoding", "storelib.local.wire"],  # the machine-local servers' wire: frames and payloads
    ["storelib.filter"],
    ["storelib.delta"],
    ["storelib.storage"],
    ["storelib.send", "storelib.local.relay", "storelib.local.landing"],  # the relay: the producers' committer
    ["storelib.context"],
    ["storelib.dispatch"],
    ["storelib.query"],
    ["storelib.consume", "storelib.local"],  # the tail server answers getMessage
    ["storelib.maintenance"],
    ["storelib.schedule"],
    ["storelib.datasource"],
    ["storelib.session"],
    ["storelib.store"],
    ["storelib.serve"],  # the gRPC endpoint: a RocketMQ 5 proxy over a store
    ["storelib.sql", "storelib.cli", "storelib.admin", "storelib.__main__", "storelib"],
]


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules ``name`` imports anywhere in its source (resolved to the module)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
                break
    return found


def layer_of(name: str) -> int:
    best, rank = -1, None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    assert rank is not None, f"{name} is in no layer: add it to LAYERS"
    return rank


GRAPH = {name: imports(name, path, set(modules())) for name, path in modules().items()}


def test_every_module_has_a_layer():
    for name in GRAPH:
        layer_of(name)


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_imports_only_from_below(name):
    above = sorted(t for t in GRAPH[name] if layer_of(t) > layer_of(name))
    assert not above, f"{name} (layer {layer_of(name)}) imports from higher layers: {above}"


def test_no_import_cycles():
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in sorted(GRAPH):
        if start not in state:
            visit(start, [start])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_nothing_below_the_handle_imports_it():
    top = tuple(LAYERS[-1])  # the handle's users: the package, SQL views, the command
    users = sorted(
        n
        for n, targets in GRAPH.items()
        if "storelib.store" in targets and not any(n == t or n.startswith(t + ".") for t in top)
    )
    assert not users


def test_import_storelib_loads_no_module_through_a_cycle():
    """``import storelib`` and its handle in a fresh interpreter: every module they load is in the acyclic graph
    above (the package's names load on first use)."""
    code = (
        "import sys, storelib; storelib.MessageStore; "
        "print('\\n'.join(m for m in sys.modules if m.startswith('storelib')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    ).stdout.split()
    assert "storelib.store" in loaded
    assert set(loaded) <= set(GRAPH)


def test_no_module_is_too_long():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 600}
    assert not long, f"modules over 600 lines: {long}"


def test_only_the_delta_layer_writes_delta_tables():
    """One commit path: nothing outside ``storelib.delta`` calls deltalake's writers or builds a predicate as text."""
    writers = {"write_deltalake", "create_write_transaction", "delete", "merge", "update"}
    found = []
    for name, path in modules().items():
        if name.startswith("storelib.delta"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("deltalake"):
                found += [f"{name} imports {a.name}" for a in node.names if a.name in writers]
            if isinstance(node, ast.keyword) and node.arg == "predicate":
                found.append(f"{name}:{node.value.lineno} passes a predicate")
            if isinstance(node, ast.Attribute) and node.attr in {"write_deltalake", "create_write_transaction"}:
                found.append(f"{name}:{node.lineno} calls {node.attr}")
    assert found == []


def _sqlglot_private_names() -> set[str]:
    """Names starting with ``_`` (dunders aside) that sqlglot's extension classes and modules define."""
    import sqlglot
    from sqlglot import exp, generator, parser, tokens
    from sqlglot.dialects import dialect

    owners = [
        parser.Parser,
        tokens.Tokenizer,
        tokens.Token,
        generator.Generator,
        dialect.Dialect,
        exp.Expr,
        sqlglot,
        parser,
        tokens,
        generator,
        dialect,
        exp,
    ]
    return {
        name
        for owner in owners
        for name in dir(owner)
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
    }


def private_sqlglot_uses(source: str) -> list[str]:
    """Where ``source`` imports a private name from sqlglot, names sqlglot's end-of-input shim, or (in a
    module that imports sqlglot) reaches for a private member of sqlglot's classes, by attribute or getattr.

    >>> private_sqlglot_uses("from sqlglot.parser import _foo\\nimport sqlglot\\nx = p._curr")
    ['line 1: from sqlglot.parser import _foo', 'line 3: ._curr']
    """
    tree = ast.parse(source)
    found = []
    uses_sqlglot = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlglot":
            uses_sqlglot = True
            names = [a.name for a in node.names]
            if any(part.startswith("_") for part in node.module.split(".") + names):  # type: ignore[union-attr]
                found.append(f"line {node.lineno}: from {node.module} import {', '.join(names)}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sqlglot":
                    uses_sqlglot = True
                    if any(part.startswith("_") for part in alias.name.split(".")):
                        found.append(f"line {node.lineno}: import {alias.name}")
    if not uses_sqlglot:
        return found
    private = _sqlglot_private_names()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (node.attr in private or node.attr == "SENTINEL_NONE"):
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in private | {"SENTINEL_NONE"}:
            found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Name) and node.id == "SENTINEL_NONE":
            found.append(f"line {node.lineno}: SENTINEL_NONE")
    return found


def test_private_sqlglot_uses_are_caught():
    assert private_sqlglot_uses(
        "from sqlglot import parser\nclass P(parser.Parser):\n    def f(self):\n"
        "        return self._match(1) or self._curr"
    )
    assert private_sqlglot_uses("import sqlglot.parser\nE = getattr(sqlglot.parser, 'SENTINEL_NONE', None)")
    assert private_sqlglot_uses("from sqlglot.tokens import _ALL_TOKENS")
    assert not private_sqlglot_uses(
        "from sqlglot import exp\nclass P:\n    def f(self):\n        return self.RANGE_PARSERS"
    )


def test_no_private_sqlglot_member_is_used():
    """sqlglot is used through its public extension points only: documented class attributes,
    public functions and classes, subclasses of its expressions."""
    found = {name: uses for name, path in modules().items() if (uses := private_sqlglot_uses(path.read_text()))}
    assert not found
