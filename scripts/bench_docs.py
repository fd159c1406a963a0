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
    ("stream_overhead", ["--flat-max", "10000000"],
     "The runtime's cost per task: fire-and-forget launches of zero-duration kernels and awaited "
     "launches (`use_awaitable` in an Asio coroutine, `use_task` in an `npurt::task`) on the "
     "ascend910 backend, against two baselines measured in the same run (a bare binary-heap event "
     "queue and a plain Asio `co_await post` on a strand). Each ratio's two sides run in alternating "
     "rounds and each keeps its best round; thread-CPU time is the figure to compare, wall time is "
     "printed beside it. The flatness rows (and the plot) launch 10^6 tasks over 1 to 1,024 streams, "
     "and 10^3 to 10^7 tasks queued on one stream before the run, each point on a fresh system "
     "(so the smallest sizes include growing the pools), beside a bare heap holding as many events."),
    ("graph_replay", [],
     "What launching a captured `stream_graph` saves against launching the same kernels call by "
     "call: ResNet-50 v1.5 forward pass and training step (FP16, timing-only, one ascend910) at "
     "batch 1 to 256, with the runtime's own launch cost (2.5 us) and with 10 us standing for a "
     "framework's eager dispatch. Step times are simulated (deterministic); host CPU per kernel is "
     "thread CPU, best of three rounds. The last rows: the host CPU to change one kernel of the "
     "training step's graph, by a new capture and `stream_graph::update` or by a task update of a "
     "task group that holds the kernel."),
    ("kernel_roofline", [],
     "The cost model against its oracles: GEMMs and ResNet-50 convolutions on ascend910, as a "
     "fraction of peak and against the cube floor and the roofline."),
    ("sim_speed", [],
     "How fast the simulator simulates: ResNet-50 training steps (batch 256, FP16, timing-only) on "
     "1, 8, 64, 256 and 1,024 devices (one stream each; one step at 64 devices and more, every "
     "kernel queued before the run, launched from the model's shared descriptors, with the "
     "data-parallel gradient AllReduce over all devices); wall time per simulated device-step, "
     "first run and best of three."),
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
     "per schedule and optimisation level, memory reuse off and on; a data-parallel MLP training "
     "step on 8 ranks with its gradients all-reduced inside the run (`compile_options::all_reduce`) "
     "in backward and in forward order; ResNet-50 inference at batch 1 call by call and as a "
     "captured graph (`compile_options::capture_graph`), one run and 16 batches, with and without "
     "`enable_overlap`."),
    ("fault_campaign", [],
     "Seeded fault-injection runs of a data-parallel training loop: faults injected, detected, "
     "recovered, fatal, silent corruptions and virtual time lost."),
]


def rows_of(doc):
    if isinstance(doc.get("rows"), list) and all(isinstance(r, dict) and "key" in r for r in doc["rows"]):
        return [(r.get("key", ""), r.get("value"), r.get("unit", ""), r.get("note", "")) for r in doc["rows"]]
    return [(k, v, "", "") for k, v in doc.items()
            if k not in ("benchmark", "command", "measured") and not isinstance(v, (dict, list))]


def flatten(record, prefix=""):
    """A record with nested objects as one row: {"a": {"b": 1}} -> {"a.b": 1}."""
    out = {}
    for k, v in record.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def record_table(records):
    """Markdown lines of a table with one row per record (nested objects flattened), its columns
    in first-seen order."""
    rows = [flatten(r) for r in records]
    cols = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |")
    return lines + [""]


def fmt(v):
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return f"{int(v):,}"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) >= 0.001 else f"{v:.3e}"
    return str(v)


def flatness_svg(doc, path):
    """Draws stream_overhead's flatness rows (flat_streams_S_*, flat_queued_N_*) as two log-log
    panels, runtime beside the bare heap at the same depth. Returns False when there are none."""
    import math
    series = {}
    for key, value, _, _ in rows_of(doc):
        for kind in ("streams", "queued"):
            prefix = f"flat_{kind}_"
            if key.startswith(prefix) and key.endswith("_cpu_ns") and isinstance(value, (int, float)):
                rest = key[len(prefix):-len("_cpu_ns")]
                heap = rest.endswith("_heap")
                size = int(rest[:-len("_heap")] if heap else rest)
                series.setdefault(kind, {}).setdefault("heap" if heap else "runtime", []).append((size, value))
    if not series:
        return False
    w, h, pad = 360, 260, 50
    panels = [("streams", "streams (10^6 tasks)"), ("queued", "tasks queued on 1 stream")]
    colors = {"runtime": "#d62728", "heap": "#1f77b4"}
    labels = {"runtime": "npurt fire-and-forget", "heap": "bare binary heap, same depth"}
    ys = [v for k in series.values() for pts in k.values() for _, v in pts if v > 0]
    y0 = 10 ** math.floor(math.log10(min(ys)))
    y1 = 10 ** math.ceil(math.log10(max(ys)))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w + 20}" height="{h + 40}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{2 * w + 20}" height="{h + 40}" fill="white"/>']
    for i, (kind, title) in enumerate(panels):
        if kind not in series:
            continue
        ox = 10 + i * w
        xs = [x for pts in series[kind].values() for x, _ in pts]
        x0, x1 = min(xs), max(xs)
        if x0 == x1:
            x1 = x0 * 10

        def px(x):
            return ox + pad + (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) * (w - pad - 20)

        def py(y):
            return 20 + (h - pad) * (1 - (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)))

        out.append(f'<text x="{ox + w / 2}" y="14" text-anchor="middle">ns per task (thread CPU) against {title}</text>')
        out.append(f'<line x1="{ox + pad}" y1="{py(y0)}" x2="{ox + w - 20}" y2="{py(y0)}" stroke="black"/>')
        out.append(f'<line x1="{ox + pad}" y1="{py(y0)}" x2="{ox + pad}" y2="{py(y1)}" stroke="black"/>')
        e = math.floor(math.log10(y0))
        while 10 ** e <= y1 * 1.0001:
            y = py(10 ** e)
            out.append(f'<line x1="{ox + pad - 4}" y1="{y}" x2="{ox + w - 20}" y2="{y}" stroke="#ddd"/>')
            out.append(f'<text x="{ox + pad - 6}" y="{y + 4}" text-anchor="end">{10 ** e:g}</text>')
            e += 1
        for x in sorted(set(xs)):
            out.append(f'<text x="{px(x)}" y="{py(y0) + 14}" text-anchor="middle">{x:g}</text>')
        for name, pts in sorted(series[kind].items()):
            pts = sorted(pts)
            d = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in pts if v > 0)
            out.append(f'<polyline points="{d}" fill="none" stroke="{colors[name]}" stroke-width="2"/>')
            for x, v in pts:
                if v > 0:
                    out.append(f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="3" fill="{colors[name]}"/>')
    for j, name in enumerate(("runtime", "heap")):
        out.append(f'<rect x="{20 + j * 240}" y="{h + 18}" width="12" height="3" fill="{colors[name]}"/>')
        out.append(f'<text x="{36 + j * 240}" y="{h + 23}">{labels[name]}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="Meson build directory with bench/")
    ap.add_argument("--from", dest="src", help="read NAME.json from this folder instead of running")
    ap.add_argument("--only", help="comma-separated benchmark names")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    unknown = sorted(only - {name for name, _, _ in BENCHES}) if only else []
    if unknown:
        ap.error(f"--only: no benchmark named {', '.join(unknown)} (known: {', '.join(n for n, _, _ in BENCHES)})")
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
           "by hand. Every program below prints its table and, with `--json PATH`, writes it (`bench/trace_summarize`,",
           "the profiler's cost against the size of a trace, does too but is not on this page); a `--json` path that cannot be written is refused before the run. Speed",
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
            out += record_table(rows)
            flat = [(k, v, "", "") for k, v in doc.items()
                    if k not in ("benchmark", "command", "measured", "rows") and not isinstance(v, (dict, list))]
        else:
            flat = rows_of(doc)
        # Other lists of records (the allocator's cached path and replays, the planner's
        # instances): a table each, under its name.
        for k, v in doc.items():
            if k != "rows" and isinstance(v, list) and v and all(isinstance(r, dict) for r in v):
                out += [f"`{k}`:", ""] + record_table(v)
        if name == "stream_overhead" and flatness_svg(doc, os.path.join(ROOT, "docs", "stream_overhead_flatness.svg")):
            out += ["![cost per task against streams and queued tasks](stream_overhead_flatness.svg)", ""]
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
