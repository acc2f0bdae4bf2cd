"""kafka.ssl.* options -> TlsSettings: each store given the ways Spark users give it, refusals
naming the option (JKS with the keytool command), and no TLS setting without a TLS protocol."""

from __future__ import annotations

from typing import Any

import pytest

from unaligned.errors import OptionError
from unaligned.kafka.login.tls_options import TLS_KWARG, map_tls
from unaligned.kafka.login.tls_stores import ClientIdentity, InlinePem, StoreFile, TlsSettings

SSL = {"security_protocol": "SSL"}


def _settings(params: dict[str, str], protocol: str = "SSL") -> TlsSettings:
    kwargs: dict[str, Any] = {"security_protocol": protocol}
    map_tls(params, kwargs)
    settings = kwargs[TLS_KWARG]
    assert isinstance(settings, TlsSettings)
    return settings


def test_no_store_means_the_systems_authorities_and_the_host_name_checked() -> None:
    assert _settings({}) == TlsSettings()
    assert _settings({}, "SASL_SSL") == TlsSettings()


def test_without_a_tls_protocol_nothing_is_set_and_ssl_options_are_refused() -> None:
    kwargs: dict[str, Any] = {"security_protocol": "SASL_PLAINTEXT"}
    map_tls({}, kwargs)
    assert TLS_KWARG not in kwargs
    with pytest.raises(OptionError, match="kafka.ssl.truststore.location.*SSL or SASL_SSL"):
        map_tls({"ssl.truststore.location": "/ca.pem"}, {})


@pytest.mark.parametrize(
    ("params", "trust"),
    [
        (
            {
                "ssl.truststore.location": "/t.p12",
                "ssl.truststore.type": "pkcs12",
                "ssl.truststore.password": "pw",
            },
            StoreFile("kafka.ssl.truststore.location", "/t.p12", "PKCS12", "pw"),
        ),
        (
            {"ssl.truststore.location": "/ca.pem"},
            StoreFile("kafka.ssl.truststore.location", "/ca.pem", None),
        ),
        (
            {"ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----..."},
            InlinePem("kafka.ssl.truststore.certificates", "-----BEGIN CERTIFICATE-----..."),
        ),
        ({"ssl.cafile": "/ca.pem"}, StoreFile("kafka.ssl.cafile", "/ca.pem", "PEM")),
    ],
)
def test_trust_stores(params: dict[str, str], trust: Any) -> None:
    assert _settings(params).trust == trust


def test_key_stores_and_inline_keys() -> None:
    pkcs12 = _settings(
        {
            "ssl.keystore.location": "/k.p12",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": "sp",
            "ssl.key.password": "kp",
        }
    )
    assert pkcs12.identity == ClientIdentity(
        StoreFile("kafka.ssl.keystore.location", "/k.p12", "PKCS12", "sp")
    )
    pem = _settings(
        {"ssl.keystore.location": "/k.pem", "ssl.keystore.type": "PEM", "ssl.key.password": "kp"}
    )
    assert pem.identity == ClientIdentity(
        StoreFile("kafka.ssl.keystore.location", "/k.pem", "PEM"), key_password="kp"
    )
    inline = _settings(
        {
            "ssl.keystore.key": "KEY",
            "ssl.keystore.certificate.chain": "CHAIN",
            "ssl.key.password": "kp",
        }
    )
    assert inline.identity == ClientIdentity(
        InlinePem("kafka.ssl.keystore.certificate.chain", "CHAIN"),
        InlinePem("kafka.ssl.keystore.key", "KEY"),
        "kp",
    )
    files = _settings({"ssl.certfile": "/c.pem", "ssl.keyfile": "/k.pem"})
    assert files.identity == ClientIdentity(
        StoreFile("kafka.ssl.certfile", "/c.pem", "PEM"),
        StoreFile("kafka.ssl.keyfile", "/k.pem", "PEM"),
    )
    assert "KEY" not in repr(inline) and "kp" not in repr(inline) and "sp" not in repr(pkcs12)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"ssl.truststore.location": "/etc/ts.jks", "ssl.truststore.type": "JKS"},
            r"kafka.ssl.truststore.location.*JKS.*keytool -importkeystore -srckeystore "
            r"/etc/ts.jks -srcstoretype JKS -destkeystore /etc/ts.p12 -deststoretype PKCS12",
        ),
        ({"ssl.keystore.type": "BCFKS"}, "kafka.ssl.keystore.type.*PKCS12 or PEM"),
        (
            {"ssl.truststore.location": "/a", "ssl.cafile": "/b"},
            "'kafka.ssl.truststore.location' and 'kafka.ssl.cafile' give the same store",
        ),
        ({"ssl.keystore.key": "KEY"}, "go together"),
        (
            {"ssl.truststore.certificates": "C", "ssl.truststore.type": "PKCS12"},
            "truststore.certificates.*PEM",
        ),
        (
            {
                "ssl.truststore.location": "/ca.pem",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.password": "pw",
            },
            "kafka.ssl.truststore.password.*PEM",
        ),
        ({"ssl.truststore.password": "pw"}, "truststore.password.*without"),
        ({"ssl.key.password": "pw"}, "kafka.ssl.key.password.*without the client"),
        ({"ssl.endpoint.identification.algorithm": "dns"}, "'https' or empty"),
    ],
)
def test_refusals_name_the_option(params: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message) as refused:
        map_tls(params, dict(SSL))
    assert "pw" not in str(refused.value).replace("password", "")


def test_host_name_check_off_with_an_empty_algorithm() -> None:
    assert _settings({"ssl.endpoint.identification.algorithm": ""}).check_hostname is False
    assert _settings({"ssl.endpoint.identification.algorithm": "HTTPS"}).check_hostname is True
