"""A RocketMQ 5 gRPC endpoint over a store (``storelib serve``): RocketMQ's own clients send, receive,
ack, delay and transact against it, while Spark reads the same messages as tables.

>>> from storelib.serve import Endpoint
>>> with Endpoint(store, port=0) as endpoint:
...     endpoint.port > 0
True
"""

from storelib.serve.server import Endpoint

__all__ = ["Endpoint"]
