#!/usr/bin/env python3
"""Fails when easel's own modules import each other in a circle, or a file under src/ is too long.

Every `crate::…`, `super::…` and `self::…` path in a file (comments and strings left out) is an
edge from that file to the deepest module file the path names. `mod` declarations are not edges:
a parent declaring a child is structure, a child reaching back up to its parent is a dependency.
Strongly connected components of more than one file are circles, printed with one path through
them. Run from anywhere: `python3 scripts/check-layers.py` (CI runs it).
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
MAX_LINES = 700
# The crate roots: declarations only, and main.rs is the binary on top of everything.
ROOTS = {"lib.rs", "main.rs"}


def module_files():
    files = {}
    for dirpath, _, names in os.walk(ROOT):
        for name in names:
            if not name.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), ROOT)
            if rel in ROOTS:
                continue
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            files[tuple(parts)] = rel
    return files


def strip(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'r#*"(?:.|\n)*?"#*', '""', text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{)")
CHILD = re.compile(r"(?<![:\w])((?:[a-z_][a-z0-9_]*::)+)")
GROUP = re.compile(r"\b(crate|super|self)::((?:[A-Za-z_][A-Za-z0-9_]*::)*)\{([^}]*)\}")


REEXPORTS = {}  # module -> {name: module that defines it}
PUB_USE = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);")


def reexports(files, module, text):
    """The names a module re-exports from its children (`pub use model::{Task, TaskStatus};`)."""
    names = {}
    for m in PUB_USE.finditer(text):
        body = re.sub(r"\s+", "", m.group(1))
        prefix, _, group = body.partition("{")
        items = group.rstrip("}").split(",") if group else [prefix.rsplit("::", 1)[-1]]
        prefix = prefix if group else prefix.rsplit("::", 1)[0] if "::" in prefix else ""
        segs = [s for s in prefix.split("::") if s and s != "self"]
        if not segs or segs[0] in ("crate", "super"):
            continue
        target = resolve(files, module, segs)
        if target is None:
            continue
        for item in items:
            item = item.split("::")[-1]
            alias = item.split("as")[-1] if "as" in item else item
            if alias and alias != "*":
                names[alias] = target
    return names


def resolve(files, base, segments):
    """The deepest module file named by `segments` under `base`, seen through re-exports."""
    path = list(base)
    best = None
    for seg in segments:
        if best is not None and seg in REEXPORTS.get(best, {}):
            return REEXPORTS[best][seg]
        path.append(seg)
        if tuple(path) in files:
            best = tuple(path)
        else:
            break
    return best


def edges(files, module, rel, text):
    out = set()
    is_mod = rel.endswith("mod.rs")
    # `super` from a/b.rs is `a`; from a/b/mod.rs (module a::b) it is `a` too.
    here = list(module)

    def base_of(kind):
        if kind == "crate":
            return []
        if kind == "self":
            return here
        return here[:-1]

    for m in GROUP.finditer(text):
        kind, prefix, inner = m.group(1), m.group(2), m.group(3)
        prefix_segs = [s for s in prefix.split("::") if s]
        for item in inner.split(","):
            segs = prefix_segs + [s for s in item.strip().split("::") if s and s != "self"]
            segs = [s.split(" ")[0] for s in segs]
            target = resolve(files, base_of(kind), segs)
            if target and target != module:
                out.add(target)
    for m in PATH.finditer(text):
        kind = m.group(1)
        segs = [s for s in m.group(2).split("::") if s and s != "{"]
        # super::super::x
        base = base_of(kind)
        while segs and segs[0] == "super":
            base = base[:-1]
            segs = segs[1:]
        target = resolve(files, base, segs)
        if target is None and kind == "super":
            target = tuple(base) if tuple(base) in files else None
        if target and target != module:
            out.add(target)
    # Paths that start at a child module (`use model::Task;`, `pub use error::ApiError;`).
    for m in CHILD.finditer(text):
        segs = [s for s in m.group(1).split("::") if s]
        if (*here, segs[0]) in files:
            target = resolve(files, here, segs)
            if target and target != module:
                out.add(target)
    return out


def sccs(graph):
    index, low, stack, on, result = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            result.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return result


def cycle_in(graph, comp):
    members = set(comp)
    start = sorted(comp)[0]
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v]):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def main():
    files = module_files()
    graph = {}
    failed = False
    texts = {}
    for module, rel in files.items():
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            texts[module] = f.read()
    # Two passes, so that a re-export of a re-export resolves too.
    for _ in range(2):
        for module in files:
            REEXPORTS[module] = reexports(files, module, strip(texts[module]))
    for module, rel in files.items():
        raw = texts[module]
        # A parent's re-export of its own child is the facade, not a dependency.
        body = PUB_USE.sub(
            lambda m: "" if re.sub(r"\s+", "", m.group(1)).split("::")[0] not in ("crate", "super") else m.group(0),
            strip(raw),
        )
        graph[module] = edges(files, module, rel, body)
        lines = raw.count("\n")
        if lines > MAX_LINES:
            print(f"src/{rel}: {lines} lines (at most {MAX_LINES})")
            failed = True
    name = lambda m: "::".join(m)
    for comp in sccs(graph):
        if len(comp) > 1:
            failed = True
            path = cycle_in(graph, comp)
            print(f"a circle of {len(comp)} modules: {', '.join(sorted(map(name, comp)))}")
            print("  for example: " + " -> ".join(map(name, path)))
    if failed:
        sys.exit(1)
    print(f"{len(files)} modules, no circle, none over {MAX_LINES} lines")


if __name__ == "__main__":
    main()
