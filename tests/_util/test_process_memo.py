"""unaligned._util.process_memo: values kept per key, forgotten when stale, and once-flags."""

from __future__ import annotations

from unaligned._util.process_memo import ProcessMemo


def test_a_process_memo_keeps_values_forgets_stale_ones_and_flags_once() -> None:
    memo: ProcessMemo[tuple[str, str], int] = ProcessMemo()
    calls: list[int] = []
    assert memo.get_or_compute(("k", "t"), lambda: calls.append(1) or 7) == 7
    assert memo.get_or_compute(("k", "t"), lambda: calls.append(1) or 8) == 7
    assert calls == [1]
    memo.forget(("k", "t"))
    assert memo.get(("k", "t")) is None
    assert [memo.first_time(("k", "w")) for _ in range(3)] == [True, False, False]
