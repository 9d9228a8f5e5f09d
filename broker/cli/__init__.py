"""Command-line tools of the broker side (``pyklog-topics``) and what every pyklog tool shares."""
from __future__ import annotations

import argparse

__all__ = ["add_version_argument"]


def add_version_argument(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--version``: print ``<prog> (pyklog <version>)`` and exit 0, as every pyklog tool does."""
    from pyklog import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s (pyklog {__version__})")
    return parser
