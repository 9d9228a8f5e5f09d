"""``--version`` for every pyklog command line (the tools under ``broker/cli`` and ``connector/cli``,
and ``pyklog-zookeeper``): a module of its own so a launcher needs no CLI package to print it."""
from __future__ import annotations

import argparse


def add_version_argument(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--version``: print ``<prog> (pyklog <version>)`` and exit 0, as every pyklog tool does."""
    from pyklog import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s (pyklog {__version__})")
    return parser
