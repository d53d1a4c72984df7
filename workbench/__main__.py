"""``python -m workbench``: the same command line as the ``workbench`` script (for
interpreters where the package is importable but its script is not on the PATH)."""

import sys

from .commands.cli import main

if __name__ == "__main__":  # importing the module (pkgutil walks, docs tools) runs nothing
    sys.exit(main())
