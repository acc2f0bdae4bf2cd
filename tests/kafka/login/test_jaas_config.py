"""kafka.sasl.jaas.config parsed as Kafka's clients take it: quoted and bare values, the
module's short name; a malformed entry refused without showing it."""

from __future__ import annotations

import pytest

from unaligned.errors import OptionError
from unaligned.kafka.login.jaas_config import parse_jaas


def test_double_single_and_bare_values() -> None:
    entry = parse_jaas(
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        "clientId='app' clientSecret=\"s3\\\"c\" scope=kafka extension_logicalCluster='lkc-1';"
    )
    assert entry.module == "OAuthBearerLoginModule"
    assert dict(entry.options) == {
        "clientId": "app",
        "clientSecret": 's3"c',
        "scope": "kafka",
        "extension_logicalCluster": "lkc-1",
    }
    assert "s3" not in repr(entry)


def test_an_entry_without_options() -> None:
    entry = parse_jaas("software.amazon.msk.auth.iam.IAMLoginModule required;")
    assert entry.module == "IAMLoginModule" and dict(entry.options) == {}


def test_a_malformed_entry_is_refused_without_its_value() -> None:
    with pytest.raises(OptionError, match="not a JAAS entry.*value not shown") as refused:
        parse_jaas("password=hunter2")
    assert "hunter2" not in str(refused.value)
