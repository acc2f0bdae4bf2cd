"""kafka-python clients as the package uses them: ``kafka.*`` options (:mod:`.client_options`,
:mod:`.producer_options`), connections and kept admin clients (:mod:`.connections`,
:mod:`.admin_clients`), and every access to kafka-python's private names
(:mod:`.client_internals`, the one adapter)."""
