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


def module_files(root):
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if rel in ROOTS:
                continue
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            files[tuple(parts)] = rel
    return files


def strip(text):
    """`text` without comments, string literals and char literals, in one pass (a `//` inside a
    string is not a comment, and a quote inside a comment opens no string)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "r" and re.match(r'r#*"', text[i:]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            j = text.find('"' + hashes, i + 2 + len(hashes))
            out.append('""')
            i = n if j < 0 else j + 1 + len(hashes)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^'\\])'", text[i:]):
            m = re.match(r"'(\\.[^']*|[^'\\])'", text[i:])
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


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


def check(root, say=print):
    """Say every problem under `root`; True when there is none."""
    REEXPORTS.clear()
    files = module_files(root)
    graph = {}
    failed = False
    texts = {}
    for module, rel in files.items():
        with open(os.path.join(root, rel), encoding="utf-8") as f:
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
            say(f"src/{rel}: {lines} lines (at most {MAX_LINES})")
            failed = True
    name = lambda m: "::".join(m)
    for comp in sccs(graph):
        if len(comp) > 1:
            failed = True
            path = cycle_in(graph, comp)
            say(f"a circle of {len(comp)} modules: {', '.join(sorted(map(name, comp)))}")
            say("  for example: " + " -> ".join(map(name, path)))
    if not failed:
        say(f"{len(files)} modules, no circle, none over {MAX_LINES} lines")
    return not failed


def self_test():
    """The check finds what it is for: a circle through a re-export, and nothing in a facade
    or a string; so that a broken checker cannot pass CI quietly."""
    import tempfile

    def tree(files):
        root = tempfile.mkdtemp()
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return root

    quiet = lambda _: None
    circle = tree({
        "a/mod.rs": "mod x;\npub use x::X;\n",
        "a/x.rs": "use crate::b::Y;\npub struct X;\n",
        "b.rs": "use crate::a::X; // through a's re-export, to a/x.rs\npub struct Y;\n",
    })
    assert not check(circle, quiet), "a circle through a re-export"
    fine = tree({
        "a/mod.rs": "mod x;\nmod y;\npub use x::X;\npub use y::Y;\n",
        "a/x.rs": "pub struct X;\n",
        "a/y.rs": 'use super::X;\nconst U: &str = "crate::a::y://"; // crate::a::y\npub struct Y;\n',
    })
    assert check(fine, quiet), "a facade and its children, a path in a string and a comment"
    long = tree({"a.rs": "\n" * (MAX_LINES + 1)})
    assert not check(long, quiet), "a long file"
    print("check-layers: self-test passed")


def main():
    if "--self-test" in sys.argv:
        self_test()
    if not check(ROOT):
        sys.exit(1)


if __name__ == "__main__":
    main()
