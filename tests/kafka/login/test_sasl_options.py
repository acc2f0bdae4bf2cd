"""kafka.sasl.* -> what each mechanism logs in with: passwords, OAuth token sources (KIP-768
names, the JAAS form, a user's provider), MSK IAM and GSSAPI refused at definition when they
cannot work, with the way out."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest

from unaligned.errors import OptionError
from unaligned.kafka.login.jaas_config import MODULES
from unaligned.kafka.login.oauth_tokens import ClientCredentials, RefreshRule, UserProvider
from unaligned.kafka.login.sasl_options import MSK_HANDLER, TOKEN_SOURCE_KWARG, map_sasl

OAUTH_JAAS = (
    f"{MODULES['OAuthBearerLoginModule']} required clientId='app' clientSecret='s3cret' "
    "scope='kafka' extension_logicalCluster='lkc-1' extension_identityPoolId='pool-2';"
)


def _map(params: dict[str, str], protocol: str = "SASL_SSL", **kwargs: Any) -> dict[str, Any]:
    mapped: dict[str, Any] = {"security_protocol": protocol, **kwargs}
    if "sasl.mechanism" in params:
        mapped["sasl_mechanism"] = params["sasl.mechanism"]
    map_sasl(params, mapped)
    return mapped


def test_oauth_client_credentials_from_the_jaas_entry() -> None:
    mapped = _map(
        {
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
            "sasl.login.callback.handler.class": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
            ),
            "sasl.jaas.config": OAUTH_JAAS,
            "sasl.login.refresh.window.factor": "0.5",
            "sasl.login.refresh.buffer.seconds": "30",
        }
    )
    source = mapped[TOKEN_SOURCE_KWARG]
    assert source == ClientCredentials(
        "https://idp/token",
        "app",
        "s3cret",
        "kafka",
        (("identityPoolId", "pool-2"), ("logicalCluster", "lkc-1")),
        RefreshRule(0.5, 30, 60),
    )
    assert "s3cret" not in repr(source)


def test_oauth_client_credentials_with_kip_768_option_names() -> None:
    mapped = _map(
        {
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
            "sasl.oauthbearer.client.credentials.client.id": "app",
            "sasl.oauthbearer.client.credentials.client.secret": "s3cret",
            "sasl.oauthbearer.scope": "api://kafka/.default",
            "sasl.login.connect.timeout.ms": "2s",
        }
    )
    source = mapped[TOKEN_SOURCE_KWARG]
    assert (source.client_id, source.client_secret, source.scope) == (
        "app",
        "s3cret",
        "api://kafka/.default",
    )
    assert source.connect_timeout_ms == 2000


def test_a_users_token_provider_named_by_an_import_string() -> None:
    mapped = _map(
        {
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.provider": "json:JSONDecoder",
        }
    )
    assert mapped[TOKEN_SOURCE_KWARG] == UserProvider("json:JSONDecoder")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"sasl.mechanism": "OAUTHBEARER"}, "needs a token source"),
        (
            {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token.endpoint.url": "https://i"},
            "needs a client id and secret",
        ),
        (
            {
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.token.endpoint.url": "https://i",
                "sasl.oauthbearer.token.provider": "json:loads",
            },
            "both give OAUTHBEARER tokens",
        ),
        (
            {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token.provider": "no_such_mod:x"},
            "cannot import 'no_such_mod:x'.*every Python process",
        ),
        (
            {
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.token.provider": "json:loads",
                "sasl.login.callback.handler.class": "com.example.MyHandler",
            },
            "Java class kafka-python cannot run.*kafka.sasl.oauthbearer.token.provider",
        ),
        (
            {
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.token.endpoint.url": "ldap://i",
                "sasl.jaas.config": OAUTH_JAAS,
            },
            "https",
        ),
        (
            {
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.token.endpoint.url": "https://i",
                "sasl.jaas.config": OAUTH_JAAS,
                "sasl.login.refresh.window.factor": "0.2",
            },
            "window.factor.*0.5 to 1.0",
        ),
        (
            {
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.token.provider": "json:loads",
                "sasl.login.refresh.window.factor": "0.6",
            },
            "window.factor' applies to a token endpoint only",
        ),
        (
            {"sasl.mechanism": "PLAIN", "sasl.oauthbearer.scope": "x"},
            "applies to kafka.sasl.mechanism=OAUTHBEARER only",
        ),
        (
            {"sasl.mechanism": "PLAIN", "sasl.jaas.config": OAUTH_JAAS},
            "OAuthBearerLoginModule, which does not log in with kafka.sasl.mechanism=PLAIN",
        ),
    ],
)
def test_oauth_and_password_refusals(params: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message) as refused:
        _map(params)
    assert "s3cret" not in str(refused.value)


def test_msk_iam_needs_sasl_ssl_botocore_and_takes_the_msk_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    iam = {
        "sasl.mechanism": "AWS_MSK_IAM",
        "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;",
        "sasl.client.callback.handler.class": MSK_HANDLER,
    }
    with pytest.raises(OptionError, match="needs kafka.security.protocol=SASL_SSL"):
        _map(iam, "SASL_PLAINTEXT")
    with pytest.raises(OptionError, match="awsProfileName is not supported.*AWS_PROFILE"):
        _map({**iam, "sasl.jaas.config": iam["sasl.jaas.config"][:-1] + ' awsProfileName="p";'})
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "botocore" else real_find_spec(name, *a),
    )
    with pytest.raises(OptionError, match=r"botocore.*pip install 'unaligned\[aws\]'"):
        _map(iam)


def test_msk_iam_with_botocore_maps_to_kafka_pythons_mechanism(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: object() if name == "botocore" else real_find_spec(name, *a),
    )
    mapped = _map({"sasl.mechanism": "AWS_MSK_IAM"})
    assert mapped["sasl_mechanism"] == "AWS_MSK_IAM" and TOKEN_SOURCE_KWARG not in mapped


def test_gssapi_is_kafkas_default_and_needs_the_gssapi_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gssapi" else real_find_spec(name, *a),
    )
    with pytest.raises(OptionError, match="GSSAPI.*pip install gssapi.*kinit"):
        _map({})  # no mechanism: Kafka's default, GSSAPI
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: object() if name == "gssapi" else real_find_spec(name, *a),
    )
    krb5 = f'{MODULES["Krb5LoginModule"]} required useTicketCache=true serviceName="kfk";'
    mapped = _map({"sasl.mechanism": "GSSAPI", "sasl.jaas.config": krb5})
    assert mapped["sasl_kerberos_service_name"] == "kfk"
    with pytest.raises(OptionError, match="keyTab is not supported.*kinit -kt"):
        _map({"sasl.mechanism": "GSSAPI", "sasl.jaas.config": krb5[:-1] + ' keyTab="/k";'})


def test_msk_iam_options_reach_kafka_pythons_signed_login(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As far as no AWS allows: the options map to AWS_MSK_IAM, and kafka-python's mechanism
    (with botocore's credential chain, here the environment) signs the first message the
    broker would check."""
    from unaligned.kafka.clients.client_internals import sasl_mechanism
    from unaligned.kafka.clients.client_options import client_config_from_options

    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-secret",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    config = client_config_from_options(
        {
            "bootstrap.servers": "b-1.msk.example:9098",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "AWS_MSK_IAM",
            "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;",
            "sasl.client.callback.handler.class": MSK_HANDLER,
        }
    )
    mechanism = sasl_mechanism("AWS_MSK_IAM", "b-1.msk.example", config.client_kwargs)
    first = json.loads(mechanism.auth_bytes())
    assert first["host"] == "b-1.msk.example" and first["action"] == "kafka-cluster:Connect"
    assert (
        first["x-amz-credential"].startswith("AKIDEXAMPLE/")
        and "/eu-west-1/" in (first["x-amz-credential"])
    )
    assert len(first["x-amz-signature"]) == 64
    assert "wJalrXUtnFEMI-secret" not in json.dumps(first)


def test_ssl_options_in_the_oauth_jaas_entry_are_the_token_endpoints_tls() -> None:
    from unaligned.kafka.login.tls_stores import StoreFile, TlsSettings

    jaas = OAUTH_JAAS.rstrip(";") + (
        " ssl.truststore.location='/etc/idp/ca.p12' ssl.truststore.type='PKCS12'"
        " ssl.truststore.password='tpw';"
    )
    params = {
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        "sasl.jaas.config": jaas,
    }
    source = _map(params)[TOKEN_SOURCE_KWARG]
    assert isinstance(source, ClientCredentials)
    assert source.tls == TlsSettings(
        trust=StoreFile("kafka.ssl.truststore.location", "/etc/idp/ca.p12", "PKCS12", "tpw")
    )
    assert "tpw" not in repr(source)
    with pytest.raises(OptionError, match="token endpoint, whose URL is not https"):
        _map({**params, "sasl.oauthbearer.token.endpoint.url": "http://idp/token"})
    jks = jaas.replace("PKCS12", "JKS")
    with pytest.raises(OptionError, match="the token endpoint's TLS.*keytool"):
        _map({**params, "sasl.jaas.config": jks})
