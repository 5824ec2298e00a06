"""``python -m harness.run.child JOB_DIR``: the measured process started as a fresh interpreter."""

import sys

from harness.run.child.main import exit_now, main

exit_now(main(sys.argv[1]))
