"""The token providers kafka-python calls: a kept token fetched again past its refresh point,
a valid one kept when a refresh fails, one provider per process and source; a user's provider
adapted to kafka-python's AbstractTokenProvider."""

from __future__ import annotations

import pytest
from kafka.net.sasl.oauth import AbstractTokenProvider

from unaligned.errors import OAuthTokenError
from unaligned.kafka.login.oauth_tokens import ClientCredentials, RefreshRule, Token, UserProvider
from unaligned.kafka.login.token_providers import RefreshingTokenProvider, token_provider


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_kept_token_is_fetched_again_past_its_refresh_point() -> None:
    clock = _Clock()
    fetched: list[Token] = []
    failing = False

    def fetch() -> Token:
        if failing:
            raise OAuthTokenError("endpoint away")
        token = Token(f"t{len(fetched)}", clock.now, clock.now + 100)
        fetched.append(token)
        return token

    provider = RefreshingTokenProvider(fetch, RefreshRule(0.8, 300, 60), (("a", "b"),), clock)
    assert provider.token() == "t0"
    clock.now += 79
    assert provider.token() == "t0"  # before 80% of its life
    clock.now += 2
    assert provider.token() == "t1"  # refreshed
    failing = True
    clock.now += 90
    assert provider.token() == "t1"  # refresh failed, still valid: kept
    clock.now += 20
    with pytest.raises(OAuthTokenError):  # expired and no new one
        provider.token()
    assert provider.extensions() == {"a": "b"}


class _Users:
    def token(self) -> str:
        return "users-token"

    def extensions(self) -> dict[str, str]:
        return {"pool": "p1"}


def make_users_provider() -> _Users:
    return _Users()


def test_one_provider_per_process_and_source_and_a_users_provider_adapted() -> None:
    source = UserProvider(f"{__name__}:make_users_provider", (("cluster", "lkc"),))
    provider = token_provider(source)
    assert provider is token_provider(source)
    assert isinstance(provider, AbstractTokenProvider)
    assert provider.token() == "users-token"
    assert provider.extensions() == {"cluster": "lkc", "pool": "p1"}
    other = token_provider(ClientCredentials("http://127.0.0.1:9/t", "app", "x"))
    assert other is not provider
