"""``save`` and ``load`` with file objects and special paths: every byte a writer is offered
is written or ``OSError`` is raised (never a silently truncated file), a path that is not a
regular file is refused at once (a FIFO used to block forever), and arguments that are
neither paths nor file objects are ``TypeError``."""

import os
import subprocess
import sys
import textwrap

import pytest

import quabla as qb

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_load_of_a_path_that_is_not_a_regular_file_is_an_os_error_at_once(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    script = textwrap.dedent(
        f"""
        import quabla as qb
        for path, what in [({str(fifo)!r}, "a FIFO"), ({str(tmp_path)!r}, "a directory"),
                           ("/dev/zero", "a character device")]:
            try:
                qb.load(path)
                print("loaded", path)
            except OSError as e:
                assert what + ", not a regular file" in str(e), e
                print("refused", path)
        """
    )
    # In a child with a deadline: a regression would block in open() forever.
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split().count("refused") == 3, out.stdout
