"""The ``storelib`` command: a store's topics, groups, messages, consumers and upkeep, in mqadmin's spirit.

Details: ``docs/internals.md``, section storelib.admin.

>>> main(["group", "list", "--store", store.root, "--json"])  # doctest: +NORMALIZE_WHITESPACE
[{"group": "GroupA", "consume_enable": true, "consume_broadcast_enable": true, "retry_queue_nums": 1,
    "retry_max_times": 16}]
0
"""

from storelib.admin.command import build_parser, main

__all__ = ["main", "build_parser"]
