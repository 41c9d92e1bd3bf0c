"""Hostfile parsing and process placement for tracker/launch.py.

A hostfile has one host per line: `host`, `host:sshport` or `host slots=N`
(also `host:sshport slots=N`). `#` starts a comment; blank lines are ignored.
A host name may not begin with `-`: ssh, rsync and mpirun would read it as an
option (`-Fconfig` makes ssh read a config whose ProxyCommand runs here).
"""

import re


class HostfileError(ValueError):
    """A hostfile line that cannot be used; the message names file and line."""


class Host:
    """One usable host: its name as written, ssh port (None: default) and slots
    (None: no limit)."""

    def __init__(self, name, port=None, slots=None):
        self.name = name
        self.port = port
        self.slots = slots

    def __repr__(self):
        return "Host(%r, port=%r, slots=%r)" % (self.name, self.port, self.slots)

    def __eq__(self, other):
        return (self.name, self.port, self.slots) == (other.name, other.port, other.slots)


_HOST_RE = re.compile(r"^(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.\-]+)(?::(\d+))?$")


def parse_hostfile_text(text, filename="hostfile"):
    """Returns the list of Hosts in `text`; raises HostfileError."""
    hosts = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = "%s:%d" % (filename, lineno)
        parts = line.split()
        if parts[0].startswith("-"):
            raise HostfileError("%s: host %r begins with '-', which ssh and rsync would "
                                "take as an option" % (where, parts[0]))
        m = _HOST_RE.match(parts[0])
        if not m:
            raise HostfileError("%s: cannot parse host %r (expected host, "
                                "host:sshport or host slots=N)" % (where, parts[0]))
        name = m.group(1).strip("[]")
        port = int(m.group(2)) if m.group(2) else None
        if port is not None and not 0 < port < 65536:
            raise HostfileError("%s: ssh port %d out of range" % (where, port))
        slots = None
        for opt in parts[1:]:
            key, _, value = opt.partition("=")
            if key not in ("slots", "max_slots", "max-slots"):
                raise HostfileError("%s: unknown option %r (expected slots=N)" % (where, opt))
            if not value.isdigit() or int(value) < 1:
                raise HostfileError("%s: %s must be a positive integer, got %r"
                                    % (where, key, value))
            slots = int(value)
        hosts.append(Host(name, port, slots))
    if not hosts:
        raise HostfileError("%s: no hosts listed" % filename)
    return hosts


def parse_hostfile(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise HostfileError("cannot read hostfile %s: %s" % (path, e.strerror)) from e
    return parse_hostfile_text(text, path)


def place(hosts, num_servers, num_workers):
    """Assigns processes to hosts: servers first, then workers, round-robin
    over the hosts. A host with slots=N takes at most N processes; hosts
    without slots take any number. Returns [(role, rank, Host)] in launch
    order; raises HostfileError when the slots cannot hold the job."""
    needed = num_servers + num_workers
    if all(h.slots is not None for h in hosts):
        capacity = sum(h.slots for h in hosts)
        if capacity < needed:
            raise HostfileError(
                "the job needs %d processes (%d servers, %d workers) but the "
                "hostfile's hosts offer %d slots in total"
                % (needed, num_servers, num_workers, capacity))
    used = [0] * len(hosts)
    roles = [("server", r) for r in range(num_servers)] + \
            [("worker", r) for r in range(num_workers)]
    placement = []
    cursor = 0
    for role, rank in roles:
        for _ in range(len(hosts)):
            h = hosts[cursor % len(hosts)]
            i = cursor % len(hosts)
            cursor += 1
            if h.slots is None or used[i] < h.slots:
                used[i] += 1
                placement.append((role, rank, h))
                break
    return placement
