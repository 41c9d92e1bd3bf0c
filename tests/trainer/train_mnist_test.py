"""examples/train_mnist end to end on the bundled Fashion-MNIST: accuracy of
the MLP and LeNet, dist_sync == local with the combined batch,
dist_allreduce == dist_sync (launch.py -s 0 and mpirun), dist_async,
exact resume from a checkpoint (local and dist_sync), uneven multi-device
data parallelism, one-line errors for bad input (mpiexec with a local store
too), --help and --epoch-size."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from tracker import jobkey
from tracker.launch_testlib import launch
from tracker.testbed import free_port
from tools import pyunit

TRAIN = os.path.abspath("examples/train_mnist")
CKPT = os.path.abspath("tools/kvtrain_checkpoint")
PLOT = os.path.abspath("tools/plot_metrics")
DATA = "/usr/share/datasets/fashion-mnist"
# Loaded CI machines must not look like dead peers.
JOB_ENV = ["--env", "PS_HEARTBEAT_TIMEOUT=60", "--env", "KVTRAIN_STARTUP_TIMEOUT=120"]


def train(*args, timeout=900):
    r = subprocess.run([TRAIN, "--disp-batches=0"] + list(args), capture_output=True,
                       text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr



def parsed_accuracy(out):
    m = re.findall(r"Test accuracy=([0-9.]+)", out)
    return float(m[-1]) if m else -1.0


def same_weights(a, b, rtol, atol):
    r = subprocess.run([CKPT, "diff", a, b, "--rtol=%g" % rtol, "--atol=%g" % atol],
                       capture_output=True, text=True)
    return r.returncode == 0, r.stdout + r.stderr


@unittest.skipUnless(os.path.isdir(DATA), "Fashion-MNIST is not installed (tools/setup.sh)")
class TrainMnistTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvtrain-train-")

    def test_mlp_local_reaches_87_percent(self):
        code, out, err = train("--network=mlp", "--kv-store=local", "--num-epochs=10",
                               "--metrics-file=%s/m.jsonl" % self.tmp)
        self.assertEqual(code, 0, err)
        acc = parsed_accuracy(out)
        print("MLP local, 10 epochs: test accuracy %.4f" % acc)
        self.assertGreaterEqual(acc, 0.87, out)
        # The metrics log plots.
        r = subprocess.run(["/usr/bin/python3", PLOT, "-o", self.tmp + "/m.png",
                            self.tmp + "/m.jsonl"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(os.path.getsize(self.tmp + "/m.png"), 10000)

    def test_lenet_local_reaches_85_percent_in_an_epoch(self):
        # One epoch (0.866; 5 epochs reach 0.909, 10 reach 0.915: a run of
        # minutes, recorded in docs/training.md, not repeated here).
        code, out, err = train("--network=lenet", "--kv-store=local", "--num-epochs=1",
                               "--lr-step-epochs=", timeout=900)
        self.assertEqual(code, 0, err)
        acc = parsed_accuracy(out)
        print("LeNet local, 1 epoch: test accuracy %.4f" % acc)
        self.assertGreaterEqual(acc, 0.85, out)

    def test_dist_sync_equals_local_with_the_combined_batch(self):
        # 20 steps across an epoch boundary: the two sum a step's gradient in
        # different orders, and over hundreds of steps training amplifies
        # those last-bit differences chaotically (0.03 after 240 steps on one
        # CPU, 1e-4 on another); after 20 they are below 1e-7.
        common = ["--network=mlp", "--num-epochs=2", "--num-examples=1000", "--seed=3"]
        code, out, err = train(*common, "--kv-store=local", "--batch-size=100",
                               "--model-prefix=%s/local" % self.tmp)
        self.assertEqual(code, 0, err)
        code, out = launch(["-n", "2", "-s", "2"] + JOB_ENV + [
            TRAIN, "--disp-batches=0", "--kv-store=dist_sync", "--batch-size=50",
            "--model-prefix=%s/dist" % self.tmp] + common, timeout=900)
        self.assertEqual(code, 0, out)
        ok, report = same_weights(self.tmp + "/local-0002.params",
                                  self.tmp + "/dist-0002.params", 1e-4, 1e-6)
        print(report)
        self.assertTrue(ok, report)

    def test_dist_allreduce_equals_dist_sync(self):
        common = [TRAIN, "--disp-batches=0", "--network=mlp", "--num-epochs=1",
                  "--num-examples=12000", "--seed=3", "--batch-size=50"]
        code, out = launch(["-n", "2", "-s", "2"] + JOB_ENV + common + [
            "--kv-store=dist_sync", "--model-prefix=%s/sync" % self.tmp], timeout=900)
        self.assertEqual(code, 0, out)
        code, out = launch(["-n", "2", "-s", "0"] + JOB_ENV + common + [
            "--kv-store=dist_allreduce", "--model-prefix=%s/ar" % self.tmp], timeout=900)
        self.assertEqual(code, 0, out)
        ok, report = same_weights(self.tmp + "/sync-0001.params",
                                  self.tmp + "/ar-0001.params", 1e-5, 1e-6)
        print(report)
        self.assertTrue(ok, report)
        if not shutil.which("mpirun"):
            return
        # The same job started by mpirun directly.
        env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_")}
        env["KVTRAIN_RENDEZVOUS"] = "127.0.0.1:%d" % free_port()
        env["PS_HEARTBEAT_TIMEOUT"] = "60"
        env["KVTRAIN_JOB_KEY"] = jobkey.new_secret_key()
        r = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca",
                            "orte_tmpdir_base", self.tmp + "/ompi", "-n", "2",
                            "-x", "KVTRAIN_RENDEZVOUS", "-x", "PS_HEARTBEAT_TIMEOUT",
                            "-x", "KVTRAIN_JOB_KEY"]
                           + common + ["--kv-store=dist_allreduce",
                                       "--model-prefix=%s/mpi" % self.tmp],
                           env=env, capture_output=True, text=True, timeout=900)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        ok, report = same_weights(self.tmp + "/sync-0001.params",
                                  self.tmp + "/mpi-0001.params", 1e-5, 1e-6)
        self.assertTrue(ok, report)

    def test_dist_async_mlp_reaches_82_percent_in_3_epochs(self):
        # Under MXNet's scaling each of the 2 workers' pushes is its own update
        # of one batch's mean gradient: half the sync runs' learning rate keeps
        # the step per example of one process at --lr 0.05. (Runs differ with
        # the order pushes arrive in: 0.845-0.856 in 3 runs; one process
        # reaches 0.84-0.86 in 3 epochs. bench/async_accuracy_bench.py
        # measures more epochs and settings.)
        code, out = launch(["-n", "2", "-s", "2"] + JOB_ENV + [
            TRAIN, "--disp-batches=0", "--kv-store=dist_async", "--num-epochs=3",
            "--lr=0.025"], timeout=900)
        self.assertEqual(code, 0, out)
        accs = [float(a) for a in re.findall(r"\[worker \d\] Test accuracy=([0-9.]+)", out)]
        print("MLP dist_async, 2 workers, 3 epochs: test accuracy %s" % accs)
        self.assertEqual(len(accs), 2, out)
        self.assertGreaterEqual(min(accs), 0.82, out)

    def test_dist_sync_with_uneven_parts_does_not_hang(self):
        # 1030 examples in chunks of 50: worker 0's part has 11 batches,
        # worker 1's 10; both run 11 steps per epoch (apache/mxnet#7888).
        code, out = launch(["-n", "2", "-s", "1"] + JOB_ENV + [
            TRAIN, "--disp-batches=0", "--kv-store=dist_sync", "--batch-size=50",
            "--num-examples=1030", "--num-epochs=2"], timeout=300)
        self.assertEqual(code, 0, out)
        self.assertEqual(len(re.findall(r"\[worker \d\] Test accuracy=", out)), 2, out)

    def test_dist_ssp_keeps_every_worker_within_the_bound(self):
        # Uneven parts (11 and 10 batches): a bounded store runs as many
        # steps on every worker, or one would wait for one that stopped.
        # With staleness s = 1 and 2 workers, a push can miss at most
        # 2s + 1 = 3 updates of the other worker's.
        metrics = self.tmp + "/ssp.jsonl"
        code, out = launch(["-n", "2", "-s", "1"] + JOB_ENV + [
            TRAIN, "--disp-batches=0", "--kv-store=dist_ssp", "--staleness=1",
            "--async-lr=staleness", "--batch-size=50", "--num-examples=1030",
            "--num-epochs=2", "--metrics-file=" + metrics], timeout=300)
        self.assertEqual(code, 0, out)
        accs = re.findall(r"\[worker \d\] Test accuracy=([0-9.]+)", out)
        # Both end with the servers' final weights.
        self.assertEqual(len(accs), 2, out)
        self.assertEqual(accs[0], accs[1], out)
        with open(metrics) as f:
            epochs = [json.loads(line) for line in f if "staleness-max" in line]
        self.assertEqual(len(epochs), 4, epochs)  # 2 workers x 2 epochs
        for e in epochs:
            self.assertLessEqual(e["staleness-max"], 3, e)
            self.assertIn("held-seconds", e)
        self.assertGreater(max(e["staleness-max"] for e in epochs), 0, epochs)

    def test_2bit_at_mxnets_threshold_trains_with_momentum(self):
        # Threshold 0.5 is below this MLP's gradients; with SGD's momentum
        # 0.9 applied after error feedback the run diverged (accuracy 0.10).
        # The momentum now runs before it, on the workers.
        code, out = launch(["-n", "2", "-s", "1"] + JOB_ENV + [
            TRAIN, "--disp-batches=0", "--kv-store=dist_sync", "--batch-size=50",
            "--num-epochs=1", "--gc-type=2bit", "--gc-threshold=0.5"], timeout=300)
        self.assertEqual(code, 0, out)
        accs = [float(a) for a in re.findall(r"\[worker \d\] Test accuracy=([0-9.]+)", out)]
        print("MLP dist_sync 2bit 0.5, 2 workers, 1 epoch: test accuracy %s" % accs)
        self.assertEqual(len(accs), 2, out)
        self.assertGreaterEqual(min(accs), 0.8, out)

    def test_progress_bar_on_a_terminal(self):
        import pty
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(TRAIN, [TRAIN, "--num-examples=2000", "--num-epochs=1",
                             "--disp-batches=0"])
        chunks = []
        while True:
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        _, status = os.waitpid(pid, 0)
        out = b"".join(chunks).decode(errors="replace")
        self.assertEqual(os.waitstatus_to_exitcode(status), 0, out)
        self.assertIn("\r[==============================] 100% batch 20/20", out)
        self.assertIn("Epoch[0] Train-accuracy=", out)

    def check_resume(self, run):
        """`run(prefix, extra)` trains; 5 epochs straight vs 3 + resume to 5."""
        run(self.tmp + "/straight", ["--num-epochs=5"])
        run(self.tmp + "/split", ["--num-epochs=3"])
        run(self.tmp + "/split", ["--num-epochs=5", "--load-epoch=3"])
        ok, report = same_weights(self.tmp + "/straight-0005.params",
                                  self.tmp + "/split-0005.params", 1e-4, 1e-5)
        print(report)
        self.assertTrue(ok, report)

    def test_resume_local(self):
        def run(prefix, extra):
            code, out, err = train("--kv-store=local", "--num-examples=10000",
                                   "--lr-step-epochs=2,4", "--model-prefix=" + prefix, *extra)
            self.assertEqual(code, 0, err)
        self.check_resume(run)

    def test_resume_dist_sync(self):
        def run(prefix, extra):
            code, out = launch(["-n", "2", "-s", "2"] + JOB_ENV + [
                TRAIN, "--disp-batches=0", "--kv-store=dist_sync", "--num-examples=10000",
                "--batch-size=50", "--lr-step-epochs=2,4", "--model-prefix=" + prefix]
                + extra, timeout=900)
            self.assertEqual(code, 0, out)
        self.check_resume(run)

    def test_damaged_checkpoints_are_refused(self):
        """--load-epoch with a params or states file that is empty, cut
        short, another epoch's, or for another network: an error naming the
        file and what is wrong, and no training."""
        base = self.tmp + "/m"
        code, _, err = train("--num-epochs=2", "--num-examples=2000",
                             "--model-prefix=" + base)
        self.assertEqual(code, 0, err)

        def first_array_only(data):
            # The wire format: field 1 (epoch, varint), then field 2 (arrays,
            # length-delimited): keep the epoch and the first array.
            pos = 0
            while True:
                tag = data[pos]
                pos += 1
                if tag == 0x08:
                    while data[pos] & 0x80:
                        pos += 1
                    pos += 1
                    continue
                self.assertEqual(tag, 0x12)
                length, shift = 0, 0
                while True:
                    b = data[pos]
                    pos += 1
                    length |= (b & 0x7F) << shift
                    shift += 7
                    if not b & 0x80:
                        break
                return data[:pos + length]

        def flip_in_middle(data):
            # The middle of a params file is inside fc1_weight (400 KB of
            # its 440 KB).
            mid = len(data) // 2
            return data[:mid] + bytes([data[mid] ^ 0x01]) + data[mid + 1:]

        def params(epoch):
            with open("%s-%04d.params" % (base, epoch), "rb") as f:
                return f.read()

        def states(epoch):
            with open("%s-%04d.states" % (base, epoch), "rb") as f:
                return f.read()

        cases = [
            ("empty params", b"", states(1), [], "-0001.params: the file is empty"),
            ("first array only", first_array_only(params(1)), states(1), [],
             "-0001.params: no checksum trailer"),
            ("a flipped bit in the weights", flip_in_middle(params(1)), states(1), [],
             "-0001.params: array arg:fc1_weight: checksum mismatch"),
            ("a flipped bit in the states", params(1), flip_in_middle(states(1)), [],
             "-0001.states: not the optimizer states saved with "),
            ("epoch 2's params", params(2), states(2), [],
             "-0001.params: holds the arrays after epoch 2, not 1"),
            ("epoch 2's states", params(1), states(2), [],
             "-0001.states: not the optimizer states saved with "),
            ("empty states", params(1), b"", [], "-0001.states: the file is empty"),
            ("another network", params(1), states(1), ["--network=lenet"],
             "-0001.params: has no parameter conv1_weight"),
        ]
        for i, (what, p, st, extra, message) in enumerate(cases):
            with self.subTest(what):
                prefix = "%s/case%d" % (self.tmp, i)
                shutil.copy(base + "-symbol.txt", prefix + "-symbol.txt")
                with open(prefix + "-0001.params", "wb") as f:
                    f.write(p)
                with open(prefix + "-0001.states", "wb") as f:
                    f.write(st)
                code, out, err = train("--num-epochs=2", "--num-examples=2000",
                                       "--load-epoch=1", "--model-prefix=" + prefix, *extra,
                                       timeout=120)
                self.assertNotEqual(code, 0, out + err)
                self.assertIn(prefix + message, err)
                self.assertNotIn("Train-accuracy", out + err)
                self.assertFalse(os.path.exists(prefix + "-0002.params"))

    def test_uneven_cpu_contexts_equal_one_device(self):
        common = ["--num-epochs=1", "--num-examples=6000", "--lr-step-epochs="]
        code, _, err = train(*common, "--model-prefix=%s/one" % self.tmp)
        self.assertEqual(code, 0, err)
        code, _, err = train(*common, "--cpus=2", "--work-load-list=1,3",
                             "--model-prefix=%s/two" % self.tmp)
        self.assertEqual(code, 0, err)
        ok, report = same_weights(self.tmp + "/one-0001.params", self.tmp + "/two-0001.params",
                                  1e-3, 1e-4)
        print(report)
        self.assertTrue(ok, report)


class BadInputTest(unittest.TestCase):
    def check(self, args, message):
        code, out, err = train(*args, timeout=60)
        self.assertEqual(code, 2, out + err)
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, err)
        self.assertIn("train_mnist: error: ", lines[0])
        self.assertIn(message, lines[0])
        self.assertNotIn("Check failure", err)

    def test_missing_data_dir(self):
        self.check(["--data-dir=/nonexistent/mnist"],
                   "data directory /nonexistent/mnist does not exist")

    def test_unknown_network(self):
        self.check(["--network=resnet"], "--network=resnet: expected mlp or lenet")

    def test_unknown_kv_store(self):
        self.check(["--kv-store=dist_sink"], "unknown KVStore type \"dist_sink\"; valid types:")

    def test_zero_batch_size(self):
        self.check(["--batch-size=0"], "--batch-size=0: expected a positive number of examples")

    def test_one_of_several_mpi_ranks_with_a_local_store(self):
        # mpiexec -n 4 train_mnist (ChainerMN's habit) would train 4 models.
        message = ("this process is one of 4 MPI ranks (OMPI_COMM_WORLD_SIZE=4) but "
                   "--kv-store=local trains a separate model in each; use --kv-store "
                   "dist_allreduce")
        old = os.environ.get("OMPI_COMM_WORLD_SIZE")
        os.environ["OMPI_COMM_WORLD_SIZE"] = "4"
        try:
            self.check([], message)
        finally:
            if old is None:
                del os.environ["OMPI_COMM_WORLD_SIZE"]
            else:
                os.environ["OMPI_COMM_WORLD_SIZE"] = old

    @unittest.skipUnless(shutil.which("mpirun"), "mpirun is not installed")
    def test_mpiexec_without_dist_allreduce_is_refused(self):
        r = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2",
                            TRAIN, "--num-epochs=1"], capture_output=True, text=True,
                           timeout=120)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("one of 2 MPI ranks", r.stdout + r.stderr)
        self.assertNotIn("Epoch[0]", r.stdout)

    def test_help_lists_its_own_flags(self):
        r = subprocess.run([TRAIN, "--help"], capture_output=True, text=True, timeout=60)
        text = r.stdout + r.stderr
        for flag in ("-kv_store", "-epoch_size", "-network", "-lr "):
            self.assertIn(flag, text)
        self.assertNotIn("-logtostderr", text)  # glog's: --helpfull only
        self.assertLess(len(text.splitlines()), 80, text)
        full = subprocess.run([TRAIN, "--helpfull"], capture_output=True, text=True,
                              timeout=60)
        self.assertIn("-logtostderr", full.stdout + full.stderr)

    @unittest.skipUnless(os.path.isdir(DATA), "Fashion-MNIST is not installed (tools/setup.sh)")
    def test_epoch_size_sets_the_batches_per_epoch(self):
        code, out, err = train("--epoch-size=7", "--num-epochs=1", "--disp-batches=1",
                               timeout=120)
        self.assertEqual(code, 0, err)
        batches = re.findall(r"Epoch\[0\] Batch\[(\d+)\]", out + err)
        self.assertTrue(batches, out + err)
        self.assertEqual(max(int(b) for b in batches), 7, out + err)


if __name__ == "__main__":
    pyunit.main()
