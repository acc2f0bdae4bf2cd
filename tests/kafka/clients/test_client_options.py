"""kafka.* -> kafka-python mapping, rejection by name, and secret redaction."""

from __future__ import annotations

import pytest

from unaligned.errors import OptionError
from unaligned.kafka.clients.client_options import (
    REDACTED,
    client_config_from_options,
    is_secret,
    redact,
)
from unaligned.kafka.login.tls_options import TLS_KWARG
from unaligned.kafka.login.tls_stores import ClientIdentity, StoreFile, TlsSettings

SERVERS = {"bootstrap.servers": "127.0.0.1:9092"}
SASL = {**SERVERS, "security.protocol": "SASL_SSL"}


def test_java_names_map_to_kafka_python_keywords() -> None:
    config = client_config_from_options(
        {
            "bootstrap.servers": "h1:9092, h2:9093",
            "client.id": "reader",
            "request.timeout.ms": "15000",
            "isolation.level": "READ_COMMITTED",
            "max.partition.fetch.bytes": "1048576",
            "fetch.max.wait.ms": "100",
            "check.crcs": "true",
            "security.protocol": "ssl",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": "/etc/ca.pem",
            "ssl.keystore.type": "pem",
            "ssl.keystore.location": "/etc/client.pem",
            "ssl.key.password": "k3y",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    kw = config.client_kwargs
    assert kw["bootstrap_servers"] == ["h1:9092", "h2:9093"]
    assert config.bootstrap_servers == "h1:9092,h2:9093"
    assert (kw["client_id"], kw["request_timeout_ms"], kw["isolation_level"]) == (
        "reader",
        15000,
        "read_committed",
    )
    assert (kw["max_partition_fetch_bytes"], kw["fetch_max_wait_ms"], kw["check_crcs"]) == (
        1048576,
        100,
        True,
    )
    assert kw["security_protocol"] == "SSL"
    assert kw[TLS_KWARG] == TlsSettings(
        trust=StoreFile("kafka.ssl.truststore.location", "/etc/ca.pem", "PEM"),
        identity=ClientIdentity(
            StoreFile("kafka.ssl.keystore.location", "/etc/client.pem", "PEM"),
            key_password="k3y",
        ),
        check_hostname=False,
    )
    assert "k3y" not in repr(kw[TLS_KWARG])
    assert config.read_committed and config.request_timeout_ms == 15000


def test_sasl_plain_jaas_maps_to_username_and_password() -> None:
    config = client_config_from_options(
        {
            **SERVERS,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="alice" password="s3cr\\"et";',
        }
    )
    assert config.client_kwargs["sasl_plain_username"] == "alice"
    assert config.client_kwargs["sasl_plain_password"] == 's3cr"et'
    assert "s3cr" not in repr(config)
    assert REDACTED in repr(config)


@pytest.mark.parametrize(
    "params, message",
    [
        ({**SASL, "sasl.mechanism": "PLAIN"}, "kafka.sasl.jaas.config"),
        (
            {
                **SASL,
                "sasl.mechanism": "GSSAPI",
                "sasl.jaas.config": (
                    "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"
                ),
            },
            "kafka.sasl.jaas.config.*useKeyTab.*kinit",
        ),
        (
            {**SASL, "sasl.mechanism": "PLAIN", "sasl.jaas.config": "not a jaas entry"},
            "kafka.sasl.jaas.config",
        ),
        (
            {
                **SASL,
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": 'x.PlainLoginModule required username="u";',
            },
            "kafka.sasl.jaas.config.*username and password",
        ),
        ({**SASL, "sasl.mechanism": "MAGIC"}, "kafka.sasl.mechanism"),
        ({"sasl.mechanism": "PLAIN"}, "kafka.sasl.mechanism.*kafka.security.protocol"),
        ({"security.protocol": "TLS"}, "kafka.security.protocol"),
        (
            {"security.protocol": "SSL", "ssl.truststore.type": "JKS"},
            "kafka.ssl.truststore.location.*keytool -importkeystore",
        ),
        (
            {"ssl.truststore.location": "/etc/ca.pem"},
            "kafka.ssl.truststore.location.*set it to SSL or SASL_SSL",
        ),
        (
            {"security.protocol": "SSL", "ssl.truststore.password": "pw"},
            "kafka.ssl.truststore.password",
        ),
        (
            {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "http"},
            "kafka.ssl.endpoint.identification.algorithm",
        ),
        ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "kafka.ssl.cipher.suites"),
        ({"request.timeout.ms": "soon"}, "kafka.request.timeout.ms"),
        ({"check.crcs": "maybe"}, "kafka.check.crcs"),
        ({"isolation.level": "serializable"}, "kafka.isolation.level"),
        ({"bootstrap.servers": " , "}, "kafka.bootstrap.servers"),
    ],
)
def test_unmappable_or_contradictory_kafka_options_are_rejected_by_name(
    params: dict[str, str], message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        client_config_from_options({**SERVERS, **params})


def test_jaas_errors_do_not_echo_the_password() -> None:
    with pytest.raises(OptionError) as excinfo:
        client_config_from_options(
            {
                **SASL,
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.jaas.config": (
                    'x.PlainLoginModule required username="u" password="topsecret";'
                ),
            }
        )
    assert "topsecret" not in str(excinfo.value)


def test_redaction() -> None:
    assert (
        is_secret("sasl.jaas.config")
        and is_secret("ssl.key.password")
        and is_secret("SSL.KEYSTORE.PASSWORD")
    )
    assert not is_secret("bootstrap.servers")
    new_secrets = (
        "ssl.keystore.key",
        "kafka.ssl.keystore.key",
        "sasl.oauthbearer.client.credentials.client.secret",
        "sasl.oauthbearer.assertion.private.key.passphrase",
    )
    assert all(is_secret(name) for name in new_secrets)
    assert not is_secret("ssl.keystore.certificate.chain")
    assert not is_secret("ssl.truststore.certificates")
    assert redact({"ssl.truststore.password": "x", "client.id": "c"}) == {
        "ssl.truststore.password": REDACTED,
        "client.id": "c",
    }


def test_consumer_kwargs_force_what_the_source_relies_on() -> None:
    config = client_config_from_options(
        {**SERVERS, "max.partition.fetch.bytes": "4096", "request.timeout.ms": "7000"}
    )
    kw = config.consumer_kwargs()
    assert kw["enable_auto_commit"] is False and kw["auto_offset_reset"] == "none"
    assert kw["key_deserializer"] is None and kw["value_deserializer"] is None
    assert kw["max_partition_fetch_bytes"] == 4096  # the user's value wins over the default
    assert kw["bootstrap_timeout_ms"] == 7000
    assert kw["allow_auto_create_topics"] is False
