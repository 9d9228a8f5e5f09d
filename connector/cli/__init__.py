"""Command-line tools of the connector: console producer / consumer (and consumer groups)."""

from __future__ import annotations

import argparse
import logging
import sys

from pyklog.broker.common.cli import tool_parser

__all__ = [
    "parse_properties",
    "console_tool_parser",
    "setup_logging",
    "add_command_config",
    "client_properties",
    "client_security",
]


_EXAMPLES = {
    "pyklog-console-producer": "example:\n  pyklog-console-producer --bootstrap-server localhost:9092 --topic events "
    "--property parse.key=true --property key.separator=:",
    "pyklog-console-consumer": "example:\n  pyklog-console-consumer --bootstrap-server localhost:9092 --topic events "
    "--from-beginning --group my-group --property print.key=true",
}


class _ConsoleParser(argparse.ArgumentParser):
    """Usage errors as Kafka's tools report them: one ``Error: ...`` line and exit code 1."""

    def error(self, message):
        self.exit(1, f"Error: {message} (see {self.prog} --help)\n")


def console_tool_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The options the console producer and consumer share: where the brokers are
    (``--bootstrap-server`` or ``--zookeeper``, exactly one) and ``--topic``."""
    ap = tool_parser(prog, description, _EXAMPLES.get(prog), parser_class=_ConsoleParser)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--bootstrap-server", help="HOST:PORT[,HOST:PORT...] of brokers")
    src.add_argument("--zookeeper", help="ZooKeeper connect string (brokers found in /brokers/ids)")
    ap.add_argument("--topic", required=True)
    return ap


def setup_logging() -> None:
    """Warnings and errors of the library on stderr (stdout carries the tool's data)."""
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def parse_properties(items, option: str = "--property") -> dict[str, str]:
    """``["a=1", "b.c=x=y"]`` -> ``{"a": "1", "b.c": "x=y"}``; a missing ``=`` is an error."""
    out: dict[str, str] = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise SystemExit(f"{option}: expected key=value, got {item!r}")
        out[k.strip()] = v
    return out


def unescape(s: str) -> str:
    r"""Interpret ``\t``, ``\n``, ``\\`` in separator properties as Kafka's tools do."""
    return s.encode("utf-8").decode("unicode_escape") if "\\" in s else s


def add_command_config(parser: argparse.ArgumentParser) -> None:
    """``--command-config FILE``: the client's properties (``security.protocol``, ``ssl.*``,
    ``sasl.*``: Kafka's client settings), as every Kafka tool takes them."""
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties file: security.protocol, ssl.*, sasl.* (Kafka's client settings)",
    )


def client_properties(path: str | None, flag: str = "--command-config") -> dict[str, str]:
    """The settings of a client properties file (Java properties syntax); ``{}`` for no file.  An
    unreadable file is a usage error naming ``flag`` (never a value: the file holds passwords)."""
    if not path:
        return {}
    from pyklog.broker.common.cli import UsageError
    from pyklog.broker.errors import ConfigError
    from pyklog.broker.server.config import load_properties

    try:
        return load_properties(path)
    except ConfigError as e:
        raise UsageError(f"{flag}: {e}") from None


def client_security(path: str | None, flag: str = "--command-config"):
    """The :class:`~pyklog.connector.security.ClientSecurityConfig` of a client properties file
    (PLAINTEXT for no file); a bad setting is a usage error."""
    from pyklog.broker.common.cli import UsageError
    from pyklog.broker.errors import ConfigError
    from pyklog.connector.security import ClientSecurityConfig

    try:
        return ClientSecurityConfig.from_config(client_properties(path, flag))
    except (ConfigError, ValueError) as e:
        raise UsageError(f"{flag}: {e}") from None
