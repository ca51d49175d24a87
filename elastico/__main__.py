"""``python -m elastico``: the ``elastico`` command (how ``elastico up`` starts its services)."""

import sys

from elastico.cli import main

sys.exit(main())
