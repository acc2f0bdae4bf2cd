"""unaligned.testing.oidc_issuer: the JWKS and client-credentials endpoints a test runs, and the
tokens it signs (checked against the JWKS it serves)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from unaligned.testing.oidc_issuer import AUDIENCE, OidcIssuer


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _token_request(issuer: OidcIssuer, client: str, secret: str) -> dict[str, object]:
    basic = base64.b64encode(f"{client}:{secret}".encode()).decode()
    request = urllib.request.Request(
        issuer.token_url,
        data=urllib.parse.urlencode({"grant_type": "client_credentials", "scope": "s"}).encode(),
        headers={"Authorization": f"Basic {basic}"},
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        result: dict[str, object] = json.loads(answer.read())
    return result


def test_tokens_from_the_endpoint_verify_against_the_jwks() -> None:
    with OidcIssuer({"app": "secret"}, lifetime_s=120) as issuer:
        answer = _token_request(issuer, "app", "secret")
        with urllib.request.urlopen(issuer.jwks_url, timeout=5) as jwks_answer:
            key = json.loads(jwks_answer.read())["keys"][0]
        assert issuer.issued == 1
    token = str(answer["access_token"])
    header, claims, signature = token.split(".")
    public = rsa.RSAPublicNumbers(
        int.from_bytes(_b64(key["e"]), "big"), int.from_bytes(_b64(key["n"]), "big")
    ).public_key()
    public.verify(
        _b64(signature), f"{header}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256()
    )
    payload = json.loads(_b64(claims))
    assert payload["sub"] == "app" and payload["aud"] == AUDIENCE and payload["scope"] == "s"
    assert payload["exp"] - payload["iat"] == 120 and answer["expires_in"] == 120


def test_a_wrong_secret_is_answered_invalid_client() -> None:
    with OidcIssuer({"app": "secret"}) as issuer:
        with pytest.raises(urllib.error.HTTPError) as refused:
            _token_request(issuer, "app", "wrong")
        assert refused.value.code == 401
        assert json.loads(refused.value.read())["error"] == "invalid_client"
        assert issuer.issued == 0


def test_minted_tokens_can_be_expired() -> None:
    with OidcIssuer({}) as issuer:
        token = issuer.mint("app", lifetime_s=-60, now=1_000_000)
        url = issuer.issuer
    claims = json.loads(_b64(token.split(".")[1]))
    assert claims["exp"] == 1_000_000 - 60 and claims["iss"] == url
