"""The Schema Registry as a server: :mod:`.registry_settings` (where it is, how to log in),
:mod:`.client` (its REST API over the stdlib's HTTP: basic auth, bearer tokens, OAuth client
credentials with :mod:`.oauth_token`, TLS, retries until the registry timeout) and
:mod:`.schemas` (reader schemas resolved when a query starts, writer schemas fetched once per
id and worker process)."""
