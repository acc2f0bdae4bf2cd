"""The Schema Registry options: parsed, checked against each other, secrets never shown."""

from __future__ import annotations

import pytest

from unaligned.errors import OptionError
from unaligned.registry.options import (
    DecodeMode,
    Format,
    SubjectNameStrategy,
    is_format_option,
    parse_formats,
)

URL = {"schema.registry.url": "http://registry:8081"}


def test_no_format_option_means_no_formats() -> None:
    assert parse_formats({"subscribe": "t"}, sink=False) is None


def test_a_value_format_with_its_reader_schema_and_mode() -> None:
    formats = parse_formats(
        {
            **URL,
            "valueformat": "AVRO-CONFLUENT",
            "valuesubject": "orders-value",
            "valueschemaversion": "3",
            "mode": "permissive",
        },
        sink=False,
    )
    assert formats is not None and formats.key is None
    assert formats.value is not None and formats.value.format is Format.AVRO
    assert formats.value.choice.subject == "orders-value"
    assert formats.value.choice.version == 3 and formats.value.choice.pinned
    assert formats.mode is DecodeMode.PERMISSIVE
    assert formats.registry.urls == ("http://registry:8081",)


def test_latest_is_no_version_and_an_id_excludes_subject_and_version() -> None:
    formats = parse_formats(
        {**URL, "keyformat": "protobuf-confluent", "keyschemaversion": "latest"}, sink=False
    )
    assert formats is not None and formats.key is not None
    assert formats.key.choice.version is None and formats.key.choice.pinned
    with pytest.raises(OptionError, match="valueSchemaId' names the schema itself"):
        parse_formats(
            {**URL, "valueformat": "avro-confluent", "valueschemaid": "4", "valuesubject": "s"},
            sink=False,
        )


@pytest.mark.parametrize(
    "options, message",
    [
        ({"valueformat": "avro-confluent"}, "needs option 'schema.registry.url'"),
        ({**URL, "valueformat": "avro"}, "must be one of"),
        ({**URL, "valueformat": "avro-confluent", "valueschemaid": "x"}, "whole number"),
        ({**URL, "valuesubject": "s"}, "'valueSubject' needs option 'valueFormat'"),
        ({**URL, "mode": "permissive"}, "neither 'valueFormat' nor 'keyFormat'"),
        ({**URL, "valueformat": "binary", "valuesubject": "s"}, "needs option 'valueFormat'"),
        (
            {"schema.registry.url": "ftp://x", "valueformat": "avro-confluent"},
            "must be http",
        ),
        (
            {**URL, "valueformat": "avro-confluent", "schema.registry.colour": "x"},
            "unknown option 'schema.registry.colour'",
        ),
        (
            {
                **URL,
                "valueformat": "avro-confluent",
                "schema.registry.basic.auth.user.info": "alice:pw",
                "schema.registry.bearer.auth.token": "tok",
            },
            "give one way to log in",
        ),
        (
            {
                **URL,
                "valueformat": "avro-confluent",
                "schema.registry.basic.auth.user.info": "no-colon-secret",
            },
            "user:password",
        ),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message) as refused:
        parse_formats(options, sink=False)
    assert "no-colon-secret" not in str(refused.value)


def test_sink_only_options_are_the_sinks() -> None:
    assert is_format_option("valuesubjectnamestrategy", sink=True)
    assert is_format_option("valuesubjectnamestrategy", sink=False)
    assert not is_format_option("autoregisterschemas", sink=False)
    assert is_format_option("valueschema", sink=False)
    assert not is_format_option("valueschema", sink=True)
    assert not is_format_option("upcastunsignedints", sink=True)
    formats = parse_formats(
        {
            **URL,
            "valueformat": "json-schema-confluent",
            "valuesubjectnamestrategy": "topic-record",
            "valuerecordname": "shop.Order",
            "autoregisterschemas": "false",
        },
        sink=True,
    )
    assert formats is not None and formats.value is not None
    assert formats.value.strategy is SubjectNameStrategy.TOPIC_RECORD
    assert formats.value.strategy.subject("orders", "shop.Order", "value") == "orders-shop.Order"
    assert not formats.auto_register
    with pytest.raises(OptionError, match="applies to the source"):
        parse_formats({**URL, "valueformat": "avro-confluent", "mode": "failfast"}, sink=True)


def test_secrets_stay_out_of_repr_and_messages() -> None:
    formats = parse_formats(
        {
            "schema.registry.url": "https://bob:url-secret@registry:8081/api",
            "valueformat": "avro-confluent",
            "schema.registry.basic.auth.user.info": "alice:info-secret",
        },
        sink=False,
    )
    assert formats is not None
    config = formats.registry
    assert "info-secret" not in repr(config) and "url-secret" not in repr(config)
    assert "url-secret" not in repr(formats)
    assert config.shown_urls() == "https://registry:8081/api"
    text = config.redact(f"failed for {config.urls[0]} with {config.user_info}")
    assert "url-secret" not in text and "info-secret" not in text
