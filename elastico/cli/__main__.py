"""``python -m elastico.cli``: the ``elastico`` command (as ``python -m elastico``)."""

import sys

from elastico.cli import main

sys.exit(main())
