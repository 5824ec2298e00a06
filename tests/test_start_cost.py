"""A single run's start cost: what the parent does beside the child's start instead of after it. In a fresh
interpreter (this process has loaded everything already)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_the_records_conversion_imports_are_made_in_a_thread_while_the_child_starts():
    code = ("import sys, threading\n"
            "from harness.run.parent import watch\n"
            "assert 'pandas' not in sys.modules\n"
            "thread = watch._store_imports()\n"
            "assert thread is not None and thread is not threading.main_thread()\n"
            "thread.join()\n"
            "assert 'pandas' in sys.modules\n"  # what pyarrow's first conversion imports: loaded for the write
            "assert watch._store_imports() is None\n"  # loaded already: no thread
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
