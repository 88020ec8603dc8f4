#!/usr/bin/env python3
"""Checks that every #include of a tracked C++/CUDA file follows the layering of
docs/ARCHITECTURE.md ("Layers"): nothing includes upward or sideways, a layer's internal/
headers are included only from inside that layer and by its own test binary's files, and
testing/ (the fault-injecting seams) is never included by product code. Run by scripts/lint;
takes well under a second.

  scripts/check_layers.py [FILE...]     (default: every tracked *.h *.cc *.cu *.cuh)

Each violation is one line, "FILE:LINE: #include "X": RULE", and the exit status is 1.
Only includes that name a file of the repository are judged (quoted or angled, their first
folder one of the layers' below); the standard library and third-party headers are not.
"""
import os
import re
import subprocess
import sys

# The layers, bottom first: a file under LAYER may include files of LAYER itself and of the
# layers listed after it ("core/*": every core/ layer, "backends/*" every backend), nothing
# else ("*": every layer; another layer's internal/ still excepted). Longest prefix wins.
# server -> runtime -> engine -> core/offload -> core/snapshot -> core/memory -> core/base; compute (the Kernels seam) on core/memory; the backends implement
# core/memory and compute; runtime assembles the engine stack (it opens the backends);
# testing wraps the seams for tests and benchmarks; tests/ and bench/ sit on top of it all.
LAYERS = [
    ("core/base", []),
    ("core/memory", ["core/base"]),
    ("core/snapshot", ["core/memory", "core/base"]),
    ("core/offload", ["core/snapshot", "core/memory", "core/base"]),
    ("compute", ["core/memory", "core/base"]),
    ("backends/sim", ["compute", "core/*"]),
    ("backends/cuda_vmm", ["compute", "core/*"]),
    ("engine", ["compute", "core/*"]),
    ("runtime", ["engine", "backends/*", "compute", "core/*"]),
    ("server", ["runtime", "engine", "compute", "core/*"]),
    ("testing", ["compute", "core/*"]),
    # Outside engines: only the installed library (the core layers, the backends' headers).
    ("examples", ["backends/*", "core/*"]),
    ("bench", ["*"]),
    ("tests", ["*"]),
]

# An internal/ folder belongs to the layer that holds it; only that layer's files include its
# headers, and its own tests: the test files registered in the layer's test binary
# (siesta_test_sources() in tests/*.cmake), which may check its internals directly.
TEST_BINARY_LAYER = {
    "base_tests": "core/base",
    "memory_tests": "core/memory",
    "snapshot_tests": "core/snapshot",
    "offload_tests": "core/offload",
    "engine_tests": "engine",
    "server_tests": "server",
}
TEST_SOURCES = re.compile(r"siesta_test_sources\(\s*([A-Za-z0-9_]+)\b(.*?)\)", re.S)

SOURCES = ("*.h", "*.cc", "*.cu", "*.cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of(path):
    """The layer whose folder holds `path` (longest prefix), or None."""
    best = None
    for name, _ in LAYERS:
        if path == name or path.startswith(name + "/"):
            if best is None or len(name) > len(best):
                best = name
    return best


def allowed(layer):
    """The layers `layer` may include, itself included, with the wildcards expanded."""
    names = [name for name, _ in LAYERS]
    out = {layer}
    for entry in dict(LAYERS)[layer]:
        if entry == "*":
            out.update(names)
        elif entry.endswith("/*"):
            prefix = entry[:-1]
            out.update(n for n in names if n.startswith(prefix))
        else:
            out.add(entry)
    return out


def describe(layer):
    return ", ".join(dict(LAYERS)[layer]) or "nothing else"


def test_layers():
    """{test file path: the layer whose test binary it is registered in}."""
    owners = {}
    for name in sorted(os.listdir("tests")):
        if not name.endswith(".cmake"):
            continue
        with open(os.path.join("tests", name), encoding="utf-8") as f:
            text = re.sub(r"#[^\n]*", "", f.read())
        for binary, args in TEST_SOURCES.findall(text):
            if binary not in TEST_BINARY_LAYER or "SOURCES" not in args:
                continue
            for source in args.split("SOURCES", 1)[1].split():
                owners["tests/" + source] = TEST_BINARY_LAYER[binary]
    return owners


def check_file(path, text, owners):
    problems = []
    source_layer = layer_of(path)
    if source_layer is None:
        return ["%s: not under any layer of scripts/check_layers.py (add its folder to LAYERS)"
                % path]
    may = allowed(source_layer)
    for number, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        target = m.group(2)
        target_layer = layer_of(target)
        if target_layer is None:
            continue  # the standard library, a third-party or a generated header
        where = '%s:%d: #include %s%s%s' % (path, number, m.group(1), target,
                                             '"' if m.group(1) == '"' else ">")
        if target_layer not in may and target_layer == "testing":
            problems.append("%s: testing/ (the fault-injecting seams) is for tests and benchmarks;"
                            " %s never includes it" % (where, source_layer))
            continue
        if target_layer not in may:
            problems.append("%s: %s may include %s (%s is not below it)"
                            % (where, source_layer, describe(source_layer), target_layer))
            continue
        internal = re.match(r"^(.*?)/internal/", target)
        if internal:
            owner = internal.group(1)
            if not path.startswith(owner + "/") and owners.get(path) != owner:
                problems.append("%s: %s/internal/ is %s's own; only files under %s/ and the "
                                "tests of its test binary include it (use the layer's public "
                                "headers)" % (where, owner, owner, owner))
    return problems


def main(argv):
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    os.chdir(root)
    files = argv[1:] or subprocess.run(
        ["git", "ls-files", "--", *SOURCES], check=True, capture_output=True,
        text=True).stdout.split()
    owners = test_layers()
    problems = []
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except FileNotFoundError:
            continue  # deleted in the working tree
        problems.extend(check_file(path, text, owners))
    for problem in problems:
        print("scripts/check_layers.py: " + problem)
    if problems:
        sys.stdout.flush()
        print("scripts/check_layers.py: %d include(s) break the layering (docs/ARCHITECTURE.md, "
              "\"Layers\"; the rules are the LAYERS table of scripts/check_layers.py)"
              % len(problems), file=sys.stderr)
        return 1
    print("scripts/check_layers.py: layers: the includes of %d files follow the layering"
          % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
