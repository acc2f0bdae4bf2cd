"""The command line's reference page, rendered from its argument parser.

:func:`cli_page` returns ``docs/reference/cli.md``: each subcommand's ``--help`` as argparse
prints it (at a fixed width, so the page does not depend on the terminal), in the parser's
order. The page cannot drift from the options the commands take.
"""

from __future__ import annotations

import os

from unaligned.cli import build_parser
from unaligned.manual.option_tables import GENERATED

_WIDTH = "100"


def cli_page() -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _WIDTH
    try:
        parser, commands = build_parser()
        lines = [
            "# Command line",
            "",
            GENERATED,
            "",
            "The package installs one command, `unaligned`. `unaligned --version` prints the "
            "version; `unaligned COMMAND --help` prints what each page below shows.",
        ]
        for name, sub in commands.items():
            help_text = sub.format_help().replace(parser.prog + " ", "unaligned ", 1)
            lines += ["", f"## `unaligned {name}`", "", "```text", help_text.rstrip(), "```"]
        return "\n".join(lines) + "\n"
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
