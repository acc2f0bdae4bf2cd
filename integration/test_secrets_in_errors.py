"""A secret never appears in what a failure says (issues 21 and 30).

Two failures, each for the source and the sink: a connection failure (a port with nothing
listening) and an authentication failure (SASL options against the embedded broker's plaintext
listener). The secret must be absent from the raised error (its whole chain of causes) and from
the streaming query's exception text.

Real refused logins on the secured broker (secured_cluster.py): a wrong PLAIN or SCRAM password,
an expired token (called expired), a wrong OAuth client secret, mutual TLS without a
certificate. Each fails the source's look-ups and the sink's checks within the request timeout
(and the time to say why), with an error naming the mechanism and the reason, never a secret of
any login (passwords, client secret, store and key passwords) nor the token; a query with a
wrong password fails the same way in Spark.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.types import StringType, StructType

from harness import kafka_stream
from secured_cluster import OAUTH_CLIENT, SECRETS, USER, SecuredCluster, jaas
from unaligned.errors import KafkaAuthenticationError, OAuthTokenError
from unaligned.kafka.clients.offset_lookup import OffsetLookup
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.options import SinkOptions
from unaligned.sink.topics.kafka_columns import kafka_columns
from unaligned.sink.topics.kafka_participant import KafkaParticipant
from unaligned.source.options import SourceOptions
from unaligned.testing import EmbeddedKafka

TopicFactory = Callable[..., str]
SECRET = "Wh1sper-9f3c-NOT-FOR-LOGS"
_SASL = {
    "kafka.security.protocol": "SASL_PLAINTEXT",
    "kafka.sasl.mechanism": "PLAIN",
    "kafka.sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="alice" password="{SECRET}";'
    ),
    "kafka.request.timeout.ms": "4000",  # fail in seconds, not the default 30 s per request
    "kafka.default.api.timeout.ms": "6000",  # nor asked again for the default 60 s
}
_SINK_ONLY = {"kafka.max.block.ms": "6000", "kafka.delivery.timeout.ms": "6000"}


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _servers(kafka: EmbeddedKafka, failure: str) -> str:
    return _closed_port() if failure == "connection" else kafka.bootstrap_servers


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _assert_no_secret(error: BaseException) -> None:
    texts = [f"{type(e).__name__}: {e!s} {e!r}" for e in _chain(error)]
    assert texts, "no error"
    for text in texts:
        assert SECRET not in text, text


@pytest.mark.parametrize("failure", ["connection", "authentication"])
def test_the_sinks_checks_and_transactions_never_show_the_secret(
    kafka: EmbeddedKafka, new_topic: TopicFactory, failure: str, tmp_path: Path
) -> None:
    topic = new_topic(partitions=1)
    options = SinkOptions.parse(
        {
            "checkpointLocation": str(tmp_path),
            "kafka.bootstrap.servers": _servers(kafka, failure),
            "topic": topic,
            **_SASL,
            **_SINK_ONLY,
        }
    )
    target = options.target
    assert isinstance(target, KafkaTarget)
    columns = kafka_columns(StructType().add("value", StringType()), target)
    participant = KafkaParticipant(target, columns, "secret-test")
    with pytest.raises(Exception) as at_start:
        participant.check_at_query_start()
    _assert_no_secret(at_start.value)
    with pytest.raises(Exception) as at_open:
        participant.open_task(0, 0, 0).close()
    _assert_no_secret(at_open.value)


def _query_failure(start: Callable[[], Any]) -> StreamingQueryException:
    with pytest.raises(StreamingQueryException) as raised:
        query = start()
        try:
            assert query.awaitTermination(180), "the query neither failed nor finished"
        finally:
            query.stop()
        raise AssertionError("the query ran to its end")
    return raised.value


@pytest.mark.parametrize("failure", ["connection", "authentication"])
def test_a_failing_query_never_shows_the_secret(
    spark: SparkSession,
    kafka: EmbeddedKafka,
    new_topic: TopicFactory,
    failure: str,
    tmp_path: Path,
) -> None:
    topic = new_topic(partitions=1)
    kafka.produce(topic, [(0, None, b"x", None, None)])
    servers = _servers(kafka, failure)

    def source() -> Any:
        reader = spark.readStream.format("unaligned").option("subscribe", topic)
        for key, value in {"kafka.bootstrap.servers": servers, **_SASL}.items():
            reader = reader.option(key, value)
        return (
            reader.load()
            .writeStream.format("unaligned")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "source-checkpoint"))
            .trigger(availableNow=True)
            .start()
        )

    def sink() -> Any:
        writer = (
            kafka_stream(spark, kafka, topic)
            .select("value")
            .writeStream.format("unaligned")
            .option("topic", topic)
            .option("checkpointLocation", str(tmp_path / "sink-checkpoint"))
        )
        for key, value in {"kafka.bootstrap.servers": servers, **_SASL, **_SINK_ONLY}.items():
            writer = writer.option(key, value)
        return writer.trigger(availableNow=True).start()

    for start in (source, sink):
        failed = _query_failure(start)
        _assert_no_secret(failed)
        assert SECRET not in str(failed) + failed.getMessage()  # with the JVM stack trace


REQUEST_TIMEOUT_MS = 4000
WRONG = "Wr0ng-Secret-d00d"
#: Past the request timeout (kafka-python's bootstrap waits that long): saying why.
EXPLAINING_S = 6.0
_REFUSED = {
    "plain-wrong-password": ("plain", {"sasl.jaas.config": "wrong"}, "SASL PLAIN login"),
    "scram-wrong-password": ("scram", {"sasl.jaas.config": "wrong"}, "SASL SCRAM-SHA-512 login"),
    "oauth-expired-token": (
        "oauth",
        {
            "sasl.oauthbearer.token.endpoint.url": "",
            "sasl.login.callback.handler.class": "",
            "sasl.jaas.config": "",
            "sasl.oauthbearer.token.provider": "secured_cluster:expired_tokens",
        },
        "SASL OAUTHBEARER login.*refused by the broker: the token expired at ",
    ),
    "oauth-wrong-client-secret": (
        "oauth",
        {"sasl.jaas.config": "wrong"},
        "token endpoint refused client 'spark-app'.*invalid_client",
    ),
    "mtls-without-certificate": (
        "mtls",
        {"ssl.keystore.location": "", "ssl.keystore.type": "", "ssl.keystore.password": ""},
        "TLS with .*SSL.*refused the client.*kafka.ssl.keystore",
    ),
}


def _refused_login(cluster: SecuredCluster, case: str) -> dict[str, str]:
    login, overrides, _ = _REFUSED[case]
    if overrides.get("sasl.jaas.config") == "wrong":  # the right user, a wrong secret
        module, user = {
            "plain": ("PlainLoginModule", {"username": USER}),
            "scram": ("ScramLoginModule", {"username": USER}),
            "oauth": ("OAuthBearerLoginModule", {"clientId": OAUTH_CLIENT}),
        }[login]
        secret = "clientSecret" if login == "oauth" else "password"
        overrides = {**overrides, "sasl.jaas.config": jaas(module, **user, **{secret: WRONG})}
    return {
        **cluster.options(login, **overrides),
        "kafka.request.timeout.ms": str(REQUEST_TIMEOUT_MS),
    }


def _assert_refused(error: BaseException, pattern: str, started: float) -> None:
    elapsed = time.monotonic() - started
    assert elapsed < REQUEST_TIMEOUT_MS / 1000 + EXPLAINING_S, f"took {elapsed:.1f} s"
    assert isinstance(error, (KafkaAuthenticationError, OAuthTokenError)), repr(error)
    assert re.search(pattern, str(error)), str(error)
    for e in _chain(error):
        text = f"{e!s} {e!r}"
        for secret in (*SECRETS, WRONG, "eyJ"):  # "eyJ": how every JWT starts
            assert secret not in text, text


@pytest.mark.parametrize("case", sorted(_REFUSED))
def test_a_refused_login_fails_in_bounded_time_naming_the_mechanism(
    secured_kafka: SecuredCluster, case: str, tmp_path: Path
) -> None:
    options = _refused_login(secured_kafka, case)
    pattern = _REFUSED[case][2]
    source = SourceOptions.parse({"subscribe": "t", **options})
    lookup = OffsetLookup(source.kafka)
    started = time.monotonic()
    with pytest.raises(Exception) as by_source:
        lookup.latest([TopicPartitionId("t", 0)])
    lookup.close()
    _assert_refused(by_source.value, pattern, started)

    target = SinkOptions.parse(
        {"checkpointLocation": str(tmp_path), "topic": "t", **options}
    ).target
    assert isinstance(target, KafkaTarget)
    columns = kafka_columns(StructType().add("value", StringType()), target)
    started = time.monotonic()
    with pytest.raises(Exception) as by_sink:
        KafkaParticipant(target, columns, "refused").check_at_query_start()
    _assert_refused(by_sink.value, pattern, started)


def test_a_query_with_a_wrong_password_fails_saying_so(
    spark: SparkSession, secured_kafka: SecuredCluster, tmp_path: Path
) -> None:
    options = _refused_login(secured_kafka, "scram-wrong-password")

    def source() -> Any:
        reader = spark.readStream.format("unaligned").option("subscribe", "t")
        for key, value in options.items():
            reader = reader.option(key, value)
        return (
            reader.load()
            .writeStream.format("unaligned")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )

    failed = _query_failure(source)
    text = str(failed) + failed.getMessage()
    assert "SASL SCRAM-SHA-512 login" in text and "refused" in text
    for secret in (*SECRETS, WRONG):
        assert secret not in text
