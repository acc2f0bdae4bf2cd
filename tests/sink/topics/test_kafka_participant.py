"""The Kafka participant's pure parts: its transactional ids and prepared items as JSON. Anything
that talks to a broker is in integration/test_kafka_sink.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import TransactionDescription, TransactionState
from pyspark.sql.types import StringType, StructField, StructType

from fake_admin_client import FakeAdmin, use_fake_admin
from unaligned.checkpoint import Checkpoint
from unaligned.errors import KafkaUnavailableError
from unaligned.kafka.transactions import transaction_coordinator, transaction_states
from unaligned.kafka.transactions.transaction_states import commit_blockers
from unaligned.kafka.transactions.transactions import PreparedTransaction
from unaligned.sink.commit_log import CommitLog, CommitRecord
from unaligned.sink.kafka_target import KafkaTarget
from unaligned.sink.options import SinkOptions
from unaligned.sink.topics import kafka_id_pool
from unaligned.sink.topics.kafka_columns import kafka_columns
from unaligned.sink.topics.kafka_items import prepared_from_json, prepared_to_json
from unaligned.sink.topics.kafka_participant import KafkaParticipant


def _participant(tmp_path: Path, prefix: str) -> KafkaParticipant:
    target = SinkOptions.parse(
        {
            "checkpointlocation": str(tmp_path),
            "kafka.bootstrap.servers": "127.0.0.1:1",
            "topic": "t",
        }
    ).target
    assert isinstance(target, KafkaTarget)
    columns = kafka_columns(StructType([StructField("value", StringType())]), target)
    return KafkaParticipant(target, columns, prefix)


def test_only_the_sinks_own_transactional_ids_are_recognised(tmp_path: Path) -> None:
    participant = _participant(tmp_path, "app")
    assert participant.transactional_id(3, 0) == "app-3-0"
    assert participant.owns("app-3-0")
    # Another stem that merely starts with "app" (prefix "app-12"'s ids, the old per-batch
    # scheme's) is never taken for this query's: clean-up would fence it.
    for foreign in ("app-12-3-0", "app-2-12-3-0", "apple-1-2", "app-1", "app-x-2", "app-1-2-"):
        assert not participant.owns(foreign), foreign


def test_prefixes_x_and_x_7_never_share_an_id(tmp_path: Path) -> None:
    """The issue's clash: queries with prefixes ``X`` and ``X-7`` (and two queries with one
    prefix) own disjoint ids, whatever the tasks and slots."""
    stems = [kafka_id_pool.id_stem(p, q) for p in ("X", "X-7") for q in ("q1", "q2")]
    stems += ["X", "X-7", kafka_id_pool.default_transactional_id_prefix("q1")]
    owners = [_participant(tmp_path / str(i), stem) for i, stem in enumerate(stems)]
    for owner in owners:
        for task, slot in ((0, 0), (0, 1), (7, 0), (12, 3)):
            tid = owner.transactional_id(task, slot)
            assert [o.id_stem for o in owners if o.owns(tid)] == [owner.id_stem], tid
            assert kafka_id_pool.stem_of(tid) == owner.id_stem


def test_a_prefix_with_regex_characters_matches_only_itself(tmp_path: Path) -> None:
    participant = _participant(tmp_path, "a.b+")
    assert participant.owns(participant.transactional_id(4, 1))
    assert not participant.owns("aXb+-4-1")
    assert not participant.owns("a.bb-4-1")


def test_clean_up_with_a_broker_away_is_skipped_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rolling restart must not kill the query: clean-up only keeps consumers moving."""
    participant = _participant(tmp_path, "app")

    def unavailable(*args: object, **kwargs: object) -> list[str]:
        raise KafkaUnavailableError("could not reach Kafka at 127.0.0.1:1")

    monkeypatch.setattr(transaction_states, "list_transactional_ids", unavailable)
    fenced: list[str] = []
    monkeypatch.setattr(transaction_coordinator, "fence", lambda kwargs, tid: fenced.append(tid))
    assert participant.clean_up(CommitLog(Checkpoint.resolve(str(tmp_path))), 3) == 0
    assert fenced == []


def test_clean_up_fences_open_ids_no_needed_record_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    participant = _participant(tmp_path, "app")
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    item = {"transactionalId": "app-0-0", "producerId": 1, "epoch": 0, "recordCount": 1}
    log.write(CommitRecord(7, "kafka", (item,), 0))
    listed = ["app-0-0", "app-0-1", "app-1-0", "app-5-1-0", "other-0-0", "app-x"]
    monkeypatch.setattr(transaction_states, "list_transactional_ids", lambda kw, prefix: listed)
    fenced: list[str] = []
    monkeypatch.setattr(transaction_coordinator, "fence", lambda kwargs, tid: fenced.append(tid))
    assert participant.clean_up(log, 7) == 2
    # fenced at once (any order); "app-5-1-0" is prefix "app-5"'s (or the old per-batch scheme's)
    assert sorted(fenced) == ["app-0-1", "app-1-0"]


def test_recovery_names_open_ids_of_other_stems_under_the_prefix_and_leaves_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another query with the same ``transactionalIdPrefix`` (another owner tag), and ids of
    the scheme before owner tags: one warning names them, nothing of theirs is fenced."""
    target = dataclasses.replace(
        _participant(tmp_path, "x")._target, transactional_id_prefix="orders"
    )
    columns = kafka_columns(StructType([StructField("value", StringType())]), target)
    mine = KafkaParticipant(target, columns, "orders-qaaaa")
    log = CommitLog(Checkpoint.resolve(str(tmp_path)))
    listed = ["orders-qaaaa-0-1", "orders-qbbbb-0-0", "orders-0-0", "orders-7-0-1"]
    monkeypatch.setattr(
        transaction_states,
        "list_transactional_ids",
        lambda kw, prefix: [tid for tid in listed if tid.startswith(prefix)],
    )
    fenced: list[str] = []
    monkeypatch.setattr(transaction_coordinator, "fence", lambda kwargs, tid: fenced.append(tid))
    with caplog.at_level("WARNING"):
        assert mine.clean_up(log, None) == 1
    assert fenced == ["orders-qaaaa-0-1"]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "3 open transaction(s)" in warned[0], warned
    for other in ("orders-qbbbb-0-0", "orders-0-0", "orders-7-0-1"):
        assert other in warned[0]


def _description(state: str, pid: int = 4001, epoch: int = 3, start: int = 0) -> Any:
    return TransactionDescription(1, TransactionState(state), pid, epoch, 60_000, start, set())


@pytest.mark.parametrize(
    "description, reason",
    [
        (None, "unknown to its coordinator"),
        (_description("CompleteAbort"), "CompleteAbort"),
        (_description("Ongoing", epoch=4), "epoch 4"),
        (_description("Ongoing", pid=9), "producer id 9"),
        (_description("Ongoing", start=-50_000), "began 50.0 s ago"),
        (_description("CompleteAbort", epoch=4), "aborted by the transaction timeout"),
        (_description("Empty", epoch=4), "another attempt of the task took it"),
        (_description("CompleteAbort", epoch=5), "another attempt of the task took it"),
    ],
)
def test_commit_blockers_name_why_a_transaction_cannot_commit(
    description: Any, reason: str
) -> None:
    prepared = PreparedTransaction("app-0-0", producer_id=4001, epoch=3, record_count=2)
    blockers = commit_blockers([prepared], {"app-0-0": description}, now_ms=0, margin_ms=15_000)
    assert len(blockers) == 1 and reason in blockers[0], blockers


def test_commit_blockers_accept_a_live_transaction_and_an_empty_one() -> None:
    live = PreparedTransaction("app-0-0", producer_id=4001, epoch=3, record_count=2)
    empty = PreparedTransaction("app-1-0", producer_id=4002, epoch=0, record_count=0)
    descriptions = {"app-0-0": _description("Ongoing", start=-1_000)}
    assert commit_blockers([live, empty], descriptions, now_ms=0, margin_ms=15_000) == []


def test_a_prepared_transaction_survives_the_commit_record_as_json(tmp_path: Path) -> None:
    prepared = PreparedTransaction(
        transactional_id="app-2-1", producer_id=4001, epoch=3, record_count=17
    )
    item = json.loads(json.dumps(prepared_to_json(prepared, 2)))
    assert item["partition"] == 2
    assert prepared_from_json(item) == prepared
    assert "twoPhaseCommit" not in item  # the layout without two-phase commit, as before
    two_phase = PreparedTransaction("app-2-1", 4001, 3, 17, two_phase_commit=True)
    item_2pc = json.loads(json.dumps(prepared_to_json(two_phase, 2)))
    assert item_2pc["twoPhaseCommit"] is True and prepared_from_json(item_2pc) == two_phase
    participant = _participant(tmp_path, "app")
    assert participant.item_key(item) == "app-2-1"
    assert participant.owns(participant.item_key(item))


def test_the_warm_up_builds_the_kept_clients_a_task_then_borrows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 1b's warm-up builds the produce session's kept client and the one ``free_id`` asks
    through, and nothing else: no request of its own (the stand-in client records none)."""
    from unaligned.kafka.clients import admin_clients
    from unaligned.kafka.produce.produce_requests import CONNECTION_IN_FLIGHT

    use_fake_admin(monkeypatch)
    participant = _participant(tmp_path, "p")
    participant.warm_up()
    participant.warm_up()  # warm already: nothing more is built
    default = FakeAdmin.DEFAULT_CONFIG["max_in_flight_requests_per_connection"]
    in_flight = sorted(
        admin.kwargs.get("max_in_flight_requests_per_connection", default)
        for admin in FakeAdmin.built
    )
    assert in_flight == sorted([default, CONNECTION_IN_FLIGHT])
    with admin_clients.shared_admin_client(participant.client_kwargs()):
        pass
    assert len(FakeAdmin.built) == 2  # free_id's questions go to the warmed client
