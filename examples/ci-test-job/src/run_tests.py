"""Runs the unit tests in this folder and writes a JSON report that
Terraform reads back with the rarecloud_sandbox_file data source. Exits 1
when a test fails, so the rarecloud_sandbox_command fails the apply."""
import json
import sys
import unittest

suite = unittest.defaultTestLoader.discover(".", pattern="test_*.py")
result = unittest.TextTestRunner(verbosity=2).run(suite)
report = {
    "tests": result.testsRun,
    "failures": len(result.failures),
    "errors": len(result.errors),
    "passed": result.wasSuccessful(),
}
with open("/home/user/report.json", "w") as f:
    json.dump(report, f)
sys.exit(0 if result.wasSuccessful() else 1)
