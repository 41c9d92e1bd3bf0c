"""tools/check_layers.py on small made-up trees: right-way edges pass,
wrong-way BUILD labels and #includes are named, visibility and build
machinery are not edges."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tools import check_layers  # noqa: E402
from tools import pyunit  # noqa: E402


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as f:
        f.write(text)


class CheckLayersTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        write(self.root, "base/status.h", "// status\n")
        write(self.root, "base/BUILD", 'cc_library(name = "status")\n')
        write(self.root, "tensor/tensor.h", '#include "base/status.h"\n')
        write(self.root, "tensor/BUILD",
              'cc_library(name = "tensor", deps = ["//base:status"])\n')
        write(self.root, "kvstore/kvstore.h", '#include "tensor/tensor.h"\n')
        write(self.root, "kvstore/BUILD",
              'load("//tools:fuzz.bzl", "kv_fuzz_target")\n'
              'cc_library(name = "kvstore", deps = ["//tensor"],\n'
              '    visibility = ["//trainer:__subpackages__"])\n')

    def tearDown(self):
        self.tmp.cleanup()

    def test_right_way_edges_pass(self):
        self.assertEqual(check_layers.check(self.root), [])

    def test_a_wrong_way_label_is_named(self):
        write(self.root, "tensor/BUILD",
              'cc_library(name = "tensor", deps = ["//kvstore"])\n')
        bad = check_layers.check(self.root)
        self.assertEqual(len(bad), 1)
        self.assertIn("tensor/BUILD", bad[0])
        self.assertIn("(layer tensor) uses layer kvstore", bad[0])

    def test_a_wrong_way_include_is_named(self):
        write(self.root, "base/file.cc", '#include "kvstore/kvstore.h"\n')
        bad = check_layers.check(self.root)
        self.assertEqual(len(bad), 1)
        self.assertIn("base/file.cc", bad[0])
        self.assertIn("base may use only: third_party", bad[0])

    def test_the_two_transports_do_not_include_each_other(self):
        write(self.root, "transport/ps/van.h", "// van\n")
        write(self.root, "transport/collective/mesh.cc",
              '#include "transport/ps/van.h"\n')
        bad = check_layers.check(self.root)
        self.assertEqual(len(bad), 1)
        self.assertIn("(layer transport/collective) uses layer transport/ps", bad[0])

    def test_main_exit_status(self):
        self.assertEqual(check_layers.main(["check_layers.py", self.root]), 0)
        write(self.root, "base/BUILD",
              'cc_library(name = "status", deps = ["//tensor"])\n')
        self.assertEqual(check_layers.main(["check_layers.py", self.root]), 1)


if __name__ == "__main__":
    pyunit.main()
