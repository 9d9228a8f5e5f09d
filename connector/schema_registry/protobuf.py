"""Protobuf schemas: parsing (``.proto`` text, or a base64 ``FileDescriptorProto`` as confluent-kafka's
Python serializer registers) and the compatibility rules the registry applies.

Both forms become one :class:`ProtoFile` model: the file's messages by full name, each with its
fields by number (name, type, label).  :func:`check` compares a *reader* file with a *writer* file
(Confluent's Protobuf rules, in part):

* a message of the writer missing in the reader: MESSAGE_REMOVED;
* a field whose number is kept but whose kind changes between scalar, message and enum:
  FIELD_KIND_CHANGED; a scalar type changed outside its wire-compatible group
  (int32/uint32/int64/uint64/bool, sint32/sint64, fixed32/sfixed32, fixed64/sfixed64,
  string/bytes): FIELD_SCALAR_KIND_CHANGED; a message or enum type renamed: FIELD_NAMED_TYPE_CHANGED;
* a ``required`` field (proto2) added or removed: REQUIRED_FIELD_ADDED / REQUIRED_FIELD_REMOVED;
* a field removed or added otherwise, or renamed with its number kept: compatible.

Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field

SCALARS = frozenset(
    [
        "double",
        "float",
        "int32",
        "int64",
        "uint32",
        "uint64",
        "sint32",
        "sint64",
        "fixed32",
        "fixed64",
        "sfixed32",
        "sfixed64",
        "bool",
        "string",
        "bytes",
    ]
)
_WIRE_GROUPS = [
    {"int32", "uint32", "int64", "uint64", "bool"},
    {"sint32", "sint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
    {"string", "bytes"},
]
#: FieldDescriptorProto.Type numbers -> scalar names (11 message, 14 enum, 10 group)
_DESCRIPTOR_TYPES = {
    1: "double",
    2: "float",
    3: "int64",
    4: "uint64",
    5: "int32",
    6: "fixed64",
    7: "fixed32",
    8: "bool",
    9: "string",
    12: "bytes",
    13: "uint32",
    15: "sfixed32",
    16: "sfixed64",
    17: "sint32",
    18: "sint64",
}
_LABELS = {1: "optional", 2: "required", 3: "repeated"}


class ProtobufSchemaError(ValueError):
    """Neither valid ``.proto`` text nor a base64 FileDescriptorProto (the registry answers 42201)."""


@dataclass
class ProtoField:
    name: str
    type: str  # a scalar name, or the referenced message/enum type's name as written
    label: str  # "optional" | "required" | "repeated" | "" (proto3 singular)


@dataclass
class ProtoFile:
    syntax: str = "proto2"
    package: str = ""
    imports: list = field(default_factory=list)
    messages: dict = field(default_factory=dict)  # full name -> {number: ProtoField}
    enums: dict = field(default_factory=dict)  # full name -> [symbols]
    serialized: bool = False  # given as a base64 FileDescriptorProto


# --------------------------------------------------------------------------- .proto text
_TOKEN = re.compile(
    r"""\s+|//[^\n]*|/\*.*?\*/|(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(?P<word>[A-Za-z_.][\w.]*)|(?P<num>-?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?))|(?P<sym>[{}\[\]()<>=;,:])""",
    re.S,
)


def _tokens(text: str) -> list[str]:
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ProtobufSchemaError(f"unexpected character {text[pos]!r} at offset {pos}")
        pos = m.end()
        tok = m.group("str") or m.group("word") or m.group("num") or m.group("sym")
        if tok:
            out.append(tok)
    return out


class _Parser:
    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0
        self.file = ProtoFile()
        from google.protobuf import descriptor_pb2

        self.fdp = descriptor_pb2.FileDescriptorProto()  # the same file as a descriptor
        self._optional: dict[int, list] = {}  # a message's proto3 optional fields, by id(descriptor)

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise ProtobufSchemaError(f"unexpected end of the schema, expected {expected or 'more'}")
        if expected is not None and tok != expected:
            raise ProtobufSchemaError(f"expected {expected!r}, got {tok!r} (token {self.i})")
        self.i += 1
        return tok

    def skip_statement(self) -> None:
        """Up to and including the next ``;`` at this level, or a balanced ``{...}`` block."""
        depth = 0
        while True:
            tok = self.take()
            if tok == "{":
                depth += 1
            elif tok == "}":
                depth -= 1
                if depth == 0:
                    return
            elif tok == ";" and depth == 0:
                return

    def parse(self) -> ProtoFile:
        f = self.file
        fdp = self.fdp
        while self.peek() is not None:
            tok = self.take()
            if tok == "syntax" or tok == "edition":
                self.take("=")
                f.syntax = self.take().strip("\"'")
                self.take(";")
            elif tok == "package":
                f.package = self.take()
                self.take(";")
            elif tok == "import":
                name = self.take()
                if name in ("public", "weak"):
                    name = self.take()
                f.imports.append(name.strip("\"'"))
                self.take(";")
            elif tok == "message":
                self.message(self.take(), f.package, fdp.message_type.add())
            elif tok == "enum":
                self.enum(self.take(), f.package, fdp.enum_type.add())
            elif tok in ("option", "service", "extend"):
                self.skip_statement()
            elif tok == ";":
                continue
            else:
                raise ProtobufSchemaError(f"unexpected {tok!r} at the top level")
        fdp.package = f.package
        fdp.dependency.extend(f.imports)
        if f.syntax == "proto3":
            fdp.syntax = "proto3"
        return f

    def enum(self, name: str, scope: str, desc) -> None:
        full = f"{scope}.{name}" if scope else name
        desc.name = name
        symbols = []
        self.take("{")
        while self.peek() != "}":
            tok = self.take()
            if tok in ("option", "reserved"):
                self.skip_statement()
            elif tok == ";":
                continue
            else:
                symbols.append(tok)
                self.take("=")
                number = self.take()
                try:
                    desc.value.add(name=tok, number=int(number, 0))
                except ValueError:
                    raise ProtobufSchemaError(f"enum {full}: expected a number for {tok}, got {number!r}") from None
                self.skip_statement()
        self.take("}")
        self.file.enums[full] = symbols

    def message(self, name: str, scope: str, desc) -> None:
        full = f"{scope}.{name}" if scope else name
        desc.name = name
        fields: dict = {}
        self.file.messages[full] = fields
        self.take("{")
        self.body(full, fields, desc, None)
        self.take("}")
        for fd in self._optional.pop(id(desc), []):
            desc.oneof_decl.add(name=f"_{fd.name}")
            fd.oneof_index = len(desc.oneof_decl) - 1

    def body(self, full: str, fields: dict, desc, oneof_index: int | None) -> None:
        while self.peek() != "}":
            tok = self.take()
            if tok == "message":
                self.message(self.take(), full, desc.nested_type.add())
            elif tok == "enum":
                self.enum(self.take(), full, desc.enum_type.add())
            elif tok in ("option", "reserved", "extensions", "extend"):
                self.skip_statement()
            elif tok == "oneof":
                desc.oneof_decl.add(name=self.take())
                self.take("{")
                self.body(full, fields, desc, len(desc.oneof_decl) - 1)
                self.take("}")
            elif tok == ";":
                continue
            else:
                label = ""
                if tok in ("optional", "required", "repeated"):
                    label, tok = tok, self.take()
                ftype = tok
                entry = None
                if tok == "map":
                    self.take("<")
                    k = self.take()
                    self.take(",")
                    v = self.take()
                    self.take(">")
                    ftype, label = f"map<{k},{v}>", "repeated"
                    entry = (k, v)
                fname = self.take()
                self.take("=")
                number = self.take()
                try:
                    num = int(number, 0)
                except ValueError:
                    raise ProtobufSchemaError(f"field {fname!r}: expected a field number, got {number!r}") from None
                if num in fields:
                    raise ProtobufSchemaError(f"message {full}: field number {num} used twice")
                fields[num] = ProtoField(fname, ftype, label)
                self.skip_statement()
                fd = desc.field.add(name=fname, number=num, label=_LABEL_NUMBERS.get(label, 1))
                if entry is not None:
                    entry_name = "".join(p[:1].upper() + p[1:] for p in fname.split("_")) + "Entry"
                    e = desc.nested_type.add(name=entry_name)
                    e.options.map_entry = True
                    for i, t in enumerate(entry, 1):
                        _set_type(e.field.add(name=("key", "value")[i - 1], number=i, label=1), t)
                    fd.type_name = entry_name
                    fd.type = 11
                else:
                    _set_type(fd, ftype)
                if oneof_index is not None:
                    fd.oneof_index = oneof_index
                elif label == "optional" and self.file.syntax == "proto3":
                    fd.proto3_optional = True  # its synthetic oneof is added after the real ones
                    self._optional.setdefault(id(desc), []).append(fd)


_SCALAR_NUMBERS = {v: k for k, v in _DESCRIPTOR_TYPES.items()}
_LABEL_NUMBERS = {"optional": 1, "required": 2, "repeated": 3}


def _set_type(fd, type_name: str) -> None:
    """A field's type: a scalar's number, or the referenced type's name (resolved by the pool with
    protobuf's scoping rules; whether it is a message or an enum is decided there)."""
    if type_name in _SCALAR_NUMBERS:
        fd.type = _SCALAR_NUMBERS[type_name]
    else:
        fd.type_name = type_name


def to_descriptor(text: str, name: str = "schema.proto") -> bytes:
    """The serialized FileDescriptorProto of ``.proto`` text (what ``?format=serialized`` answers);
    a base64 descriptor is returned decoded as it is."""
    model = parse(text)
    if model.serialized:
        return base64.b64decode(text.strip())
    p = _Parser(text)
    p.fdp.name = name
    p.parse()
    return p.fdp.SerializeToString()


def _from_descriptor(data: bytes) -> ProtoFile:
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    fdp = descriptor_pb2.FileDescriptorProto()
    try:
        fdp.ParseFromString(data)
    except DecodeError as e:
        raise ProtobufSchemaError(f"not a FileDescriptorProto: {e}") from None
    if not fdp.message_type and not fdp.enum_type and not fdp.name:
        raise ProtobufSchemaError("an empty FileDescriptorProto")
    f = ProtoFile(syntax=fdp.syntax or "proto2", package=fdp.package, imports=list(fdp.dependency), serialized=True)

    def walk_enum(e, scope):
        f.enums[f"{scope}.{e.name}" if scope else e.name] = [v.name for v in e.value]

    def walk(m, scope):
        full = f"{scope}.{m.name}" if scope else m.name
        fields = {}
        entries = {n.name: n for n in m.nested_type if n.options.map_entry}
        for fd in m.field:
            t = fd.type_name.lstrip(".") if fd.type_name else _DESCRIPTOR_TYPES.get(fd.type, "")
            entry = entries.get(t.rsplit(".", 1)[-1]) if fd.type_name else None
            if entry is not None:  # a map field, as the text form names it
                k, v = sorted(entry.field, key=lambda f: f.number)
                t = f"map<{_field_type(k, {})},{_field_type(v, {})}>"
            label = _LABELS.get(fd.label, "")
            if f.syntax == "proto3" and label == "optional" and not fd.proto3_optional:
                label = ""
            fields[fd.number] = ProtoField(fd.name, t, label)
        f.messages[full] = fields
        for n in m.nested_type:
            if not n.options.map_entry:
                walk(n, full)
        for e in m.enum_type:
            walk_enum(e, full)

    for m in fdp.message_type:
        walk(m, fdp.package)
    for e in fdp.enum_type:
        walk_enum(e, fdp.package)
    return f


def parse(text: str, references: list | None = None) -> ProtoFile:
    """The schema's model; ``text`` is ``.proto`` source or a base64 FileDescriptorProto."""
    stripped = text.strip()
    if stripped and re.fullmatch(r"[A-Za-z0-9+/=\s]+", stripped) and not re.search(r"\b(message|syntax)\b", stripped):
        try:
            data = base64.b64decode(stripped, validate=False)
        except (binascii.Error, ValueError):
            data = b""
        if data:
            return _from_descriptor(data)
    f = _Parser(text).parse()
    if not f.messages and not f.enums:
        raise ProtobufSchemaError("the schema defines no message and no enum")
    return f


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _kind(t: str, f: ProtoFile) -> str:
    if t in SCALARS:
        return "scalar"
    if t.startswith("map<"):
        return "map"
    if any(_short(e) == _short(t) for e in f.enums):
        return "enum"
    return "message"


def check(reader: ProtoFile, writer: ProtoFile) -> list[str]:
    """The reasons data written with ``writer`` may not be read with ``reader`` (empty: none)."""
    out: list[str] = []
    rmsgs = {
        _short(k) if not reader.package else k.removeprefix(reader.package + "."): v for k, v in reader.messages.items()
    }
    for wname, wfields in writer.messages.items():
        key = wname.removeprefix(writer.package + ".") if writer.package else wname
        rfields = rmsgs.get(key)
        if rfields is None:
            out.append(f"{{errorType:'MESSAGE_REMOVED', description:'#/{key}'}}")
            continue
        for num, wf in wfields.items():
            rf = rfields.get(num)
            path = f"#/{key}/{num}"
            if rf is None:
                if wf.label == "required":
                    out.append(f"{{errorType:'REQUIRED_FIELD_REMOVED', description:'{path}'}}")
                continue
            rk, wk = _kind(rf.type, reader), _kind(wf.type, writer)
            if rk != wk:
                out.append(f"{{errorType:'FIELD_KIND_CHANGED', description:'{path}: {wf.type} -> {rf.type}'}}")
            elif rk == "scalar" and rf.type != wf.type and not any(rf.type in g and wf.type in g for g in _WIRE_GROUPS):
                out.append(f"{{errorType:'FIELD_SCALAR_KIND_CHANGED', description:'{path}: {wf.type} -> {rf.type}'}}")
            elif rk in ("message", "enum") and _short(rf.type) != _short(wf.type):
                out.append(f"{{errorType:'FIELD_NAMED_TYPE_CHANGED', description:'{path}: {wf.type} -> {rf.type}'}}")
            elif rk == "map" and rf.type != wf.type:
                out.append(f"{{errorType:'FIELD_KIND_CHANGED', description:'{path}: {wf.type} -> {rf.type}'}}")
        for num, rf in rfields.items():
            if num not in wfields and rf.label == "required":
                out.append(f"{{errorType:'REQUIRED_FIELD_ADDED', description:'#/{key}/{num}'}}")
    return out


def _render_message(m, indent: str, syntax: str, out: list) -> None:
    out.append(f"{indent}message {m.name} {{")
    inner = indent + "  "
    entries = {n.name: n for n in m.nested_type if n.options.map_entry}
    for n in m.nested_type:
        if not n.options.map_entry:
            _render_message(n, inner, syntax, out)
    for e in m.enum_type:
        _render_enum(e, inner, out)
    oneofs: dict[int, list] = {}
    for fd in m.field:
        if fd.HasField("oneof_index") and not fd.proto3_optional:
            oneofs.setdefault(fd.oneof_index, []).append(fd)
            if len(oneofs[fd.oneof_index]) > 1:
                continue
            out.append(f"{inner}oneof {m.oneof_decl[fd.oneof_index].name} {{")
            for member in (f for f in m.field if f.HasField("oneof_index") and f.oneof_index == fd.oneof_index):
                out.append(f"{inner}  {_field_type(member, entries)} {member.name} = {member.number};")
            out.append(f"{inner}}}")
            continue
        entry = entries.get(fd.type_name.rsplit(".", 1)[-1]) if fd.type_name else None
        if entry is not None and fd.label == 3:
            out.append(f"{inner}{_field_type(fd, entries)} {fd.name} = {fd.number};")
            continue
        label = _LABELS.get(fd.label, "optional")
        if syntax == "proto3" and label == "optional" and not fd.proto3_optional:
            label = ""
        prefix = f"{label} " if label else ""
        out.append(f"{inner}{prefix}{_field_type(fd, entries)} {fd.name} = {fd.number};")
    out.append(f"{indent}}}")


def _field_type(fd, entries: dict) -> str:
    # a descriptor may name a message or enum type without setting ``type`` (whose unset value
    # reads as TYPE_DOUBLE): the name decides
    if not fd.type_name:
        return _DESCRIPTOR_TYPES[fd.type]
    entry = entries.get(fd.type_name.rsplit(".", 1)[-1])
    if entry is not None:
        k, v = sorted(entry.field, key=lambda f: f.number)
        return f"map<{_field_type(k, {})}, {_field_type(v, {})}>"
    return fd.type_name


def _render_enum(e, indent: str, out: list) -> None:
    out.append(f"{indent}enum {e.name} {{")
    out.extend(f"{indent}  {v.name} = {v.number};" for v in e.value)
    out.append(f"{indent}}}")


def to_text(text: str) -> str:
    """``.proto`` text of a schema: a base64 FileDescriptorProto rendered as text (what the registry
    answers by default, as Confluent's does); text is returned as it is."""
    if not parse(text).serialized:
        return text
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text.strip()))
    syntax = fdp.syntax or "proto2"
    out = [f'syntax = "{syntax}";']
    if fdp.package:
        out.append(f"package {fdp.package};")
    out.extend(f'import "{d}";' for d in fdp.dependency)
    for m in fdp.message_type:
        _render_message(m, "", syntax, out)
    for e in fdp.enum_type:
        _render_enum(e, "", out)
    return "\n".join(out) + "\n"
