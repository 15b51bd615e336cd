"""``python -m storelib``: the ``storelib`` command (:mod:`storelib.admin`)."""

import sys

from storelib.admin import main

if __name__ == "__main__":
    sys.exit(main())
