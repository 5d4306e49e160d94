#!/usr/bin/env python3
"""Fails when one of easel's modules imports from a layer above its own, when modules import each
other in a circle, or when a file under src/ is too long.

`LAYERS` below is the table from top-level module (a folder or a file under src/) to layer;
docs/design.md draws the same table. A module may import from its own layer and the ones below
it, never from one above. Every `crate::…`, `super::…` and `self::…` path in a file (comments and
strings left out, inline `mod tests { … }` blocks resolved as the modules they are) is an edge from
that file to the deepest module file the path names. `mod` declarations are not edges: a parent
declaring a child is structure, a child reaching back up to its parent is a dependency. Strongly
connected components of more than one file are circles, printed with one path through them.
Run from anywhere: `python3 scripts/check-layers.py [--self-test]` (CI runs both).
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
MAX_LINES = 700
# The crate roots: lib.rs wires every role together and main.rs is the binary on top of it.
ROOTS = {"lib.rs", "main.rs"}

# Lowest first. Each top-level module of src/ is in exactly one layer; a new one must be added
# here (the check refuses a module it cannot place).
LAYERS = [
    ("foundation", ["config", "domain", "refusal"]),
    ("services", ["store", "blobs", "images", "generate", "net", "ratelimit", "metrics", "telemetry"]),
    ("use cases", ["tasks", "accounts", "auth", "worker", "webhooks", "deploy"]),
    ("http", ["http"]),
    ("binary", ["cli"]),
]


def layer_of(module, layers=LAYERS):
    """The index of the layer that `module` (a tuple of path segments) sits in, or None."""
    for i, (_, tops) in enumerate(layers):
        if module[0] in tops:
            return i
    return None


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
INLINE_MOD = re.compile(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{")


REEXPORTS = {}  # module -> {name: module that defines it}
PUB_USE = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);")


def inline_modules(text):
    """For a stripped file, a function from an offset to the names of the inline modules
    (`mod tests { … }`) around it, outermost first."""
    opens = {m.end() - 1: m.group(1) for m in INLINE_MOD.finditer(text)}
    spans = []  # (start, end, path)
    stack = []  # (offset of '{', name or None)
    for i, c in enumerate(text):
        if c == "{":
            stack.append((i, opens.get(i)))
        elif c == "}" and stack:
            start, name = stack.pop()
            if name is not None:
                path = [s for _, s in stack if s is not None] + [name]
                spans.append((start, i, path))

    def at(offset):
        best = []
        for start, end, path in spans:
            if start < offset < end and len(path) > len(best):
                best = path
        return best

    return at


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


def file_of(files, path):
    """The module file that holds `path`, which may name inline modules below a file."""
    path = tuple(path)
    while path and path not in files:
        path = path[:-1]
    return path or None


def edges(files, module, text):
    out = set()
    inline = inline_modules(text)

    def base_of(kind, offset):
        here = list(module) + inline(offset)
        if kind == "crate":
            return []
        if kind == "self":
            return here
        return here[:-1]

    def add(target):
        if target and target != module:
            out.add(target)

    for m in GROUP.finditer(text):
        kind, prefix, inner = m.group(1), m.group(2), m.group(3)
        prefix_segs = [s for s in prefix.split("::") if s]
        base = base_of(kind, m.start())
        while prefix_segs and prefix_segs[0] == "super":
            base, prefix_segs = base[:-1], prefix_segs[1:]
        for item in inner.split(","):
            segs = prefix_segs + [s for s in item.strip().split("::") if s and s != "self"]
            segs = [s.split(" ")[0] for s in segs]
            add(resolve(files, base, segs) or file_of(files, base))
    for m in PATH.finditer(text):
        kind = m.group(1)
        segs = [s for s in m.group(2).split("::") if s and s != "{"]
        base = base_of(kind, m.start())
        while segs and segs[0] == "super":
            base, segs = base[:-1], segs[1:]
        target = resolve(files, base, segs)
        if target is None and kind != "crate":
            target = file_of(files, base)
        add(target)
    # Paths that start at a child module (`use model::Task;`, `pub use error::ApiError;`).
    for m in CHILD.finditer(text):
        segs = [s for s in m.group(1).split("::") if s]
        here = (*module, *inline(m.start()))
        if (*here, segs[0]) in files:
            add(resolve(files, here, segs))
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


def check(root, say=print, layers=LAYERS):
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
        graph[module] = edges(files, module, body)
        lines = raw.count("\n")
        if lines > MAX_LINES:
            say(f"src/{rel}: {lines} lines (at most {MAX_LINES})")
            failed = True
    name = lambda m: "::".join(m)
    for module in sorted(files):
        if layer_of(module, layers) is None:
            say(f"src/{files[module]}: `{module[0]}` is in no layer (add it to LAYERS in scripts/check-layers.py)")
            failed = True
    upward = 0
    for module in sorted(graph):
        mine = layer_of(module, layers)
        for target in sorted(graph[module]):
            theirs = layer_of(target, layers)
            if mine is not None and theirs is not None and theirs > mine:
                say(
                    f"src/{files[module]} ({layers[mine][0]}) imports src/{files[target]} "
                    f"({layers[theirs][0]}, a layer above)"
                )
                upward += 1
    failed = failed or upward > 0
    for comp in sccs(graph):
        if len(comp) > 1:
            failed = True
            path = cycle_in(graph, comp)
            say(f"a circle of {len(comp)} modules: {', '.join(sorted(map(name, comp)))}")
            say("  for example: " + " -> ".join(map(name, path)))
    if not failed:
        say(f"{len(files)} modules in {len(layers)} layers: none imports upward, no circle, none over {MAX_LINES} lines")
    return not failed


def self_test():
    """The check finds what it is for: an upward import, a circle through a re-export, a module
    in no layer, a long file; and nothing in a facade, a string, a comment or an inline test
    module's `super`; so that a broken checker cannot pass CI quietly."""
    import tempfile

    def tree(files):
        root = tempfile.mkdtemp()
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return root

    layers = [("low", ["a", "b"]), ("high", ["h"])]
    quiet = lambda _: None
    said = []
    circle = tree({
        "a/mod.rs": "mod x;\npub use x::X;\n",
        "a/x.rs": "use crate::b::Y;\npub struct X;\n",
        "b.rs": "use crate::a::X; // through a's re-export, to a/x.rs\npub struct Y;\n",
    })
    assert not check(circle, quiet, layers), "a circle through a re-export"
    fine = tree({
        "a/mod.rs": "mod x;\nmod y;\npub use x::X;\npub use y::Y;\n",
        "a/x.rs": "pub struct X;\n",
        "a/y.rs": 'use super::X;\nconst U: &str = "crate::h::y://"; // crate::h::y\npub struct Y;\n',
        "h/mod.rs": "use crate::a::X;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        # From an inline module of a/z/mod.rs, `super` is a::z itself, not a (nor h).
        "a/z/mod.rs": "pub struct Z;\n#[cfg(test)]\nmod tests {\n    use super::Z;\n    use super::super::X;\n}\n",
    })
    assert check(fine, quiet, layers), "a facade and its children, a path in a string and a comment, inline tests"
    upward = tree({
        "a/mod.rs": "pub fn f() { crate::h::g() }\n",
        "h.rs": "pub fn g() {}\n",
    })
    assert not check(upward, said.append, layers), "an import from the layer above"
    assert any("src/a/mod.rs (low) imports src/h.rs (high" in s for s in said), said
    grouped = tree({
        "b.rs": "use crate::{a::A, h::H};\n",
        "a.rs": "pub struct A;\n",
        "h.rs": "pub struct H;\n",
    })
    assert not check(grouped, quiet, layers), "an upward import inside a `use crate::{…}` group"
    in_tests = tree({
        "a/mod.rs": "pub struct A;\n#[cfg(test)]\nmod tests {\n    use crate::h::H;\n}\n",
        "h.rs": "pub struct H;\n",
    })
    assert not check(in_tests, quiet, layers), "an upward import in a test module"
    unplaced = tree({"z.rs": "pub struct Z;\n"})
    assert not check(unplaced, quiet, layers), "a module in no layer"
    long = tree({"a.rs": "\n" * (MAX_LINES + 1)})
    assert not check(long, quiet, layers), "a long file"
    print("check-layers: self-test passed")


def main():
    if "--self-test" in sys.argv:
        self_test()
    if not check(ROOT):
        sys.exit(1)


if __name__ == "__main__":
    main()
