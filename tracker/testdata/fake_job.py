#!/usr/bin/env python3
"""A stand-in kvtrain program for testing the launcher's mechanics. The
scheduler binds port 0, reports it through KVTRAIN_SCHEDULER_PORT_FILE and
waits for every server and worker to check in; they print what the test asks
and exit as told by their flags."""

import argparse
import hashlib
import json
import os
import signal
import socket
import sys
import time


def scheduler(expected):
    srv = socket.socket()
    srv.bind((os.environ["DMLC_PS_ROOT_URI"], 0))
    srv.listen(64)
    with open(os.environ["KVTRAIN_SCHEDULER_PORT_FILE"] + ".tmp", "w") as f:
        f.write(str(srv.getsockname()[1]))
    os.rename(os.environ["KVTRAIN_SCHEDULER_PORT_FILE"] + ".tmp",
              os.environ["KVTRAIN_SCHEDULER_PORT_FILE"])
    print("scheduler listening", flush=True)
    conns = []
    while len(conns) < expected:
        c, _ = srv.accept()
        conns.append(c)
    for c in conns:
        c.sendall(b"go\n")
        c.close()
    print("scheduler: all %d nodes checked in" % expected, flush=True)


def report_key():
    """How this process got the job key: from a file (its mode and its
    directory's), the environment, or not at all; and a digest of it."""
    path = os.environ.get("KVTRAIN_JOB_KEY_FILE")
    if path:
        with open(path) as f:
            key = f.read().strip()
        how = "file mode=%04o dir_mode=%04o" % (os.stat(path).st_mode & 0o7777,
                                                os.stat(os.path.dirname(path)).st_mode & 0o7777)
    elif os.environ.get("KVTRAIN_JOB_KEY"):
        key = os.environ["KVTRAIN_JOB_KEY"]
        how = "env"
    else:
        print("key: none", flush=True)
        return
    print("key: %s len=%d sha=%s" % (how, len(key), hashlib.sha256(key.encode()).hexdigest()[:16]),
          flush=True)


def count_sigterms(path):
    """Appends a line to `path` for each SIGTERM and exits 1 s after the
    first, so that the test sees how many came."""
    first = []

    def on_term(_sig, _frame):
        with open(path, "a") as f:
            f.write("SIGTERM\n")
        first.append(time.monotonic())

    signal.signal(signal.SIGTERM, on_term)
    return lambda: bool(first) and time.monotonic() > first[0] + 1


def node(args):
    role = os.environ["DMLC_ROLE"]
    rank = int(os.environ["DMLC_RANK"])
    done = lambda: False  # noqa: E731
    if args.count_sigterms:
        done = count_sigterms(os.path.join(args.count_sigterms, "%s-%d" % (role, rank)))
    for name in args.print_env:
        print("%s=%s" % (name, os.environ.get(name, "<unset>")), flush=True)
    for text in args.say:
        print("say=%s" % json.dumps(text), flush=True)
    if args.print_cwd:
        print("cwd=%s" % json.dumps(os.getcwd()), flush=True)
    if args.report_key:
        report_key()
    print("stderr line from %s %d" % (role, rank), file=sys.stderr, flush=True)
    me = "%s:%d" % (role, rank)
    if me in args.die_first_run and "KVTRAIN_RESTART" not in os.environ:
        os.kill(os.getpid(), signal.SIGKILL)
    c = socket.create_connection((os.environ["DMLC_PS_ROOT_URI"],
                                  int(os.environ["DMLC_PS_ROOT_PORT"])))
    c.recv(16)
    if me in args.fail:
        print("failing on purpose", flush=True)
        sys.exit(args.fail_code)
    if me in args.leave:
        time.sleep(0.3)
        print("leaving on my own")  # flushed at exit only
        sys.exit(1)
    if me in args.hang or "*" in args.hang:
        while not done():
            time.sleep(0.1)
        sys.exit(128 + signal.SIGTERM)
    print("%s %d done" % (role, rank), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--marker", default="", help="a token tests find in ps")
    ap.add_argument("--print-env", action="append", default=[])
    ap.add_argument("--say", action="append", default=[],
                    help="print this argument as received (JSON)")
    ap.add_argument("--print-cwd", action="store_true")
    ap.add_argument("--count-sigterms", metavar="DIR",
                    help="log each SIGTERM in DIR/ROLE-RANK, exit 1 s after the first")
    ap.add_argument("--fail", action="append", default=[], help="role:rank")
    ap.add_argument("--fail-code", type=int, default=3)
    ap.add_argument("--hang", action="append", default=[], help="role:rank or *")
    ap.add_argument("--leave", action="append", default=[],
                    help="role:rank: exits 1 on its own 0.3 s after the start, its last line "
                         "left in stdout's buffer (as a node that reports a peer's failure)")
    ap.add_argument("--die-first-run", action="append", default=[], metavar="ROLE:RANK",
                    help="dies by SIGKILL before checking in, unless started again by "
                         "the launcher (KVTRAIN_RESTART set)")
    ap.add_argument("--report-key", action="store_true",
                    help="print how the job key arrived and its digest")
    args = ap.parse_args()
    if os.environ["DMLC_ROLE"] == "scheduler":
        scheduler(int(os.environ["DMLC_NUM_WORKER"]) + int(os.environ["DMLC_NUM_SERVER"]))
    else:
        node(args)


if __name__ == "__main__":
    main()
