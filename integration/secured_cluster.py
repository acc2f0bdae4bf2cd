"""The secured broker of the end-to-end tests and the logins clients use on it.

One broker for the test session (``secured_kafka`` in conftest.py, started by the first test that
asks for it), with four secured listeners next to its plaintext one
(:mod:`unaligned.testing.secured_listeners`): ``SSL``, ``MTLS`` (client certificate required),
``SASL_SSL`` (PLAIN and SCRAM-SHA-512, user :data:`USER`) and ``OAUTH`` (OAUTHBEARER checked by
Kafka's OIDC validator against the test's own issuer, :class:`~unaligned.testing.oidc_issuer.
OidcIssuer`). Certificates are made when the session starts. :meth:`SecuredCluster.options`
gives each login as a user writes it (``kafka.*`` options), each with another way to give the
stores: PEM files, inline PEM, PKCS12 files. The test kit's own helpers (topics, produce,
consume) keep to the plaintext listener.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from unaligned.testing import EmbeddedKafka
from unaligned.testing.broker_config import TWO_PHASE_COMMIT
from unaligned.testing.oidc_issuer import AUDIENCE, OidcIssuer
from unaligned.testing.secured_listeners import BrokerSecurity, OidcSettings
from unaligned.testing.tls_material import TlsMaterial, make_tls_material

USER, PASSWORD = "alice", "alice-Pw-7f3e9d"
OAUTH_CLIENT, OAUTH_SECRET = "spark-app", "app-Secret-91c2b8"
STORE_PASSWORD, KEY_PASSWORD = "store-Pw-c0ffee", "key-Pw-5eed42"
#: Every secret a login below holds: none may ever show in a message.
SECRETS = (PASSWORD, OAUTH_SECRET, STORE_PASSWORD, KEY_PASSWORD)
LOGINS = ("ssl", "mtls", "plain", "scram", "oauth")
#: What a failure message names for each login.
MECHANISMS = {
    "ssl": "SSL",
    "mtls": "SSL",
    "plain": "PLAIN",
    "scram": "SCRAM-SHA-512",
    "oauth": "OAUTHBEARER",
}


def jaas(module: str, **options: str) -> str:
    """A ``sasl.jaas.config`` entry for ``module`` (the short class name)."""
    packages = {
        "PlainLoginModule": "org.apache.kafka.common.security.plain",
        "ScramLoginModule": "org.apache.kafka.common.security.scram",
        "OAuthBearerLoginModule": "org.apache.kafka.common.security.oauthbearer",
    }
    values = " ".join(f'{k}="{v}"' for k, v in options.items())
    return f"{packages[module]}.{module} required {values};"


@dataclass(frozen=True)
class SecuredCluster:
    kafka: EmbeddedKafka
    tls: TlsMaterial
    issuer: OidcIssuer

    def options(self, login: str, **overrides: str) -> dict[str, str]:
        """The ``kafka.*`` options of ``login`` (one of :data:`LOGINS`), with ``overrides``
        (names without the ``kafka.`` prefix; an empty value drops the option)."""
        tls, pem_trust = self.tls, {"ssl.truststore.location": str(self.tls.ca_pem)}
        logins = {
            # PEM trust store, its type given
            "ssl": {
                "bootstrap.servers": self.kafka.listener_bootstrap("SSL"),
                "security.protocol": "SSL",
                **pem_trust,
                "ssl.truststore.type": "PEM",
            },
            # inline PEM trust, the client's certificate from a PKCS12 key store
            "mtls": {
                "bootstrap.servers": self.kafka.listener_bootstrap("MTLS"),
                "security.protocol": "SSL",
                "ssl.truststore.certificates": tls.ca_pem.read_text(),
                "ssl.keystore.location": str(tls.client_p12),
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.password": STORE_PASSWORD,
            },
            # a PKCS12 trust store
            "plain": {
                "bootstrap.servers": self.kafka.listener_bootstrap("SASL_SSL"),
                "security.protocol": "SASL_SSL",
                "ssl.truststore.location": str(tls.truststore_p12),
                "ssl.truststore.type": "PKCS12",
                "ssl.truststore.password": STORE_PASSWORD,
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": jaas("PlainLoginModule", username=USER, password=PASSWORD),
            },
            # a PEM trust store without a type (read by its content)
            "scram": {
                "bootstrap.servers": self.kafka.listener_bootstrap("SASL_SSL"),
                "security.protocol": "SASL_SSL",
                **pem_trust,
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": jaas("ScramLoginModule", username=USER, password=PASSWORD),
            },
            # OIDC client credentials, KIP-768's JAAS form
            "oauth": {
                "bootstrap.servers": self.kafka.listener_bootstrap("OAUTH"),
                "security.protocol": "SASL_SSL",
                **pem_trust,
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.token.endpoint.url": self.issuer.token_url,
                "sasl.login.callback.handler.class": (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
                ),
                "sasl.jaas.config": jaas(
                    "OAuthBearerLoginModule",
                    clientId=OAUTH_CLIENT,
                    clientSecret=OAUTH_SECRET,
                    scope="kafka",
                ),
            },
        }
        chosen = {**logins[login], **overrides}
        return {f"kafka.{k}": v for k, v in chosen.items() if v != ""}


_ISSUERS: list[OidcIssuer] = []
"""The running issuer, for the token providers below (named by import strings in tests)."""


class _Minted:
    """A user's token provider as ``kafka.sasl.oauthbearer.token.provider`` names one: any
    object with ``token()``; this one signs with the running issuer (``lifetime_s`` negative:
    already expired)."""

    def __init__(self, lifetime_s: float | None) -> None:
        self._lifetime_s = lifetime_s

    def token(self) -> str:
        issuer = _ISSUERS[-1]
        if self._lifetime_s is None:
            return issuer.mint(OAUTH_CLIENT)
        return issuer.mint(OAUTH_CLIENT, lifetime_s=self._lifetime_s, now=time.time() - 600)


def minted_tokens() -> _Minted:
    return _Minted(None)


def expired_tokens() -> _Minted:
    return _Minted(-60)


@contextmanager
def secured_cluster(directory: Path) -> Iterator[SecuredCluster]:
    """The issuer, then the broker (it fetches the issuer's keys when it starts)."""
    tls = make_tls_material(directory / "tls", STORE_PASSWORD, KEY_PASSWORD)
    with OidcIssuer({OAUTH_CLIENT: OAUTH_SECRET}) as issuer:
        _ISSUERS.append(issuer)
        security = BrokerSecurity(
            tls,
            {USER: PASSWORD},
            OidcSettings(issuer.jwks_url, issuer.issuer, AUDIENCE),
        )
        with EmbeddedKafka(
            data_dir=directory / "kafka", broker_properties=TWO_PHASE_COMMIT, security=security
        ) as kafka:
            yield SecuredCluster(kafka, tls, issuer)
