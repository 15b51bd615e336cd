"""RocketMQ's encodings, one module per encoding, each with its scalar, Arrow and Column forms side by side.

=====================  ==========================================================================
``hashcode``           Java ``String.hashCode`` (the base of tag codes and index keys)
``tags``               ConsumeQueue tag codes (``tagsString2tagsCode``)
``index_key``          IndexFile keys ``topic#key`` and their hashes and slots
``ext_addr``           ConsumeQueueExt addresses (``decorate``, ``unDecorate``, ``isExtAddr``)
``message_id``         store message ids (``createMessageId`` / ``decodeMessageId``)
``uniq_id``            client unique ids (``MessageClientIDSetter``) and the local address
``record``             the commitlog record length (``calMsgLength``)
``properties``         the properties string (``messageProperties2String``)
``arrow``              Arrow helpers the batch forms share (distinct values, hex strings)
=====================  ==========================================================================

The scalar forms are pure Python (stdlib), the Arrow forms work on whole batches with numpy and
pyarrow (no Python per row), the Column forms are Spark expressions. Every form of an encoding
is checked against RocketMQ's reference cases.
"""
