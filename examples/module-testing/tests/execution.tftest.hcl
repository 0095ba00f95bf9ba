# Runs that need the smoke check really executed: RareCloud itself, or the
# local test backend on real gVisor (its test mode reports every program
# as exiting 0, so this file fails there, as it should).

variables {
  name = "nightly"
}

# The smoke check's failure is reported, not hidden.
run "reports_a_failing_check" {
  variables {
    smoke_check = ["sh", "-c", "exit 3"]
  }

  assert {
    condition     = output.smoke_check_exit_code == 3
    error_message = "A failing smoke check should report its exit code."
  }
}
