#!/usr/bin/env python3
"""Every manifest that states kvcache's version states the one in abi/include/kvcache/version.h.

    scripts/check_versions.py [--root DIR]     exit 1 naming each file (and line) that differs
    scripts/check_versions.py --selftest       change each manifest in a copy in turn: the check must name it

The header is the one source (CMake reads it too); the bindings' manifests are what their package tools read,
so they carry a copy, and this check keeps the copies honest. CHANGELOG.md must have a section for the version.
"""
import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

VERSION_H = "abi/include/kvcache/version.h"
# The Rust crates' package names: the safe crate is published as kvcache-rs (the name kvcache is taken).
RUST_PACKAGES = ("kvcache-rs", "kvcache-sys")


def header_version(root):
    text = (root / VERSION_H).read_text()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^#define KVC_VERSION_{part} +(\d+)", text, re.M)
        if not m:
            raise SystemExit(f"check_versions: {VERSION_H} does not define KVC_VERSION_{part}")
        parts.append(m.group(1))
    return ".".join(parts)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def toml_section_value(text, section, key):
    """(value, line) of `key = "..."` inside [section], or (None, 0)."""
    m = re.search(rf"^\[{re.escape(section)}\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not m:
        return None, 0
    v = re.search(rf'^{re.escape(key)} *= *"([^"]*)"', m.group(1), re.M)
    if not v:
        return None, 0
    return v.group(1), line_of(text, m.start(1) + v.start(1))


def found_versions(root):
    """Yields (file, line, what, version) for every place that states the version."""
    py = "bindings/python/pyproject.toml"
    text = (root / py).read_text()
    v, n = toml_section_value(text, "project", "version")
    yield py, n, "[project] version", v

    cargo = "bindings/rust/Cargo.toml"
    text = (root / cargo).read_text()
    v, n = toml_section_value(text, "workspace.package", "version")
    yield cargo, n, "[workspace.package] version", v
    m = re.search(r'^kvcache-sys *= *\{[^}]*version *= *"=?([^"]*)"', text, re.M)
    yield cargo, line_of(text, m.start()) if m else 0, "[workspace.dependencies] kvcache-sys version", (
        m.group(1) if m else None)

    lock = "bindings/rust/Cargo.lock"
    text = (root / lock).read_text()
    for name in RUST_PACKAGES:
        m = re.search(rf'^name = "{re.escape(name)}"\nversion = "([^"]*)"', text, re.M)
        yield lock, line_of(text, m.start()) if m else 0, f"package {name}", m.group(1) if m else None

    go = "bindings/go/types.go"
    text = (root / go).read_text()
    parts, first = [], 0
    for part in ("Major", "Minor", "Patch"):
        m = re.search(rf"^\s*HeaderVersion{part}\s*=\s*(\d+)", text, re.M)
        parts.append(m.group(1) if m else "?")
        first = first or (line_of(text, m.start()) if m else 0)
    yield go, first, "HeaderVersionMajor/Minor/Patch", None if "?" in parts else ".".join(parts)


def check(root):
    want = header_version(root)
    bad = []
    for path, line, what, got in found_versions(root):
        if got != want:
            where = f"{path}:{line}" if line else path
            bad.append(f"{where}: {what} is {got if got else 'missing'}, but {VERSION_H} says {want}")
    changelog = root / "CHANGELOG.md"
    if not changelog.is_file() or not re.search(rf"^## {re.escape(want)}\b", changelog.read_text(), re.M):
        bad.append(f"CHANGELOG.md: no section '## {want}' for the version in {VERSION_H}")
    return want, bad


def selftest(root):
    """Each manifest changed in turn in a copy: the check must fail and name that file."""
    files = [VERSION_H, "CHANGELOG.md", "bindings/python/pyproject.toml", "bindings/rust/Cargo.toml",
             "bindings/rust/Cargo.lock", "bindings/go/types.go"]
    want = header_version(root)
    major, minor, patch = want.split(".")
    changes = {
        "bindings/python/pyproject.toml": (f'version = "{want}"', f'version = "{major}.{minor}.{int(patch) + 1}"'),
        "bindings/rust/Cargo.toml": (f'version = "{want}"', f'version = "{major}.{int(minor) + 1}.{patch}"'),
        "bindings/rust/Cargo.lock": (f'name = "kvcache-sys"\nversion = "{want}"',
                                     f'name = "kvcache-sys"\nversion = "{major}.{minor}.{int(patch) + 1}"'),
        "bindings/go/types.go": (None, None),
        "CHANGELOG.md": (f"## {want}", "## unreleased"),
    }
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp)
        for f in files:
            (copy / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(root / f, copy / f)
        _, bad = check(copy)
        if bad:
            print("selftest: the unchanged copy already fails:\n  " + "\n  ".join(bad))
            return 1
        for f, (old, new) in changes.items():
            original = (copy / f).read_text()
            if f.endswith(".go"):
                changed = re.sub(r"(HeaderVersionMinor\s*=\s*)(\d+)", lambda m: m.group(1) + str(int(m.group(2)) + 1),
                                 original, count=1)
            else:
                changed = original.replace(old, new, 1)
            if changed == original:
                print(f"selftest: could not change the version in {f}")
                failures += 1
                continue
            (copy / f).write_text(changed)
            _, bad = check(copy)
            named = [b for b in bad if b.startswith(f)]
            print(f"selftest: {f} changed -> {'named' if named else 'NOT named'}: {bad[0] if bad else 'no failure'}")
            failures += 0 if named and len(bad) == len(named) else 1
            (copy / f).write_text(original)
    print(f"selftest: {len(changes) - failures} passed, {failures} failed")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--selftest", action="store_true")
    args = ap.parse_args()
    if args.selftest:
        return selftest(args.root)
    want, bad = check(args.root)
    if bad:
        print("check_versions: these differ from the header's version:\n  " + "\n  ".join(bad))
        return 1
    print(f"check_versions: every manifest says {want}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
