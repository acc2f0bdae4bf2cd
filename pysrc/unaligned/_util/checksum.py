"""A checksum inside the JSON files that recovery trusts, verified on every read.

The sink's commit records (and the finishing markers) are small JSON documents that decide what
a restart commits. :func:`sealed_json` writes a document with one more field,
``"checksum": "sha256:<hex>"``, the SHA-256 of the document without that field as
``json.dumps(..., sort_keys=True)`` writes it; :func:`verified` checks it and returns the
document without it. A mismatch means the file was changed after it was written (edited into
other valid JSON, or corrupted): the caller raises its own error naming the file, with
:func:`mismatch`. A document without the field is accepted as it is: removing the field is how
a deliberate edit is made acceptable (the mismatch message says so).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

CHECKSUM_FIELD = "checksum"
_PREFIX = "sha256:"


def _digest(document: Mapping[str, Any]) -> str:
    canonical = json.dumps(document, sort_keys=True).encode("utf-8")
    return _PREFIX + hashlib.sha256(canonical).hexdigest()


def sealed_json(document: Mapping[str, Any]) -> bytes:
    """``document`` as JSON bytes (sorted keys) with its checksum field added."""
    body = {k: v for k, v in document.items() if k != CHECKSUM_FIELD}
    return json.dumps({**body, CHECKSUM_FIELD: _digest(body)}, sort_keys=True).encode("utf-8")


def verified(document: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(``document`` without its checksum field, the problem or ``None``). No field: no
    problem (a deliberately edited file)."""
    body = {k: v for k, v in document.items() if k != CHECKSUM_FIELD}
    recorded = document.get(CHECKSUM_FIELD)
    if recorded is None:
        return body, None
    actual = _digest(body)
    if recorded != actual:
        return body, mismatch(str(recorded), actual)
    return body, None


def mismatch(recorded: str, actual: str) -> str:
    return (
        f"its content does not match its checksum (recorded {recorded}, content {actual}): it "
        "was changed after it was written. Restore the file as it was; if the change was "
        f"deliberate, remove its '{CHECKSUM_FIELD}' field"
    )
