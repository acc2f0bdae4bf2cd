"""The login material of a client's kwargs, made in the process that connects.

Client kwargs (:mod:`unaligned.kafka.clients.client_options`) are plain, picklable values: they
travel from the driver to the executors inside input partitions and stream writers. What a
login needs that cannot travel is made here, once per process and settings:

- :data:`~unaligned.kafka.login.tls_options.TLS_KWARG` (:class:`TlsSettings`) -> kafka-python's
  ``ssl_context`` (:func:`unaligned.kafka.login.tls_stores.tls_context`: stores read, PKCS12
  converted);
- :data:`~unaligned.kafka.login.sasl_options.TOKEN_SOURCE_KWARG` -> kafka-python's
  ``sasl_oauth_token_provider`` (:func:`unaligned.kafka.login.oauth_tokens.token_provider`:
  one per process, refreshing its token).

:func:`login_kwargs` is called by every place that builds a kafka-python client (through
:func:`unaligned.kafka.clients.client_options.kafka_python_kwargs`) and by the read path's own
connections (:mod:`unaligned.kafka.fetch.fetch_connections`), so both log in alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unaligned.kafka.login.sasl_options import TOKEN_SOURCE_KWARG
from unaligned.kafka.login.tls_options import TLS_KWARG
from unaligned.kafka.login.tls_stores import TlsSettings, tls_context
from unaligned.kafka.login.token_providers import token_provider

#: The package's own kwargs that stand for login material.
LOGIN_KWARGS = (TLS_KWARG, TOKEN_SOURCE_KWARG)


def login_kwargs(client_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``client_kwargs`` with the login material made: ``ssl_context`` and
    ``sasl_oauth_token_provider`` in place of the settings they come from."""
    kwargs = {k: v for k, v in client_kwargs.items() if k not in LOGIN_KWARGS}
    tls = client_kwargs.get(TLS_KWARG)
    if isinstance(tls, TlsSettings):
        kwargs["ssl_context"] = tls_context(tls)
    source = client_kwargs.get(TOKEN_SOURCE_KWARG)
    if source is not None:
        kwargs["sasl_oauth_token_provider"] = token_provider(source)
    return kwargs
