"""``python -m fastload``: the same as the ``fastload`` command."""

import sys

from fastload.cli import main

sys.exit(main())
