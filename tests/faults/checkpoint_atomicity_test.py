"""Checkpoint writes are atomic: a writer (checkpoint_writer) rewrites a
.params and a .states file in a loop with changing contents (each run goes on
from the version on disk) and is killed
with SIGKILL at random moments while writing. After every kill both files
load and each holds one whole version, the last one reported written or the
one after it (never a torn file, never an older one), and the leftover
temporary files are never taken for a checkpoint."""

import glob
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from tools import pyunit

WRITER = os.path.abspath("tests/faults/checkpoint_writer")
KILLS = 40


class CheckpointAtomicityTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvtrain-atomic-")
        self.prefix = self.tmp + "/m"

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self):
        r = subprocess.run([WRITER, "check", self.prefix], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        m = re.match(r"params (\d+) states (\d+)", r.stdout)
        self.assertIsNotNone(m, r.stdout)
        return int(m.group(1)), int(m.group(2))

    def test_killed_writers_leave_a_whole_checkpoint(self):
        rng = random.Random(7)
        versions = []
        for i in range(KILLS):
            with open(self.tmp + "/out.txt", "w+") as out:
                p = subprocess.Popen([WRITER, "write", self.prefix], stdout=out,
                                     stderr=subprocess.STDOUT)
                # Start-up time does not count; the first run writes a first
                # complete version, so that there is something to keep.
                want = "wrote 1" if i == 0 else "ready"
                end = time.monotonic() + 60
                while want not in open(out.name).read():
                    self.assertLess(time.monotonic(), end, "the writer is not " + want)
                    self.assertIsNone(p.poll(), open(out.name).read())
                    time.sleep(0.005)
                time.sleep(rng.uniform(0.0, 0.3))
                p.send_signal(signal.SIGKILL)
                p.wait(timeout=30)
                out.seek(0)
                log = out.read()
            self.assertEqual(p.returncode, -signal.SIGKILL, log)
            wrote = [int(v) for v in re.findall(r"wrote (\d+)", log)]
            # Each file holds the last version reported, or the next one if
            # its rename happened just before the kill. With nothing
            # reported: what the previous run left, or this run's version.
            params, states = self.check()
            self.assertLessEqual(states, params, log)  # params are written first
            if wrote:
                self.assertIn(params, (wrote[-1], wrote[-1] + 1), log)
                self.assertIn(states, (wrote[-1], wrote[-1] + 1), log)
            else:
                prev_params, prev_states = versions[-1]
                self.assertIn(params, (prev_params, prev_params + 1), log)
                self.assertTrue(states == prev_states or prev_params < states, log)
            versions.append((params, states))
        left = sorted(os.path.basename(f) for f in glob.glob(self.tmp + "/m-*"))
        checkpoints = [f for f in left if re.fullmatch(r"m-\d{4}\.(params|states)", f)]
        temps = [f for f in left if f not in checkpoints]
        print("%d kills; (params, states) versions on disk after each: %s; "
              "%d temporary files left: %s" % (KILLS, versions, len(temps), temps[:4]))
        self.assertEqual(checkpoints, ["m-0001.params", "m-0001.states"])
        for t in temps:
            self.assertRegex(t, r"^m-0001\.(params|states)\.tmp\.\d+\.[0-9a-f]{16}$")
        # Writes completed between the kills (the versions advanced) and
        # kills landed mid-write (temporary files left behind).
        self.assertGreater(len(set(v for v, _ in versions)), KILLS // 4)
        self.assertGreater(len(temps), 0)


if __name__ == "__main__":
    pyunit.main()
