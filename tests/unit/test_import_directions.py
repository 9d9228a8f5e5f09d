"""Import directions between pyklog's packages, and no import cycle between its modules.

Every module of ``broker/``, ``connector/`` and ``src/`` is read with :mod:`ast` (nothing is
imported), and every import statement in it counts, function-level ones included: a lazy import
is still a dependency, and it still closes a cycle when it runs.  An import under
``if TYPE_CHECKING:`` never runs: it counts for the directions, not for the cycles.

The layers (:data:`LAYERS`), lowest first; a module may import its own layer and those below it:

- ``errors``, then ``common`` / ``record`` / ``protocol``: the codecs and shared utilities;
- ``log``: storage (Kafka's ``storage`` module);
- ``zk``: the ZooKeeper layout, codecs and client;
- ``coordinator``: the group and transaction coordinators and the offset manager
  (``broker/coordinator/``): above the log, never the server (what they need of it comes in as
  constructor arguments, the append path as the ``CoordinatorPartitionWriter`` protocol);
- ``controller``, then ``server`` (the request handling, replica manager, network, main), then
  the broker's ``cli`` and ``python -m pyklog.broker``.

The connector is the client side: ``connector`` (clients, producer, consumer, groups) may import
the broker's codecs (``errors``, ``common``, ``record``, ``protocol``, and from ``zk`` only the
paths and node codecs), never its log, server or controller; ``connector.cli`` sits on it (the
tools, which may also use the registry's client, the log's file formats and the broker side's
tools: :data:`TOOLS_MAY_IMPORT`), and
``connector.spark`` on top (the only package that imports pyspark).  The broker never imports
the connector or pyspark.  ``pyklog`` (``src/pyklog/__init__.py``: version, set-up error and
``register``) may be imported by anyone; it imports the Spark side only inside ``register``.

A new package or top-level module must be placed in :data:`LAYERS` (the test says which are
missing).  :data:`KNOWN_VIOLATIONS` lists what breaks the rules today and is being removed; an
entry that no longer happens fails the test too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple


def _repo() -> Path:
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "setup.cfg").is_file() and (parent / "broker").is_dir():
            return parent
    raise RuntimeError(f"no repository root above {here}")


REPO = _repo()

#: (layer, module prefixes): a module belongs to the layer of its longest matching prefix (a
#: prefix matches itself and its submodules).  Lowest first; a layer may import the layers at
#: or below its own rank (``RANKS``).  The broker's and the connector's sides are ranked apart.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("errors", ("pyklog.broker.errors",)),
    ("common", ("pyklog.broker.common",)),
    ("record", ("pyklog.broker.record",)),
    ("protocol", ("pyklog.broker.protocol",)),
    ("security", ("pyklog.broker.security",)),
    ("authorizer", ("pyklog.broker.security.authorizer",)),
    ("log", ("pyklog.broker.log",)),
    ("zk", ("pyklog.broker.zk",)),
    # the broker's settings: their definitions and checks, static and dynamic (Kafka's KafkaConfig
    # and DynamicBrokerConfig validation), which the tools use as Kafka's kafka-configs does; they
    # sit with the server they configure but import nothing of its running parts
    (
        "config",
        ("pyklog.broker.server.config", "pyklog.broker.server.config_helper", "pyklog.broker.server.dynamic_config"),
    ),
    ("coordinator", ("pyklog.broker.coordinator",)),
    ("controller", ("pyklog.broker.controller",)),
    ("server", ("pyklog.broker.server",)),
    ("cli", ("pyklog.broker.cli",)),
    ("broker", ("pyklog.broker.__main__",)),
    ("connector", ("pyklog.connector",)),
    ("connector.cli", ("pyklog.connector.cli",)),
    ("connector.spark", ("pyklog.connector.spark", "pyspark_pyklog")),
]

#: Modules matched exactly (package roots that would otherwise swallow every new submodule).
EXACT: dict[str, str] = {
    "pyklog": "pyklog",
    "pyklog.errors": "pyklog",
    "pyklog.broker": "broker",
}

#: The broker's layers in order (same rank: may import each other; the cycle check still applies).
BROKER_RANKS: list[set[str]] = [
    {"errors"},
    {"common", "record", "protocol", "security"},
    {"log"},
    {"zk", "config"},
    {"coordinator", "authorizer"},
    {"controller"},
    {"server"},
    {"cli"},
    {"broker"},
]

#: What the broker's codecs are, for the connector: the layers it may import (security: principals,
#: credentials and ACL values, no ZooKeeper), and the modules of
#: ``zk`` it may import (the ZooKeeper paths, node codecs and credentials/ACL policy, no client).
CONNECTOR_MAY_IMPORT = {"errors", "common", "record", "protocol", "security"}
CONNECTOR_ZK_MODULES = {"pyklog.broker.zk.paths", "pyklog.broker.zk.znodes", "pyklog.broker.zk.znode_acls"}
#: The command-line tools (``connector.cli``) are Kafka's tools: besides the clients they may use
#: the registry's client (``zk``: Kafka's ``--zookeeper`` modes work on ZooKeeper directly), the log's
#: file formats (``log``: pyklog-dump-log reads segments offline, as Kafka's DumpLogSegments does)
#: the broker's settings and their checks (``config``: kafka-configs --zookeeper validates as the broker
#: does) and the broker side's tools (``cli``); never the running broker (server, controller, coordinators).
TOOLS_MAY_IMPORT = CONNECTOR_MAY_IMPORT | {"zk", "log", "cli", "config"}
CONNECTOR_RANKS: list[set[str]] = [{"connector"}, {"connector.cli"}, {"connector.spark"}]

#: What breaks the rules today (the test fails when an entry no longer happens: delete it then).  Each is (importer, imported) for a
#: direction, or the sorted modules of an import cycle.
KNOWN_VIOLATIONS: set[tuple[str, ...]] = set()


# ---------------------------------------------------------------------------------- reading


class Import(NamedTuple):
    importer: str
    imported: str
    line: int
    type_checking: bool  # under ``if TYPE_CHECKING:`` (never runs)
    in_function: bool = False  # runs when the function is called, not at import


def source_modules() -> dict[str, Path]:
    """Every module of the distribution: import name -> file."""
    out: dict[str, Path] = {}
    for top, prefix in (("broker", ("pyklog", "broker")), ("connector", ("pyklog", "connector"))):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO / top).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join(prefix + rel)] = path
    for path in sorted((REPO / "src").rglob("*.py")):
        rel = path.relative_to(REPO / "src").with_suffix("").parts
        if rel[-1] == "__init__":
            rel = rel[:-1]
        out[".".join(rel)] = path
    return out


def _nodes_within(tree: ast.AST, kinds: tuple[type, ...]) -> set[int]:
    """ids of the nodes inside a node of one of ``kinds``."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, kinds):
            ids.update(id(n) for n in ast.walk(node) if n is not node)
    return ids


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the statements under ``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:``."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for stmt in node.body:
                    ids.update(id(n) for n in ast.walk(stmt))
    return ids


def imports_of(module: str, path: Path, known: set[str]) -> Iterator[Import]:
    """The modules ``module`` imports: for ``from P import N``, ``P.N`` when that is a module of
    the distribution, else ``P``.  Relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    checking = _type_checking_nodes(tree)
    in_function = _nodes_within(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        tc, fn = id(node) in checking, id(node) in in_function
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno, tc, fn)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                src = f"{base}.{node.module}" if node.module else base
            else:
                src = node.module or ""
            for alias in node.names:
                sub = f"{src}.{alias.name}"
                yield Import(module, sub if sub in known else src, node.lineno, tc, fn)


@functools.cache
def all_imports() -> tuple[Import, ...]:
    mods = source_modules()
    known = set(mods)
    return tuple(imp for mod, path in mods.items() for imp in imports_of(mod, path, known))


def layer_of(module: str) -> str | None:
    if module in EXACT:
        return EXACT[module]
    best, best_len = None, -1
    for layer, prefixes in LAYERS:
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = layer, len(p)
    return best


def _rank(ranks: list[set[str]], layer: str) -> int:
    return next(i for i, group in enumerate(ranks) if layer in group)


# ---------------------------------------------------------------------------------- rules


def direction_problem(imp: Import) -> str | None:
    """Why ``imp`` runs against the layers, or None."""
    src, dst = imp.importer, imp.imported
    root = dst.split(".")[0]
    if root in ("broker", "connector"):
        return "a bare name: import it as pyklog.broker / pyklog.connector"
    src_layer = layer_of(src)
    assert src_layer is not None, src
    if root == "pyspark" or root == "py4j":
        return None if src_layer == "connector.spark" else "only pyklog.connector.spark imports pyspark"
    if not (dst == "pyklog" or dst.startswith("pyklog.")):
        return None  # the standard library or a third-party package
    dst_layer = layer_of(dst)
    if dst_layer is None:
        return None  # reported by test_every_module_has_a_layer
    if dst_layer == "pyklog" or src_layer == dst_layer:
        return None  # the package root (version, set-up error, register) is for everyone
    if src_layer == "pyklog":
        ok = dst_layer == "connector.spark" and imp.in_function
        return None if ok else "the package root imports only the Spark side, inside register()"
    src_broker = any(src_layer in g for g in BROKER_RANKS)
    dst_broker = any(dst_layer in g for g in BROKER_RANKS)
    if src_broker and not dst_broker:
        return "the broker never imports the connector"
    if src_broker:
        if _rank(BROKER_RANKS, dst_layer) > _rank(BROKER_RANKS, src_layer):
            return f"{src_layer} is below {dst_layer}"
        return None
    # the connector's side
    if dst_broker:
        if dst_layer in CONNECTOR_MAY_IMPORT or dst in CONNECTOR_ZK_MODULES:
            return None
        if src_layer == "connector.cli" and dst_layer in TOOLS_MAY_IMPORT:
            return None
        if src_layer == "connector.cli":
            return f"a command-line tool never imports the running broker ({dst_layer})"
        return f"the connector imports only the broker's codecs, not its {dst_layer}"
    if _rank(CONNECTOR_RANKS, dst_layer) > _rank(CONNECTOR_RANKS, src_layer):
        return f"{src_layer} is below {dst_layer}"
    return None


def direction_violations(imports: Iterable[Import]) -> dict[tuple[str, str], str]:
    """(importer, imported) -> why, with the first line of each."""
    out: dict[tuple[str, str], str] = {}
    for imp in imports:
        why = direction_problem(imp)
        if why is not None and (imp.importer, imp.imported) not in out:
            out[(imp.importer, imp.imported)] = f"line {imp.line}: {why}"
    return out


def import_cycles(imports: Iterable[Import]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module of the graph of the imports
    that run (Tarjan's algorithm, iterative), each as a sorted tuple."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if not imp.type_checking and imp.imported != imp.importer and imp.imported.startswith("pyklog"):
            graph.setdefault(imp.importer, set()).add(imp.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[tuple[str, ...]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        out.append(tuple(sorted(comp)))
    return sorted(out)


# ---------------------------------------------------------------------------------- tests


def test_every_module_has_a_layer():
    missing = sorted(m for m in source_modules() if layer_of(m) is None)
    assert missing == [], f"place these modules in LAYERS: {missing}"


def test_import_directions():
    found = direction_violations(all_imports())
    new = {k: why for k, why in found.items() if k not in KNOWN_VIOLATIONS}
    assert new == {}, "imports against the layers:\n" + "\n".join(
        f"  {a} imports {b} ({why})" for (a, b), why in sorted(new.items())
    )


def test_no_import_cycle():
    cycles = [c for c in import_cycles(all_imports()) if c not in KNOWN_VIOLATIONS]
    assert cycles == [], "import cycles (function-level imports included):\n" + "\n".join(
        "  " + " <-> ".join(c) for c in cycles
    )


def test_known_violations_still_happen():
    """An entry of KNOWN_VIOLATIONS that no longer happens is removed from the list."""
    imports = all_imports()
    happening = set(direction_violations(imports)) | set(import_cycles(imports))
    assert sorted(KNOWN_VIOLATIONS - happening) == []


def test_the_rules_catch_what_they_should():
    """The checker itself: an upward import, a connector -> log import, pyspark in the broker, a
    cycle through a function-level import, a TYPE_CHECKING import left out of cycles."""

    def imp(a: str, b: str, tc: bool = False) -> Import:
        return Import(a, b, 1, tc)

    assert direction_problem(imp("pyklog.broker.log.log", "pyklog.broker.server.config"))
    assert direction_problem(imp("pyklog.broker.record.batch", "pyklog.broker.log.log"))
    assert direction_problem(imp("pyklog.broker.coordinator", "pyklog.broker.server.apis"))
    assert direction_problem(imp("pyklog.broker.log.log", "pyspark.sql"))
    assert direction_problem(imp("pyklog.broker.server.apis", "pyklog.connector.client"))
    assert direction_problem(imp("pyklog.connector.client", "pyklog.broker.log.log"))
    assert direction_problem(imp("pyklog.connector.client", "pyklog.broker.zk.cluster"))
    assert direction_problem(imp("pyklog.connector.client", "pyklog.connector.spark.source"))
    assert direction_problem(imp("pyklog.connector.group", "broker.record"))
    assert direction_problem(imp("pyklog.broker.log.log", "pyklog.broker.record.batch")) is None
    assert direction_problem(imp("pyklog.connector.group", "pyklog.broker.zk.paths")) is None
    assert direction_problem(imp("pyklog.connector.spark.sink", "pyspark.sql")) is None
    assert direction_problem(imp("pyklog.broker.cli.topics", "pyklog")) is None
    assert import_cycles([imp("pyklog.a", "pyklog.b"), imp("pyklog.b", "pyklog.c"), imp("pyklog.c", "pyklog.a")]) == [
        ("pyklog.a", "pyklog.b", "pyklog.c")
    ]
    assert import_cycles([imp("pyklog.a", "pyklog.b"), imp("pyklog.b", "pyklog.a", tc=True)]) == []


def test_imports_are_read_everywhere(tmp_path):
    """Function-level and TYPE_CHECKING imports are read, relative ones resolved, and ``from P
    import N`` names the submodule P.N when there is one."""
    path = tmp_path / "mod.py"
    path.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from ..record import batch, Record\n"
        "if TYPE_CHECKING:\n"
        "    from pyklog.broker.server.config import ServerConfig\n"
        "def f():\n"
        "    import pyklog.broker.zk.paths\n"
    )
    known = {"pyklog.broker.log.sibling", "pyklog.broker.record.batch"}
    got = {(i.imported, i.type_checking, i.in_function) for i in imports_of("pyklog.broker.log.mod", path, known)}
    assert got == {
        ("typing", False, False),
        ("pyklog.broker.log.sibling", False, False),
        ("pyklog.broker.record.batch", False, False),
        ("pyklog.broker.record", False, False),
        ("pyklog.broker.server.config", True, False),
        ("pyklog.broker.zk.paths", False, True),
    }
