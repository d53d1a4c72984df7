"""``python -m benchmarks BENCH --json PATH``."""

import sys

from .cli import main

sys.exit(main())
