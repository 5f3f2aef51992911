"""``python -m adcompile.cli``."""

from .commands import main

raise SystemExit(main())
