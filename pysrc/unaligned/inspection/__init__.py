"""Looking at a checkpoint: ``unaligned inspect`` and ``unaligned report``.

- :mod:`.model`: the facts, as frozen dataclasses, and the ``--json`` document.
- :mod:`.checkpoint_view`: collects them from a checkpoint (:func:`build_view`).
- :mod:`.broker_transactions`: the query's open transactions, when a broker is named.
- :mod:`.formatting`, :mod:`.text`: the human-readable table.
- :mod:`.svg_charts`, :mod:`.html_report`: the self-contained HTML report.
"""

from __future__ import annotations

from unaligned.inspection.checkpoint_view import build_view
from unaligned.inspection.model import CheckpointView
from unaligned.inspection.text import render_text

__all__ = ["CheckpointView", "build_view", "render_text"]
