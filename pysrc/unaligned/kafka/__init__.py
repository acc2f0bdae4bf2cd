"""Kafka's protocol and kafka-python, shared by the source and the sink; nothing of Spark's query.

Sub-packages, lowest first (each imports only its own and lower ones; ``./dev lint`` checks):

- :mod:`.partitions`: :class:`~unaligned.kafka.partitions.TopicPartitionId`, used by all.
- :mod:`.login`: TLS and SASL settings parsed from ``kafka.*`` options, OAUTHBEARER tokens,
  and the kafka-python arguments every client logs in with.
- :mod:`.records`: record batches: the v2 layout, decoding into Arrow columns, encoding.
- :mod:`.clients`: ``kafka.*`` options, kafka-python clients and their private internals, the
  cluster's metadata (leaders, leader epochs, topic ids) and the driver's offset look-ups.
- :mod:`.fetch`: a read task's ``Fetch`` requests for its offset ranges.
- :mod:`.transactions`: transaction coordinators: ``InitProducerId``, ``AddPartitionsToTxn``,
  ``EndTxn`` by handle, listing and describing transactional ids.
- :mod:`.produce`: a sink task's ``Produce`` session, its queues, retries and routing.
"""
