"""The embedded broker's secured listeners: TLS, mutual TLS, SASL_SSL with passwords, OAUTHBEARER.

A node started with a :class:`BrokerSecurity` opens, next to its ``PLAINTEXT`` listener (the
first one: inter-broker traffic, the test kit's own clients), one listener per
:class:`SecuredListener`, each on a loopback port of its own:

===============  =============  ============================================================
listener         protocol       clients log in with
===============  =============  ============================================================
``SSL``          SSL            nothing: they check the server's certificate
``MTLS``         SSL            a client certificate signed by the test authority (required)
``SASL_SSL``     SASL_SSL       ``PLAIN`` or ``SCRAM-SHA-512``, a user of :attr:`users`
``OAUTH``        SASL_SSL       ``OAUTHBEARER``: a JWT Kafka's broker-side OIDC validator
                                checks against the issuer's JWKS (only with :attr:`oidc`)
===============  =============  ============================================================

The server certificate and the authority come from
:mod:`unaligned.testing.tls_material`; the OIDC issuer is
:class:`unaligned.testing.oidc_issuer.OidcIssuer`. SCRAM users are created when the node's log
directory is formatted (``kafka-storage format --add-scram``, :meth:`format_arguments`); PLAIN
users are listed in the listener's JAAS entry. Kafka refuses to fetch a JWKS from a URL that the
JVM property ``org.apache.kafka.sasl.oauthbearer.allowed.urls`` does not name
(:meth:`jvm_options`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from unaligned.testing.tls_material import TlsMaterial

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
#: Server properties of a cluster that authorizes every request (:attr:`BrokerSecurity.acls`).
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "false",
}


@dataclass(frozen=True)
class SecuredListener:
    """One listener: its Kafka listener name and security protocol."""

    name: str
    protocol: str


SSL = SecuredListener("SSL", "SSL")
MTLS = SecuredListener("MTLS", "SSL")
SASL_SSL = SecuredListener("SASL_SSL", "SASL_SSL")
OAUTH = SecuredListener("OAUTH", "SASL_SSL")


@dataclass(frozen=True)
class OidcSettings:
    """What the broker's validator checks a token against."""

    jwks_url: str
    issuer: str
    audience: str


@dataclass(frozen=True)
class BrokerSecurity:
    """The secured listeners of every node of an embedded cluster (module docstring).

    ``users``: user name -> password, for ``PLAIN`` and ``SCRAM-SHA-512`` alike (names and
    passwords of letters, digits, ``-`` and ``_``: the format tool's syntax takes no others).
    ``acls``: authorize every request with Kafka's ``StandardAuthorizer``: nothing is allowed
    without an ACL (``allow.everyone.if.no.acl.found=false``) but to the super user
    ``User:ANONYMOUS``, the principal of the ``PLAINTEXT`` and ``CONTROLLER`` listeners (the
    brokers' own traffic and the test kit's clients) and of the ``SSL`` listener (no client
    certificate). Tests grant ACLs with :meth:`unaligned.testing.EmbeddedKafka.allow`.
    """

    tls: TlsMaterial
    users: Mapping[str, str] = field(default_factory=dict)
    oidc: OidcSettings | None = None
    acls: bool = False

    def __post_init__(self) -> None:
        for text in (*self.users, *self.users.values()):
            if not text or not all(c.isalnum() or c in "-_" for c in text):
                raise ValueError(
                    "embedded SASL users: names and passwords take letters, digits, '-' and '_'"
                )

    @property
    def listeners(self) -> tuple[SecuredListener, ...]:
        return (SSL, MTLS, SASL_SSL) + ((OAUTH,) if self.oidc is not None else ())

    def server_properties(self) -> dict[str, str]:
        """The server properties of the secured listeners but their addresses and protocols
        (:func:`unaligned.testing.broker_config.broker_properties` adds those, with ports)."""
        plain_users = " ".join(f'user_{name}="{password}"' for name, password in self.users.items())
        props = {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.tls.server_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls.ca_pem),
            "listener.name.mtls.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f"{PLAIN_MODULE} required {plain_users};"
            ),
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        }
        if self.acls:
            props.update(AUTHORIZER)
        if self.oidc is not None:
            props.update(
                {
                    "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
                    "listener.name.oauth.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required;",
                    "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": (
                        OAUTH_VALIDATOR
                    ),
                    "sasl.oauthbearer.jwks.endpoint.url": self.oidc.jwks_url,
                    "sasl.oauthbearer.expected.issuer": self.oidc.issuer,
                    "sasl.oauthbearer.expected.audience": self.oidc.audience,
                }
            )
        return props

    def format_arguments(self) -> tuple[str, ...]:
        """``kafka-storage format`` arguments that create the SCRAM-SHA-512 users."""
        arguments: list[str] = []
        for name, password in self.users.items():
            arguments += ["--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]"]
        return tuple(arguments)

    def jvm_options(self) -> tuple[str, ...]:
        """JVM options of a node: the JWKS URL its validator may fetch."""
        if self.oidc is None:
            return ()
        return (f"-D{ALLOWED_URLS_PROPERTY}={self.oidc.jwks_url}",)
