"""Every name ``storelib`` exports, and every method of the handle, shows an example that runs.

The examples themselves run as doctests (``--doctest-modules``, with ``conftest.py``'s globals);
this checks that none is missing from the public surface.
"""

from __future__ import annotations

import inspect

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
    import ast
    from pathlib import Path

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
