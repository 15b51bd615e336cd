"""Every name ``storelib`` exports, and every method of the handle, shows an example that runs.

The examples themselves run as doctests (``--doctest-modules``, with ``conftest.py``'s globals);
this checks that none is missing from the public surface.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import storelib
from storelib import MessageStore


def has_example(obj) -> bool:
    doc = inspect.getdoc(obj) or ""
    return ">>>" in doc


@pytest.mark.parametrize(
    "name",
    sorted(
        n for n in storelib.__all__ if inspect.isclass(getattr(storelib, n)) or inspect.isfunction(getattr(storelib, n))
    ),
)
def test_exported_names_have_examples(name):
    obj = getattr(storelib, name)
    module = inspect.getmodule(obj)
    assert has_example(obj) or f"{name}(" in (module.__doc__ or ""), f"storelib.{name} has no example"


@pytest.mark.parametrize("name", sorted(n for n, v in vars(MessageStore).items() if not n.startswith("_")))
def test_handle_methods_have_examples(name):
    member = vars(MessageStore)[name]
    target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
    assert has_example(target) or isinstance(member, property), f"MessageStore.{name} has no example"


def _callables_without_examples() -> list[str]:
    """Public functions, classes' public methods and properties of every module (its ``__all__``) that
    show no example: not in their own docstring, their class's, or their module's."""
    missing = []
    for path in sorted((Path(storelib.__file__).parent).rglob("*.py")):
        tree = ast.parse(path.read_text())
        module_doc = ast.get_docstring(tree) or ""
        exported = None
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                exported = set(ast.literal_eval(node.value))
        for node in tree.body:
            if node.__class__.__name__ not in ("FunctionDef", "ClassDef") or node.name.startswith("_"):
                continue
            if exported is not None and node.name not in exported:
                continue
            if isinstance(node, ast.FunctionDef):
                if ">>>" not in (ast.get_docstring(node) or "") and f"{node.name}(" not in module_doc:
                    missing.append(f"{path.name}:{node.name}")
                continue
            class_doc = ast.get_docstring(node) or ""
            for member in node.body:
                if isinstance(member, ast.FunctionDef) and not member.name.startswith("_"):
                    if (
                        ">>>" not in (ast.get_docstring(member) or "")
                        and ">>>" not in class_doc
                        and f".{member.name}" not in module_doc
                    ):
                        missing.append(f"{path.name}:{node.name}.{member.name}")
    return missing


def test_every_public_callable_of_the_library_has_an_example():
    assert _callables_without_examples() == []


def test_the_lazy_exports_are_the_type_checkers_imports():
    """``storelib`` imports its public names on first use; the imports type checkers see name the same
    ones, from the same modules."""
    tree = ast.parse(open(storelib.__file__).read())
    guarded = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {alias.name: node.module for node in guarded.body for alias in node.names}
    assert seen == storelib._HOMES
    assert sorted(storelib.__all__) == sorted(["StoreError", *seen])


def test_importing_one_layer_does_not_import_the_handle():
    """A Spark worker that reads a stream imports the data source, not the whole library."""
    code = (
        "import sys, storelib.datasource.stream; "
        "print('storelib.store' in sys.modules, 'storelib.consume.pop' in sys.modules)"
    )
    root = Path(storelib.__file__).parent.parent
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    ).stdout.split()
    assert out == ["False", "False"]
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        storelib.Nothing  # noqa: B018
