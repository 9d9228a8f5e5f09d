"""What every pyklog command line shares: Kafka's conventions for its tools (``CommandLineUtils``).

A usage error or a failed call prints one line ``Error: ...`` on stderr and the exit code is 1;
``--help`` shows the examples verbatim; ``--version`` prints ``<prog> (pyklog <version>)``.  Used by
the tools under ``broker/cli`` and ``connector/cli``, ``pyklog-broker`` and ``pyklog-zookeeper``:
it sits in ``common`` so that each of them, wherever it lives, can import it.  Runs in the tool's
process (one thread).
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = [
    "UsageError",
    "UsageParser",
    "add_version_argument",
    "tool_parser",
    "require",
    "read_option_file",
    "json_list_document",
    "print_error",
    "reports_errors",
]


class UsageError(Exception):
    """A bad command line or option value: the tool prints ``Error: <message>`` and exits with 1."""


class UsageParser(argparse.ArgumentParser):
    """argparse raising :class:`UsageError` instead of exiting with 2, so a tool reports a bad
    option as it reports every other error."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def add_version_argument(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--version``: print ``<prog> (pyklog <version>)`` and exit 0, as every pyklog tool does."""
    from pyklog import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s (pyklog {__version__})")
    return parser


def tool_parser(
    prog: str, description: str, epilog: str | None = None, *, parser_class: type[argparse.ArgumentParser] = UsageParser
) -> argparse.ArgumentParser:
    """A tool's parser: ``--help`` with the description and the examples (``epilog``) as written,
    ``--version``; errors as ``parser_class`` reports them (default: :class:`UsageError`)."""
    p = parser_class(
        prog=prog, description=description, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_version_argument(p)
    return p


def require(args: argparse.Namespace, *options: str) -> None:
    """Kafka's ``Missing required argument "[option]"`` for the first of ``options`` (spelled as on
    the command line, without ``--``) that was not given or given empty."""
    for option in options:
        value = getattr(args, option.replace("-", "_").replace(".", "_"))
        if value is None or value == "":
            raise UsageError(f'Missing required argument "[{option}]"')


def read_option_file(path: str, parse: Callable[[str], Any]) -> Any:
    """``parse(text)`` of the file an option names (``--offset-json-file`` and the like); an
    unreadable file or a ValueError from ``parse`` is a :class:`UsageError`."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    try:
        return parse(text)
    except ValueError as e:
        raise UsageError(str(e)) from None


def json_list_document(text: str, what: str, key: str, layout: str) -> tuple[dict, list]:
    """The JSON document of a tool's input file whose ``key`` holds a list (Kafka's
    ``{"partitions": [...]}`` files): ``(document, that list)``; a ValueError says the file is
    ``what`` and should look like ``layout``."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the {what} is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise ValueError(f"the {what} must be {layout}")
    return doc, doc[key]


def print_error(message: object) -> int:
    """``Error: <message>`` on stderr; returns the exit code 1."""
    print(f"Error: {message}", file=sys.stderr)
    return 1


def reports_errors(
    *also: type[BaseException], usage: str = "{}", failure: str = "{}"
) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Decorates a tool's ``main(...) -> int``: a :class:`UsageError` (or one of ``also``) ends it
    with ``Error: `` + ``usage.format(error)``, a PyklogError (a failed call) with ``Error: `` +
    ``failure.format(error)``, both on stderr and with exit code 1."""
    from pyklog.broker.errors import PyklogError

    usage_errors = (UsageError,) + also

    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def run(*args: Any, **kwargs: Any) -> int:
            try:
                return main(*args, **kwargs)
            except usage_errors as e:
                return print_error(usage.format(e))
            except PyklogError as e:
                return print_error(failure.format(e))

        return run

    return wrap
