#!/usr/bin/env python3
"""Summarises a `bazel test` run from its build-event JSON file.

Counts test cases from each target's test.xml (gtest and kvtrain's Python
runner write one testcase per case; other targets count as one case), lists
failed and skipped cases, and ends with the line `N passed, N failed`.
A target that failed to build or run counts as failed even with no cases.
With --fuzz-results, each fuzz target run by tools/fuzz.sh (a line
`<label> PASSED|FAILED`) counts as one more case; with --check-results, each
check script run by tools/test.sh (the same line format) does too.
Exit status: 0 when nothing failed, 1 otherwise.
"""

import argparse
import json
import sys
import urllib.parse
import xml.etree.ElementTree as ET


def read_events(path):
    events = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                events.append(json.loads(line))
    return events


def xml_path(test_result):
    for out in test_result.get("testActionOutput", []):
        if out.get("name") == "test.xml":
            uri = out.get("uri", "")
            if uri.startswith("file://"):
                return urllib.parse.unquote(uri[len("file://"):])
    return None


def cases_from_xml(path):
    """Yields (name, outcome) with outcome in passed/failed/skipped."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return
    for case in root.iter("testcase"):
        name = case.get("classname", "") + "." + case.get("name", "")
        if case.find("failure") is not None or case.find("error") is not None:
            yield name, "failed"
        elif (case.get("result") == "skipped" or case.get("status") == "notrun"
              or case.find("skipped") is not None):
            yield name, "skipped"
        else:
            yield name, "passed"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bep", required=True, help="build event JSON file")
    ap.add_argument("--fuzz-results", help="tools/fuzz.sh --results file")
    ap.add_argument("--check-results",
                    help="`<label> PASSED|FAILED` lines of tools/test.sh's checks")
    args = ap.parse_args()

    events = read_events(args.bep)
    tests = {}      # label -> overall status
    xmls = {}       # label -> [test.xml paths]
    for ev in events:
        ident = ev.get("id", {})
        if "targetConfigured" in ident:
            conf = ev.get("configured", {})
            if conf.get("testSize") or conf.get("targetKind", "").endswith("_test rule"):
                tests.setdefault(ident["targetConfigured"]["label"], "NO STATUS")
        elif "targetCompleted" in ident:
            label = ident["targetCompleted"]["label"]
            if label in tests and (ev.get("aborted") or
                                   not ev.get("completed", {}).get("success", False)):
                tests[label] = "FAILED TO BUILD"
        elif "testSummary" in ident:
            label = ident["testSummary"]["label"]
            tests[label] = ev.get("testSummary", {}).get("overallStatus", "NO STATUS")
        elif "testResult" in ident:
            label = ident["testResult"]["label"]
            path = xml_path(ev.get("testResult", {}))
            if path:
                xmls.setdefault(label, []).append(path)

    passed = failed = skipped = 0
    failed_names, skipped_names = [], []
    for label in sorted(tests):
        status = tests[label]
        cases = []
        for path in xmls.get(label, []):
            cases.extend(cases_from_xml(path))
        ok = status in ("PASSED", "FLAKY")
        if not cases:
            cases = [(label, "passed" if ok else "failed")]
        elif not ok and not any(o == "failed" for _, o in cases):
            # Crashed, timed out or failed outside any case.
            cases.append((label + " (" + status.lower() + ")", "failed"))
        n_pass = sum(1 for _, o in cases if o == "passed")
        n_fail = sum(1 for _, o in cases if o == "failed")
        n_skip = sum(1 for _, o in cases if o == "skipped")
        passed += n_pass
        failed += n_fail
        skipped += n_skip
        failed_names += [label + ": " + n for n, o in cases if o == "failed"]
        skipped_names += [label + ": " + n for n, o in cases if o == "skipped"]
        note = "%d passed" % n_pass
        if n_fail:
            note += ", %d failed" % n_fail
        if n_skip:
            note += ", %d skipped" % n_skip
        print("%-60s %-16s %s" % (label, status, note))

    bazel_targets = len(tests)
    for path, what, verb, source in (
            (args.check_results, "checked", "check", "tools/test.sh checks"),
            (args.fuzz_results, "fuzzed", "fuzzing", "tools/fuzz.sh")):
        if not path:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                lines = [l.split() for l in f if l.strip()]
        except OSError:
            lines = [[source, "NO RESULTS"]]
        for fields in lines:
            label, status = fields[0], " ".join(fields[1:])
            tests[label] = status
            if status == "PASSED":
                passed += 1
            else:
                failed += 1
                failed_names.append(label + ": " + verb + " " + status.lower())
            print("%-60s %-16s %s" % (label, status, what))

    print()
    print("%d test targets, %d test cases" % (len(tests), passed + failed + skipped))
    if skipped_names:
        print("%d skipped (reported, not counted as passed):" % skipped)
        by_target = {}
        for n in skipped_names:
            label, case = n.split(": ", 1)
            by_target.setdefault(label, []).append(case)
        for label, cases in sorted(by_target.items()):
            shown = ", ".join(cases[:3]) + (", ..." if len(cases) > 3 else "")
            print("  skipped %d in %s: %s" % (len(cases), label, shown))
    for n in failed_names:
        print("  FAILED " + n)
    if not bazel_targets:
        print("no test targets were found")
        failed = max(failed, 1)
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
