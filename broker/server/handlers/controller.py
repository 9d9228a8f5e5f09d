"""The controller's APIs: ControlledShutdown v0-3, ElectLeaders v0-2, AlterPartitionReassignments
v0 and ListPartitionReassignments v0 go to :class:`broker.controller.KafkaController`
(NOT_CONTROLLER on a broker that is not the controller).

Authorization (Kafka's KafkaApis): ControlledShutdown needs CLUSTER_ACTION on the cluster,
ElectLeaders and AlterPartitionReassignments ALTER, ListPartitionReassignments DESCRIBE; a denied
request is answered CLUSTER_AUTHORIZATION_FAILED as a whole.

Thread-safety: a request thread hands the work to the controller's event thread and returns; the
answer goes out from that thread or a timer's (:meth:`ControllerApis._answer_from_controller`).
"""

from __future__ import annotations

import logging
import threading

from pyklog.broker.errors import ClusterAuthorizationFailedError, InvalidRequestError, PyklogError
from pyklog.broker.protocol import ApiKey
from pyklog.broker.security.acl import AclOperation
from pyklog.broker.server.handlers.authorization import ALLOW_ALL, AuthHelper
from pyklog.broker.server.handlers.responses import (
    NONE,
    UNKNOWN_SERVER_ERROR,
    RequestHandlers,
    error_body,
    group_by_topic,
    outcome_fields,
)

#: the cluster operation each API needs
_CLUSTER_OPERATION = {
    ApiKey.CONTROLLED_SHUTDOWN: AclOperation.CLUSTER_ACTION,
    ApiKey.ELECT_LEADERS: AclOperation.ALTER,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: AclOperation.ALTER,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: AclOperation.DESCRIBE,
}

log = logging.getLogger(__name__)


class ControllerApis(RequestHandlers):
    """The controller's APIs.  ``controller`` is this broker's
    :class:`~pyklog.broker.controller.controller.KafkaController`, or None (NOT_CONTROLLER)."""

    def __init__(self, controller=None, *, auth: AuthHelper = ALLOW_ALL):
        self.controller = controller
        self.auth = auth

    def _refused(self, request, header, body) -> bool:
        """Answer CLUSTER_AUTHORIZATION_FAILED (True) unless the API's cluster operation is allowed."""
        op = _CLUSTER_OPERATION[header.api_key]
        if self.auth.authorize_cluster(request, op):
            return False
        self._respond(
            request,
            header,
            error_body(
                ApiKey(header.api_key),
                header.api_version,
                body,
                ClusterAuthorizationFailedError.code,
                "Cluster authorization failed.",
            ),
        )
        return True

    def handle_controlled_shutdown(self, request, header, body):
        """ControlledShutdown v0-3 (a stopping broker to the controller, Kafka's
        ``KafkaApis.handleControlledShutdownRequest``): NOT_CONTROLLER unless this broker is the
        controller; else the partitions the stopping broker still leads, answered when the
        controller's event thread has moved the leaderships (REQUEST_TIMED_OUT after 30 s); the
        request thread does not wait (:meth:`_answer_from_controller`)."""
        if self._refused(request, header, body):
            return
        from pyklog.broker.errors import NotControllerError

        controller = self.controller
        if controller is None or not controller.is_active:
            return self._respond(request, header, {"error_code": NotControllerError.code, "remaining_partitions": []})

        def answer(remaining):
            return {
                "error_code": NONE,
                "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining],
            }

        self._answer_from_controller(
            request,
            header,
            "controlled_shutdown",
            (int(body["broker_id"]), int(body.get("broker_epoch", -1))),
            30.0,
            answer,
            lambda code, msg: {"error_code": code, "remaining_partitions": []},
        )

    def _answer_from_controller(self, request, header, event: str, arg: tuple, timeout_s: float, answer, fail) -> None:
        """Hand ``event`` to the controller's event thread and answer when it is done: ``answer(result)``
        builds the response, ``fail(code, message)`` the error response (the controller's error, or
        REQUEST_TIMED_OUT after ``timeout_s``, whichever comes first: exactly one is sent).  Runs on a
        request handler thread and returns at once, so a slow controller holds no I/O thread (the
        response goes out from the controller's event thread or the timer's thread)."""
        from pyklog.broker.errors import RequestTimedOutError

        lock = threading.Lock()
        sent = []

        def send(build):
            with lock:
                if sent:
                    return
                sent.append(True)
            timer.cancel()
            try:
                resp = build()
            except Exception as e:  # noqa: BLE001 - never leave the client without an answer
                log.exception("building the %s answer failed", event)
                resp = fail(UNKNOWN_SERVER_ERROR, str(e))
            try:
                self._respond(request, header, resp)
            except Exception:  # noqa: BLE001
                log.exception("sending the %s answer failed", event)

        def done(fut):
            def build():
                try:
                    result = fut.result()
                except PyklogError as e:
                    return fail(e.code, str(e))
                return answer(result)

            send(build)

        timer = threading.Timer(
            timeout_s,
            lambda: send(
                lambda: fail(
                    RequestTimedOutError.code, f"the controller did not finish {event} within {timeout_s:.0f} s"
                )
            ),
        )
        timer.daemon = True
        try:
            fut = self.controller.submit(event, arg)
        except PyklogError as e:
            return self._respond(request, header, fail(e.code, str(e)))
        timer.start()
        fut.add_done_callback(done)

    def handle_elect_leaders(self, request, header, body):
        """ElectLeaders v0-2 (KIP-183/KIP-460; the admin client sends it to the controller):
        NOT_CONTROLLER unless this broker is the controller; else each partition's result
        (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
        UNKNOWN_TOPIC_OR_PARTITION).  Null partitions: every partition.  Election type 0 preferred,
        1 unclean (v1+)."""
        if self._refused(request, header, body):
            return
        from pyklog.broker.errors import NotControllerError

        controller = self.controller
        version = header.api_version
        resp = {"throttle_time_ms": 0, "error_code": NONE, "replica_election_results": []}

        def fail(code):
            if version >= 1:
                resp["error_code"] = code
            else:  # v0 has no top-level error: every partition carries it
                resp["replica_election_results"] = [
                    {
                        "topic": t["topic"],
                        "partition_result": [
                            {"partition_id": p, "error_code": code, "error_message": None} for p in t["partitions"]
                        ],
                    }
                    for t in body.get("topic_partitions") or []
                ]
            self._respond(request, header, resp)

        etype = body.get("election_type", 0)
        if etype not in (0, 1):
            return fail(InvalidRequestError.code)
        if controller is None or not controller.is_active:
            return fail(NotControllerError.code)
        wanted = body.get("topic_partitions")
        tps = None if wanted is None else [(t["topic"], p) for t in wanted for p in t["partitions"]]
        timeout_s = max(1.0, min(body.get("timeout_ms", 60000), 300000) / 1000.0)

        def error_body(code, _msg=None):
            out = dict(resp)
            if version >= 1:
                out["error_code"] = code
            else:
                out["replica_election_results"] = [
                    {
                        "topic": t["topic"],
                        "partition_result": [
                            {"partition_id": p, "error_code": code, "error_message": None} for p in t["partitions"]
                        ],
                    }
                    for t in body.get("topic_partitions") or []
                ]
            return out

        def answer(results):
            return dict(
                resp,
                replica_election_results=group_by_topic(
                    [(tp, dict(partition_id=tp[1], **outcome_fields(err))) for tp, err in sorted(results.items())],
                    "topic",
                    "partition_result",
                ),
            )

        self._answer_from_controller(request, header, "elect_leaders", (tps, int(etype)), timeout_s, answer, error_body)

    def handle_alter_partition_reassignments(self, request, header, body):
        """AlterPartitionReassignments v0 (KIP-455; the admin client sends it to the controller):
        NOT_CONTROLLER (top level) unless this broker is the controller; else per partition NONE
        (started, or cancelled for null replicas), UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_REPLICA_ASSIGNMENT or NO_REASSIGNMENT_IN_PROGRESS.  The controller's event thread
        starts the moves; this request thread waits only for that, not for the data to move."""
        if self._refused(request, header, body):
            return
        from pyklog.broker.errors import NotControllerError

        controller = self.controller
        resp = {"throttle_time_ms": 0, "error_code": NONE, "error_message": None, "responses": []}

        def fail(code, msg):
            resp.update(error_code=code, error_message=msg)
            self._respond(request, header, resp)

        if controller is None or not controller.is_active:
            return fail(NotControllerError.code, "This is not the correct controller for this cluster.")
        changes = {}
        for t in body.get("topics") or []:
            for p in t.get("partitions") or []:
                changes[(t["name"], p["partition_index"])] = p.get("replicas")
        timeout_s = max(1.0, min(body.get("timeout_ms", 60000), 300000) / 1000.0)

        def answer(results):
            return dict(
                resp,
                responses=group_by_topic(
                    [(tp, dict(partition_index=tp[1], **outcome_fields(err))) for tp, err in sorted(results.items())],
                    "name",
                    "partitions",
                ),
            )

        self._answer_from_controller(
            request,
            header,
            "alter_reassignments",
            (changes,),
            timeout_s,
            answer,
            lambda code, msg: dict(resp, error_code=code, error_message=msg),
        )

    def handle_list_partition_reassignments(self, request, header, body):
        """ListPartitionReassignments v0 (KIP-455): the controller's reassignments in progress, each
        with its full replica set (target then original replicas), adding and removing replicas;
        null topics: all of them.  NOT_CONTROLLER unless this broker is the controller."""
        if self._refused(request, header, body):
            return
        from pyklog.broker.errors import NotControllerError

        controller = self.controller
        resp = {"throttle_time_ms": 0, "error_code": NONE, "error_message": None, "topics": []}
        if controller is None or not controller.is_active:
            resp.update(
                error_code=NotControllerError.code, error_message="This is not the correct controller for this cluster."
            )
            return self._respond(request, header, resp)
        wanted = body.get("topics")
        tps = None if wanted is None else [(t["name"], p) for t in wanted for p in t.get("partition_indexes") or []]
        timeout_s = max(1.0, min(body.get("timeout_ms", 60000), 300000) / 1000.0)

        def answer(found):
            return dict(
                resp,
                topics=group_by_topic(
                    [
                        (
                            (t, p),
                            {
                                "partition_index": p,
                                "replicas": replicas,
                                "adding_replicas": adding,
                                "removing_replicas": removing,
                            },
                        )
                        for (t, p), (replicas, adding, removing) in sorted(found.items())
                    ],
                    "name",
                    "partitions",
                ),
            )

        self._answer_from_controller(
            request,
            header,
            "list_reassignments",
            (tps,),
            timeout_s,
            answer,
            lambda code, msg: dict(resp, error_code=code, error_message=msg),
        )
