"""Schema engine: compact field definitions compiled into per-version encoders/decoders.

A message schema is a list of :class:`Field` transcribed from Kafka's JSON message schemas
(``clients/src/main/resources/common/message/*.json``): name (the JSON name, CamelCase),
type, the versions the field is present in, the versions in which it may be null, and its
default.  Dict keys are the snake_case of the JSON names (:func:`snake_case`).

For every (message, version) :func:`compile_decoder` and :func:`compile_encoder` generate
one straight-line Python function (nested arrays become nested loops, consecutive
fixed-width fields are read or written with one precompiled ``struct.Struct``; scalar arrays
of up to 15 elements use precompiled structs too).  This is 4-8x faster than walking the
schema per field per call (bench/bench_protocol.py).  Each decoder has a *checked* twin that
tests every read against the bytes left: the fast one leaves the fixed-width checks to
``struct`` (which raises past the end of the buffer) and, on any low-level error, the caller
re-runs the checked twin so a malformed frame raises
:class:`~broker.errors.InvalidRequestError` naming the field (``topics[2].partitions[0].records``),
what was expected and what was read.  String/bytes lengths and array counts (bounded by the
bytes left, so a forged count cannot allocate) are checked in both.

Decoders: ``fn(buf: memoryview, pos: int, end: int) -> (dict, pos)``.  ``records`` values are
zero-copy ``memoryview`` slices of ``buf``.
Encoders: ``fn(body: dict, out: bytearray, chunks: list) -> bytearray``: appends to ``out``;
a large ``records`` value (or a :class:`~broker.protocol.types.FileRegion`) is not copied:
``out`` is closed into ``chunks``, the value appended as its own chunk, and a new
``bytearray`` returned for what follows.

Flexible versions (KIP-482): ``compile_decoder``/``compile_encoder`` take ``flexible=True`` for
the versions in the message's ``flexibleVersions`` (:data:`messages.FLEXIBLE`).  Then lengths and
counts are unsigned varints holding N + 1 (0 = null), and every struct ends with its tagged field
section: a field with ``tag`` whose ``tagged`` versions include the version is written there
(only when it differs from its default, in tag order) instead of in line; unknown tags are
skipped on decode, and a struct without tagged fields is written with an empty section (one 0
byte).  So a message gains flexible versions by a schema change only: list them in FLEXIBLE and
declare the new fields (with ``tag=``/``tagged=`` where Kafka's JSON has ``tag``/``taggedVersions``).

Compiled functions are pure and thread-safe.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from pyklog.broker.errors import InvalidRequestError, PyklogError
from pyklog.broker.protocol.types import (
    BOOL,
    BYTES,
    FIXED,
    INT16_S,
    INT32_S,
    RECORDS,
    SCALARS,
    STRING,
    UUID,
    FileRegion,
    read_uvarint,
    uvarint_bytes,
)

MAX_VERSION = 0x7FFF

#: records values at least this long are emitted as their own chunk instead of copied.
RECORDS_CHUNK_THRESHOLD = 1024

_MISSING = object()


def parse_versions(spec: str | None) -> tuple[int, int] | None:
    """Kafka's version range syntax: ``"0+"``, ``"2-4"``, ``"1"``, ``"none"``/None."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), MAX_VERSION
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    return int(spec), int(spec)


_CAMEL_1 = re.compile(r"(.)([A-Z][a-z]+)")
_CAMEL_2 = re.compile(r"([a-z0-9])([A-Z])")


def snake_case(name: str) -> str:
    """``PartitionIndex`` -> ``partition_index``, ``timeoutMs`` -> ``timeout_ms``."""
    return _CAMEL_2.sub(r"\1_\2", _CAMEL_1.sub(r"\1_\2", name)).lower()


class Field:
    """One field of a message schema (immutable after construction).

    ``type`` is a scalar type name (``int32``, ``string``, ``records`` ...), ``"[]T"`` for an
    array of scalars, or ``"[]"`` with ``fields`` for an array of structs.
    """

    __slots__ = ("name", "key", "type", "elem", "versions", "nullable", "default", "fields", "tag", "tagged")

    def __init__(
        self,
        name: str,
        type: str,
        versions: str = "0+",
        *,
        nullable: str | None = None,
        default: Any = _MISSING,
        fields: Sequence[Field] | None = None,
        tag: int | None = None,
        tagged: str | None = None,
    ) -> None:
        """``tag``/``tagged``: Kafka's ``tag`` and ``taggedVersions`` (a tagged field of a
        flexible version lives in its struct's tagged field section)."""
        self.name = name
        self.key = snake_case(name)
        self.type = type
        self.fields = tuple(fields) if fields is not None else None
        if type.startswith("[]"):
            self.elem = type[2:] or None
            if self.elem is None and not self.fields:
                raise ValueError(f"struct array {name} needs fields")
            if self.elem is not None and self.elem not in SCALARS:
                raise ValueError(f"unknown element type {self.elem} of {name}")
        else:
            if type not in SCALARS:
                raise ValueError(f"unknown type {type} of {name}")
            self.elem = None
        present_in = parse_versions(versions)
        if present_in is None:
            raise ValueError(f"{name}: versions {versions!r} names no version")
        self.versions: tuple[int, int] = present_in
        self.nullable = parse_versions(nullable)
        if default is _MISSING:
            if type.startswith("[]"):
                default = ()
            elif type in FIXED:
                default = False if type == BOOL else 0
            elif type == STRING:
                default = ""
            elif type == UUID:
                default = ZERO_UUID
            else:  # bytes, records
                default = None
        elif isinstance(default, list):
            default = tuple(default)
        self.default = default
        if (tag is None) != (tagged is None):
            raise ValueError(f"{name}: tag and tagged go together")
        self.tag = tag
        self.tagged = parse_versions(tagged)

    def tagged_in(self, version: int) -> bool:
        return self.tagged is not None and self.tagged[0] <= version <= self.tagged[1]

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def struct_fields(self) -> tuple[Field, ...]:
        """The fields of each element of a struct array (``elem is None``; the constructor checked
        that it has some)."""
        return self.fields or ()

    def present(self, version: int) -> bool:
        lo, hi = self.versions
        return lo <= version <= hi

    def nullable_in(self, version: int) -> bool:
        return self.nullable is not None and self.nullable[0] <= version <= self.nullable[1]

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r}, {self.versions})"


def F(name: str, type: str, versions: str = "0+", **kw: Any) -> Field:
    """Shorthand for :class:`Field`."""
    return Field(name, type, versions, **kw)


def A(name: str, versions: str = "0+", fields: Sequence[Field] = (), **kw: Any) -> Field:
    """Shorthand for an array of structs."""
    return Field(name, "[]", versions, fields=fields, **kw)


#: Kafka's Uuid.ZERO_UUID (the default of a uuid field: "no topic id").
ZERO_UUID = uuid.UUID(int=0)


def active_fields(fields: Iterable[Field], version: int) -> list[Field]:
    """The fields present in ``version`` (tagged ones included: they are dict keys too)."""
    return [f for f in fields if f.present(version)]


def _split(fields: Iterable[Field], version: int, flexible: bool) -> tuple[list[Field], list[Field]]:
    """(in-line fields, tagged fields sorted by tag) of a struct in ``version``."""
    inline: list[Field] = []
    tagged: list[Field] = []
    for f in active_fields(fields, version):
        (tagged if flexible and f.tagged_in(version) else inline).append(f)
    return inline, sorted(tagged, key=lambda f: cast(int, f.tag))  # a tagged field has a tag


def min_size(fields: Iterable[Field], version: int, flexible: bool = False) -> int:
    """Smallest encoding of a struct in ``version`` (bounds array counts by bytes left)."""
    inline, _ = _split(fields, version, flexible)
    total = 1 if flexible else 0  # the tagged field count
    for f in inline:
        if flexible and (f.is_array or f.type in (BYTES, RECORDS, STRING)):
            total += 1
        elif f.is_array or f.type in (BYTES, RECORDS):
            total += 4
        elif f.type == STRING:
            total += 2
        elif f.type == UUID:
            total += 16
        else:
            total += FIXED[f.type][1]
    return total


# --------------------------------------------------------------------------------------
# error helpers called from generated code (only on the error path)


def _where(path: str, idx: tuple) -> str:
    return path % idx if idx else path


def _short(msg: str, path: str, idx: tuple, need: int, have: int) -> None:
    raise InvalidRequestError(
        f"malformed {msg}: {_where(path, idx)}: expected {need} bytes, only {have} left (truncated)"
    )


def _badlen(msg: str, path: str, idx: tuple, n: int, nullable: bool) -> None:
    what = "-1 (null) or a length >= 0" if nullable else "a length >= 0 (field is not nullable)"
    raise InvalidRequestError(f"malformed {msg}: {_where(path, idx)}: expected {what}, read {n}")


def _badcount(msg: str, path: str, idx: tuple, n: int, have: int, each: int) -> None:
    raise InvalidRequestError(
        f"malformed {msg}: {_where(path, idx)}: array count {n} needs at least {n * each} bytes, only {have} left"
    )


def _uvar(buf: Any, pos: int, end: int, msg: str, path: str, idx: tuple) -> tuple[int, int]:
    """Read an unsigned varint (a compact length, a count or a tag) or raise naming the field."""
    try:
        return read_uvarint(buf, pos, end)
    except ValueError as e:
        raise InvalidRequestError(f"malformed {msg}: {_where(path, idx)}: {e}") from None


def _badtag(msg: str, path: str, idx: tuple, tag: int, size: int, used: int) -> None:
    raise InvalidRequestError(
        f"malformed {msg}: {_where(path, idx)}: tagged field {tag} declares {size} bytes, its value used {used}"
    )


def _badorder(msg: str, path: str, idx: tuple, tag: int, prev: int) -> None:
    raise InvalidRequestError(
        f"malformed {msg}: {_where(path, idx)}: tagged field {tag} after tag {prev} (tags must increase)"
    )


def _null_error(msg: str, path: str) -> None:
    # a ValueError, not InvalidRequestError: the caller re-walks the body to name the element
    raise ValueError(f"{path} is None but not nullable in this version")


# --------------------------------------------------------------------------------------
# code generation


class _Gen:
    def __init__(self, msg: str, checked: bool = True, flexible: bool = False) -> None:
        self.checked = checked
        self.flex = flexible
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {
            "_msg": msg,
            "_short": _short,
            "_badlen": _badlen,
            "_badcount": _badcount,
            "_null_error": _null_error,
            "_uvar": _uvar,
            "_badtag": _badtag,
            "_badorder": _badorder,
            "_uv": uvarint_bytes,
            "_UUID": uuid.UUID,
            "_h_unpack": INT16_S.unpack_from,
            "_i_unpack": INT32_S.unpack_from,
            "_h_pack": INT16_S.pack,
            "_i_pack": INT32_S.pack,
            "_unpack_from": struct.unpack_from,
            "_pack": struct.pack,
            "FileRegion": FileRegion,
            "bytearray": bytearray,
            "_BIG": RECORDS_CHUNK_THRESHOLD,
        }
        self.n = 0

    def tmp(self, prefix: str = "v") -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, value: Any, prefix: str = "_c") -> str:
        name = self.tmp(prefix)
        self.ns[name] = value
        return name

    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    def build(self, fname: str) -> Callable:
        src = "\n".join(self.lines)
        code = compile(src, f"<pyklog protocol {self.ns['_msg']}>", "exec")
        exec(code, self.ns)
        fn = self.ns[fname]
        fn.__source__ = src
        return fn


def _idx_expr(idx: list[str]) -> str:
    if not idx:
        return "()"
    return "(" + ", ".join(idx) + ",)"


# ---- decoder


def _dec_uvarint(g: _Gen, ind: int, path: str, idx: list[str], nvar: str) -> None:
    """Read an unsigned varint into ``nvar`` (one byte inline, longer ones via ``_uvar``)."""
    if g.checked:
        g.emit(ind, f"if pos >= end: _short(_msg, {path!r}, {_idx_expr(idx)}, 1, 0)")
    g.emit(ind, f"{nvar} = buf[pos]")
    g.emit(ind, f"if {nvar} < 128: pos += 1")
    g.emit(ind, f"else: {nvar}, pos = _uvar(buf, pos, end, _msg, {path!r}, {_idx_expr(idx)})")


def _dec_length(g: _Gen, ind: int, path: str, idx: list[str], width: int, nullable: bool, nvar: str) -> None:
    """Read an int16/int32 length or count (or, in a flexible version, a compact one: uvarint
    N + 1) into ``nvar``; -1 means null either way."""
    if g.flex:
        _dec_uvarint(g, ind, path, idx, nvar)
        g.emit(ind, f"{nvar} -= 1")
        return
    unpack = "_h_unpack" if width == 2 else "_i_unpack"
    if g.checked:
        g.emit(ind, f"if pos + {width} > end: _short(_msg, {path!r}, {_idx_expr(idx)}, {width}, end - pos)")
    g.emit(ind, f"{nvar} = {unpack}(buf, pos)[0]")
    g.emit(ind, f"pos += {width}")


def _dec_scalar_var(g: _Gen, ind: int, ftype: str, path: str, idx: list[str], nullable: bool, var: str) -> None:
    """Decode one string/bytes/records/uuid value into ``var`` (fixed types are handled in runs)."""
    if ftype == UUID:
        if g.checked:
            g.emit(ind, f"if pos + 16 > end: _short(_msg, {path!r}, {_idx_expr(idx)}, 16, end - pos)")
        g.emit(ind, f"{var} = _UUID(bytes=bytes(buf[pos:pos + 16]))")
        g.emit(ind, "pos += 16")
        return
    n = g.tmp("n")
    width = 2 if ftype == STRING else 4
    _dec_length(g, ind, path, idx, width, nullable, n)
    g.emit(ind, f"if {n} < 0:")
    if nullable:
        g.emit(ind + 1, f"if {n} != -1: _badlen(_msg, {path!r}, {_idx_expr(idx)}, {n}, True)")
        g.emit(ind + 1, f"{var} = None")
    else:
        g.emit(ind + 1, f"_badlen(_msg, {path!r}, {_idx_expr(idx)}, {n}, False)")
    g.emit(ind, "else:")
    g.emit(ind + 1, f"if {n} > end - pos: _short(_msg, {path!r}, {_idx_expr(idx)}, {n}, end - pos)")
    if ftype == STRING:
        g.emit(ind + 1, f"{var} = str(buf[pos:pos + {n}], 'utf-8')")
    elif ftype == RECORDS:
        g.emit(ind + 1, f"{var} = buf[pos:pos + {n}]")
    else:
        g.emit(ind + 1, f"{var} = bytes(buf[pos:pos + {n}])")
    g.emit(ind + 1, f"pos += {n}")


def _dec_field(g: _Gen, f: Field, version: int, ind: int, fpath: str, idx: list[str], var: str) -> None:
    """Decode one non-fixed-width field (string/bytes/records/uuid or an array) into ``var``."""
    nullable = f.nullable_in(version)
    if not f.is_array:
        _dec_scalar_var(g, ind, f.type, fpath, idx, nullable, var)
        return
    n = g.tmp("n")
    _dec_length(g, ind, fpath, idx, 4, nullable, n)
    g.emit(ind, f"if {n} < 0:")
    if nullable:
        g.emit(ind + 1, f"if {n} != -1: _badlen(_msg, {fpath!r}, {_idx_expr(idx)}, {n}, True)")
        g.emit(ind + 1, f"{var} = None")
    else:
        g.emit(ind + 1, f"_badlen(_msg, {fpath!r}, {_idx_expr(idx)}, {n}, False)")
    g.emit(ind, "else:")
    if f.elem in FIXED:
        code, width = FIXED[f.elem]
        g.emit(
            ind + 1,
            f"if {n} > (end - pos) // {width}: _badcount(_msg, {fpath!r}, {_idx_expr(idx)}, {n}, end - pos, {width})",
        )
        small = g.const([struct.Struct(f">{k}{code}").unpack_from for k in range(16)], "_arr")
        g.emit(
            ind + 1, f"{var} = list({small}[{n}](buf, pos) if {n} < 16 else _unpack_from('>%d{code}' % {n}, buf, pos))"
        )
        g.emit(ind + 1, f"pos += {n} * {width}")
        return
    if f.elem is None:
        each = max(1, min_size(f.struct_fields, version, g.flex))
    elif f.elem == UUID:
        each = 16
    else:
        each = 1 if g.flex else 2 if f.elem == STRING else 4
    g.emit(
        ind + 1, f"if {n} > (end - pos) // {each}: _badcount(_msg, {fpath!r}, {_idx_expr(idx)}, {n}, end - pos, {each})"
    )
    g.emit(ind + 1, f"{var} = []")
    k = g.tmp("i")
    g.emit(ind + 1, f"for {k} in range({n}):")
    sub_idx = idx + [k]
    if f.elem is not None:
        ev = g.tmp()
        _dec_scalar_var(g, ind + 2, f.elem, fpath + "[%d]", sub_idx, False, ev)
    else:
        ev = _dec_struct(g, f.struct_fields, version, ind + 2, fpath + "[%d].", sub_idx)
    g.emit(ind + 2, f"{var}.append({ev})")


def _dec_struct(g: _Gen, fields: Sequence[Field], version: int, ind: int, path: str, idx: list[str]) -> str:
    """Emit code decoding one struct; returns the name of the variable holding its dict."""
    act, tagged = _split(fields, version, g.flex)
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(act):
        f = act[i]
        fpath = f"{path}{f.key}"
        if f.type in FIXED:
            run = [f]
            j = i + 1
            # the fast variant reads consecutive fixed-width fields with one struct; the checked
            # variant (error messages only) reads them one by one to name the truncated field
            while j < len(act) and act[j].type in FIXED and not g.checked:
                run.append(act[j])
                j += 1
            fmt = ">" + "".join(FIXED[x.type][0] for x in run)
            s = struct.Struct(fmt)
            unpack = g.const(s.unpack_from, "_s")
            vars_ = [g.tmp() for _ in run]
            if g.checked:
                g.emit(ind, f"if pos + {s.size} > end: _short(_msg, {fpath!r}, {_idx_expr(idx)}, {s.size}, end - pos)")
            g.emit(ind, f"{', '.join(vars_)}, = {unpack}(buf, pos)")
            g.emit(ind, f"pos += {s.size}")
            pairs.extend((x.key, v) for x, v in zip(run, vars_))
            i = j
            continue
        var = g.tmp()
        _dec_field(g, f, version, ind, fpath, idx, var)
        pairs.append((f.key, var))
        i += 1
    if g.flex:
        pairs.extend(_dec_tagged(g, tagged, version, ind, path, idx))
    d = g.tmp("d")
    g.emit(ind, f"{d} = {{" + ", ".join(f"{k!r}: {v}" for k, v in pairs) + "}")
    return d


def _dec_tagged(
    g: _Gen, tagged: list[Field], version: int, ind: int, path: str, idx: list[str]
) -> list[tuple[str, str]]:
    """Emit the decoding of a struct's tagged field section: known tags decode into their field
    (bounded by the declared size), unknown ones are skipped.  Returns (key, variable) pairs."""
    where = f"{path}_tagged_fields"
    pairs = []
    for f in tagged:
        var = g.tmp()
        dflt = f.default
        if isinstance(dflt, tuple):
            g.emit(ind, f"{var} = []")
        elif isinstance(dflt, (int, str, type(None))):
            g.emit(ind, f"{var} = {dflt!r}")
        else:
            g.emit(ind, f"{var} = {g.const(dflt, '_d')}")
        pairs.append((f.key, var))
    cnt, tag, size, tend, prev, k = (g.tmp(p) for p in ("tc", "tg", "ts", "te", "tp", "ti"))
    _dec_uvarint(g, ind, where, idx, cnt)
    g.emit(ind, f"if {cnt}:")
    g.emit(ind + 1, f"if {cnt} > (end - pos) // 2: _badcount(_msg, {where!r}, {_idx_expr(idx)}, {cnt}, end - pos, 2)")
    g.emit(ind + 1, f"{prev} = -1")
    g.emit(ind + 1, f"for {k} in range({cnt}):")
    b = ind + 2
    _dec_uvarint(g, b, where, idx, tag)
    g.emit(b, f"if {tag} <= {prev}: _badorder(_msg, {where!r}, {_idx_expr(idx)}, {tag}, {prev})")
    g.emit(b, f"{prev} = {tag}")
    _dec_uvarint(g, b, where, idx, size)
    g.emit(b, f"if {size} > end - pos: _short(_msg, {where!r}, {_idx_expr(idx)}, {size}, end - pos)")
    g.emit(b, f"{tend} = pos + {size}")
    kw = "if"
    for f, (_, var) in zip(tagged, pairs):
        g.emit(b, f"{kw} {tag} == {f.tag}:")
        kw = "elif"
        fpath = f"{path}{f.key}"
        save = g.tmp("se")
        # the value may not read past its declared size: decode it with end = the tag's end
        g.emit(b + 1, f"{save} = end")
        g.emit(b + 1, f"end = {tend}")
        if f.type in FIXED:
            s = struct.Struct(">" + FIXED[f.type][0])
            if g.checked:
                g.emit(
                    b + 1, f"if pos + {s.size} > end: _short(_msg, {fpath!r}, {_idx_expr(idx)}, {s.size}, end - pos)"
                )
            g.emit(b + 1, f"{var}, = {g.const(s.unpack_from, '_s')}(buf, pos)")
            g.emit(b + 1, f"pos += {s.size}")
        else:
            _dec_field(g, f, version, b + 1, fpath, idx, var)
        g.emit(b + 1, f"end = {save}")
        g.emit(
            b + 1, f"if pos != {tend}: _badtag(_msg, {fpath!r}, {_idx_expr(idx)}, {tag}, {size}, pos - {tend} + {size})"
        )
    if tagged:
        g.emit(b, "else:")
        g.emit(b + 1, f"pos = {tend}")
    else:
        g.emit(b, f"pos = {tend}")
    return pairs


def compile_decoder(
    msg: str, fields: Sequence[Field], version: int, checked: bool = True, flexible: bool = False
) -> Callable:
    """Generate ``decode(buf, pos, end) -> (dict, pos)`` for ``version`` of a message.

    ``checked=False`` leaves out the bounds checks before fixed-width reads: ``struct`` raises
    ``struct.error`` past the end of ``buf`` anyway, so this is only valid when ``end ==
    len(buf)``; the caller then re-runs the checked decoder to report where the frame broke.
    Lengths of strings/bytes and array counts are checked in both variants.
    ``flexible``: ``version`` is one of the message's flexible versions (compact lengths, tagged
    field sections).
    """
    g = _Gen(f"{msg} v{version}", checked, flexible)
    g.emit(0, "def decode(buf, pos, end):")
    d = _dec_struct(g, fields, version, 1, "", [])
    g.emit(1, f"return {d}, pos")
    return g.build("decode")


# ---- encoder


def _enc_len(g: _Gen, ind: int, width: int, n: str) -> None:
    """Write the length/count expression ``n``: int16/int32, or a compact uvarint N + 1."""
    if g.flex:
        g.emit(ind, f"out += _uv({n} + 1)")
    else:
        g.emit(ind, f"out += {'_h_pack' if width == 2 else '_i_pack'}({n})")


def _enc_null(g: _Gen, ind: int, width: int) -> None:
    if g.flex:
        g.emit(ind, "out += b'\\x00'")
    else:
        g.emit(ind, "out += " + ("b'\\xff\\xff'" if width == 2 else "b'\\xff\\xff\\xff\\xff'"))


def _enc_scalar(g: _Gen, ind: int, ftype: str, nullable: bool, path: str, val: str) -> None:
    if ftype == UUID:
        g.emit(ind, f"out += {val}.bytes")
        return
    width = 2 if ftype == STRING else 4
    g.emit(ind, f"if {val} is None:")
    if nullable:
        _enc_null(g, ind + 1, width)
    else:
        g.emit(ind + 1, f"_null_error(_msg, {path!r})")
    if ftype == STRING:
        g.emit(ind, "else:")
        b = g.tmp("b")
        g.emit(ind + 1, f"{b} = {val}.encode('utf-8')")
        _enc_len(g, ind + 1, 2, f"len({b})")
        g.emit(ind + 1, f"out += {b}")
        return
    if ftype == RECORDS:
        g.emit(ind, f"elif {val}.__class__ is FileRegion:")
        _enc_len(g, ind + 1, 4, f"{val}.size")
        g.emit(ind + 1, "chunks.append(out)")
        g.emit(ind + 1, f"chunks.append({val})")
        g.emit(ind + 1, "out = bytearray()")
        g.emit(ind, "else:")
        n = g.tmp("n")
        g.emit(ind + 1, f"{n} = len({val})")
        _enc_len(g, ind + 1, 4, n)
        g.emit(ind + 1, f"if {n} >= _BIG:")
        g.emit(ind + 2, "chunks.append(out)")
        g.emit(ind + 2, f"chunks.append({val})")
        g.emit(ind + 2, "out = bytearray()")
        g.emit(ind + 1, "else:")
        g.emit(ind + 2, f"out += {val}")
    else:
        g.emit(ind, "else:")
        _enc_len(g, ind + 1, 4, f"len({val})")
        g.emit(ind + 1, f"out += {val}")


def _enc_field(g: _Gen, f: Field, version: int, ind: int, val: str, fpath: str) -> None:
    """Encode the value in variable ``val`` of one field (any type)."""
    nullable = f.nullable_in(version)
    if f.type in FIXED:
        g.emit(ind, f"out += {g.const(struct.Struct('>' + FIXED[f.type][0]).pack, '_p')}({val})")
    elif not f.is_array:
        _enc_scalar(g, ind, f.type, nullable, fpath, val)
    else:
        g.emit(ind, f"if {val} is None:")
        if nullable:
            _enc_null(g, ind + 1, 4)
        else:
            g.emit(ind + 1, f"_null_error(_msg, {fpath!r})")
        g.emit(ind, "else:")
        if f.elem in FIXED:
            code = FIXED[f.elem][0]
            k = g.tmp("k")
            g.emit(ind + 1, f"{k} = len({val})")
            if g.flex:
                small = g.const([struct.Struct(f">{k}{code}").pack for k in range(16)], "_parr")
                g.emit(ind + 1, f"out += _uv({k} + 1)")
                g.emit(ind + 1, f"out += {small}[{k}](*{val}) if {k} < 16 else _pack('>%d{code}' % {k}, *{val})")
            else:
                small = g.const([struct.Struct(f">i{k}{code}").pack for k in range(16)], "_parr")
                g.emit(
                    ind + 1, f"out += {small}[{k}]({k}, *{val}) if {k} < 16 else _pack('>i%d{code}' % {k}, {k}, *{val})"
                )
        else:
            _enc_len(g, ind + 1, 4, f"len({val})")
            e = g.tmp("e")
            g.emit(ind + 1, f"for {e} in {val}:")
            if f.elem is not None:
                _enc_scalar(g, ind + 2, f.elem, False, fpath + "[]", e)
            else:
                _enc_struct(g, f.struct_fields, version, ind + 2, e, fpath + "[].")


def _enc_struct(g: _Gen, fields: Sequence[Field], version: int, ind: int, dvar: str, path: str) -> None:
    act, tagged = _split(fields, version, g.flex)
    i = 0
    while i < len(act):
        f = act[i]
        fpath = f"{path}{f.key}"
        dflt = g.const(f.default, "_d") if not isinstance(f.default, (int, str, type(None))) else repr(f.default)
        if f.type in FIXED:
            run = [f]
            j = i + 1
            while j < len(act) and act[j].type in FIXED:
                run.append(act[j])
                j += 1
            s = struct.Struct(">" + "".join(FIXED[x.type][0] for x in run))
            pack = g.const(s.pack, "_p")
            args = ", ".join(f"{dvar}.get({x.key!r}, {x.default!r})" for x in run)
            g.emit(ind, f"out += {pack}({args})")
            i = j
            continue
        val = g.tmp()
        g.emit(ind, f"{val} = {dvar}.get({f.key!r}, {dflt})")
        _enc_field(g, f, version, ind, val, fpath)
        i += 1
    if not g.flex:
        return
    if not tagged:
        g.emit(ind, "out += b'\\x00'")  # an empty tagged field section
        return
    # tagged fields are written only when they differ from their default, in tag order
    tl = g.tmp("tl")
    g.emit(ind, f"{tl} = []")
    for f in tagged:
        fpath = f"{path}{f.key}"
        dflt = g.const(f.default, "_d")
        val = g.tmp()
        g.emit(ind, f"{val} = {dvar}.get({f.key!r}, {dflt})")
        if isinstance(f.default, tuple):
            g.emit(ind, f"if {val} is None or len({val}):")
        else:
            g.emit(ind, f"if {val} != {dflt}:")
        saved = g.tmp("so")
        g.emit(ind + 1, f"{saved} = out")
        g.emit(ind + 1, "out = bytearray()")
        _enc_field(g, f, version, ind + 1, val, fpath)
        g.emit(ind + 1, f"{tl}.append(({f.tag}, out))")
        g.emit(ind + 1, f"out = {saved}")
    g.emit(ind, f"out += _uv(len({tl}))")
    t, data = g.tmp("t"), g.tmp("td")
    g.emit(ind, f"for {t}, {data} in {tl}:")
    g.emit(ind + 1, f"out += _uv({t})")
    g.emit(ind + 1, f"out += _uv(len({data}))")
    g.emit(ind + 1, f"out += {data}")


def compile_encoder(msg: str, fields: Sequence[Field], version: int, flexible: bool = False) -> Callable:
    """Generate ``encode(body, out, chunks) -> out`` for ``version`` of a message
    (``flexible``: compact lengths and tagged field sections)."""
    g = _Gen(f"{msg} v{version}", flexible=flexible)
    g.emit(0, "def encode(body, out, chunks):")
    _enc_struct(g, fields, version, 1, "body", "")
    g.emit(1, "return out")
    return g.build("encode")


# ---- slow path: explain why an encode failed


def explain_encode_error(
    msg: str, fields: Sequence[Field], version: int, body: Any, exc: BaseException
) -> InvalidRequestError:
    """Walk ``body`` against the schema and build an error naming the first bad field."""
    problem = _find_problem(fields, version, body, "")
    detail = problem or f"{type(exc).__name__}: {exc}"
    return InvalidRequestError(f"cannot encode {msg} v{version}: {detail}")


_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _check_scalar(ftype: str, nullable: bool, value: Any, path: str) -> str | None:
    if value is None:
        return None if nullable else f"{path}: None is not allowed (not nullable in this version)"
    if ftype == BOOL:
        return None
    if ftype in _RANGES:
        bits = _RANGES[ftype]
        if not isinstance(value, int):
            return f"{path}: expected {ftype}, got {type(value).__name__} {value!r}"
        if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
            return f"{path}: {value} does not fit in {ftype}"
        return None
    if ftype == STRING:
        if not isinstance(value, str):
            return f"{path}: expected str, got {type(value).__name__} {value!r:.80}"
        if len(value.encode("utf-8", "surrogatepass")) > 0x7FFF:
            return f"{path}: string of {len(value.encode('utf-8', 'surrogatepass'))} bytes exceeds 32767"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            return f"{path}: not encodable as UTF-8 ({e})"
        return None
    if ftype == UUID:
        return None if isinstance(value, uuid.UUID) else f"{path}: expected uuid.UUID, got {type(value).__name__}"
    if ftype == RECORDS and isinstance(value, FileRegion):
        return None
    try:
        memoryview(value)
    except TypeError:
        return f"{path}: expected a bytes-like object, got {type(value).__name__}"
    return None


def _find_problem(fields: Sequence[Field], version: int, body: Any, path: str) -> str | None:
    if not isinstance(body, dict):
        return f"{path or 'body'}: expected a dict, got {type(body).__name__}"
    for f in active_fields(fields, version):
        fpath = f"{path}{f.key}"
        value = body.get(f.key, f.default)
        nullable = f.nullable_in(version)
        if not f.is_array:
            p = _check_scalar(f.type, nullable, value, fpath)
        elif value is None:
            p = None if nullable else f"{fpath}: None is not allowed (not nullable in this version)"
        else:
            try:
                items = list(value)
            except TypeError:
                return f"{fpath}: expected a list, got {type(value).__name__}"
            p = None
            for k, item in enumerate(items):
                if f.elem is not None:
                    p = _check_scalar(f.elem, False, item, f"{fpath}[{k}]")
                else:
                    p = _find_problem(f.struct_fields, version, item, f"{fpath}[{k}].")
                if p:
                    break
        if p:
            return p
    return None


def wrap_decode_error(msg: str, exc: BaseException) -> PyklogError:
    """Turn an unexpected low-level exception during decoding into InvalidRequestError."""
    if isinstance(exc, UnicodeDecodeError):
        return InvalidRequestError(f"malformed {msg}: string is not valid UTF-8 ({exc.reason} at byte {exc.start})")
    return InvalidRequestError(f"malformed {msg}: {type(exc).__name__}: {exc}")
