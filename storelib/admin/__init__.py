"""The ``storelib`` command: a store's topics, groups, messages, consumers and upkeep, in mqadmin's spirit.

Installed as a console script (``storelib``) and runnable as ``python -m storelib``::

    storelib topic create Orders --queues 8 --store /data/store
    storelib send Orders --tags TagA --keys order-1 --body '{"id": 1}' --store /data/store
    storelib dispatch --store /data/store
    storelib query key Orders order-1 --store /data/store
    storelib pull GroupA Orders 0 --store /data/store --json
    storelib consumer progress GroupA --store /data/store

One module per group of verbs (:mod:`~storelib.admin.topics`, :mod:`~storelib.admin.messages`,
:mod:`~storelib.admin.consumers`, :mod:`~storelib.admin.upkeep`), the parser and run loop in
:mod:`~storelib.admin.command`, tables and JSON in :mod:`~storelib.admin.output`.

>>> main(["group", "list", "--store", store.root, "--json"])  # doctest: +NORMALIZE_WHITESPACE
[{"group": "GroupA", "consume_enable": true, "consume_broadcast_enable": true, "retry_queue_nums": 1,
    "retry_max_times": 16}]
0
"""

from storelib.admin.command import build_parser, main

__all__ = ["main", "build_parser"]
