"""A read task's ``Fetch`` requests for its offset ranges (:mod:`.range_fetch`), on the
process's own sockets for plaintext clusters (:mod:`.fetch_connections`, :mod:`.fetch_wire`)."""
