"""The import graph of `agentd` has no circle and never looks up a layer, at
the level of modules and at the level of folders.

Every module of the package is parsed with `ast` (nothing is imported, so a
module that would fail to import still gets checked); every `import x` and
`from x import y` counts, at module level and inside functions, with relative
imports resolved. `from pkg import name` counts as an import of `pkg.name` when
that is a module (like `import pkg.name`), else of `pkg`. A module's own parent
packages are not edges: Python initialises them before the module whatever it
imports. The layer map below is the one docs/architecture.md draws; a module
belongs to the longest prefix that names it.

Folders: each subpackage of `agentd` (`agentd.mcp`, `agentd.tree`, ...) and
each top-level module (`agentd.config`, ...) is one node, and a module's
import is an edge between the nodes of both ends. That graph must have no
circle either, and it must follow the folders' own ranks (the map's entry for
the folder, which every folder must have): a folder imports only folders of
its rank or below. A module may
be ranked above its folder (the map splits `agentd.mcp` into its sessions and
its transport layer) but never below it: a folder's module ranked at a lower
folder's layer is how a circle between two folders hides.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE = "agentd"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

# module prefix -> rank. A module may import modules of its own rank or lower.
LAYERS: dict[str, int] = {
    # 0: leaves every layer may use (no agentd imports of their own above this rank)
    "agentd": 0,  # the package's own __init__ (lazy __version__)
    "agentd.errors": 0,
    "agentd.exitcodes": 0,
    "agentd.log": 0,
    "agentd.log_bridge": 0,
    "agentd.output": 0,  # the run's stdout object: data every layer reports into
    "agentd.runtime": 0,  # event-loop start-up; imports only log
    "agentd.netaddr": 0,  # what counts as loopback (listeners, endpoints)
    "agentd.secrets": 0,  # {{secret:NAME}} references: resolved on use, redacted
    # 1: messages
    "agentd.wire": 1,
    # 2: sessions (sans-IO) and the data shared by every layer above
    "agentd.config": 2,  # the data model (Config) and its parsing, each subsystem's checks
    "agentd.mcp": 2,  # the package __init__ (lazy names only), selftool (data shapes)
    "agentd.mcp.client.rules": 2,  # the client's sans-IO rules: session, revision, faults, ...
    "agentd.mcp.server.rules": 2,  # the server's sans-IO rules per revision
    "agentd.obs": 2,
    "agentd.pool": 2,  # the pool's sans-IO rules: handles, relay MAC, membership
    "agentd.pool.link": 3,  # the pool's IO: relay, probes, --pool-dns, the session proxy
    # 3: transport, clients, servers, observability exporters
    "agentd.mcp.client": 3,  # the client half's IO: facade, connection, transport, toolbox, OAuth
    "agentd.mcp.server": 3,  # the server half: the handler and the HTTP serving
    "agentd.a2a": 3,
    # 4: intelligence
    "agentd.intelligence": 4,
    # 5: agent (with the tree's contract: agent.subagents, agent.spawn_tools)
    "agentd.agent": 5,
    "agentd.trajectory": 5,  # ATIF: fed by the loop's hooks, carried by the control wire
    # 6: reactive (the wake loop and the await tool, on the agent: a child uses them too)
    "agentd.reactive": 6,
    # 7: the child process (entry, runtime, forkserver's own side, brokered I/O, remote
    # backend) and the control wire's contract both sides use (boot, control, channel)
    "agentd.child": 7,
    # the journal: a run's record and exchanges on disk (its exchange shape, on the wire's)
    "agentd.journal": 7,
    # 8: tree (the parent side: supervision, processes, the broker)
    "agentd.tree": 8,
    # 9: the served endpoints (self-MCP, served A2A, the pool's served side), on the tree
    "agentd.served": 9,
    # 10: app (entry points, composition roots, demo)
    "agentd.app": 10,
    "agentd.demo": 10,
    "agentd.acp": 10,  # `agentd acp`: composes a run per prompt, as app.run does
    # 11: batch runs, a composition root of their own (on app's run pieces)
    "agentd.batch": 11,
    # 12: cli (click: flags -> one validated config -> app; terminal views)
    "agentd.cli": 12,
    "agentd.__main__": 12,
}


def module_name(path: Path, root: Path = ROOT, package: str = PACKAGE) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = [package, *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """Absolute name of `from <level dots><target> import ...` inside `module`."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def imports_of(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The `agentd` modules `source` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:  # a submodule, else a name defined in `base`
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    edges: set[str] = set()
    for name in found:
        # the longest known module that `name` is or lies inside
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module and not module.startswith(name + "."):
            edges.add(name)
    return edges


def build_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    files = {module_name(p, root, package): p for p in sorted(root.rglob("*.py"))}
    known = set(files)
    return {m: imports_of(p.read_text(), m, p.name == "__init__.py", known)
            for m, p in files.items()}


def rank(module: str, layers: Mapping[str, int] = LAYERS) -> int | None:
    name = module
    while name:
        if name in layers:
            return layers[name]
        name = name.rpartition(".")[0]
    return None


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            advanced = False
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def violations(graph: Mapping[str, Iterable[str]],
               layers: Mapping[str, int] = LAYERS) -> tuple[list[list[str]], list[str], list[str]]:
    """(circles, upward imports, modules the layer map does not place)."""
    upward: list[str] = []
    unplaced = sorted(m for m in graph if rank(m, layers) is None)
    for src in sorted(graph):
        for dst in sorted(graph[src]):
            rs, rd = rank(src, layers), rank(dst, layers)
            if rs is not None and rd is not None and rd > rs:
                upward.append(f"{src} (rank {rs}) imports {dst} (rank {rd})")
    return cycles(graph), upward, unplaced


def folder(module: str) -> str:
    """The node of `module` in the folder graph: `agentd.<first component>`."""
    return ".".join(module.split(".")[:2])


def folder_graph(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """`agentd/<folder> -> agentd/<folder>`: one edge per pair some module import joins."""
    out: dict[str, set[str]] = {folder(m): set() for m in graph}
    for src, dsts in graph.items():
        for dst in dsts:
            if folder(dst) != folder(src):
                out[folder(src)].add(folder(dst))
    return out


def folder_violations(graph: Mapping[str, Iterable[str]], layers: Mapping[str, int] = LAYERS
                      ) -> tuple[list[list[str]], list[str], list[str]]:
    """(folder circles, folder imports up the folders' ranks, modules ranked below
    their folder or folders the map gives no rank of their own)."""
    folders = folder_graph(graph)
    unranked = [f"{f} has no rank of its own in the layer map"
                for f in sorted(folders) if f not in layers]
    upward: list[str] = []
    for src in sorted(folders):
        for dst in sorted(folders[src]):
            rs, rd = layers.get(src), layers.get(dst)
            if rs is not None and rd is not None and rd > rs:
                upward.append(f"{src} (rank {rs}) imports {dst} (rank {rd})")
    below = sorted(f"{name} (rank {r}) is ranked below its folder {folder(name)} "
                   f"(rank {layers[folder(name)]})"
                   for name, r in layers.items()
                   if folder(name) in layers and r < layers[folder(name)])
    return cycles(folders), upward, unranked + below


def room(module: str, packages: Iterable[str]) -> str:
    """The node of `module` in the directory graph: the directory that holds it,
    nested folders apart (`agentd.mcp.client.oauth` is not `agentd.mcp`); a module
    directly in `agentd/` is a room of its own, like a folder."""
    if module in packages:
        return module
    parent, _, _ = module.rpartition(".")
    return module if parent == PACKAGE else parent


def directory_circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Circles between directories at every depth: a sub-folder and the folder
    holding it import each other only through a circle, whatever the ranks say."""
    packages = {m for m in graph if any(o.startswith(m + ".") for o in graph)}
    rooms: dict[str, set[str]] = {room(m, packages): set() for m in graph}
    for src, dsts in graph.items():
        for dst in dsts:
            a, b = room(src, packages), room(dst, packages)
            if a != b:
                rooms[a].add(b)
    return cycles(rooms)


def test_checker_reports_a_circle_and_an_upward_import() -> None:
    graph = {"p.low": {"p.high"}, "p.high": {"p.mid"}, "p.mid": {"p.high"}, "p.free": set()}
    circles, upward, unplaced = violations(graph, {"p.low": 0, "p.mid": 1, "p.high": 1})
    assert circles == [["p.high", "p.mid"]]
    assert upward == ["p.low (rank 0) imports p.high (rank 1)"]
    assert unplaced == ["p.free"]


def test_relative_and_function_level_imports_count() -> None:
    known = {"p", "p.a", "p.b", "p.sub", "p.sub.y"}
    src = "from . import y\n\ndef f():\n    from ..a import thing\n    import p.b\n"
    assert imports_of(src, "p.sub.x", False, known) == {"p.sub.y", "p.a", "p.b"}
    # a package's `from . import y` is its own child; its parents are never edges
    assert imports_of("from . import y", "p.sub", True, known) == {"p.sub.y"}


def test_folder_checker_reports_a_circle_a_rank_exception_and_an_upward_import() -> None:
    # the shape the first cut left: each module edge looks down because `p.b.api`
    # is ranked at `p.a`'s layer, yet the folders `p.a` and `p.b` import each other
    graph = {"p.a.tools": {"p.b.api"}, "p.b.api": set(), "p.b.core": {"p.a.tools"},
             "p.c": {"p.b.core"}}
    layers = {"p.a": 1, "p.b": 2, "p.b.api": 1, "p.c": 1}
    circles, upward, unplaced = violations(graph, layers)
    assert circles == [] and unplaced == [] and upward == [
        "p.c (rank 1) imports p.b.core (rank 2)"]
    circles, upward, below = folder_violations(graph, layers)
    assert circles == [["p.a", "p.b"]]
    assert upward == ["p.a (rank 1) imports p.b (rank 2)",
                      "p.c (rank 1) imports p.b (rank 2)"]
    assert below == ["p.b.api (rank 1) is ranked below its folder p.b (rank 2)"]
    # the cure: the contract moves down into p.a; nothing is left to report
    graph = {"p.a.tools": {"p.a.api"}, "p.a.api": set(), "p.b.core": {"p.a.tools"}}
    assert folder_violations(graph, {"p.a": 1, "p.b": 2}) == ([], [], [])
    # a folder ranked only through its modules is not ranked as a folder
    assert folder_violations(graph, {"p.a": 1, "p.b.core": 2})[2] == [
        "p.b has no rank of its own in the layer map"]


def test_directory_checker_sees_a_sub_folder_circle() -> None:
    graph = {"agentd.m": set(), "agentd.m.client": {"agentd.m.sub.auth"},
             "agentd.m.sub": set(), "agentd.m.sub.auth": {"agentd.m.session"},
             "agentd.m.session": set(), "agentd.cli.top": {"agentd.m.client"}}
    assert directory_circles(graph) == [["agentd.m", "agentd.m.sub"]]
    graph["agentd.m.sub.auth"] = {"agentd.top2"}  # the cure: the shared piece moves out
    graph["agentd.top2"] = set()
    assert directory_circles(graph) == []


def test_agentd_directories_never_circle_at_any_depth() -> None:
    assert not (found := directory_circles(build_graph())), f"directory circles: {found}"


def test_agentd_folders_never_circle_and_follow_their_ranks() -> None:
    circles, upward, below = folder_violations(build_graph())
    assert not circles, f"folder circles: {circles}"
    assert not upward, "folder imports up the ranks:\n" + "\n".join(upward)
    assert not below, "folder rank exceptions:\n" + "\n".join(below)


def test_agentd_imports_only_look_down_and_never_circle() -> None:
    circles, upward, unplaced = violations(build_graph())
    assert not unplaced, f"modules missing from the layer map: {unplaced}"
    assert not circles, f"import circles: {circles}"
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


if __name__ == "__main__":  # the figures docs/architecture.md quotes
    g = build_graph()
    c, u, _ = violations(g)
    fc, fu, fb = folder_violations(g)
    f = folder_graph(g)
    print(f"{len(g)} modules, {sum(map(len, g.values()))} edges, "
          f"{len(c)} circles {c}, {len(u)} upward imports; "
          f"{len(f)} folders, {sum(map(len, f.values()))} folder edges, "
          f"{len(fc)} folder circles {fc}, {len(fu) + len(fb)} folder rank breaks")
    for line in u + fu + fb:
        print("  ", line)


def test_the_mcp_client_and_server_halves_never_import_each_other() -> None:
    """What both halves use sits below them (`agentd.wire`, the base): a client
    module that reached into the server (or back) would tie a toolbox to the
    serving stack."""
    graph = build_graph()
    halves = ("agentd.mcp.client", "agentd.mcp.server")
    crossing = sorted(
        f"{m} -> {dep}" for m, deps in graph.items() for dep in deps
        for mine, other in (halves, halves[::-1])
        if (m == mine or m.startswith(mine + ".")) and (dep == other or dep.startswith(other + ".")))
    assert crossing == []


# the map's entries that name one module inside a folder: none -- every entry is a
# folder, or a base module directly in agentd/ (a room of its own)
MODULE_ENTRIES: set[str] = set()
TESTS = Path(__file__).resolve().parents[1]


def test_the_layer_map_ranks_folders() -> None:
    packages = {".".join([PACKAGE, *p.parent.relative_to(ROOT).parts])
                for p in ROOT.rglob("__init__.py")}
    single = sorted(name for name in LAYERS
                    if name not in packages and name.count(".") > 1
                    and name != f"{PACKAGE}.__main__")
    assert single == sorted(MODULE_ENTRIES), (
        "rank the folder, not its modules: " + ", ".join(sorted(set(single) - MODULE_ENTRIES)))


def test_no_test_module_imports_another() -> None:
    """Shared test code lives in tests/support/ (the process harness, the fault
    server, the peers, the pool and serving harnesses): a test module that
    imported another would run that module's tests' set-up and tie the two."""
    tests = {p.stem for p in TESTS.rglob("test_*.py")}
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if any(part in ("peers", "peers_2026", ".venvs") for part in path.parts):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(TESTS)} imports {n}" for n in names
                      if n.split(".")[0] in tests]
    assert found == []
