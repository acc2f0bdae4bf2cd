"""Reading and writing through the secured listeners of one broker (secured_cluster.py): TLS,
mutual TLS, SASL_SSL with PLAIN and SCRAM-SHA-512, and OAUTHBEARER checked by Kafka's own OIDC
validator against the test's issuer.

- A read task alone (no Spark) reads a range over each login, on the read path's own
  connections (TLS and SASL on its kept sockets).
- Each login runs Kafka -> Kafka in the shared Spark session, exactly once (read back
  read_committed), the record timestamps carried by the sink's ``timestamp`` column; the SASL
  logins run again on more input from the same checkpoint (a restart).
- The stores as Spark takes them reach the mutual-TLS listener: an encrypted inline PEM key,
  kafka-python's PEM file names, a PEM key store; PKCS12 and inline PEM trust.
- OAuth with KIP-768's option names, and with a token provider of the user's named by an import
  string.

Refused logins and what their messages say: test_secrets_in_errors.py.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from harness import wait_until
from secured_cluster import (
    KEY_PASSWORD,
    LOGINS,
    OAUTH_CLIENT,
    OAUTH_SECRET,
    STORE_PASSWORD,
    SecuredCluster,
)
from unaligned.kafka.clients.admin_clients import ask_admin
from unaligned.kafka.clients.client_options import client_config_from_options
from unaligned.kafka.clients.connections import settings_key
from unaligned.kafka.fetch import fetch_connections
from unaligned.kafka.partitions import TopicPartitionId
from unaligned.source.options import SourceOptions
from unaligned.source.partition_reader import KafkaInputPartition, read_partition
from unaligned.source.planning.offset_ranges import OffsetRange

SASL_LOGINS = ("plain", "scram", "oauth")
# an hour ago: a record stamped past the topic's retention (7 days) is deleted by the broker's
# retention check, which runs every 5 minutes of a long test run
BASE_TS = int(time.time() * 1000) - 3_600_000


def _topic(cluster: SecuredCluster, partitions: int = 1) -> str:
    name = f"sec-{uuid.uuid4().hex[:10]}"
    cluster.kafka.create_topic(name, partitions=partitions)
    return name


def _client_kwargs(options: dict[str, str]) -> dict[str, Any]:
    params = {k.removeprefix("kafka."): v for k, v in options.items()}
    return dict(client_config_from_options(params).client_kwargs)


@pytest.mark.parametrize("login", LOGINS)
def test_a_read_task_reads_over_its_own_logged_in_connections(
    secured_kafka: SecuredCluster, login: str
) -> None:
    topic = _topic(secured_kafka)
    values = [f"r{i:04d}".encode() for i in range(500)]
    secured_kafka.kafka.produce(topic, [(0, None, v, None, None) for v in values])
    parsed = SourceOptions.parse({"subscribe": topic, **secured_kafka.options(login)})
    part = KafkaInputPartition(
        index=0,
        ranges=(OffsetRange(TopicPartitionId(topic, 0), 0, len(values)),),
        kafka=parsed.kafka,
        include_headers=False,
        fail_on_data_loss=True,
        poll_timeout_ms=parsed.poll_timeout_ms,
    )
    table = pa.Table.from_batches(list(read_partition(part)))
    assert table.column("value").to_pylist() == values
    kwargs = parsed.kafka.consumer_kwargs()
    kept = fetch_connections._OPEN.get((settings_key(kwargs), 1))
    assert kept is not None and kept.is_open(), "the read did not go over its own connection"


def _run_query(
    spark: Any, cluster: SecuredCluster, login: str, source: str, output: str, checkpoint: Path
) -> None:
    options = cluster.options(login)
    reader = spark.readStream.format("unaligned").option("subscribe", source)
    reader = reader.option("startingOffsets", "earliest")
    for key, value in options.items():
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .selectExpr("key", "value", "timestamp", "partition")
        .writeStream.format("unaligned")
        .option("topic", output)
        .option("checkpointLocation", str(checkpoint))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(180), "the query did not finish"
        assert query.exception() is None, query.exception()
    finally:
        query.stop()


@pytest.mark.parametrize("login", LOGINS)
def test_kafka_to_kafka_exactly_once_over_each_login(
    spark: Any, secured_kafka: SecuredCluster, login: str, tmp_path: Path
) -> None:
    kafka = secured_kafka.kafka
    source, output = _topic(secured_kafka, 2), _topic(secured_kafka, 2)
    sent: list[tuple[bytes, int]] = []

    def produce(start: int, count: int) -> None:
        batch = [(f"v{i:05d}".encode(), BASE_TS + i) for i in range(start, start + count)]
        kafka.produce(source, [(i % 2, b"k", v, None, ts) for i, (v, ts) in enumerate(batch)])
        sent.extend(batch)

    produce(0, 300)
    _run_query(spark, secured_kafka, login, source, output, tmp_path / "checkpoint")
    if login in SASL_LOGINS:  # a restart from the checkpoint: only the new records are written
        produce(300, 200)
        _run_query(spark, secured_kafka, login, source, output, tmp_path / "checkpoint")
    wait_until(
        lambda: kafka.last_stable_offsets(output) == kafka.end_offsets(output),
        "every transaction of the sink ended",
    )
    got = [(r.value, r.timestamp) for r in kafka.consume_all(output, read_committed=True)]
    assert len(got) == len(sent), f"{len(got)} records read back, {len(sent)} sent"
    assert sorted(got) == sorted(sent)  # every record once, with its timestamp


@pytest.mark.parametrize(
    "stores",
    [
        {  # inline PEM: the client's encrypted key and its chain; PKCS12 trust
            "ssl.keystore.key": "client_key_encrypted_pem",
            "ssl.keystore.certificate.chain": "client_chain_pem",
            "ssl.key.password": KEY_PASSWORD,
            "ssl.truststore.certificates": "",
            "ssl.truststore.location": "truststore_p12",
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.password": STORE_PASSWORD,
        },
        {  # kafka-python's PEM file names, the key encrypted
            "ssl.certfile": "client_chain_pem",
            "ssl.keyfile": "client_key_encrypted_pem",
            "ssl.key.password": KEY_PASSWORD,
            "ssl.cafile": "ca_pem",
            "ssl.truststore.certificates": "",
        },
        {  # a PEM key store (key and chain in one file), PEM trust without a type
            "ssl.keystore.location": "client_pem",
            "ssl.keystore.type": "PEM",
            "ssl.truststore.certificates": "",
            "ssl.truststore.location": "ca_pem",
        },
    ],
    ids=["inline-pem-and-pkcs12-trust", "kafka-python-pem-files", "pem-key-store"],
)
def test_stores_as_spark_takes_them_reach_the_mutual_tls_listener(
    secured_kafka: SecuredCluster, stores: dict[str, str]
) -> None:
    tls = secured_kafka.tls
    files = {
        "client_key_encrypted_pem": tls.client_key_encrypted_pem,
        "client_chain_pem": tls.client_chain_pem,
        "client_pem": tls.client_pem,
        "truststore_p12": tls.truststore_p12,
        "ca_pem": tls.ca_pem,
    }
    inline = ("ssl.keystore.key", "ssl.keystore.certificate.chain")

    def given(name: str, value: str) -> str:
        if value not in files:
            return value
        return files[value].read_text() if name in inline else str(files[value])

    dropped = ("ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password")
    chosen = {name: given(name, value) for name, value in stores.items()}
    options = secured_kafka.options("mtls", **{**{k: "" for k in dropped}, **chosen})
    topic = _topic(secured_kafka)
    kwargs = _client_kwargs(options)
    assert topic in ask_admin(kwargs, "listing topics", lambda admin: admin.list_topics())


def test_oauth_with_kip_768_option_names_and_with_a_users_token_provider(
    secured_kafka: SecuredCluster,
) -> None:
    topic = _topic(secured_kafka)
    config_form = secured_kafka.options(
        "oauth",
        **{
            "sasl.jaas.config": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
            ),
            "sasl.oauthbearer.client.credentials.client.id": OAUTH_CLIENT,
            "sasl.oauthbearer.client.credentials.client.secret": OAUTH_SECRET,
            "sasl.oauthbearer.scope": "kafka.admin",  # a source of its own in this process
        },
    )
    issued = secured_kafka.issuer.issued
    for options in (config_form, config_form):  # the second client reuses the process's token
        kwargs = _client_kwargs(options)
        assert topic in ask_admin(kwargs, "listing topics", lambda admin: admin.list_topics())
    assert secured_kafka.issuer.issued == issued + 1
    provider = secured_kafka.options(
        "oauth",
        **{
            "sasl.oauthbearer.token.endpoint.url": "",
            "sasl.login.callback.handler.class": "",
            "sasl.jaas.config": "",
            "sasl.oauthbearer.token.provider": "secured_cluster:minted_tokens",
        },
    )
    kwargs = _client_kwargs(provider)
    assert topic in ask_admin(kwargs, "listing topics", lambda admin: admin.list_topics())
