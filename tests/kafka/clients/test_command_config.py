"""The operator commands' Kafka settings: a Java properties file, checked as query options."""

from __future__ import annotations

from pathlib import Path

import pytest

from unaligned.errors import OptionError
from unaligned.kafka.clients.command_config import command_client_kwargs, read_properties


def test_properties_with_comments_separators_and_continued_lines(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(
        "# a comment\n"
        "! another\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism : SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="app" password="secret";\n'
    )
    assert read_properties(config) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="app" password="secret";',
    }
    kwargs = command_client_kwargs("h:9092", config)
    assert kwargs["bootstrap_servers"] == ["h:9092"]
    assert kwargs["security_protocol"] == "SASL_PLAINTEXT"


def test_a_line_without_a_value_and_an_unknown_setting_are_named(tmp_path: Path) -> None:
    config = tmp_path / "bad.properties"
    config.write_text("security.protocol=PLAINTEXT\njust-a-word\n")
    with pytest.raises(OptionError, match="line 2"):
        read_properties(config)
    config.write_text("no.such.setting=1\n")
    with pytest.raises(OptionError, match="no.such.setting"):
        command_client_kwargs("h:9092", config)
    with pytest.raises(OptionError, match="cannot read"):
        read_properties(tmp_path / "missing.properties")
