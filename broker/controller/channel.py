"""Broker to controller: the controlled shutdown a stopping broker asks for (Kafka's
``KafkaServer.controlledShutdown``).

:func:`controlled_shutdown` runs on the thread that stops the broker, before the broker stops
serving: it finds the controller in ``/controller`` and ``/brokers/ids``, sends it
ControlledShutdown v3 (broker id and broker epoch = the czxid of this broker's registration) over a
plain socket, or calls the local controller directly when this broker is the controller, and
repeats up to ``controlled.shutdown.max.retries`` times, ``controlled.shutdown.retry.backoff.ms``
apart, while partitions remain or the controller cannot be reached or has moved.

Not thread-safe (one caller, once).
"""

from __future__ import annotations

import logging
import struct
import time

from kazoo.exceptions import KazooException, NoNodeError

from pyklog.broker.common.sockets import recv_exact
from pyklog.broker.errors import NotControllerError, PyklogError, error_for_code
from pyklog.broker.protocol import ApiKey, decode_response, encode_request
from pyklog.broker.zk import paths
from pyklog.broker.zk.znodes import ZkDataError, decode_controller

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN_VERSION = 3


def _send(cluster, host: str, port: int, body: dict, timeout_s: float) -> dict:
    with cluster.connect_to_broker(host, port, timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(
            encode_request(
                ApiKey.CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN_VERSION, 1, "pyklog-controlled-shutdown", body
            )
        )

        closed = "the controller closed the connection"
        (size,) = struct.unpack(">i", recv_exact(sock, 4, closed))
        _, resp = decode_response(
            ApiKey.CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN_VERSION, recv_exact(sock, size, closed)
        )
        return resp


def _one_attempt(cluster, broker_id: int, local_controller, timeout_s: float) -> list:
    """One ControlledShutdown; returns the remaining partitions, raises on any failure."""
    zk = cluster.zk
    try:
        data, _ = cluster.retry(zk.get, paths.CONTROLLER)
        controller_id = decode_controller(data, paths.CONTROLLER).broker_id
    except NoNodeError:
        raise NotControllerError("no controller is elected (no /controller)") from None
    try:
        stat = cluster.retry(zk.exists, paths.broker_id(broker_id))
    except KazooException:
        stat = None
    broker_epoch = stat.czxid if stat is not None else -1
    if controller_id == broker_id and local_controller is not None and local_controller.is_active:
        return local_controller.controlled_shutdown(broker_id, broker_epoch, timeout_s)
    address = cluster.live_brokers().get(controller_id)
    if address is None:
        raise NotControllerError(f"the controller (broker {controller_id}) is not a live broker")
    resp = _send(cluster, address[0], address[1], {"broker_id": broker_id, "broker_epoch": broker_epoch}, timeout_s)
    if resp["error_code"]:
        raise error_for_code(resp["error_code"], f"controller {controller_id} refused the controlled shutdown")
    return [(r["topic_name"], r["partition_index"]) for r in resp["remaining_partitions"]]


def controlled_shutdown(
    cluster,
    broker_id: int,
    *,
    local_controller=None,
    max_retries: int = 3,
    retry_backoff_ms: int = 5000,
    timeout_s: float = 30.0,
) -> bool:
    """Ask the controller to move this broker's leaderships away; True once none remain.  A broker
    that hosts no partition with more than one replica has nothing to move and asks nothing."""
    hosted = [
        (t, p)
        for t, parts in cluster.topics().items()
        for p, s in parts.items()
        if broker_id in s.replicas and len(s.replicas) > 1
    ]
    if not hosted:
        return True
    for attempt in range(1, max_retries + 1):
        try:
            remaining = _one_attempt(cluster, broker_id, local_controller, timeout_s)
        except (PyklogError, KazooException, ZkDataError, OSError, TimeoutError) as e:
            log.warning("controlled shutdown attempt %d/%d of broker %d failed: %s", attempt, max_retries, broker_id, e)
        else:
            if not remaining:
                log.info("controlled shutdown of broker %d succeeded (attempt %d)", broker_id, attempt)
                return True
            log.info(
                "controlled shutdown attempt %d/%d of broker %d: %d partition(s) still led here: %s",
                attempt,
                max_retries,
                broker_id,
                len(remaining),
                ", ".join(f"{t}-{p}" for t, p in remaining[:10]),
            )
        if attempt < max_retries:
            time.sleep(retry_backoff_ms / 1000.0)
    log.warning(
        "controlled shutdown of broker %d did not complete after %d attempt(s): stopping anyway", broker_id, max_retries
    )
    return False
