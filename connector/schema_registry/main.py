"""``pyklog-schema-registry schema-registry.properties``: the registry as its own process.

The composition root: reads the properties (:mod:`.config`), builds the state
(:class:`~.registry.SchemaRegistry`), the store (:class:`~.store.KafkaStore`, which reads the topic
to its end before the HTTP listener opens), the election (:class:`~.election.GroupElection`) and
the HTTP app (:class:`~.app.RegistryApp`), serves until SIGTERM/SIGINT, then stops them in reverse.
Logs ``Server started, listening for requests...`` (Confluent's line) once it answers.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from aiohttp import web

from pyklog.broker.common.cli import add_version_argument
from pyklog.broker.security import ssl_factory
from pyklog.connector.schema_registry.app import RegistryApp
from pyklog.connector.schema_registry.config import RegistryConfig, RegistryConfigError, parse_properties
from pyklog.connector.schema_registry.election import GroupElection
from pyklog.connector.schema_registry.errors import SchemaRegistryError
from pyklog.connector.schema_registry.registry import SchemaRegistry
from pyklog.connector.schema_registry.store import KafkaStore
from pyklog.connector.security import ClientSecurityConfig

log = logging.getLogger("pyklog.connector.schema_registry")


async def serve(config: RegistryConfig) -> None:
    # the state applies what the store reads; the store writes what the state decides: the
    # store is built first with the state's apply, the state second with the store's write
    state: dict = {}

    def apply(key, value, offset):
        state["registry"].apply(key, value, offset)

    store = KafkaStore(
        config.kafkastore,
        config.topic,
        apply,
        timeout_ms=config.timeout_ms,
        init_timeout_ms=config.init_timeout_ms,
        replication_factor=config.replication_factor,
    )
    registry = state["registry"] = SchemaRegistry(store.write, config.level)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, store.start)
    election = GroupElection(
        config.kafkastore["bootstrap.servers"],
        config.group_id,
        config.advertised_url,
        eligible=config.leader_eligible,
        session_timeout_ms=config.session_timeout_ms,
        security=ClientSecurityConfig.from_config(config.kafkastore),
        on_primary=store.sync,
    ).start()
    server_ssl = forward_ssl = None
    if config.tls is not None:
        tls = config.tls
        server_ssl = ssl_factory.server_context(tls.get)
        # the primary's certificate is checked against the same truststore (the system's CAs without one)
        forward_ssl = ssl_factory.client_context(tls.get)
    app = RegistryApp(
        registry,
        election,
        store,
        election_wait_s=config.timeout_ms / 1000.0,
        users=config.users,
        realm=config.realm,
        forward_ssl=forward_ssl,
    ).build()
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port, ssl_context=server_ssl)
    await site.start()
    log.info(
        "Server started, listening for requests at %s (advertised %s)",
        f"{config.host}:{config.port}",
        config.advertised_url,
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping")
    await runner.cleanup()
    await loop.run_in_executor(None, election.close)
    await loop.run_in_executor(None, store.close)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        prog="pyklog-schema-registry",
        description="Confluent's Schema Registry REST API, storing schemas in a topic of a pyklog cluster.",
    )
    p.add_argument("config", help="schema-registry.properties (listeners, kafkastore.bootstrap.servers, ...)")
    add_version_argument(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    try:
        with open(args.config, encoding="utf-8") as f:
            config = RegistryConfig.from_properties(parse_properties(f.read()))
    except (OSError, RegistryConfigError):
        raise SystemExit(1) from None
    try:
        asyncio.run(serve(config))
    except SchemaRegistryError:
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
