#!/usr/bin/env python3
"""Checks that core/'s folders include only the floors below them (core/README.md).

Every `#include "..."` of a file under core/ is resolved the way the compiler resolves it with -Icore (the
including file's folder first, then core/); what does not resolve inside core/ (kvcache.h, backend.h, half.h)
is outside the check. A file may include its own folder and the folders FLOORS lists for it; core/internal.h,
the umbrella, only the top floor. An include that names a header of another folder by its bare name is refused
too: it builds here only through the tests' include directories, not where -Icore is all there is (the Python
and Rust bindings compile the core that way).

  check_layering.py [--root DIR]   exit 0 and one summary line, or 1 and one line per forbidden include
  check_layering.py --selftest     copies core/ aside, adds one forbidden include, and checks it is refused
"""
import argparse
import os
import re
import shutil
import sys
import tempfile

# Each folder and the folders below it that it may include. Order is bottom to top.
FLOORS = {
    "util": [],
    "quant": ["util"],
    "model": ["util"],
    "kinds/base": ["model", "util"],
    "kinds": ["kinds/base", "model", "quant", "util"],
    "cache": ["kinds", "kinds/base", "model", "quant", "util"],
}
# The top floor: the block pool, cache files and tiers. They may include every floor below and the umbrella
# core/internal.h; among themselves they share small leaf helpers (sha256, crc32c, the tier's framing).
TOP = ["pool", "persist", "tier", "tier/redis"]
# Leaf headers of a higher folder that include nothing of the core, allowed to the floors named here, and why.
LEAVES = {
    # The record format of cache files: a byte writer and reader the kinds' ext_save/ext_load hooks fill.
    "persist/record.h": ["kinds"],
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(rel):
    """The floor a path under core/ belongs to ('' for core/ itself), the longest match first."""
    d = os.path.dirname(rel)
    for f in sorted(list(FLOORS) + TOP, key=len, reverse=True):
        if d == f or d.startswith(f + "/"):
            return f
    return d


def resolve(core, rel, name):
    """The path under core/ that `#include "name"` in core/<rel> reaches, and whether only a bare name found it."""
    here = os.path.dirname(rel)
    for base in (here, ""):
        cand = os.path.normpath(os.path.join(base, name))
        if not cand.startswith("..") and os.path.isfile(os.path.join(core, cand)):
            return cand, False
    if "/" not in name:
        for dirpath, _, files in os.walk(core):
            if name in files:
                return os.path.relpath(os.path.join(dirpath, name), core), True
    return None, False


def check(core):
    problems = []
    count = 0
    for dirpath, _, files in os.walk(core):
        for fname in sorted(files):
            if not fname.endswith((".c", ".h")):
                continue
            rel = os.path.relpath(os.path.join(dirpath, fname), core)
            src_floor = folder_of(rel)
            with open(os.path.join(core, rel), encoding="utf-8") as fh:
                text = fh.read()
            for m in INCLUDE.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                target, bare = resolve(core, rel, m.group(1))
                if target is None:
                    continue
                count += 1
                where = f"core/{rel}:{line}: #include \"{m.group(1)}\""
                if bare:
                    problems.append(f"{where}: names core/{target} by its bare name; write \"{target}\" "
                                    "(the bindings compile the core with -Icore only)")
                    continue
                dst_floor = folder_of(target)
                if src_floor in TOP or src_floor == "" or dst_floor == src_floor:  # "": the umbrella itself
                    continue
                if target == "internal.h":
                    problems.append(f"{where}: core/internal.h is the umbrella of the top floor ({', '.join(TOP)}); "
                                    f"{src_floor}/ includes the headers of the floors it stands on")
                    continue
                if src_floor in LEAVES.get(target, []):
                    continue
                allowed = FLOORS.get(src_floor)
                if allowed is None:
                    problems.append(f"{where}: core/{src_floor or '.'} is no floor of core/README.md; "
                                    "add the folder to scripts/check_layering.py and the README")
                elif dst_floor not in allowed:
                    below = ", ".join(allowed) if allowed else "none"
                    problems.append(f"{where}: {src_floor}/ may include {below} (core/README.md), "
                                    f"not {dst_floor or 'core'}/")
    return problems, count


def selftest(root):
    """A forbidden include added to a copy must be refused, naming the file and both folders."""
    with tempfile.TemporaryDirectory() as tmp:
        core = os.path.join(tmp, "core")
        shutil.copytree(os.path.join(root, "core"), core)
        victim = os.path.join(core, "util", "error.c")
        with open(victim, "a", encoding="utf-8") as fh:
            fh.write('\n#include "cache/cache_ops.h"\n')
        problems, _ = check(core)
        expected = [p for p in problems if p.startswith("core/util/error.c:") and "not cache/" in p]
        if not expected:
            print("selftest FAILED: an include of cache/ from util/ was not refused; got:", problems or "nothing")
            return 1
        print("selftest passed: refused", expected[0])
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--selftest", action="store_true")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    if args.selftest:
        return selftest(root)
    problems, count = check(os.path.join(root, "core"))
    for p in problems:
        print(p)
    if problems:
        print(f"core layering: {len(problems)} forbidden include(s) of {count} (core/README.md says what each "
              "folder may include)")
        return 1
    print(f"core layering: {count} includes, each to its own floor or one below")
    return 0


if __name__ == "__main__":
    sys.exit(main())
