"""bench/bench_rows.py: the JSON rows every benchmark of make bench writes into one results file."""
import json
import os


def write_rows(path: str, rows: list) -> None:
    """results.json: a JSON array, one object per line; rows of our (bench, impl) pairs are replaced."""
    ours = {(r["bench"], r["impl"]) for r in rows}
    kept = []
    if os.path.exists(path):
        with open(path) as f:
            text = f.read().strip()
        if text:
            for row in json.loads(text):
                if (row.get("bench"), row.get("impl")) not in ours:
                    kept.append(row)
    all_rows = kept + rows
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("[\n")
        for i, r in enumerate(all_rows):
            sep = "," if i + 1 < len(all_rows) else ""
            f.write(f'{{"bench": "{r["bench"]}", "impl": "{r["impl"]}", "metric": "{r["metric"]}", '
                    f'"value": {r["value"]:.10g}, "unit": "{r["unit"]}"}}{sep}\n')
        f.write("]\n")
    print(f"results: {len(rows)} rows written to {path}")
