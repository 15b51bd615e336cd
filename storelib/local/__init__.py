"""Machine-local servers: one process of a machine serves the others of the same user over a Unix socket.

:mod:`~storelib.local.wire` is the one wire they share (frames, addresses, the peer check, payloads, the
server loop and the client); :mod:`~storelib.local.relay` is the machine's committer of producers' sends,
and :mod:`~storelib.local.tail` the follower's answers to consumers' pulls of the queues' tails. Nothing
depends on a server being there: without one, each process does the work itself.
"""
