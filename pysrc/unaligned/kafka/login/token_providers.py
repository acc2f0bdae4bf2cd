"""The OAUTHBEARER token providers kafka-python calls, one per process and token source.

kafka-python asks its ``sasl_oauth_token_provider`` for a token whenever a connection logs in
(and logs in again, KIP-368). :func:`token_provider` keeps one provider per process and
:data:`~unaligned.kafka.login.oauth_tokens.TokenSource`, so every connection of a worker
shares a token and only the first one asks: :class:`RefreshingTokenProvider` keeps the token of
a client-credentials grant and fetches it again past its refresh point
(:class:`~unaligned.kafka.login.oauth_tokens.RefreshRule`); a refresh that fails while the
kept token is still valid keeps it (logged). A user's provider
(:class:`~unaligned.kafka.login.oauth_tokens.UserProvider`) is made by calling what its import
string names; one that is not kafka-python's ``AbstractTokenProvider`` is adapted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka.net.sasl.oauth import AbstractTokenProvider

from unaligned._util.process_memo import ProcessMemo
from unaligned.errors import OAuthTokenError, OptionError
from unaligned.kafka.login.oauth_tokens import (
    ClientCredentials,
    RefreshRule,
    Token,
    TokenSource,
    client_credentials_fetch,
    load_attribute,
)

logger = logging.getLogger(__name__)


class RefreshingTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """A kept token, fetched again past its refresh point (module docstring)."""

    def __init__(
        self,
        fetch: Callable[[], Token],
        rule: RefreshRule,
        extensions: tuple[tuple[str, str], ...] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fetch = fetch
        self._rule = rule
        self._extensions = dict(extensions)
        self._clock = clock
        self._token: Token | None = None
        self._lock = threading.Lock()

    def token(self) -> str:
        with self._lock:
            now = self._clock()
            kept = self._token
            if kept is not None and now < self._rule.refresh_at(kept.issued_at, kept.expires_at):
                return kept.value
            try:
                self._token = self._fetch()
            except OAuthTokenError as exc:
                if kept is None or now >= kept.expires_at:
                    raise
                logger.warning(
                    "refreshing the OAuth token failed; keeping the current one: %s", exc
                )
                return kept.value
            return self._token.value

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)


class _UserProviderAdapter(AbstractTokenProvider):  # type: ignore[misc]
    """A user's provider that is not kafka-python's ``AbstractTokenProvider``."""

    def __init__(self, provider: Any, extensions: tuple[tuple[str, str], ...]) -> None:
        self._provider = provider
        self._extensions = dict(extensions)

    def token(self) -> str:
        return str(self._provider.token())

    def extensions(self) -> dict[str, str]:
        own = getattr(self._provider, "extensions", None)
        return {**self._extensions, **(own() if callable(own) else {})}


_PROVIDERS: ProcessMemo[TokenSource, AbstractTokenProvider] = ProcessMemo()
_BUILD_LOCK = threading.Lock()


def token_provider(source: TokenSource) -> AbstractTokenProvider:
    """The process's provider for ``source`` (one per process and source, built on first
    use)."""
    with _BUILD_LOCK:
        provider = _PROVIDERS.get(source)
        if provider is None:
            provider = _build(source)
            _PROVIDERS.put(source, provider)
        return provider


def _build(source: TokenSource) -> AbstractTokenProvider:
    if isinstance(source, ClientCredentials):
        return RefreshingTokenProvider(
            client_credentials_fetch(source), source.refresh, source.extensions
        )
    made = load_attribute(source.import_string, "kafka.sasl.oauthbearer.token.provider")()
    if not callable(getattr(made, "token", None)):
        raise OptionError(
            f"option 'kafka.sasl.oauthbearer.token.provider': {source.import_string!r} returned "
            f"{type(made).__name__}, which has no token() method"
        )
    if isinstance(made, AbstractTokenProvider) and not source.extensions:
        return made
    return _UserProviderAdapter(made, source.extensions)
