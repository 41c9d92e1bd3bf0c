#!/usr/bin/env python3
"""A stand-in kvtrain program for testing the launcher's mechanics. The
scheduler binds port 0, reports it through KVTRAIN_SCHEDULER_PORT_FILE and
waits for every server and worker to check in; they print what the test asks
and exit as told by their flags."""

import argparse
import os
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


def node(args):
    role = os.environ["DMLC_ROLE"]
    rank = int(os.environ["DMLC_RANK"])
    for name in args.print_env:
        print("%s=%s" % (name, os.environ.get(name, "<unset>")), flush=True)
    print("stderr line from %s %d" % (role, rank), file=sys.stderr, flush=True)
    c = socket.create_connection((os.environ["DMLC_PS_ROOT_URI"],
                                  int(os.environ["DMLC_PS_ROOT_PORT"])))
    c.recv(16)
    me = "%s:%d" % (role, rank)
    if me in args.fail:
        print("failing on purpose", flush=True)
        sys.exit(args.fail_code)
    if me in args.hang or "*" in args.hang:
        while True:
            time.sleep(1)
    print("%s %d done" % (role, rank), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--marker", default="", help="a token tests find in ps")
    ap.add_argument("--print-env", action="append", default=[])
    ap.add_argument("--fail", action="append", default=[], help="role:rank")
    ap.add_argument("--fail-code", type=int, default=3)
    ap.add_argument("--hang", action="append", default=[], help="role:rank or *")
    args = ap.parse_args()
    if os.environ["DMLC_ROLE"] == "scheduler":
        scheduler(int(os.environ["DMLC_NUM_WORKER"]) + int(os.environ["DMLC_NUM_SERVER"]))
    else:
        node(args)


if __name__ == "__main__":
    main()
