"""Kafka transactions seen from outside a producer: a prepared transaction's handle
(:mod:`.transactions`), the coordinator requests a session needs (:mod:`.coordinator_requests`),
ending a transaction by handle from any process (:mod:`.transaction_coordinator`), and what the
coordinators know of the sink's ids (:mod:`.transaction_states`)."""
