"""SIGKILL workers of a dist_sync MLP job started by tracker/launch.py with
--max-restarts: the launcher starts each again, it rejoins the running job at
the step the servers are at, with its data where the dead one's was, and the
job ends with the weights and optimizer states of a run that lost nothing,
bit for bit.

2 workers and 2 servers; worker 1 killed in the middle of epoch 2, worker 0
(which initialises the keys and writes the checkpoints) too, and worker 0
again when epoch 1's checkpoint appears. Restarts used up: the job ends,
naming the worker."""

import time

from tests.faults.train_job_testlib import TrainJobTest
from tracker.launch_testlib import read_until
from tools import pyunit


class WorkerRestartTest(TrainJobTest):
    EPOCHS = 3

    @classmethod
    def job(cls, restarts):
        return ["-n", "2", "-s", "2", "--max-restarts", str(restarts),
                "--env", "KVTRAIN_STARTUP_TIMEOUT=120"]

    def run_job(self, restarts, kills):
        """Runs a job, killing the worker of each (output text or "file:"
        checkpoint suffix, worker rank, whether it comes back) in turn once
        it shows; returns (exit code, output, model prefix)."""
        def after_kill(p, kill):
            if not kill[2]:
                return ""
            killed = time.monotonic()
            # The next kill waits for the new process to be back.
            out = read_until(p, "is back (started again", timeout=120)
            # The pause: until the job's next progress line.
            out += read_until(p, "Speed:", timeout=120)
            print("pause after worker %d's death: %.2f s (to the next progress line)"
                  % (kill[1], time.monotonic() - killed))
            return out
        return super().run_job(restarts, kills, "worker", after_kill)

    def assert_came_back(self, out, rank, times=1):
        self.assertIn("worker %d failed with signal SIGKILL; starting it again (restart %d of"
                      % (rank, times), out)
        self.assertRegex(out, r"worker %d \([^)]*\) is dead: .*; the job waits up to" % rank)
        self.assertRegex(out, r"worker %d \([^)]*\) is back \(started again, time %d\)"
                         % (rank, times))
        self.assertRegex(out, r"\[worker %d\] .*started again; the job is at step \d+" % rank)

    def test_kill_worker_1_mid_epoch(self):
        code, out, prefix = self.run_job(1, [("Epoch[1] Batch[40]", 1, True)])
        self.assertEqual(code, 0, out)
        self.assert_came_back(out, 1)
        self.assert_same_result(prefix, out)

    def test_kill_worker_0_mid_epoch_and_at_a_checkpoint(self):
        # Worker 0 initialised the keys and writes every checkpoint; its
        # second life is killed as epoch 2's checkpoint appears.
        code, out, prefix = self.run_job(2, [("Epoch[1] Batch[20]", 0, True),
                                             ("file:-0002.params", 0, True)])
        self.assertEqual(code, 0, out)
        self.assert_came_back(out, 0, 1)
        self.assert_came_back(out, 0, 2)
        self.assert_same_result(prefix, out)

    def test_restarts_used_up_end_the_job(self):
        code, out, _ = self.run_job(1, [("Epoch[1] Batch[20]", 1, True),
                                        ("Epoch[2] Batch[20]", 1, False)])
        self.assertNotEqual(code, 0, out)
        self.assert_came_back(out, 1)
        self.assertIn("worker 1 failed with signal SIGKILL (after 1 restart); "
                      "stopped every other process", out)


if __name__ == "__main__":
    pyunit.main()
