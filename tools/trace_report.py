#!/usr/bin/env python3
"""Merges a job's KVTRAIN_TRACE files into one Chrome trace and prints where
a training step's time goes.

  KVTRAIN_TRACE=/tmp/t/job tracker/launch.py ... --env KVTRAIN_TRACE=/tmp/t/job ...
  tools/trace_report.py /tmp/t/job [--out merged.json]

The breakdown covers the steps after the first `--skip` (default: a fifth):
per step (from its first forward op to the next step's), the compute
(forward and backward ops on the worker's compute thread), the tail after
backward (the next step's first forward op minus the end of the backward
pass: the communication that compute did not hide), with several workers
how far apart their backward passes end in each step, and per key
the request's stages: issued -> the server starts handling it -> the server
is done (reply handed to the transport) -> the worker's wait returns.
Python stdlib only."""

import argparse
import glob
import json
import statistics
import sys


def load(prefix):
    files = sorted(glob.glob(prefix + ".*.json"))
    if not files:
        sys.exit("trace_report: no files %s.*.json (was KVTRAIN_TRACE=%s set for every "
                 "process?)" % (prefix, prefix))
    events, names = [], {}
    for path in files:
        with open(path) as f:
            try:
                data = json.load(f)
            except ValueError as e:
                sys.exit("trace_report: %s is not a complete trace (%s): did the process "
                         "exit cleanly?" % (path, e))
        for e in data["traceEvents"]:
            if e.get("ph") == "M":
                names[e["pid"]] = e["args"]["name"]
            else:
                events.append(e)
    return events, names


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summary(values):
    if not values:
        return "      -"
    return "%7.0f %7.0f %7.0f" % (statistics.median(values), pct(values, 0.9), max(values))


def step_windows(evs):
    """(begin, end) of each training step of one worker's time-sorted events:
    from the first forward op after a backward pass (or the first forward op
    of all) to the next such op. The trainer keeps two steps in flight, so
    its own spans do not bound a step; the compute thread's ops do."""
    starts, after_backward = [], True
    for e in evs:
        if e.get("cat") != "engine":
            continue
        if e["name"] == "backward pass":
            after_backward = True
        elif after_backward and e["name"].endswith(" forward"):
            starts.append(e["ts"])
            after_backward = False
    return list(zip(starts, starts[1:]))


def report(events, names, skip_fraction):
    by_pid = {}
    for e in events:
        by_pid.setdefault(e["pid"], []).append(e)
    workers = sorted(p for p, n in names.items() if n.startswith("worker"))
    if not workers:
        workers = [p for p in by_pid if any(e["name"] == "step" for e in by_pid[p])]
    handles = {}  # (worker name, ts) -> (begin, end)
    replies = {}  # (worker name, ts) -> when the server handed its reply to the transport
    answered = {}  # (pid, ts) -> when the worker had the whole answer
    for e in events:
        if e.get("cat") == "van" and e["name"] == "answered":
            answered[(e["pid"], e.get("args", {}).get("n"))] = e["ts"]
        if e.get("cat") == "server" and e["name"].startswith("handle from "):
            sender = e["name"][len("handle from "):].split(" (")[0]
            handles[(sender, e.get("args", {}).get("n"))] = (e["ts"], e["ts"] + e["dur"])
        if e.get("cat") == "server" and e["name"].startswith("reply to "):
            sender = e["name"][len("reply to "):].split(" (")[0]
            replies[(sender, e.get("args", {}).get("n"))] = e["ts"]
    backward_ends = {}  # worker name -> when each counted step's backward ended
    for pid in workers:
        evs = sorted(by_pid.get(pid, []), key=lambda e: e["ts"])
        wname = names.get(pid, "pid %d" % pid)
        steps = step_windows(evs)
        steps = steps[int(len(steps) * skip_fraction):]
        if not steps:
            print("%s: no training steps traced" % wname)
            continue
        step_us, compute_us, tail_us = [], [], []
        stages = {}  # key -> {stage: [us]}
        i = 0
        for t0, t1 in steps:
            while i < len(evs) and evs[i]["ts"] < t0:
                i += 1
            j = i
            compute, bwd_end, issued = 0, None, {}
            while j < len(evs) and evs[j]["ts"] <= t1:
                e = evs[j]
                n = e["name"]
                if e.get("cat") == "engine" and (n.endswith(" forward") or n.endswith(" backward")):
                    compute += e["dur"]
                if n == "backward pass":
                    bwd_end = e["ts"]
                # A request issued: "push KEY", "pull KEY", "pushpull KEY" (or
                # "... bucket of N"); "bucket KEY" marks a key joining a bucket,
                # its number the step's, not a request's.
                if (e.get("cat") == "kvstore" and e.get("ph") == "i"
                        and n.split(" ", 1)[0] in ("push", "pull", "pushpull")):
                    key = n.split(" ", 1)[1]
                    issued[e.get("args", {}).get("n")] = (key, e["ts"])
                if e.get("cat") == "kvstore" and n.startswith("wait "):
                    ts = e.get("args", {}).get("n")
                    if ts in issued:
                        key, t_issue = issued[ts]
                        h = handles.get((wname, ts))
                        st = stages.setdefault(key, {})
                        done = e["ts"] + e["dur"]
                        got = answered.get((pid, ts), done)
                        if h:
                            # The reply mark, taken before the send: the
                            # worker may have the answer before the handler's
                            # span ends (the dist_sync answer of an earlier
                            # push comes from a later handler: its span).
                            out = replies.get((wname, ts), h[1])
                            st.setdefault("to server", []).append(h[0] - t_issue)
                            st.setdefault("server", []).append(out - h[0])
                            st.setdefault("back", []).append(got - out)
                        st.setdefault("round trip", []).append(got - t_issue)
                        st.setdefault("answer to wait's end", []).append(max(0, done - got))
                j += 1
            step_us.append(t1 - t0)
            compute_us.append(compute)
            backward_ends.setdefault(wname, []).append(bwd_end)
            if bwd_end is not None:
                tail_us.append(t1 - bwd_end)
        print("%s: %d steps (after skipping the first %.0f%%); microseconds: median, p90, max"
              % (wname, len(steps), 100 * skip_fraction))
        print("  %-34s %s" % ("step", summary(step_us)))
        print("  %-34s %s" % ("compute (forward + backward ops)", summary(compute_us)))
        print("  %-34s %s" % ("after backward (not hidden)", summary(tail_us)))
        for key in sorted(stages, key=lambda k: -statistics.median(stages[k]["round trip"])):
            st = stages[key]
            for stage in ("to server", "server", "back", "round trip", "answer to wait's end"):
                if stage in st:
                    print("  %-34s %s" % ("%s: %s" % (key, stage), summary(st[stage])))
        print()
    apart = backward_spread(backward_ends)
    if apart:
        print("workers: %d steps each; microseconds: median, p90, max" % len(apart))
        print("  %-34s %s" % ("backward ends apart (first to last)", summary(apart)))
        print()


def backward_spread(backward_ends):
    """For each step, how far apart the workers' backward passes ended (the
    last minus the first): what a dist_sync step waits for its slowest
    worker. Empty unless at least two workers counted the same number of
    steps, each with its backward pass. The timestamps are each host's
    CLOCK_MONOTONIC: meaningful when the workers share a host (or an
    emulated cluster's one machine)."""
    ends = list(backward_ends.values())
    if len(ends) < 2 or len({len(e) for e in ends}) != 1:
        return []
    return [max(step) - min(step) for step in zip(*ends) if None not in step]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prefix", help="the KVTRAIN_TRACE prefix the job ran with")
    ap.add_argument("--out", help="write the merged Chrome trace here")
    ap.add_argument("--skip", type=float, default=0.2,
                    help="fraction of each worker's first steps not counted (warm-up)")
    args = ap.parse_args(argv)
    events, names = load(args.prefix)
    if args.out:
        meta = [{"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": n}}
                for p, n in names.items()]
        with open(args.out, "w") as f:
            json.dump({"traceEvents": meta + events}, f)
    report(events, names, args.skip)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
