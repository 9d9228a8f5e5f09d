"""The group metadata record of ``__consumer_offsets`` (Kafka's ``GroupMetadataKey`` /
``GroupMetadataValue`` message schemas): what a classic group's coordinator writes at the end of
every rebalance, when the group becomes Empty, and (a null value, a tombstone) when it is removed,
so the next coordinator of the partition brings the group back as it was.

Key (version 2; versions 0-1 are offset commit keys)::

    version int16 = 2
    group   string            int16 length + UTF-8

Value (versions 0-4; Kafka 3.7 writes 3, "the highest non-flexible version", and so does pyklog;
version 4 is the first flexible one and is read too)::

    version               int16
    protocol_type         string
    generation            int32
    protocol              nullable string  (null: no protocol chosen, an Empty group)
    leader                nullable string
    current_state_timestamp int64          v2+ (ms; -1 unknown)
    members               array of:
        member_id          string
        group_instance_id  nullable string v3+ (KIP-345 static members)
        client_id          string
        client_host        string
        rebalance_timeout  int32           v1+ (v0: the session timeout)
        session_timeout    int32
        subscription       bytes           int32 length (the member's metadata for ``protocol``)
        assignment         bytes

Versions 0-3 use int16-length strings (-1: null), int32-length bytes and int32-count arrays.
Version 4 is flexible: strings, bytes and arrays carry an unsigned varint of length + 1 (0: null),
and the value and each member end with a tagged-field section (a varint count, then tag, size
and data of each: skipped, none are defined).

Pure codec (bytes in, objects out, no I/O).  Malformed input raises :class:`GroupMetadataRecordError`
saying what was expected at which byte and what was read.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

GROUP_METADATA_KEY_VERSION = 2
#: the value version written (Kafka's ``MetadataVersion.groupMetadataValueVersion`` from 2.3 on)
GROUP_METADATA_VALUE_VERSION = 3
#: the value versions read
GROUP_METADATA_VALUE_VERSIONS = range(5)
FIRST_FLEXIBLE_VERSION = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class GroupMetadataRecordError(ValueError):
    """A group metadata key or value that cannot be read (or a value that cannot be written)."""


class MemberRecord(NamedTuple):
    """One member as the group metadata value stores it (Kafka's ``MemberMetadata`` struct)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's protocol metadata for the group's protocol
    assignment: bytes


class GroupMetadataValue(NamedTuple):
    """A group metadata value (Kafka's ``GroupMetadataValue``); members in join order."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int  # ms of the group's last state change, -1 unknown
    members: tuple[MemberRecord, ...] = ()


# ---------------------------------------------------------------------------- writing


def _string(s: str | None, what: str, nullable: bool = False) -> bytes:
    if s is None:
        if not nullable:
            raise GroupMetadataRecordError(f"{what}: a non-nullable string is None")
        return _I16.pack(-1)
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise GroupMetadataRecordError(f"{what}: {len(b)} bytes do not fit an int16 length")
    return _I16.pack(len(b)) + b


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + bytes(b)


def encode_group_metadata_key(group: str) -> bytes:
    """The key (version 2) of ``group``'s metadata record."""
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(group, "group metadata key group")


def encode_group_metadata_value(value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    """``value`` as a version ``version`` (0-3) record value; 3 is what Kafka 3.7 writes."""
    if not 0 <= version < FIRST_FLEXIBLE_VERSION:
        raise GroupMetadataRecordError(f"group metadata value: writing version {version} is not supported (0-3)")
    parts = [
        _I16.pack(version),
        _string(value.protocol_type or "", "protocol_type"),
        _I32.pack(value.generation),
        _string(value.protocol, "protocol", nullable=True),
        _string(value.leader, "leader", nullable=True),
    ]
    if version >= 2:
        parts.append(_I64.pack(value.current_state_timestamp))
    parts.append(_I32.pack(len(value.members)))
    for m in value.members:
        parts.append(_string(m.member_id, "member_id"))
        if version >= 3:
            parts.append(_string(m.group_instance_id, "group_instance_id", nullable=True))
        parts.append(_string(m.client_id or "", "client_id"))
        parts.append(_string(m.client_host or "", "client_host"))
        if version >= 1:
            parts.append(_I32.pack(m.rebalance_timeout_ms))
        parts.append(_I32.pack(m.session_timeout_ms))
        parts.append(_bytes(m.subscription))
        parts.append(_bytes(m.assignment))
    return b"".join(parts)


# ---------------------------------------------------------------------------- reading


class _Reader:
    """A cursor over one value; every read says what it expected when the buffer ends."""

    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf: bytes, pos: int, flexible: bool):
        self.buf = memoryview(buf)
        self.pos = pos
        self.flexible = flexible

    def _need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise GroupMetadataRecordError(
                f"group metadata value: expected {n} bytes of {what} at byte {self.pos}, "
                f"the value has {len(self.buf)} bytes"
            )

    def fixed(self, s: struct.Struct, what: str) -> int:
        self._need(s.size, what)
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def uvarint(self, what: str) -> int:
        shift = value = 0
        while True:
            self._need(1, what)
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise GroupMetadataRecordError(f"group metadata value: {what} varint longer than 5 bytes")

    def _length(self, short: struct.Struct, what: str) -> int:
        """A length (-1: null): int16/int32, or for flexible versions a varint of length + 1."""
        if self.flexible:
            return self.uvarint(what) - 1
        return self.fixed(short, what)

    def string(self, what: str, nullable: bool = False) -> str | None:
        n = self._length(_I16, what)
        if n < 0:
            if not nullable:
                raise GroupMetadataRecordError(f"group metadata value: {what} is null, expected a string")
            return None
        self._need(n, what)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GroupMetadataRecordError(f"group metadata value: {what} is not UTF-8: {e}") from None

    def bytes_(self, what: str) -> bytes:
        n = self._length(_I32, what)
        if n < 0:
            return b""
        self._need(n, what)
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out

    def count(self, what: str) -> int:
        n = self._length(_I32, what)
        return max(n, 0)

    def skip_tagged_fields(self, what: str) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint(f"{what} tagged field count")):
            self.uvarint(f"{what} tag")
            size = self.uvarint(f"{what} tagged field size")
            self._need(size, f"{what} tagged field")
            self.pos += size


def decode_group_metadata_key(buf: bytes) -> str:
    """The group of a version 2 key."""
    if buf is None or len(buf) < 4:
        raise GroupMetadataRecordError(f"group metadata key: expected a version and a group, read {buf!r}")
    (version,) = _I16.unpack_from(buf, 0)
    if version != GROUP_METADATA_KEY_VERSION:
        raise GroupMetadataRecordError(f"group metadata key: expected version 2, read {version}")
    r = _Reader(buf, 2, flexible=False)
    return r.string("group metadata key group") or ""


def decode_group_metadata_value(buf: bytes) -> GroupMetadataValue:
    """Decode a value of version 0-4."""
    if buf is None or len(buf) < 2:
        raise GroupMetadataRecordError(f"group metadata value: expected at least a 2-byte version, read {buf!r}")
    (version,) = _I16.unpack_from(buf, 0)
    if version not in GROUP_METADATA_VALUE_VERSIONS:
        raise GroupMetadataRecordError(f"group metadata value: expected version 0-4, read {version}")
    r = _Reader(buf, 2, flexible=version >= FIRST_FLEXIBLE_VERSION)
    protocol_type = r.string("protocol_type") or ""
    generation = r.fixed(_I32, "generation")
    protocol = r.string("protocol", nullable=True)
    leader = r.string("leader", nullable=True)
    timestamp = r.fixed(_I64, "current_state_timestamp") if version >= 2 else -1
    members = []
    for i in range(r.count("members count")):
        what = f"member {i}"
        member_id = r.string(f"{what} member_id") or ""
        instance = r.string(f"{what} group_instance_id", nullable=True) if version >= 3 else None
        client_id = r.string(f"{what} client_id") or ""
        client_host = r.string(f"{what} client_host") or ""
        rebalance_timeout = r.fixed(_I32, f"{what} rebalance_timeout") if version >= 1 else None
        session_timeout = r.fixed(_I32, f"{what} session_timeout")
        subscription = r.bytes_(f"{what} subscription")
        assignment = r.bytes_(f"{what} assignment")
        r.skip_tagged_fields(what)
        members.append(
            MemberRecord(
                member_id,
                instance,
                client_id,
                client_host,
                session_timeout if rebalance_timeout is None else rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    r.skip_tagged_fields("group metadata value")
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))


__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "GroupMetadataRecordError",
    "GroupMetadataValue",
    "MemberRecord",
    "decode_group_metadata_key",
    "decode_group_metadata_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
]
