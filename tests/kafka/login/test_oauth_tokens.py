"""OAuth token sources: when a kept token is refreshed (Java's refresh rule), a token's expiry,
and the client-credentials grant against a real token endpoint on loopback
(unaligned.testing.oidc_issuer): the token, a refused secret, a token file."""

from __future__ import annotations

from pathlib import Path

import pytest

from unaligned.errors import OAuthTokenError, OptionError
from unaligned.kafka.login.oauth_tokens import (
    ClientCredentials,
    RefreshRule,
    client_credentials_fetch,
    jwt_expiry,
    load_attribute,
)
from unaligned.testing.oidc_issuer import OidcIssuer


def test_refresh_rule_as_javas() -> None:
    rule = RefreshRule()  # 0.8, buffer 300 s, at least 60 s after it was issued
    assert rule.refresh_at(0, 3600) == 2880  # 80% of an hour
    assert rule.refresh_at(0, 1000) == 700  # at least 300 s before it expires
    assert rule.refresh_at(0, 370) == 70  # ... and no earlier than 60 s after it was issued
    assert rule.refresh_at(0, 100) == 80  # shorter than buffer + min period: the factor alone


def test_jwt_expiry() -> None:
    with OidcIssuer({}, lifetime_s=50) as issuer:
        token = issuer.mint("app", now=1000)
    assert jwt_expiry(token) == 1050
    assert jwt_expiry("opaque-token") is None


def test_client_credentials_give_the_endpoints_token() -> None:
    with OidcIssuer({"app": "s3cret"}, lifetime_s=120) as issuer:
        source = ClientCredentials(issuer.token_url, "app", "s3cret", "kafka")
        token = client_credentials_fetch(source)()
        assert issuer.issued == 1
    assert token.expires_at - token.issued_at == pytest.approx(120, abs=2)
    assert token.value.count(".") == 2


def test_a_refused_secret_names_the_client_and_never_the_secret() -> None:
    with OidcIssuer({"app": "s3cret"}) as issuer:
        source = ClientCredentials(issuer.token_url, "app", "wrong-s3cret")
        with pytest.raises(OAuthTokenError, match="refused client 'app'.*401 invalid_client") as e:
            client_credentials_fetch(source)()
    assert "s3cret" not in str(e.value)


def test_an_unreachable_endpoint_is_asked_again_then_refused() -> None:
    source = ClientCredentials(
        "http://127.0.0.1:9/token", "app", "x", retry_backoff_ms=1, retry_backoff_max_ms=4
    )
    with pytest.raises(OAuthTokenError, match="no OAuth token for client 'app'"):
        client_credentials_fetch(source)()


def test_a_token_file(tmp_path: Path) -> None:
    with OidcIssuer({}, lifetime_s=60) as issuer:
        token = issuer.mint("app", now=5000)
    path = tmp_path / "token.jwt"
    path.write_text(token + "\n")
    got = client_credentials_fetch(ClientCredentials(path.as_uri()))()
    assert got.value == token and got.expires_at == 5060


def test_import_strings() -> None:
    assert load_attribute("json:loads", "o") is load_attribute("json.loads", "o")
    with pytest.raises(OptionError, match="'o' must name a token provider"):
        load_attribute("nothing", "o")
    with pytest.raises(OptionError, match="is not callable"):
        load_attribute("json:__doc__", "o")


def test_an_https_endpoint_is_trusted_by_the_truststore_given_for_it(tmp_path: Path) -> None:
    from unaligned.kafka.login.tls_stores import StoreFile, TlsSettings
    from unaligned.testing.tls_material import make_tls_material

    tls = make_tls_material(tmp_path, "store-pw", "key-pw")
    with OidcIssuer({"app": "s3cret"}, tls=tls) as issuer:
        assert issuer.token_url.startswith("https://127.0.0.1:")
        trust = TlsSettings(trust=StoreFile("truststore", str(tls.ca_pem), "PEM"))
        given = ClientCredentials(issuer.token_url, "app", "s3cret", tls=trust)
        assert client_credentials_fetch(given)().value.count(".") == 2
        # as a user gives it: the trust store inside the JAAS entry
        from unaligned.kafka.login.sasl_options import TOKEN_SOURCE_KWARG, map_sasl

        kwargs: dict[str, object] = {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "OAUTHBEARER",
        }
        jaas = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f"clientId='app' clientSecret='s3cret' ssl.truststore.location='{tls.ca_pem}' "
            "ssl.truststore.type='PEM';"
        )
        map_sasl(
            {"sasl.oauthbearer.token.endpoint.url": issuer.token_url, "sasl.jaas.config": jaas},
            kwargs,
        )
        source = kwargs[TOKEN_SOURCE_KWARG]
        assert isinstance(source, ClientCredentials)
        assert client_credentials_fetch(source)().value.count(".") == 2
        system_only = ClientCredentials(
            issuer.token_url, "app", "s3cret", retry_backoff_ms=1, retry_backoff_max_ms=1
        )
        with pytest.raises(OAuthTokenError, match="CERTIFICATE_VERIFY_FAILED"):
            client_credentials_fetch(system_only)()
        assert issuer.issued == 2


def test_the_expiry_of_the_token_a_login_sent() -> None:
    from unaligned.kafka.login.oauth_tokens import bearer_expiry

    with OidcIssuer({}, lifetime_s=50) as issuer:
        token = issuer.mint("app", now=1000)
    sent = f"n,,\x01auth=Bearer {token}\x01pool=p1\x01\x01".encode()
    assert bearer_expiry(sent) == 1050
    assert bearer_expiry(b"n,,\x01auth=Bearer opaque\x01\x01") is None
    assert bearer_expiry(b"\x01") is None
