#!/usr/bin/env python3
"""Fails when a dependency points the wrong way between kvtrain's folders.

The folders are layers (docs/development.md draws them); a layer may use only
the layers listed for it below. Two kinds of edges are checked: labels in
BUILD files ("//transport/ps:ps" inside ops/BUILD) and project #includes in
sources ('#include "kvstore/kvstore.h"' inside engine/executor.cc). Usage:

  tools/check_layers.py [ROOT]     # ROOT defaults to the repository

Prints one line per wrong-way edge (file, the layer it is in, the layer it
reaches) and exits 1 if there is any; prints the layer count and exits 0
otherwise. Python stdlib only.
"""

import os
import re
import sys

# Each layer and the layers it may use, lowest first. A folder belongs to the
# longest layer name that prefixes it ("transport/ps/x" is in "transport/ps").
LAYERS = {
    "third_party": [],
    "base": ["third_party"],
    "proto": ["base", "third_party"],
    "tensor": ["base", "proto", "third_party"],
    "ops": ["tensor", "base", "proto", "third_party"],
    "engine": ["ops", "tensor", "base", "proto", "third_party"],
    "net": ["proto", "base", "third_party"],
    # Gradient compression's codecs: pure functions over bytes.
    "compression": ["proto", "base", "third_party"],
    "transport/ps": ["net", "proto", "base", "third_party"],
    "transport/collective": ["net", "proto", "base", "third_party"],
    "kvstore": ["transport/ps", "transport/collective", "compression", "net", "ops",
                "tensor", "proto", "base", "third_party"],
    "trainer": ["engine", "kvstore", "compression", "net", "ops", "tensor", "proto",
                "base", "third_party"],
    # The process-group API (transport/collective's Communicator) is public:
    # a model-parallel program splits its groups itself, as ChainerMN's do.
    "examples": ["trainer", "engine", "kvstore", "transport/collective", "compression",
                 "net", "ops", "tensor", "proto", "base", "third_party"],
    "python": ["trainer", "engine", "kvstore", "compression", "net", "ops", "tensor",
               "proto", "base", "third_party"],
    "tracker": [],
    # Programs that exercise everything: they may use any layer, and no
    # layer may use them.
    "tools": ["*"],
    "bench": ["*"],
    "tests": ["*"],
    "python/tests": ["*"],
}

# Build machinery every package may load or name (rules, config settings,
# test runners): not code the target links.
BUILD_TOOLING = {"tools:fuzz.bzl", "tools:fuzz_build", "tools:pyunit",
                 "third_party:cuda.bzl"}

LABEL = re.compile(r'"@?/?/([A-Za-z0-9_./-]*?)(?::[^"]*)?"')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_EXT = (".h", ".cc", ".cu", ".cuh", ".proto")
SKIP_DIRS = {".git", "docs"}


def layer_of(folder):
    """The layer a repository folder belongs to, or None (the root)."""
    best = None
    for name in LAYERS:
        if folder == name or folder.startswith(name + "/"):
            if best is None or len(name) > len(best):
                best = name
    return best


def allowed(src, dst):
    if dst is None or src == dst:
        return True
    uses = LAYERS[src]
    return "*" in uses or dst in uses


def edges(root):
    """Yields (file, source folder, target folder, what) for every edge."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not d.startswith("bazel-"))
        folder = os.path.relpath(dirpath, root).replace(os.sep, "/")
        if folder == ".":
            folder = ""
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if name in ("BUILD", "BUILD.bazel"):
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for m in LABEL.finditer(text):
                    label = m.group(0).strip('"').lstrip("/")
                    if m.group(0).startswith('"@') or label in BUILD_TOOLING:
                        continue  # an external repository; build machinery
                    if label.endswith(("__pkg__", "__subpackages__")):
                        continue  # visibility: who may use this package
                    yield rel, folder, m.group(1), m.group(0)
            elif name.endswith(SOURCE_EXT):
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    inc = m.group(1)
                    target = os.path.dirname(inc)
                    if not os.path.exists(os.path.join(root, inc)) and \
                            not inc.endswith(".pb.h"):
                        continue  # a header of this folder or a system one
                    yield rel, folder, target, '#include "%s"' % inc


def check(root):
    """Returns the list of wrong-way edges as printable lines."""
    bad = []
    for rel, folder, target, what in edges(root):
        src, dst = layer_of(folder), layer_of(target)
        if src is None:
            continue  # the top-level BUILD
        if not allowed(src, dst):
            bad.append("%s: %s (layer %s) uses layer %s; %s may use only: %s"
                       % (rel, what, src, dst, src,
                          ", ".join(LAYERS[src]) or "nothing"))
    return bad


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..")
    bad = check(root)
    for line in bad:
        print(line)
    if bad:
        print("%d wrong-way dependencies" % len(bad))
        return 1
    print("layers: %d, no wrong-way dependency" % len(LAYERS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
