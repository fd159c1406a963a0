#!/usr/bin/env python3
"""Regenerates docs/benchmarks.md from the benchmarks' JSON output.

    python3 scripts/bench_docs.py                 # runs every bench of build/ and rewrites the page
    python3 scripts/bench_docs.py --from DIR      # renders JSON files already in DIR (NAME.json)
    python3 scripts/bench_docs.py --only sim_speed,memplan

Each benchmark writes {"benchmark": title, "rows": [{"key", "value", "unit", "note"}], ...}
with --json PATH; this script runs them with the arguments below, keeps the JSON beside the
page (docs/bench/NAME.json) and renders one table per benchmark. Nothing here is typed by hand:
the page is a function of the JSON files and the descriptions in this script.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (arguments, how the numbers are measured). Order is the page's order.
BENCHES = [
    ("stream_overhead", [],
     "The runtime's cost per task: fire-and-forget launches of zero-duration kernels and awaited "
     "launches on the ascend910 backend, against two baselines measured in the same run (a bare "
     "binary-heap event queue and a plain Asio `co_await post` on a strand). Each ratio's two sides "
     "run in alternating rounds and each keeps its best round; thread-CPU time is the figure to "
     "compare, wall time is printed beside it."),
    ("kernel_roofline", [],
     "The cost model against its oracles: GEMMs and ResNet-50 convolutions on ascend910, as a "
     "fraction of peak and against the cube floor and the roofline."),
    ("sim_speed", [],
     "How fast the simulator simulates: ResNet-50 training steps (batch 256, FP16, timing-only) on "
     "1 and more devices; wall time per simulated device-step."),
    ("allocator", [],
     "The caching pool's cached alloc+free path against glibc malloc and mimalloc in the same run, "
     "and replays of the ResNet-50 training step's allocation trace (reserved / lower bound)."),
    ("memplan", [],
     "The static planner on the paper example, the MiniMalloc instances, the ResNet-50 traces and "
     "large synthetic graphs: arena / lower bound and planning time."),
    ("collectives", [],
     "nccl-tests style: time, algorithm bandwidth and bus bandwidth of each collective and "
     "algorithm on 8 and 64 devices, beside the alpha-beta formula's time and the error."),
    ("priority_inversion", [],
     "Data-parallel ResNet-50 training on 8 ascend910 devices under the scheduler configurations: "
     "AllReduce wait percentiles, exposed communication, step time and throughput."),
    ("graph_schedules", [],
     "ResNet-50 inference and training through the graph API: latency, throughput and peak memory "
     "per schedule and optimisation level, memory reuse off and on."),
    ("fault_campaign", [],
     "Seeded fault-injection runs of a data-parallel training loop: faults injected, detected, "
     "recovered, fatal, silent corruptions and virtual time lost."),
]


def rows_of(doc):
    if isinstance(doc.get("rows"), list) and all(isinstance(r, dict) and "key" in r for r in doc["rows"]):
        return [(r.get("key", ""), r.get("value"), r.get("unit", ""), r.get("note", "")) for r in doc["rows"]]
    return [(k, v, "", "") for k, v in doc.items()
            if k not in ("benchmark", "command", "measured") and not isinstance(v, (dict, list))]


def fmt(v):
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return f"{int(v):,}"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) >= 0.001 else f"{v:.3e}"
    return str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="Meson build directory with bench/")
    ap.add_argument("--from", dest="src", help="read NAME.json from this folder instead of running")
    ap.add_argument("--only", help="comma-separated benchmark names")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    json_dir = os.path.join(ROOT, "docs", "bench")
    os.makedirs(json_dir, exist_ok=True)
    for name, args, _ in BENCHES:
        if only and name not in only:
            continue
        dst = os.path.join(json_dir, name + ".json")
        if a.src:
            src = os.path.join(a.src, name + ".json")
            if os.path.exists(src) and os.path.abspath(src) != os.path.abspath(dst):
                with open(src) as f, open(dst, "w") as g:
                    g.write(f.read())
            continue
        exe = os.path.join(a.build, "bench", name)
        if not os.path.exists(exe):
            print(f"skip {name}: {exe} not built", file=sys.stderr)
            continue
        print(f"running {name} ...", file=sys.stderr)
        subprocess.run([exe, *args, "--json", dst], check=True, stdout=subprocess.DEVNULL)
        with open(dst) as f:
            doc = json.load(f)
        doc["command"] = " ".join([f"./build/bench/{name}", *args, "--json", f"docs/bench/{name}.json"])
        doc["measured"] = datetime.date.today().isoformat() + f", {platform.machine()}, {os.cpu_count()} cores"
        with open(dst, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")

    out = ["# Benchmarks", "",
           "Generated by `python3 scripts/bench_docs.py` from the JSON files in `docs/bench/`; do not edit",
           "by hand. Every program in `bench/` prints this table and, with `--json PATH`, writes it. Speed",
           "is compared against baselines measured in the same run (a ratio), because these machines are",
           "shared and noisy; absolute times move from run to run, ratios much less.", ""]
    for name, _, how in BENCHES:
        path = os.path.join(json_dir, name + ".json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            doc = json.load(f)
        out += [f"## `bench/{name}`", "", how, ""]
        if doc.get("command"):
            out += [f"Command: `{doc['command']}`" + (f" ({doc['measured']})." if doc.get("measured") else "."), ""]
        rows = doc.get("rows")
        if isinstance(rows, list) and rows and isinstance(rows[0], dict) and "key" not in rows[0]:
            # A table of records (e.g. one row per operation, algorithm and size): its own columns,
            # then the flat keys below it.
            cols = list(rows[0].keys())
            out += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            for r in rows:
                out.append("| " + " | ".join(fmt(r.get(c)) for c in cols) + " |")
            out.append("")
            flat = [(k, v, "", "") for k, v in doc.items()
                    if k not in ("benchmark", "command", "measured", "rows") and not isinstance(v, (dict, list))]
        else:
            flat = rows_of(doc)
        if flat:
            out += ["| measure | value | unit | note |", "|---|---:|---|---|"]
            for k, v, u, n in flat:
                out.append(f"| {k} | {fmt(v)} | {u} | {n} |")
            out.append("")
    with open(a.out, "w") as f:
        f.write("\n".join(out))
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
