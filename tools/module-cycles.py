#!/usr/bin/env python3
"""The dependency graph between roomgate's top-level modules, and its cycles.

Reads every `crate::module` path in src/ (use declarations and inline paths alike), maps each
file to its top-level module (src/proxy/mod.rs and src/proxy/http.rs are both `proxy`), and
prints the modules each one uses, then every cycle (a strongly connected group of two or more
modules). Exits 1 if there is a cycle. `lib.rs` and `main.rs` are the roots and are left out.

    python3 tools/module-cycles.py            # graph and cycles
    python3 tools/module-cycles.py --dot      # Graphviz, for `dot -Tsvg`
"""

import pathlib
import re
import sys

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"
PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
GROUP = re.compile(r"\bcrate::\{([^}]*)\}")


def module_of(path: pathlib.Path) -> str | None:
    rel = path.relative_to(SRC)
    if rel.parts[0] in ("lib.rs", "main.rs"):
        return None
    return rel.parts[0].removesuffix(".rs")


def strip_comments(text: str) -> str:
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.rs")):
        module = module_of(path)
        if module is None:
            continue
        text = strip_comments(path.read_text())
        used = set(PATH.findall(text))
        for group in GROUP.findall(text):
            used.update(re.findall(r"(?:^|,)\s*([a-z_][a-z0-9_]*)", group))
        edges.setdefault(module, set()).update(u for u in used if u != module)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    edges = graph()
    if "--dot" in sys.argv:
        print("digraph roomgate {")
        for m in sorted(edges):
            for u in sorted(edges[m]):
                print(f'  "{m}" -> "{u}";')
        print("}")
        return 0
    for m in sorted(edges):
        print(f"{m:12} -> {', '.join(sorted(edges[m])) or '-'}")
    found = cycles(edges)
    for group in found:
        inner = {m: sorted(edges[m] & set(group)) for m in group}
        print("cycle: " + "; ".join(f"{m} -> {', '.join(v)}" for m, v in inner.items()))
    if not found:
        print("no cycles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
