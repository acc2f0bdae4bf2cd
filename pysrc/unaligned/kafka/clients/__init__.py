"""kafka-python clients as the package uses them: ``kafka.*`` options (:mod:`.client_options`,
:mod:`.producer_options`), producers and kept admin clients (:mod:`.connections`,
:mod:`.admin_clients`), what is asked again through a lost broker and for how long
(:mod:`.retries`), the source's metadata and offset requests (:mod:`.cluster_requests`) and the
driver's look-ups built on them (:mod:`.offset_lookup`), and every access to kafka-python's
private names (:mod:`.client_internals`, the one adapter); the login on the read path's own
sockets and the explanation of a refused one (:mod:`.socket_login`; the settings:
:mod:`unaligned.kafka.login`)."""
