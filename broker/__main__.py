"""``python -m pyklog.broker server.properties``: run a broker (same as ``pyklog-broker``)."""

import sys

from pyklog.broker.server.main import main

if __name__ == "__main__":
    sys.exit(main())
