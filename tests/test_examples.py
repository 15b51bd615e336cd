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


@pytest.mark.parametrize("name", sorted(n for n in storelib.__all__ if inspect.isclass(getattr(storelib, n))
                                        or inspect.isfunction(getattr(storelib, n))))
def test_exported_names_have_examples(name):
    obj = getattr(storelib, name)
    module = inspect.getmodule(obj)
    assert has_example(obj) or f"{name}(" in (module.__doc__ or ""), f"storelib.{name} has no example"


@pytest.mark.parametrize("name", sorted(n for n, v in vars(MessageStore).items() if not n.startswith("_")))
def test_handle_methods_have_examples(name):
    member = vars(MessageStore)[name]
    target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
    assert has_example(target) or isinstance(member, property), f"MessageStore.{name} has no example"
