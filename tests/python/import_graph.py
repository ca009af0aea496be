"""The import graph of sinklab's Python packages (analysis, jobs, cells) and the rules it keeps:

  - no cycle between the packages (analysis -> jobs -> analysis, or through cells);
  - analysis/ never imports jobs/ (the report and the statistics read the tables of cells/, never a runner);
  - cells/ imports neither analysis/ nor jobs/ (plain data that both import);
  - jobs/ imports from analysis/ only the results reader and the statistics (analysis.results, analysis.stats:
    a runner reads its results files and judges convergence, it never builds a report);
  - no module of analysis/stats/ (statistics) imports presentation: a report section, the page, the tables or
    the figures (analysis.sections, analysis.report, analysis.tables, analysis.figures);
  - no dynamic import (importlib.import_module, __import__) in the packages: the graph would not see it.

    python tests/python/import_graph.py [ROOT]            # each broken rule on a line; exit status 1 if any
    python tests/python/import_graph.py [ROOT] --edges    # the graph as JSON: {module: [module it imports]}

The graph comes from Python's own machinery, in this (fresh) interpreter with ROOT first on sys.path: every
import statement of every module under ROOT/<package>, those inside functions too, is found in the module's
compiled code by modulefinder's bytecode scanner (ModuleFinder.scan_opcodes on each code object), resolved by
importlib (importlib.util.resolve_name for relative imports; importlib.util.find_spec tells a submodule of
`from package import name` from an attribute). tests/python/test_import_graph.py runs it on the checkout and on
constructed packages with each rule broken.
"""
import importlib.util
import json
import modulefinder
import sys
import types
from pathlib import Path

PACKAGES = ("analysis", "jobs", "cells")
STATISTICS = "analysis.stats"
PRESENTATION = ("analysis.sections", "analysis.report", "analysis.tables", "analysis.figures")
JOBS_MAY_IMPORT = ("analysis.results", "analysis.stats")  # all that jobs/ takes from analysis/
DYNAMIC = ("import_module", "__import__")


def within(module, prefixes):
    """Whether `module` is one of `prefixes` or inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def package_of(module):
    return module.split(".", 1)[0]


def modules(root):
    """{module name: source file} of every module of PACKAGES under root."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def code_objects(code):
    """A module's code object and every one nested in it (functions, classes, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_objects(const)


def imports_of(name, path):
    """(the modules of PACKAGES that module `name` imports, whether it calls a dynamic import)."""
    code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    finder = modulefinder.ModuleFinder()
    found, dynamic = set(), False
    for co in code_objects(code):
        dynamic = dynamic or any(n in DYNAMIC for n in co.co_names)
        for kind, args in finder.scan_opcodes(co):
            if kind == "absolute_import":
                (fromlist, target), level = args, 0
            elif kind == "relative_import":
                level, fromlist, target = args
            else:
                continue
            target = importlib.util.resolve_name("." * level + target, package) if level else target
            if package_of(target) not in PACKAGES:
                continue
            found.add(target)
            spec = importlib.util.find_spec(target)
            if spec is not None and spec.submodule_search_locations is not None:  # a package: names may be modules
                found.update(f"{target}.{item}" for item in fromlist or ()
                             if item != "*" and importlib.util.find_spec(f"{target}.{item}") is not None)
    found.discard(name)
    return found, dynamic


def graph(root):
    """({module: sorted modules it imports}, [modules that call a dynamic import]) of the packages under root."""
    sys.path.insert(0, str(root))
    edges, dynamic = {}, []
    for name, path in modules(root).items():
        found, calls = imports_of(name, path)
        edges[name] = sorted(found)
        if calls:
            dynamic.append(name)
    return edges, dynamic


def package_cycles(edges):
    """The cycles of the package-level graph, each as [p, q, ..., p]."""
    links = {}
    for a, targets in edges.items():
        for b in targets:
            if package_of(a) != package_of(b):
                links.setdefault(package_of(a), set()).add(package_of(b))
    cycles = []

    def walk(path):
        for nxt in sorted(links.get(path[-1], ())):
            if nxt == path[0]:
                cycles.append(path + [nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle once, from its smallest package
                walk(path + [nxt])

    for start in sorted(links):
        walk([start])
    return cycles


def broken_rules(edges, dynamic=()):
    """One line per broken rule (see the module's docstring), [] when the graph keeps them all."""
    out = []
    for cycle in package_cycles(edges):
        steps = [next(f"{a} imports {b}" for a in sorted(edges) for b in edges[a]
                      if package_of(a) == p and package_of(b) == q) for p, q in zip(cycle, cycle[1:])]
        out.append(f"cycle between packages {' -> '.join(cycle)}: {'; '.join(steps)}")
    for a in sorted(edges):
        for b in edges[a]:
            if within(a, ("analysis",)) and within(b, ("jobs",)):
                out.append(f"analysis imports jobs: {a} imports {b}")
            if within(a, ("cells",)) and not within(b, ("cells",)):
                out.append(f"cells imports {package_of(b)}: {a} imports {b}")
            if within(a, ("jobs",)) and within(b, ("analysis",)) and b != "analysis" and not within(b, JOBS_MAY_IMPORT):
                out.append(f"jobs imports more of analysis than {' and '.join(JOBS_MAY_IMPORT)}: {a} imports {b}")
            if within(a, (STATISTICS,)) and within(b, PRESENTATION):
                out.append(f"a statistics module imports presentation: {a} imports {b}")
    out += [f"dynamic import (importlib.import_module or __import__) in {m}: the graph cannot see it" for m in dynamic]
    return out


def main(argv):
    args = [a for a in argv if a != "--edges"]
    root = Path(args[0] if args else Path(__file__).resolve().parents[2]).resolve()
    edges, dynamic = graph(root)
    if "--edges" in argv:
        print(json.dumps(edges, indent=1, sort_keys=True))
        return 0
    broken = broken_rules(edges, dynamic)
    for line in broken:
        print(line)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
