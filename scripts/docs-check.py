#!/usr/bin/env python3
"""What `make docs` checks after DocC has built the catalogues with warnings as errors (broken links, parameters
that do not exist or are left out): that every public symbol of the documented modules has a doc comment, and that
the LiveAudio catalogue lists every public type of the module with a summary.

  scripts/docs-check.py SYMBOL_GRAPH_DIR DOCS_DIR MODULE…

SYMBOL_GRAPH_DIR holds the symbol graphs swift-docc-plugin extracted (one folder a module); DOCS_DIR is the built
site. Symbols the compiler made (synthesized conformances' members) are not the code's to document and are not
counted; a member that implements a protocol requirement and has no comment of its own shows the requirement's (the
symbol graph carries it, and DocC shows it), which counts.
"""
import glob, json, os, sys

graphs, site, modules = sys.argv[1], sys.argv[2], sys.argv[3:]
problems = []
TYPE_KINDS = {"swift.class", "swift.struct", "swift.enum", "swift.protocol", "swift.actor", "swift.typealias"}

for module in modules:
    files = glob.glob(os.path.join(graphs, module, "*.symbols.json"))
    if not files:
        problems.append(f"{module}: no symbol graph in {graphs}/{module}")
        continue
    public_types = set()
    for path in files:
        graph = json.load(open(path))
        own = os.path.basename(path) == f"{module}.symbols.json"
        for symbol in graph["symbols"]:
            if symbol.get("accessLevel") not in ("public", "open"):
                continue
            if "::SYNTHESIZED::" in symbol["identifier"]["precise"]:
                continue
            name = ".".join(symbol["pathComponents"])
            if own and symbol["kind"]["identifier"] in TYPE_KINDS and len(symbol["pathComponents"]) == 1:
                public_types.add(symbol["identifier"]["precise"])
            if not (symbol.get("docComment") or {}).get("lines"):
                location = symbol.get("location", {})
                where = location.get("uri", "").replace("file://", "")
                where = os.path.relpath(where) if where else module
                line = location.get("position", {}).get("line", -1) + 1
                problems.append(f"{where}:{line}: public {symbol['kind']['displayName'].lower()} '{name}' "
                                f"has no documentation comment")
    if module == "LiveAudio":
        page = json.load(open(os.path.join(site, "data", "documentation", "liveaudio.json")))
        listed = {i for section in page.get("topicSections", []) for i in section.get("identifiers", [])}
        references = page.get("references", {})
        by_precise = {}
        for identifier, reference in references.items():
            by_precise.setdefault(reference.get("title"), identifier)
        for path in files:
            if os.path.basename(path) != "LiveAudio.symbols.json":
                continue
            for symbol in json.load(open(path))["symbols"]:
                if symbol["identifier"]["precise"] not in public_types:
                    continue
                title = symbol["names"]["title"]
                identifier = next((i for i in listed if references.get(i, {}).get("title") == title), None)
                if identifier is None:
                    problems.append(f"LiveAudio catalogue: public type '{title}' is not listed on the module's page")
                elif not references[identifier].get("abstract"):
                    problems.append(f"LiveAudio catalogue: '{title}' is listed without a summary")
        print(f"LiveAudio catalogue: {len(public_types)} public types, each listed with a summary"
              if not any(p.startswith("LiveAudio catalogue") for p in problems) else "")

for p in problems:
    print(f"error: {p}")
if problems:
    print(f"docs-check: {len(problems)} problem(s)")
    sys.exit(1)
print(f"docs-check: every public symbol of {', '.join(modules)} is documented")
