"""``pyklog-delete-records``: move the log start offset of partitions forward (Kafka's
kafka-delete-records.sh, DeleteRecordsCommand).

    pyklog-delete-records --bootstrap-server HOST:PORT --offset-json-file FILE

The file is Kafka's JSON::

    {"partitions": [{"topic": "orders", "partition": 0, "offset": 42}], "version": 1}

(offset -1 = the high watermark).  Output as Kafka's tool::

    Executing records delete operation
    Records delete operation completed:
    partition: orders-0	low_watermark: 42
    partition: orders-1	error: OFFSET_OUT_OF_RANGE: ...

Exit codes as Kafka's tool: 1 on bad input or when the brokers cannot be reached, 0 once the
operation ran (a partition that failed says so on its line).

Example::

    pyklog-delete-records --bootstrap-server localhost:9092 --offset-json-file delete.json
"""

from __future__ import annotations

import argparse
import sys

from pyklog.broker.common.cli import json_list_document, read_option_file, reports_errors, require, tool_parser
from pyklog.connector.cli import add_command_config, client_security, setup_logging


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "pyklog-delete-records",
        "Delete records of partitions up to given offsets.",
        'example:\n  echo \'{"partitions": [{"topic": "t", "partition": 0, "offset": 5}], '
        '"version": 1}\' > d.json\n  pyklog-delete-records --bootstrap-server localhost:9092 '
        "--offset-json-file d.json",
    )
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="REQUIRED: the brokers")
    p.add_argument("--offset-json-file", metavar="FILE", help="REQUIRED: the partitions and offsets (JSON)")
    add_command_config(p)
    return p


def parse_offset_json(text: str) -> dict:
    """Kafka's offset JSON -> ``{(topic, partition): offset}``; a ValueError names what is wrong."""
    doc, _ = json_list_document(
        text,
        "offset JSON file",
        "partitions",
        '{"partitions": [{"topic": ..., "partition": ..., "offset": ...}], "version": 1}',
    )
    if doc.get("version", 1) != 1:
        raise ValueError(f"Not supported version field value {doc.get('version')}")
    out = {}
    for i, e in enumerate(doc["partitions"]):
        if (
            not isinstance(e, dict)
            or not isinstance(e.get("topic"), str)
            or not isinstance(e.get("partition"), int)
            or not isinstance(e.get("offset"), int)
        ):
            raise ValueError(f"partitions[{i}]: expected topic (string), partition and offset (integers), got {e!r}")
        tp = (e["topic"], e["partition"])
        if tp in out:
            raise ValueError(f"Offset json file contains duplicate topic partitions: {tp[0]}-{tp[1]}")
        out[tp] = e["offset"]
    return out


@reports_errors()
def main(argv=None) -> int:
    setup_logging()
    a = build_parser().parse_args(argv)
    require(a, "bootstrap-server", "offset-json-file")
    offsets = read_option_file(a.offset_json_file, parse_offset_json)
    from pyklog.connector.admin import AdminClient

    print("Executing records delete operation")
    with AdminClient(
        a.bootstrap_server,
        client_id="pyklog-delete-records",
        request_timeout_ms=30000,
        security=client_security(a.command_config),
    ) as admin:
        got = admin.delete_records(offsets)
    print("Records delete operation completed:")
    for t, p in sorted(offsets):
        r = got.get((t, p))
        if isinstance(r, int):
            print(f"partition: {t}-{p}\tlow_watermark: {r}")
        else:
            print(f"partition: {t}-{p}\terror: {r if r is not None else 'no answer from the leader'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
