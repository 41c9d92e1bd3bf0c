"""SIGKILL servers of a dist_sync MLP job started by tracker/launch.py with
--server-replicas: the job goes on without restarting anything and ends with
the weights and optimizer states of a run that lost nothing, bit for bit.

2 workers and 3 servers; killed in the middle of epoch 2, when epoch 1's
checkpoint appears (the servers' optimizer states being gathered), and two
servers one after the other with two replicas. Both copies of a key range
gone: the job ends, naming the dead servers. The pause each death causes is
printed (bench/dist_train_bench.py measures what replication costs)."""

import re

from tests.faults.train_job_testlib import TrainJobTest
from tracker.launch_testlib import read_until
from tools import pyunit


class FailoverTest(TrainJobTest):
    EPOCHS = 4

    @classmethod
    def job(cls, replicas):
        # (R, K): with --max-restarts K, dead servers are started again.
        replicas, restarts = replicas if isinstance(replicas, tuple) else (replicas, 0)
        return ["-n", "2", "-s", "3", "--server-replicas", str(replicas),
                "--max-restarts", str(restarts), "--env", "KVTRAIN_STARTUP_TIMEOUT=120"]

    def run_job(self, replicas, kills, after_kill=None):
        """Runs a job, killing at each (output text or "file:" checkpoint
        suffix, server rank) in turn; returns (exit code, output, model prefix)."""
        code, out, prefix = super().run_job(replicas, kills, "server", after_kill)
        for pause in re.findall(r"resumed, answered by .* ([0-9.e-]+) s after the last word", out):
            print("pause after a server's death: %s s" % pause)
        return code, out, prefix

    def assert_went_on(self, out, rank):
        self.assertIn("server %d failed with signal SIGKILL; the job goes on without it" % rank,
                      out)
        self.assertRegex(out, r"server %d \([^)]*\) is dead: .*; the job goes on" % rank)
        self.assertIn("resumed, answered by", out)

    def test_replicas_change_nothing(self):
        code, out, prefix = self.run_job(1, [])
        self.assertEqual(code, 0, out)
        self.assert_same_result(prefix, out)

    def test_kill_a_server_mid_epoch(self):
        code, out, prefix = self.run_job(1, [("Epoch[1] Batch[40]", 1)])
        self.assertEqual(code, 0, out)
        self.assert_went_on(out, 1)
        self.assertRegex(out, r"key range 1 to server 2")
        # The epoch's line (and metrics log) counts the loss, on each worker.
        self.assertEqual(len(re.findall(r"Epoch\[1\] Train-.* servers-lost=1\.0* "
                                        r"failover-pause-seconds=[0-9.]+", out)), 2, out)
        self.assert_same_result(prefix, out)

    def test_kill_a_server_at_a_checkpoint(self):
        code, out, prefix = self.run_job(1, [("file:-0001.params", 2)])
        self.assertEqual(code, 0, out)
        self.assert_went_on(out, 2)
        self.assert_same_result(prefix, out)

    def test_kill_two_servers_with_two_replicas(self):
        code, out, prefix = self.run_job(2, [("Epoch[1] Batch[20]", 0),
                                             ("Epoch[2] Batch[20]", 2)])
        self.assertEqual(code, 0, out)
        self.assert_went_on(out, 0)
        self.assert_went_on(out, 2)
        self.assert_same_result(prefix, out)

    def test_a_server_started_again_is_a_copy_again(self):
        # Server 1 dies and comes back (--max-restarts): it copies ranges 0
        # and 1 from their primaries; then server 2, range 1's primary since
        # server 1 died, dies too, and range 1 lives on server 1 alone.
        def back(p, kill):
            if kill[1] != 1:
                return ""
            return read_until(p, "holds the key ranges it copies again", timeout=120)
        code, out, prefix = self.run_job((1, 1), [("Epoch[1] Batch[20]", 1),
                                                  ("Epoch[2] Batch[20]", 2)], back)
        self.assertEqual(code, 0, out)
        self.assertIn("server 1 failed with signal SIGKILL; starting it again (restart 1 of 1)",
                      out)
        self.assertRegex(out, r"server 1 \([^)]*\) is back \(started again, time 1\)")
        self.assertIn("server 2 failed with signal SIGKILL; starting it again", out)
        self.assert_same_result(prefix, out)

    def test_a_range_without_a_copy_ends_the_job(self):
        code, out, _ = self.run_job(1, [("Epoch[1] Batch[20]", 1),
                                        ("Epoch[2] Batch[20]", 2)])
        self.assertNotEqual(code, 0, out)
        self.assert_went_on(out, 1)
        self.assertIn("server 2 failed with signal SIGKILL; stopped every other process", out)


if __name__ == "__main__":
    pyunit.main()
