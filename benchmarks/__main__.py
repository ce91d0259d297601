"""``python -m benchmarks`` from a source checkout: the same as ``testbed bench``.

The benchmark code lives in ``testbed.bench`` (installed with the package, so no
top-level package named ``benchmarks`` is installed); this folder keeps the committed
figures (``results.json``) and this entry point.
"""

import sys

from testbed.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
