"""``python -m benchmarks`` is ``python -m benchmarks.run``."""

import sys

from .run import main

sys.exit(main())
