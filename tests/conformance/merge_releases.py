#!/usr/bin/env python3
"""Merges the vectors two transformers releases wrote from the same generators
and seeds into the committed set, so the suite keeps every release's semantics
and no file twice.

  merge_releases.py NEW_DIR OLD_DIR OUT_DIR

NEW_DIR holds what the newest release (TF_NEW in generate.sh) wrote, OLD_DIR
what the release before it (TF_PREV) wrote. For each file of the v5 families:

  * identical but for the meta line: one file, NAME, with NEW's meta line and
    "also transformers OLD" appended; the replay runs it once per release it
    names, so both releases' semantics are checked against it;
  * different: OLD's file keeps its name NAME (v5_*), NEW's becomes v524_*
    (the replay creates each file's caches with its own release);
  * written by NEW only (families of what only NEW has): v524_*.

Files whose meta line names no transformers release (tables) must be identical. Prints what it decided
for each file; docs/conformance.md lists the result.
"""
import filecmp
import os
import shutil
import sys


def meta_split(path):
    """The meta line naming a transformers release (None if there is none) and the other lines."""
    with open(path) as f:
        lines = f.read().split("\n")
    if len(lines) > 1 and lines[1].startswith("meta ") and "transformers" in lines[1].split():
        return lines[1], lines[:1] + lines[2:]
    return None, lines


def release_of(meta):
    words = meta.split()
    return words[words.index("transformers") + 1]


def new_name(name):
    return "v524_" + name[len("v5_"):] if name.startswith("v5_") else name


def main():
    new_dir, old_dir, out_dir = sys.argv[1:4]
    os.makedirs(out_dir, exist_ok=True)
    for name in sorted(os.listdir(new_dir)):
        new = os.path.join(new_dir, name)
        if not os.path.isfile(new) or name.startswith("log."):
            continue
        old = os.path.join(old_dir, name)
        new_meta, new_body = meta_split(new)
        if not os.path.exists(old):
            shutil.copyfile(new, os.path.join(out_dir, new_name(name)))
            print(f"{new_name(name)}: only {release_of(new_meta) if new_meta else 'the new release'} writes it")
            continue
        old_meta, old_body = meta_split(old)
        if new_meta is None:
            if not filecmp.cmp(new, old, shallow=False):
                sys.exit(f"{name}: a table that names no transformers release differs between the releases")
            shutil.copyfile(new, os.path.join(out_dir, name))
            print(f"{name}: identical")
            continue
        if new_body == old_body:
            lines = new_body[:1] + [f"{new_meta} also transformers {release_of(old_meta)}"] + new_body[1:]
            with open(os.path.join(out_dir, name), "w") as f:
                f.write("\n".join(lines))
            print(f"{name}: identical under {release_of(new_meta)} and {release_of(old_meta)}: one file naming both")
        else:
            shutil.copyfile(old, os.path.join(out_dir, name))
            shutil.copyfile(new, os.path.join(out_dir, new_name(name)))
            print(f"{name}: differs: {name} ({release_of(old_meta)}) and {new_name(name)} ({release_of(new_meta)})")


if __name__ == "__main__":
    main()
