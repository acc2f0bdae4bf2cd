"""Where the records of Kafka v2 record batches begin (what record_fields decodes).

:mod:`unaligned.kafka.records.record_decoder` walks fetch answers batch by batch (framing, CRC,
compression, transactions) and adds each batch's records to a :class:`RecordScan`: one scan may
hold the batches of many partitions, each batch with the offsets ``[lower, upper)`` it keeps
(``upper`` exclusive; :data:`NO_END`: no end). Adding a batch finds where each of its records
begins (at its length varint): runs of records of one length with numpy, the rest with one
short Python loop per record. The scan keeps the bytes it holds as batches come and go, and
gives its records as one buffer with their starts (:meth:`RecordScan.buffer_and_heads`).
Varints are zig-zag encoded (:func:`read_varint`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos


def _walk(buf: bytes, pos: int, end: int, count: int) -> np.ndarray:
    """Where each record of one batch begins (at its length varint), as positions in ``buf``.

    Runs of records of one length (fixed-size payloads: a record's length then changes only
    when its offset or timestamp delta needs another varint byte) are found with numpy: from a
    record of stride ``s``, the starts ``pos + i * s`` are checked at once, and every predicted
    start that holds the same length varint as the first is a record of the same length (by
    induction from the first); the run ends at the first that does not. Where runs are short
    (lengths that vary), the rest of the batch takes one short Python loop per record, the only
    per-record Python code on the read path; so do the records of a batch once fewer than
    :data:`_LOOP_BELOW` are left. Lengths are never negative, so a zig-zag length is the varint
    value shifted right by one."""
    runs: list[np.ndarray] = []
    window = np.frombuffer(buf, np.uint8)
    found = 0
    short_runs = 0
    while count - found >= _LOOP_BELOW and short_runs < _SHORT_RUNS:
        length, after = _length_at(buf, pos)
        stride = after - pos + length
        n = min(count - found, (end - pos) // stride) if stride > 0 else 0
        if n < _MIN_RUN:
            break
        starts = np.arange(pos, pos + n * stride, stride, dtype=np.int64)
        same = window[starts] == window[pos]
        for k in range(1, after - pos):
            same &= window[starts + k] == window[pos + k]
        run = n if bool(same.all()) else int(np.argmin(same))
        runs.append(starts[:run])
        found += run
        pos += run * stride
        short_runs = short_runs + 1 if run < _MIN_RUN else 0
    heads: list[int] = []
    append = heads.append
    for _ in range(count - found):
        append(pos)
        b = buf[pos]
        if b < 0x80:
            pos += 1 + (b >> 1)
            continue
        b2 = buf[pos + 1]
        if b2 < 0x80:
            pos += 2 + (((b & 0x7F) | (b2 << 7)) >> 1)
            continue
        value, pos = _length_at(buf, pos)
        pos += value
    if pos != end:
        raise IndexError("record lengths do not add up to the batch length")
    runs.append(np.array(heads, np.int64))
    return np.concatenate(runs) if len(runs) > 1 else runs[0]


#: A run shorter than this is not worth numpy's per-call cost; after :data:`_SHORT_RUNS` such
#: runs in a row the batch's lengths vary and the loop takes the rest.
_MIN_RUN = 8
_SHORT_RUNS = 2
#: Fewer records than this left in a batch go through the loop: one numpy run check costs about
#: as much as the loop over 60-100 records (10-15 us against 0.2 us a record; a wide topic's
#: batches often hold a few dozen records).
_LOOP_BELOW = 128


def _length_at(buf: bytes, pos: int) -> tuple[int, int]:
    """(record length, position after its varint); IndexError for a negative length."""
    length, after = read_varint(buf, pos)
    if length < 0:
        raise IndexError("negative record length")
    return length, after


NO_END = (1 << 63) - 1
"""An upper offset bound that keeps every record (no range end)."""


@dataclass
class RecordScan:
    """The records to decode from one or more fetch answers (several partitions' batches may
    share a scan), added batch by batch, each partition's in offset order: where every record
    begins, its batch's header values, and the offsets ``[lower, upper)`` its batch keeps."""

    heads: list[np.ndarray] = field(default_factory=list)  # record starts, one array a batch
    counts: list[int] = field(default_factory=list)
    bases: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)  # first timestamp, or the log-append time
    log_append: list[bool] = field(default_factory=list)
    lower: list[int] = field(default_factory=list)  # first offset kept (the fetch offset)
    upper: list[int] = field(default_factory=list)  # exclusive end of the offsets kept
    # (buffer, first byte, end) of each batch's records: a decompressed batch has a buffer of
    # its own, and so has every answer of a scan over several; sections in more than one
    # buffer are copied into one so that positions stay in order.
    sections: list[tuple[bytes, int, int]] = field(default_factory=list)
    section_bytes: int = field(init=False, default=0)
    """The sections' bytes together, kept as batches come and go: asked after every answer,
    a sum over the sections made a task of 2,000 partitions quadratic."""

    def __post_init__(self) -> None:
        self.section_bytes = sum(end - start for _, start, end in self.sections)

    def __len__(self) -> int:
        return len(self.counts)

    def add(
        self,
        base_offset: int,
        count: int,
        time_ms: int,
        log_append: bool,
        buf: bytes,
        start: int,
        end: int,
        lower: int = 0,
        upper: int = NO_END,
    ) -> None:
        """Add one batch: ``count`` records from ``base_offset`` in ``buf[start:end]``, of which
        those with offsets in ``[lower, upper)`` are kept. ``time_ms`` is the batch's first
        timestamp, or with ``log_append`` the broker's time. IndexError: corrupt lengths."""
        self.heads.append(_walk(buf, start, end, count))
        self.sections.append((buf, start, end))
        self.section_bytes += end - start
        self.counts.append(count)
        self.bases.append(base_offset)
        self.times.append(time_ms)
        self.log_append.append(log_append)
        self.lower.append(lower)
        self.upper.append(upper)

    def truncate(self, batches: int) -> None:
        """Forget every batch after the first ``batches`` (an answer that could not be added
        whole)."""
        for values in (
            self.heads,
            self.counts,
            self.bases,
            self.times,
            self.log_append,
            self.lower,
            self.upper,
            self.sections,
        ):
            del values[batches:]
        self.section_bytes = sum(end - start for _, start, end in self.sections)

    def select(self, first: int, stop: int) -> RecordScan:
        """The batches ``[first, stop)`` as a scan of their own."""
        return RecordScan(
            self.heads[first:stop],
            self.counts[first:stop],
            self.bases[first:stop],
            self.times[first:stop],
            self.log_append[first:stop],
            self.lower[first:stop],
            self.upper[first:stop],
            self.sections[first:stop],
        )

    def buffer_and_heads(self) -> tuple[bytes, np.ndarray]:
        """One buffer holding every batch's records, and where each record begins in it: the
        batches' own buffer when they share one (no copy), else their sections copied."""
        if not self.sections:
            return b"", np.empty(0, np.int64)
        heads = np.concatenate(self.heads) if len(self.heads) > 1 else self.heads[0]
        first = self.sections[0][0]
        if all(buf is first for buf, _, _ in self.sections):
            return first, heads
        combined = b"".join(memoryview(buf)[lo:hi] for buf, lo, hi in self.sections)
        lengths = np.array([hi - lo for _, lo, hi in self.sections], np.int64)
        placed = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        shift = placed - np.array([lo for _, lo, _ in self.sections], np.int64)
        return combined, heads + np.repeat(shift, np.array(self.counts, np.int64))
