"""A sink task's writes: rows routed to partitions (:mod:`.partitioner`, :mod:`.row_routing`),
batches sent in sequence with retries (:mod:`.produce_session`, :mod:`.produce_requests`,
:mod:`.produce_queue`), a batch refused as too large split (:mod:`.batch_split`), and topic
limits (:mod:`.topic_limits`)."""
