"""Kafka wire helpers shared by the source and the sink.

- :mod:`.client_options`: ``kafka.*`` options for consumers and producers.
- :mod:`.connections`: consumers, offset look-ups, broker errors.
- :mod:`.columnar_fetch`, :mod:`.record_decoder`, :mod:`.record_fields`: fetch responses
  decoded into Arrow columns with numpy.
- :mod:`.transactions`, :mod:`.transaction_coordinator`: task-side transactional writes and the
  driver-side commit of prepared transactions.
"""
