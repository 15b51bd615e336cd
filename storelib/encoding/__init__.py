"""RocketMQ's encodings, one module per encoding, each with its scalar, Arrow and Column forms side by side.

Details: ``docs/internals.md``, section storelib.encoding.
"""
