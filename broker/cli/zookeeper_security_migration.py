"""``pyklog-zookeeper-security-migration``: set the ACLs of a cluster's znodes (Kafka's
``zookeeper-security-migration.sh``, ``ZkSecurityMigrator``).

``--zookeeper.acl secure`` gives every znode under Kafka's secure root paths (and the chroot node)
the ACLs a broker with ``zookeeper.set.acl=true`` creates them with: this identity ALL, everyone
READ, ``/config/users`` and ``/config/brokers`` owner-only; ``/consumers`` and
``/pyklog_spark_sinks`` stay open.  ``--zookeeper.acl unsecure`` makes them all ``world:anyone``
ALL again (first restart the brokers without set.acl).  The credentials are Kafka's: the
``Client`` section of the JAAS file named in ``KAFKA_OPTS``
(``-Djava.security.auth.login.config=<file>``); as Kafka's tool, it refuses to run without one.

A broker started with ``zookeeper.set.acl=true`` secures its registry itself; this tool is for
doing it without a restart, for undoing it, and for a registry without a chroot (whose root node a
broker leaves alone).  Runs in the tool's process, one thread.
"""

from __future__ import annotations

import logging
import sys

from pyklog.broker.common.cli import UsageError, reports_errors, tool_parser
from pyklog.broker.zk.acl_migration import SECURE_ROOTS, migrate_acls
from pyklog.broker.zk.session import ZkSession
from pyklog.broker.zk.znode_acls import JAAS_FILE_PROPERTY, credentials_from_environment

PROG = "pyklog-zookeeper-security-migration"

EXAMPLES = """examples:
  KAFKA_OPTS="-Djava.security.auth.login.config=/etc/kafka/zk_client_jaas.conf" \\
    pyklog-zookeeper-security-migration --zookeeper.acl secure --zookeeper.connect localhost:2181/kafka
  (the JAAS file: Client { org.apache.zookeeper.server.auth.DigestLoginModule required
   username="kafka" password="..."; };)
"""


def build_parser():
    p = tool_parser(
        PROG,
        "Updates the ACLs of the cluster's znodes, as part of making ZooKeeper access authenticated "
        "(or the other way round).",
        EXAMPLES,
    )
    p.add_argument("--zookeeper.acl", dest="zookeeper_acl", metavar="secure|unsecure", required=False)
    p.add_argument("--zookeeper.connect", dest="zookeeper_connect", default="localhost:2181", metavar="HOST:PORT")
    p.add_argument("--zookeeper.session.timeout", dest="session_timeout_ms", type=int, default=30000, metavar="MS")
    p.add_argument("--zookeeper.connection.timeout", dest="connection_timeout_ms", type=int, default=30000)
    p.add_argument(
        "--enable.path.check",
        dest="enable_path_check",
        action="store_true",
        help="stop (exit 1) if a root path is missing: a mistyped chroot?",
    )
    return p


@reports_errors()
def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    a = build_parser().parse_args(argv)
    if a.zookeeper_acl not in ("secure", "unsecure"):
        raise UsageError("--zookeeper.acl must be secure or unsecure")
    credentials = credentials_from_environment()
    if credentials is None:
        raise UsageError(
            "No JAAS configuration file has been specified: set KAFKA_OPTS=-D"
            f"{JAAS_FILE_PROPERTY}=<file> with a Client section (DigestLoginModule username and password)"
        )
    secure = a.zookeeper_acl == "secure"
    session = ZkSession(
        a.zookeeper_connect,
        session_timeout_s=a.session_timeout_ms / 1000.0,
        connect_timeout_s=a.connection_timeout_ms / 1000.0,
        registering=False,
        credentials=credentials,
        set_acl=secure,
    )
    session.start()
    try:
        missing = [p for p in SECURE_ROOTS if session.retry(session.zk.exists, p) is None]
        if missing:
            print(f"Warning: these root paths do not exist in ZooKeeper: {', '.join(missing)}", file=sys.stderr)
            print("That might be due to an incorrect chroot in --zookeeper.connect.", file=sys.stderr)
            if a.enable_path_check:
                return 1
        result = session.retry(migrate_acls, session.zk, session.acls_for, include_root=True)
    finally:
        session.close()
    print(
        f"{a.zookeeper_acl}: {result.changed} of {result.checked} znodes changed"
        + (f"; {len(result.refused)} refused (owned by another identity)" if result.refused else "")
    )
    return 1 if result.refused else 0


if __name__ == "__main__":
    sys.exit(main())
