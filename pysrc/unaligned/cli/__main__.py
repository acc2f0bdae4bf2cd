"""``python -m unaligned.cli``: the ``unaligned`` command."""

import sys

from unaligned.cli import main

sys.exit(main())
