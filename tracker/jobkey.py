"""The job's CURVE key as launch.py makes and hands it out: 32 random bytes
(the CURVE secret key; every process derives the public key itself) as Z85
text (ZeroMQ RFC 32), written to 0600 files, never put on a command line."""

import os
import stat

KEY_VAR = "KVTRAIN_JOB_KEY"
KEY_FILE_VAR = "KVTRAIN_JOB_KEY_FILE"
INSECURE_VAR = "KVTRAIN_INSECURE"
JOB_ID_VAR = "KVTRAIN_JOB_ID"

_Z85 = ("0123456789abcdefghijklmnopqrstuvwxyz"
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")


class KeyError_(RuntimeError):
    """A key that cannot be used; the message names the variable or file."""


def z85_encode(data):
    if len(data) % 4:
        raise ValueError("Z85 needs a multiple of 4 bytes, got %d" % len(data))
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i:i + 4], "big")
        out.append("".join(_Z85[(value // 85 ** k) % 85] for k in (4, 3, 2, 1, 0)))
    return "".join(out)


def z85_decode(text):
    if len(text) % 5:
        raise ValueError("Z85 text must be a multiple of 5 long, got %d" % len(text))
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for c in text[i:i + 5]:
            d = _Z85.find(c)
            if d < 0:
                raise ValueError("not a Z85 character: %r" % c)
            value = value * 85 + d
        if value >= 1 << 32:
            raise ValueError("Z85 group %r is out of range" % text[i:i + 5])
        out += value.to_bytes(4, "big")
    return bytes(out)


def new_secret_key():
    """A fresh job key: Z85 text of 32 bytes from os.urandom."""
    return z85_encode(os.urandom(32))


def check_key_text(text, source):
    try:
        ok = len(text) == 40 and len(z85_decode(text)) == 32
    except ValueError:
        ok = False
    if not ok:
        raise KeyError_("%s: not a job key: expected 40 characters of Z85 text, "
                        "got %d characters" % (source, len(text)))
    return text


def read_key_file(path):
    """The key in `path`, which must give the group and others no access."""
    try:
        mode = os.stat(path).st_mode
        if mode & 0o077:
            raise KeyError_(
                "%s=%s: the job key file has mode %04o, which lets other users "
                "read it; it must be 0600 or stricter (chmod 600 %s)"
                % (KEY_FILE_VAR, path, stat.S_IMODE(mode), path))
        with open(path) as f:
            text = f.read().strip()
    except OSError as e:
        raise KeyError_("%s=%s: cannot read the job key file: %s"
                        % (KEY_FILE_VAR, path, e.strerror))
    return check_key_text(text, "%s=%s" % (KEY_FILE_VAR, path))


def write_key_file(directory, key):
    """Writes `key` to a new 0600 file in `directory` and returns its path."""
    path = os.path.join(directory, "job.key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return path


def key_from_environ(environ):
    """The user's own key (KVTRAIN_JOB_KEY, else KVTRAIN_JOB_KEY_FILE), or
    None when neither is set."""
    if environ.get(KEY_VAR):
        return check_key_text(environ[KEY_VAR].strip(), KEY_VAR)
    if environ.get(KEY_FILE_VAR):
        return read_key_file(environ[KEY_FILE_VAR])
    return None


def insecure_requested(environ):
    return environ.get(INSECURE_VAR, "").strip().lower() in ("1", "true", "yes", "on")


def new_job_id():
    return os.urandom(8).hex()
