"""Runs a Python test module's unittest cases and writes one JUnit testcase
per case to $XML_OUTPUT_FILE (set by `bazel test`), so tools/test_summary.py
counts Python cases like gtest ones, skips included. Use at the end of a
test file: `if __name__ == "__main__": pyunit.main()`."""

import os
import sys
import time
import unittest
import xml.etree.ElementTree as ET


class _Result(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases = []
        self._start = 0.0

    def startTest(self, test):
        self._start = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, detail=""):
        self.cases.append((test, outcome, detail, time.monotonic() - self._start))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)


def _write_xml(result, path):
    suite = ET.Element("testsuite", name="python", tests=str(len(result.cases)))
    for test, outcome, detail, seconds in result.cases:
        cls = type(test).__name__
        case = ET.SubElement(suite, "testcase", classname=cls,
                             name=getattr(test, "_testMethodName", str(test)),
                             time="%.3f" % seconds)
        if outcome == "skipped":
            case.set("result", "skipped")
            ET.SubElement(case, "skipped", message=detail)
        elif outcome != "passed":
            ET.SubElement(case, outcome, message=detail.splitlines()[-1] if detail else "")
            case[-1].text = detail
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def main(module="__main__"):
    """Runs every case of `module`, or those named on the command line
    (`Class.test_name`; `bazel test --test_arg=...`)."""
    mod = sys.modules[module]
    names = [a for a in sys.argv[1:] if not a.startswith("-")]
    loader = unittest.defaultTestLoader
    suite = loader.loadTestsFromNames(names, mod) if names else loader.loadTestsFromModule(mod)
    runner = unittest.TextTestRunner(verbosity=2, resultclass=_Result, stream=sys.stdout)
    result = runner.run(suite)
    xml_path = os.environ.get("XML_OUTPUT_FILE")
    if xml_path:
        _write_xml(result, xml_path)
    sys.exit(0 if result.wasSuccessful() else 1)
