"""unaligned.testing.secured_listeners (with broker_config): the secured listeners' properties,
the SCRAM users at format time, the JVM option the OIDC validator needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from unaligned.testing import broker_config
from unaligned.testing.secured_listeners import BrokerSecurity, OidcSettings
from unaligned.testing.tls_material import TlsMaterial

TLS = TlsMaterial(Path("/certs"), "sp", "kp")
OIDC = OidcSettings("http://127.0.0.1:9/jwks", "http://127.0.0.1:9", "kafka-broker")
PORTS = {"SSL": 11, "MTLS": 12, "SASL_SSL": 13, "OAUTH": 14}


def test_secured_listeners_follow_the_plaintext_one_on_loopback(tmp_path: Path) -> None:
    security = BrokerSecurity(TLS, {"alice": "pw-1"}, OIDC)
    props = broker_config.broker_properties(
        broker_port=10,
        controller_port=20,
        log_dir=tmp_path,
        security=security,
        secured_ports=PORTS,
    )
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:10,SSL://127.0.0.1:11,MTLS://127.0.0.1:12,"
        "SASL_SSL://127.0.0.1:13,OAUTH://127.0.0.1:14,CONTROLLER://127.0.0.1:20"
    )
    assert props["advertised.listeners"].startswith("PLAINTEXT://127.0.0.1:10,SSL://")
    assert "CONTROLLER" not in props["advertised.listeners"]
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["listener.security.protocol.map"] == (
        "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_SSL:SASL_SSL,OAUTH:SASL_SSL"
    )
    assert props["listener.name.mtls.ssl.client.auth"] == "required"
    assert props["ssl.keystore.location"] == "/certs/server.pem"
    assert 'user_alice="pw-1"' in props["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert props["sasl.oauthbearer.jwks.endpoint.url"] == OIDC.jwks_url
    assert props["sasl.oauthbearer.expected.audience"] == "kafka-broker"


def test_users_are_created_at_format_time_and_the_jwks_url_is_allowed() -> None:
    security = BrokerSecurity(TLS, {"alice": "pw-1", "bob": "pw_2"}, OIDC)
    assert security.format_arguments() == (
        "--add-scram",
        "SCRAM-SHA-512=[name=alice,password=pw-1]",
        "--add-scram",
        "SCRAM-SHA-512=[name=bob,password=pw_2]",
    )
    assert security.jvm_options() == (
        "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=http://127.0.0.1:9/jwks",
    )


def test_without_an_issuer_there_is_no_oauth_listener(tmp_path: Path) -> None:
    security = BrokerSecurity(TLS, {"alice": "pw"})
    assert [listener.name for listener in security.listeners] == ["SSL", "MTLS", "SASL_SSL"]
    assert security.jvm_options() == ()
    assert "sasl.oauthbearer.jwks.endpoint.url" not in security.server_properties()


def test_a_password_the_format_tool_cannot_parse_is_refused() -> None:
    with pytest.raises(ValueError, match="letters, digits"):
        BrokerSecurity(TLS, {"alice": "a,b]"})


def test_a_secured_listener_without_a_port_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no port for its secured listener"):
        broker_config.broker_properties(
            broker_port=1,
            controller_port=2,
            log_dir=tmp_path,
            security=BrokerSecurity(TLS),
            secured_ports={"SSL": 3},
        )


def test_acls_authorize_every_request_but_the_plaintext_listeners() -> None:
    props = BrokerSecurity(TLS, {"alice": "pw"}, acls=True).server_properties()
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["super.users"] == "User:ANONYMOUS"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert "authorizer.class.name" not in BrokerSecurity(TLS, {"alice": "pw"}).server_properties()
