"""Kafka wire helpers shared by the source and the sink.

- :mod:`.client_options`: ``kafka.*`` options for consumers and producers.
- :mod:`.connections`: consumers, offset look-ups, broker errors.
- :mod:`.range_fetch`: ``Fetch`` requests for a read task's offset ranges on kept connections;
  :mod:`.record_decoder`, :mod:`.record_fields`: their answers decoded into Arrow columns with
  numpy.
- :mod:`.transactions`, :mod:`.transaction_coordinator`: task-side transactional writes and the
  driver-side commit of prepared transactions.
"""
