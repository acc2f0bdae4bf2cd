"""Logging in to a secured cluster, as Kafka's Java clients take it: ``kafka.security.protocol``,
``kafka.ssl.*`` (:mod:`.tls_options`; PKCS12 and PEM stores, :mod:`.tls_stores`) and
``kafka.sasl.*`` (:mod:`.sasl_options`, a JAAS line read by :mod:`.jaas_config`) parsed into
frozen settings; OAUTHBEARER tokens from an OIDC issuer or a user's provider
(:mod:`.oauth_tokens`, :mod:`.token_providers`); and the kafka-python keyword arguments they
become for every client (:mod:`.client_login`). Nothing here opens a connection: the clients
(:mod:`unaligned.kafka.clients`) do, and log in on the read path's own sockets there."""
