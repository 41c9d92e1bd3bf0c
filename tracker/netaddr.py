"""Network addresses for tracker/launch.py: an interface's IPv4 address and
the rule that picks the scheduler's address."""

import fcntl
import ipaddress
import socket
import struct

_SIOCGIFADDR = 0x8915


class AddressError(ValueError):
    """No usable address; the message says why."""


def interface_names():
    return sorted(name for _, name in socket.if_nameindex())


def interface_ipv4(name):
    """The IPv4 address of interface `name`; AddressError if it has none or
    does not exist (the message lists the interfaces that exist)."""
    if name not in interface_names():
        raise AddressError("DMLC_INTERFACE=%s: no such interface; interfaces "
                           "here: %s" % (name, ", ".join(interface_names())))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR,
                             struct.pack("256s", name.encode()[:15]))
    except OSError as e:
        raise AddressError("DMLC_INTERFACE=%s: the interface has no IPv4 "
                           "address (%s)" % (name, e.strerror)) from e
    finally:
        s.close()
    return socket.inet_ntoa(packed[20:24])


def route_source(host, port=22):
    """The local IPv4 address the kernel would use to reach `host` (a UDP
    connect: no packet is sent). Raises AddressError if `host` does not
    resolve or is unreachable."""
    try:
        target = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_DGRAM)[0][4]
    except socket.gaierror as e:
        raise AddressError("cannot resolve host %s: %s" % (host, e.strerror)) from e
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(target)
        return s.getsockname()[0]
    except OSError as e:
        raise AddressError("no route to host %s: %s" % (host, e.strerror)) from e
    finally:
        s.close()


def is_loopback(addr):
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


def scheduler_address(host_ip, interface, remote_hosts):
    """The address the scheduler advertises, by this rule:
    1. --host-ip if given;
    2. else the IPv4 address of DMLC_INTERFACE if set;
    3. else, with no remote hosts, 127.0.0.1;
    4. else the local address that routes to the first remote host.
    A loopback address is refused when any host is not loopback: remote
    processes could never reach it."""
    if host_ip:
        addr = host_ip
    elif interface:
        addr = interface_ipv4(interface)
    else:
        remote = [h for h in remote_hosts if not is_loopback(h)]
        addr = route_source(remote[0]) if remote else "127.0.0.1"
    if is_loopback(addr) and any(not is_loopback(h) for h in remote_hosts):
        raise AddressError(
            "the scheduler's address would be %s, which the remote hosts (%s) "
            "cannot reach; pass --host-ip or set DMLC_INTERFACE"
            % (addr, ", ".join(h for h in remote_hosts if not is_loopback(h))))
    return addr
