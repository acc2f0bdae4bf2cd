"""``python -m unaligned.manual [--check] [DOCS_DIR]``: write the generated reference pages into
``docs/reference/`` (default: the checkout's ``docs/``), or with ``--check`` exit 1 naming every
page that differs from what the code says (``./dev lint`` runs the check, ``./dev docs`` the
write)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from unaligned.manual.cli_page import cli_page
from unaligned.manual.option_tables import sink_page, source_page

#: Each generated page, relative to the docs directory, and what renders it.
PAGES: dict[str, Callable[[], str]] = {
    "reference/source-options.md": source_page,
    "reference/sink-options.md": sink_page,
    "reference/cli.md": cli_page,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m unaligned.manual")
    parser.add_argument("docs", nargs="?", type=Path, default=Path("docs"))
    parser.add_argument("--check", action="store_true", help="compare only, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for relative, render in PAGES.items():
        path = args.docs / relative
        text = render()
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(
            "generated pages differ from the code (run ./dev docs to write them): "
            + ", ".join(stale),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
