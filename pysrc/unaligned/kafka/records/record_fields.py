"""The records inside Kafka v2 record batches, decoded into columns with numpy.

Once a :class:`~unaligned.kafka.records.record_scan.RecordScan` knows where every record
begins, :func:`decode_fields` decodes the fields of all its records at once with numpy (length,
timestamp and offset deltas, key, value, header count; headers, when asked for, one short loop
per record that has any), keeps each batch's records in its ``[lower, upper)``, and builds the
key and value columns without keys and values ever becoming Python objects.

A v2 record: length varint, attributes int8, timestamp delta varlong, offset delta varint, key
and value (varint length, -1 for null, then the bytes), header count varint, then per header a
key (varint length, UTF-8) and a value (varint length, -1 for null). Varints are zig-zag encoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from unaligned.errors import RecordDecodeError
from unaligned.kafka.records.record_columns import RecordColumns, kafka_arrow_schema
from unaligned.kafka.records.record_scan import RecordScan, read_varint

_HEADERS_TYPE: pa.DataType = kafka_arrow_schema(True).field("headers").type


def _varints(arr: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zig-zag varints at ``pos`` (one per record) -> (values, positions after them)."""
    first = arr[pos].astype(np.uint64)
    value = first & np.uint64(0x7F)
    after = pos + 1
    more = np.flatnonzero(first & np.uint64(0x80))
    shift = 7
    while more.size:
        if shift > 63:
            raise IndexError("varint longer than 10 bytes")
        b = arr[after[more]].astype(np.uint64)
        value[more] |= (b & np.uint64(0x7F)) << np.uint64(shift)
        after[more] += 1
        more = more[(b & np.uint64(0x80)) != 0]
        shift += 7
    signed = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return signed, after


_MOST_STRIDED_RUNS = 1 / 16
"""Above this many runs per record, :func:`_gather` masks bytes instead (values of many lengths)."""


def _gather(arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The bytes ``arr[s:s+l]`` of every (start, length > 0), concatenated; the ranges are
    disjoint and in increasing order."""
    if not len(starts):
        return np.empty(0, np.uint8)
    total = int(lengths.sum())
    lo = int(starts[0])
    ends = starts + lengths
    hi = int(ends[-1])
    if total * 8 < hi - lo:  # sparse (e.g. short keys in a large fetch): index per byte
        offsets = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        index = np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)
        gathered: np.ndarray = arr[index]
        return gathered
    runs = _strided_runs(starts, lengths, int(len(starts) * _MOST_STRIDED_RUNS))
    if runs is not None:
        return _gather_strided(arr, starts, lengths, runs, total)
    # dense, of many lengths: a byte mask of alternating (gap, value) runs
    pieces = np.empty(2 * len(starts), np.int64)
    pieces[0] = 0
    pieces[2::2] = starts[1:] - ends[:-1]
    pieces[1::2] = lengths
    keep = np.zeros(2 * len(starts), bool)
    keep[1::2] = True
    masked: np.ndarray = arr[lo:hi][np.repeat(keep, pieces)]
    return masked


def _strided_runs(starts: np.ndarray, lengths: np.ndarray, most: int) -> np.ndarray | None:
    """Where each run of ranges of one length, one stride apart, begins (indices, the first 0),
    or ``None`` when there would be more than ``most`` + 1 runs. A run of fixed-size records in
    one batch is one run."""
    stride = np.diff(starts)
    new_length = np.concatenate(([False], lengths[1:] != lengths[:-1]))
    new_stride = np.zeros(len(starts), bool)
    new_stride[2:] = stride[1:] != stride[:-1]  # range i is another distance from range i - 1
    candidates = np.flatnonzero(new_length | new_stride)
    if len(candidates) > most:
        return None
    runs = [0]
    for i in candidates.tolist():
        # a range that only changes the stride joins a run of one range (it sets its stride)
        if new_length[i] or runs[-1] != i - 1:
            runs.append(i)
    return np.array(runs, np.int64)


def _gather_strided(
    arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray, runs: np.ndarray, total: int
) -> np.ndarray:
    """:func:`_gather` for ranges in few :func:`_strided_runs`: one strided copy a run."""
    out = np.empty(total, np.uint8)
    bounds = np.append(runs, len(starts)).tolist()
    first_starts = starts[runs].tolist()
    run_lengths = lengths[runs].tolist()
    strides = np.append(np.diff(starts), 0)[runs].tolist()
    placed = 0
    for i, (start, length, stride) in enumerate(
        zip(first_starts, run_lengths, strides, strict=True)
    ):
        count = bounds[i + 1] - bounds[i]
        rows = np.lib.stride_tricks.as_strided(
            arr[start:], shape=(count, length), strides=(stride if count > 1 else 0, 1)
        )
        out[placed : placed + count * length].reshape(count, length)[:] = rows
        placed += count * length
    return out


def _binary_array(arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray, where: str) -> pa.Array:
    valid = lengths >= 0
    sizes = np.where(valid, lengths, 0)
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise RecordDecodeError(f"{where}: more than 2 GiB of keys or values")
    present = sizes > 0
    data = _gather(arr, starts[present], sizes[present])
    null_count = int(len(valid) - np.count_nonzero(valid))
    validity = None if null_count == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(),
        len(sizes),
        [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
        null_count=null_count,
    )


def _parse_headers(buf: bytes, pos: int, count: int) -> list[tuple[str, bytes | None]]:
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        key_len, pos = read_varint(buf, pos)
        key = buf[pos : pos + key_len].decode("utf-8")
        pos += key_len
        value_len, pos = read_varint(buf, pos)
        value = None if value_len < 0 else buf[pos : pos + value_len]
        pos += max(value_len, 0)
        headers.append((key, value))
    return headers


@dataclass(frozen=True)
class DecodedFields:
    """The records a scan keeps, as columns, and how many of them each batch gave (in order)."""

    columns: RecordColumns
    kept_per_batch: np.ndarray


def decode_fields(
    buf: bytes, heads: np.ndarray, scan: RecordScan, include_headers: bool, where: str
) -> DecodedFields:
    """Decode every record's fields at once; keep each batch's records in its ``[lower,
    upper)``. ``where`` names the fetch in errors (:class:`RecordDecodeError`)."""
    arr = np.frombuffer(buf, np.uint8)
    try:
        length, s = _varints(arr, heads)
        e = s + length
        ts_delta, p = _varints(arr, s + 1)  # after the record's attributes byte
        offset_delta, p = _varints(arr, p)
        key_len, p = _varints(arr, p)
        key_start = p
        value_len, p = _varints(arr, p + np.maximum(key_len, 0))
        value_start = p
        header_count, p = _varints(arr, p + np.maximum(value_len, 0))
    except IndexError:
        raise RecordDecodeError(f"{where}: corrupt record") from None
    if np.any(p > e) or np.any(header_count < 0) or np.any((header_count == 0) & (p != e)):
        raise RecordDecodeError(f"{where}: record fields do not match record lengths")
    counts = np.array(scan.counts, np.int64)
    offsets = np.repeat(np.array(scan.bases, np.int64), counts) + offset_delta
    appended = np.repeat(np.array(scan.log_append, bool), counts)
    timestamps = np.repeat(np.array(scan.times, np.int64), counts)
    timestamps += np.where(appended, 0, ts_delta)
    keep = (offsets >= np.repeat(np.array(scan.lower, np.int64), counts)) & (
        offsets < np.repeat(np.array(scan.upper, np.int64), counts)
    )
    if keep.all():
        kept_per_batch = counts
    else:
        firsts = np.zeros(len(counts), np.int64)
        np.cumsum(counts[:-1], out=firsts[1:])
        kept_per_batch = np.add.reduceat(keep.astype(np.int64), firsts)
        offsets, timestamps, appended = offsets[keep], timestamps[keep], appended[keep]
        key_start, key_len, value_start, value_len = (
            key_start[keep],
            key_len[keep],
            value_start[keep],
            value_len[keep],
        )
        header_count, p = header_count[keep], p[keep]
    headers = None
    if include_headers:
        with_headers = np.flatnonzero(header_count)
        if with_headers.size:
            rows: list[Any] = [None] * len(offsets)
            for i in with_headers.tolist():
                rows[i] = _parse_headers(buf, int(p[i]), int(header_count[i]))
            headers = pa.array(rows, type=_HEADERS_TYPE)
        else:
            headers = pa.nulls(len(offsets), type=_HEADERS_TYPE)
    columns = RecordColumns(
        offsets=offsets,
        timestamps_ms=timestamps,
        timestamp_types=appended.astype(np.int32),
        keys=_binary_array(arr, key_start, key_len, where),
        values=_binary_array(arr, value_start, value_len, where),
        headers=headers,
    )
    return DecodedFields(columns, kept_per_batch)
