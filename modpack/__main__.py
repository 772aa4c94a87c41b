"""``python -m modpack``: the same command line as the ``modpack`` script."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
