#!/usr/bin/env python3
"""Dead-panel check (issue 34): every metric name that the Grafana dashboard's PromQL expressions
and the Prometheus alert rules use must exist in the given /metrics expositions (schedd's and an
agent's, scraped from a running local cluster). Histograms count by their base name (a
`# TYPE NAME histogram` line) for NAME_bucket, NAME_sum and NAME_count.

Usage: dashboard_metrics.py DASHBOARD.json RULES.yml EXPOSITION...  (exit 1 naming what is missing)
"""
import json
import re
import sys

NAME = re.compile(r"\bmlsched_[a-z0-9_]+\b")


def exprs_of_dashboard(path):
    with open(path) as f:
        dash = json.load(f)
    out = []
    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))
    walk(dash["panels"])
    return out


def exprs_of_rules(path):
    out = []
    alert = "?"
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*- alert:\s*(\S+)", line)
            if m:
                alert = m.group(1)
            m = re.match(r"\s*expr:\s*(.+)", line)
            if m:
                out.append((alert, m.group(1)))
    return out


def known_names(paths):
    names = set()
    for path in paths:
        with open(path) as f:
            for line in f:
                m = re.match(r"# TYPE (\S+) (\S+)", line)
                if m:
                    names.add(m.group(1))
                elif line and line[0] != "#":
                    names.add(re.split(r"[{ ]", line, 1)[0])
    return names


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    names = known_names(sys.argv[3:])
    used = exprs_of_dashboard(sys.argv[1]) + exprs_of_rules(sys.argv[2])
    missing = []
    for where, expr in used:
        for name in NAME.findall(expr):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if name not in names and base not in names:
                missing.append(f"{where}: {name}")
    if not used:
        print("no PromQL expressions found", file=sys.stderr)
        return 1
    if missing:
        print("metrics used but not exported (dead panels or alerts):\n  " + "\n  ".join(sorted(set(missing))), file=sys.stderr)
        return 1
    print(f"{len(used)} expressions, {len({n for _, e in used for n in NAME.findall(e)})} metric names, all exported")
    return 0


if __name__ == "__main__":
    sys.exit(main())
