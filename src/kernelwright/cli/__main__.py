"""``python -m kernelwright.cli COMMAND [ARGS]``: the ``kernelwright`` command."""

from .main import main

raise SystemExit(main())
