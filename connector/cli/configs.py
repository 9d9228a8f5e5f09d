"""``pyklog-configs``: describe and alter topic and broker configs (Kafka's kafka-configs.sh,
ConfigCommand).

    pyklog-configs --bootstrap-server HOST:PORT --entity-type topics|brokers
                   [--entity-name NAME | --entity-default] --describe [--all]
    pyklog-configs --bootstrap-server ... --entity-type topics --entity-name T --alter
                   [--add-config k1=v1,k2=[a,b]] [--delete-config k1,k2]
    pyklog-configs --bootstrap-server ... --entity-type brokers (--entity-name ID | --entity-default) --alter
                   [--add-config k1=v1] [--delete-config k1]            (dynamic broker configs, KIP-226)
    pyklog-configs --zookeeper HOST:PORT[/CHROOT] --entity-type topics|brokers ...   (straight in ZooKeeper)
    pyklog-configs --bootstrap-server ... | --zookeeper ... --entity-type users --entity-name alice --alter
                   --add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'
                   | --delete-config SCRAM-SHA-512 | --describe           (SCRAM credentials)

Output as Kafka's tool::

    Dynamic configs for topic orders are:
      retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000, ...}
    Completed updating config for topic orders.

Alterations use IncrementalAlterConfigs, or AlterConfigs (the whole set, read first) when the broker
has only that.  Broker entities are the dynamic broker configs (:mod:`pyklog.broker.server.dynamic_config`):
``--entity-name N`` one broker (the request goes to that broker), ``--entity-default`` the cluster-wide
default every broker applies; ``--describe`` lists the dynamic ones (``--all``: every setting with its
source).  User entities are SCRAM credentials (``SCRAM-SHA-256`` / ``SCRAM-SHA-512``, iterations 4096
by default): through the brokers (AlterUserScramCredentials: the password is salted here and never
sent), or with ``--zookeeper`` straight into ``/config/users/<user>`` (how the first users, the
inter-broker one included, are created before any broker runs); ``--describe`` shows mechanisms and
iterations, never a credential, and no password is ever printed.  ``--command-config`` is a client
properties file (``sasl.mechanism``, ``sasl.jaas.config`` or ``sasl.username`` / ``sasl.password``).
Exit code 0, or 1 with one ``Error: ...`` line.

Example::

    pyklog-configs --bootstrap-server localhost:9092 --entity-type topics --entity-name orders \\
        --alter --add-config retention.ms=60000
    pyklog-configs --bootstrap-server localhost:9092 --entity-type brokers --entity-default \\
        --alter --add-config log.retention.ms=86400000
"""

from __future__ import annotations

import argparse
import re
import sys

from pyklog.broker.common.cli import UsageError, reports_errors, require, tool_parser
from pyklog.broker.errors import PyklogError, UnknownTopicOrPartitionError, UnsupportedVersionError
from pyklog.connector.cli import add_command_config, client_security, setup_logging

TOPIC, BROKER = 2, 4
SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}
SET, DELETE = 0, 1


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "pyklog-configs",
        "Describe and alter topic and broker configs.",
        "example:\n  pyklog-configs --bootstrap-server localhost:9092 --entity-type topics "
        "--entity-name orders --alter --add-config retention.ms=60000\n"
        "  pyklog-configs --bootstrap-server localhost:9092 --entity-type brokers "
        "--entity-default --alter --add-config log.retention.ms=86400000\n"
        "  pyklog-configs --bootstrap-server localhost:9092 --entity-type brokers "
        "--entity-name 0 --describe --all",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the brokers")
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="topics only: overrides in ZooKeeper")
    act = p.add_mutually_exclusive_group(required=True)
    act.add_argument("--describe", action="store_true", help="list the configs of the entity")
    act.add_argument("--alter", action="store_true", help="change the configs of the entity")
    p.add_argument("--entity-type", choices=("topics", "brokers", "users"), help="REQUIRED: topics, brokers or users")
    p.add_argument("--topic", help="shorthand for --entity-type topics --entity-name TOPIC")
    p.add_argument("--broker", help="shorthand for --entity-type brokers --entity-name ID")
    p.add_argument("--entity-name", help="the topic name or broker id")
    p.add_argument("--entity-default", action="store_true", help="brokers: the cluster-wide default")
    p.add_argument("--all", action="store_true", help="--describe: every config, not only the dynamic ones")
    p.add_argument("--add-config", metavar="K=V,...", help="configs to set: k1=v1,k2=[v1,v2]")
    p.add_argument("--delete-config", metavar="K,...", help="configs to remove: k1,k2")
    add_command_config(p)
    return p


def parse_add_config(spec: str | None) -> dict[str, str]:
    """``k1=v1,k2=[a,b]`` -> ``{"k1": "v1", "k2": "a,b"}`` (Kafka's square brackets group a list)."""
    if not spec:
        return {}
    out = {}
    for m in re.finditer(r"([^=,\s][^=,]*)=(\[[^\]]*\]|[^,]*)(?:,|$)", spec):
        k, v = m.group(1).strip(), m.group(2)
        out[k] = v[1:-1] if v.startswith("[") else v
    rebuilt = ",".join(f"{k}=" + (f"[{v}]" if "," in v else v) for k, v in out.items())
    if not out or len(rebuilt.replace("[", "").replace("]", "")) != len(spec.replace("[", "").replace("]", "")):
        shown = "a value holding a password (not shown)" if "password" in spec.lower() else repr(spec)
        raise UsageError(f"--add-config: expected k1=v1,k2=[v1,v2,v2],k3=v3, got {shown}")
    return out


def _entity(a):
    if a.topic:
        return "topics", a.topic
    if a.broker:
        return "brokers", a.broker
    if not a.entity_type:
        raise UsageError('Missing required argument "[entity-type]"')
    if a.entity_default:
        if a.entity_type != "brokers":
            raise UsageError("--entity-default applies to brokers only")
        return "brokers", ""
    return a.entity_type, a.entity_name


def _label(etype, name) -> str:
    if etype == "topics":
        return f"topic {name}"
    return f"broker {name}" if name else "brokers in the cluster"


def _entry_line(e) -> str:
    sensitive = bool(e.get("is_sensitive"))
    value = "null" if sensitive or e.get("value") is None else e["value"]
    syn = ", ".join(
        f"{SOURCES.get(int(s.get('source', 0)), 'UNKNOWN')}:{s['name']}="
        f"{'null' if sensitive or s.get('value') is None else s['value']}"
        for s in e.get("synonyms") or []
    )
    return f"  {e['name']}={value} sensitive={str(sensitive).lower()} synonyms={{{syn}}}"


def _topic_exists(admin, name) -> bool:
    tm = admin.client.metadata([name], refresh=True).topics.get(name)
    return tm is not None and not tm.error_code and bool(tm.partitions)


def describe(admin, etype, name, show_all) -> None:
    rtype = TOPIC if etype == "topics" else BROKER
    if name is None:
        if etype == "topics":
            names = sorted(t for t in admin.client.metadata(None, refresh=True).topics)
        else:
            names = [str(b) for b in sorted(admin.client.metadata(None, refresh=True).brokers)]
    else:
        names = [name]
    dynamic = {TOPIC: 1, BROKER: 2 if name != "" else 3}[rtype]
    for n in names:
        if etype == "topics" and not _topic_exists(admin, n):
            raise UnknownTopicOrPartitionError(f"The topic '{n}' does not exist.")
        entries = admin.describe_configs([(rtype, n)], include_synonyms=True)[(rtype, n)]
        if not show_all:
            entries = [e for e in entries if int(e.get("config_source", -1)) == dynamic]
        what = "All" if show_all else ("Default" if etype == "brokers" and n == "" else "Dynamic")
        label = _label(etype, n)
        print(f"{what} configs for {label} are:")
        for e in sorted(entries, key=lambda e: e["name"]):
            if not show_all and e.get("synonyms"):
                e = dict(e, synonyms=[s for s in e["synonyms"] if int(s.get("source", 0)) != 0])
            print(_entry_line(e))


def alter(admin, etype, name, add, delete) -> None:
    rtype = TOPIC if etype == "topics" else BROKER
    if etype == "topics" and not _topic_exists(admin, name):
        raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
    ops = [(k, SET, v) for k, v in add.items()] + [(k, DELETE, None) for k in delete]
    try:
        admin.incremental_alter_configs(rtype, name, ops)
    except UnsupportedVersionError:
        entries = admin.describe_configs([(rtype, name)])[(rtype, name)]
        dynamic = {TOPIC: 1, BROKER: 2 if name != "" else 3}[rtype]
        current = {e["name"]: e.get("value") for e in entries if int(e.get("config_source", -1)) == dynamic}
        missing = [k for k in delete if k not in current]
        if missing:
            raise PyklogError(f"Invalid config(s): {','.join(missing)}") from None
        for k in delete:
            current.pop(k, None)
        current.update(add)
        admin.alter_configs(rtype, name, current)
    print(
        f"Completed updating config for {_label(etype, name)}."
        if name != ""
        else "Completed updating default config for brokers in the cluster."
    )


def run_zookeeper(a, etype, name, add, delete) -> None:
    """--zookeeper: the config znodes read and written directly (an admin session: no registration,
    no cache), through the broker's ZooKeeper layout modules (pyklog.broker.zk), never its server."""
    from pyklog.broker.zk.configs import ZkConfigs
    from pyklog.broker.zk.session import ZkSession
    from pyklog.broker.zk.znode_acls import tool_security

    session = ZkSession(a.zookeeper, session_timeout_s=18.0, connect_timeout_s=15, registering=False, **tool_security())
    session.start()
    configs = ZkConfigs(session, None, None)
    try:
        if etype == "brokers":
            run_zookeeper_brokers(configs, a, name, add, delete)
        elif a.describe:
            names = [name] if name else configs.topic_names()
            for n in names:
                if not configs.topic_exists(n):
                    raise UnknownTopicOrPartitionError(f"The topic '{n}' does not exist.")
                print(f"Dynamic configs for topic {n} are:")
                for k, v in sorted(configs.read_topic_config(n).items()):
                    print(_entry_line({"name": k, "value": v, "synonyms": [{"name": k, "value": v, "source": 1}]}))
        else:
            from pyklog.broker.zk.topics import check_internal_topic_configs, is_protected

            if is_protected(name):  # as the brokers refuse it: retention must never delete live state
                current = configs.read_topic_config(name)
                check_internal_topic_configs(name, {**{k: v for k, v in current.items() if k not in delete}, **add})
            configs.alter_topic_config(name, add, delete)
            print(f"Completed updating config for topic {name}.")
    finally:
        session.close()


def run_zookeeper_brokers(configs, a, name, add, delete) -> None:
    """Dynamic broker configs straight in ZooKeeper (``/config/brokers/<id>`` or ``<default>``, with a
    change notification; Kafka 2's kafka-configs --zookeeper), validated as the brokers validate
    AlterConfigs; every live broker applies a change through its watch."""
    from pyklog.broker.server.dynamic_config import validate_dynamic_configs

    if name is None:
        raise UsageError("--entity-type brokers with --zookeeper needs --entity-name or --entity-default")
    if name != "" and not name.isdigit():
        raise UsageError(f"--entity-name of brokers: a broker id or --entity-default, got {name!r}")
    if a.describe:
        config, _ = configs.broker_config(name)
        source = 2 if name else 3
        print(
            "Default configs for brokers in the cluster are:"
            if name == ""
            else f"Dynamic configs for broker {name} are:"
        )
        from pyklog.broker.common.kafka_settings import is_sensitive

        for k, v in sorted(config.items()):
            shown = None if is_sensitive(k) else v
            print(
                _entry_line(
                    {
                        "name": k,
                        "value": shown,
                        "is_sensitive": is_sensitive(k),
                        "synonyms": [{"name": k, "value": shown, "source": source}],
                    }
                )
            )
        return
    from pyklog.broker.common.kafka_settings import is_sensitive
    from pyklog.broker.security.password_encoder import encoder_from_props
    from pyklog.broker.server.dynamic_config import is_dynamic

    # Kafka's ConfigCommand: the password.encoder.* settings given here encode the passwords and are
    # not stored themselves
    add = dict(add)
    encoder_props = {k: add.pop(k) for k in list(add) if k.startswith("password.encoder.")}
    secrets = sorted(k for k in add if is_sensitive(k))
    if secrets and not encoder_props.get("password.encoder.secret"):
        raise UsageError(
            f"password.encoder.secret must be specified to update {', '.join(secrets)}. Other password "
            "encoder configs like cipher algorithm and iterations may also be specified to override the "
            "default encoding parameters. Password encoder configs will not be persisted in ZooKeeper."
        )
    validate_dynamic_configs(name, add, encoder_props)
    for k in delete:
        if not is_dynamic(k):  # an unknown or read-only name: refused by name
            validate_dynamic_configs(name, {k: ""})
    if secrets:
        encoder = encoder_from_props(encoder_props)
        add = {k: encoder.encode(v) if k in secrets else v for k, v in add.items()}
    configs.alter_broker_config(
        name, add, delete, validate=lambda new: validate_dynamic_configs(name, new, new_passwords=False)
    )
    print(
        "Completed updating default config for brokers in the cluster."
        if name == ""
        else f"Completed updating config for broker {name}."
    )


SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def parse_scram_configs(add: dict[str, str]) -> list[tuple[str, str, int]]:
    """``{"SCRAM-SHA-512": "iterations=8192,password=..."}`` -> ``[(mechanism, password,
    iterations)]``; UsageError naming the problem (never the password)."""
    from pyklog.broker.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS

    out = []
    for mech, spec in add.items():
        if mech.upper() not in SCRAM_MECHANISMS:
            raise UsageError(f"--add-config of users: SCRAM-SHA-256=[...] or SCRAM-SHA-512=[...], got {mech!r}")
        fields = {}
        for part in spec.split(","):
            k, sep, v = part.partition("=")
            if not sep:
                raise UsageError(f"--add-config {mech}: expected [iterations=N,password=...]")
            fields[k.strip()] = v
        if not fields.get("password"):
            raise UsageError(f"--add-config {mech}: password=... is required")
        unknown = sorted(set(fields) - {"password", "iterations"})
        if unknown:
            raise UsageError(f"--add-config {mech}: unknown field(s) {', '.join(unknown)} (iterations, password)")
        try:
            iterations = int(fields.get("iterations") or DEFAULT_ITERATIONS)
        except ValueError:
            raise UsageError(f"--add-config {mech}: iterations must be a number") from None
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise UsageError(
                f"--add-config {mech}: iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}"
            )
        out.append((mech.upper(), fields["password"], iterations))
    return out


def read_properties_file(path: str) -> dict[str, str]:
    """A client properties file (``key=value`` lines, ``#`` / ``!`` comments, a trailing backslash
    continues the line)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise UsageError(f"--command-config: cannot read {path!r}: {e.strerror or e}") from None
    out: dict[str, str] = {}
    pending = ""
    for line in text.splitlines():
        line = pending + line.strip()
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        pending = ""
        if not line or line[0] in "#!":
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def _print_user_credentials(user: str, infos) -> None:
    text = ", ".join(f"{m}=iterations={n}" for m, n in infos)
    print(f"SCRAM credential configs for user-principal '{user}' are {text}")


def run_users(admin, a, name, upserts, delete) -> None:
    """Users through the brokers: Describe/AlterUserScramCredentials."""
    if a.describe:
        for user, infos in sorted(admin.describe_user_scram_credentials([name] if name else None).items()):
            _print_user_credentials(user, infos)
        return
    results = admin.alter_user_scram_credentials(
        [(name, m, pw, it) for m, pw, it in upserts], [(name, m.upper()) for m in delete]
    )
    err = results.get(name)
    if err is not None:
        raise err
    print(f"Completed updating config for user {name}.")


def run_zookeeper_users(a, name, upserts, delete) -> None:
    """Users straight in ZooKeeper: ``/config/users/<user>`` and a change notification (Kafka's
    ZooKeeper-mode kafka-configs), before or while brokers run."""
    from pyklog.broker.security.scram import MECHANISMS, ScramCredential
    from pyklog.broker.zk.scram_credentials import ZkScramCredentials
    from pyklog.broker.zk.session import ZkSession

    session = ZkSession(a.zookeeper, session_timeout_s=18.0, connect_timeout_s=15, registering=False)
    session.start()
    try:
        store = ZkScramCredentials(session)
        if a.describe:
            users = [name] if name else store.users()
            for user in users:
                creds = store.credentials(user)
                if creds:
                    _print_user_credentials(user, [(m, c.iterations) for m, c in sorted(creds.items())])
            return
        current = store.credentials(name)
        missing = [m.upper() for m in delete if m.upper() not in current]
        if missing:
            raise UsageError(f"user {name} has no {', '.join(missing)} credential to delete")
        store.alter(
            name,
            {m: ScramCredential.from_password(MECHANISMS[m], pw, it) for m, pw, it in upserts},
            [m.upper() for m in delete],
        )
        print(f"Completed updating config for user {name}.")
    finally:
        session.close()


@reports_errors()
def main(argv=None) -> int:
    setup_logging()
    a = build_parser().parse_args(argv)
    if not a.zookeeper:
        require(a, "bootstrap-server")
    etype, name = _entity(a)
    add = parse_add_config(a.add_config)
    delete = [k.strip() for k in (a.delete_config or "").split(",") if k.strip()]
    if a.alter:
        if not add and not delete:
            raise UsageError("--alter needs --add-config or --delete-config")
        if name is None:
            raise UsageError(
                f"an entity name must be specified with --alter of {etype}"
                if etype != "brokers"
                else "--alter of brokers needs --entity-name or --entity-default"
            )
        if set(add) & set(delete):
            raise UsageError(f"Invalid alter config: {sorted(set(add) & set(delete))} are both added and deleted")
    elif add or delete:
        raise UsageError("--add-config and --delete-config need --alter")
    if etype == "users":
        upserts = parse_scram_configs(add)
        for k in delete:
            if k.upper() not in SCRAM_MECHANISMS:
                raise UsageError(f"--delete-config of users: SCRAM-SHA-256 or SCRAM-SHA-512, got {k!r}")
        if a.zookeeper:
            run_zookeeper_users(a, name, upserts, delete)
            return 0
    if a.zookeeper:
        run_zookeeper(a, etype, name, add, delete)
        return 0
    from pyklog.connector.admin import AdminClient

    with AdminClient(
        a.bootstrap_server,
        client_id="pyklog-configs",
        request_timeout_ms=15000,
        security=client_security(a.command_config),
    ) as admin:
        if etype == "users":
            run_users(admin, a, name, upserts, delete)
        elif a.describe:
            describe(admin, etype, name, a.all)
        else:
            alter(admin, etype, name, add, delete)
    return 0


if __name__ == "__main__":
    sys.exit(main())
