#!/usr/bin/env python3
"""Usage: coverage_table.py SUMMARY.json TABLE.txt TABLE.json

Folds gcovr's per-file JSON summary (--json-summary) into one row per folder of the library (core/, core/pool,
core/persist, core/tier, core/tier/redis, backends/cpu, ...) and a total: lines and branches, covered / total
and percent. The table goes to stdout and TABLE.txt, the same numbers as JSON to TABLE.json. A folder's row
counts its own files only, not its subfolders'; the lowest files by line coverage follow the table.
"""
import json
import os
import sys


def percent(covered, total):
    return 100.0 * covered / total if total else 100.0


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__.strip())
    with open(argv[1], encoding="utf-8") as f:
        files = json.load(f)["files"]
    folders = {}
    total = {"lines_covered": 0, "lines": 0, "branches_covered": 0, "branches": 0}
    rows = []
    for entry in files:
        counts = {
            "lines_covered": entry["line_covered"],
            "lines": entry["line_total"],
            "branches_covered": entry["branch_covered"],
            "branches": entry["branch_total"],
        }
        folder = folders.setdefault(os.path.dirname(entry["filename"]), dict.fromkeys(total, 0))
        for key, value in counts.items():
            folder[key] += value
            total[key] += value
        rows.append((entry["filename"], counts))
    if not folders:
        sys.exit("coverage_table: the summary lists no files; did the tests run in this build?")

    head = f"{'folder':<18}{'lines':>16}{'%':>8}{'branches':>18}{'%':>8}"
    out = [head, "-" * len(head)]

    def row(name, c):
        return (f"{name:<18}{c['lines_covered']:>7} / {c['lines']:<6}{percent(c['lines_covered'], c['lines']):>8.1f}"
                f"{c['branches_covered']:>8} / {c['branches']:<7}"
                f"{percent(c['branches_covered'], c['branches']):>8.1f}")

    for name in sorted(folders):
        out.append(row(name, folders[name]))
    out.append("-" * len(head))
    out.append(row("overall", total))
    out.append("")
    out.append("lowest files by lines:")
    rows.sort(key=lambda r: (percent(r[1]["lines_covered"], r[1]["lines"]), r[0]))
    for name, c in rows[:8]:
        out.append(row(name, c).replace(f"{name:<18}", f"  {name}\n{'':<18}", 1))
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    with open(argv[2], "w", encoding="utf-8") as f:
        f.write(text)
    report = {
        "folders": {
            name: dict(c, lines_percent=round(percent(c["lines_covered"], c["lines"]), 1),
                       branches_percent=round(percent(c["branches_covered"], c["branches"]), 1))
            for name, c in sorted(folders.items())
        },
        "overall": dict(total, lines_percent=round(percent(total["lines_covered"], total["lines"]), 1),
                        branches_percent=round(percent(total["branches_covered"], total["branches"]), 1)),
    }
    with open(argv[3], "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
