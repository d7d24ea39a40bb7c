"""``save`` and ``load`` with file objects and special paths: every byte a writer is offered
is written or ``OSError`` is raised (never a silently truncated file), a path that is not a
regular file is refused at once (a FIFO used to block forever), and arguments that are
neither paths nor file objects are ``TypeError``."""

import io
import os
import subprocess
import sys
import textwrap

import pytest

import quabla as qb

TREE = {"w": qb.arange(0.0, 300.0), "step": 7, "name": "run"}


def expect_tree(back):
    assert back["w"].tolist() == qb.arange(0.0, 300.0).tolist()
    assert back["step"] == 7 and back["name"] == "run"


class Partial:
    """A binary writer that takes at most ``chunk`` bytes per call and reports how many."""

    def __init__(self, chunk):
        self.chunk, self.buf, self.calls = chunk, bytearray(), 0

    def write(self, b):
        self.calls += 1
        taken = bytes(b[: self.chunk])
        self.buf += taken
        return len(taken)


@pytest.mark.parametrize("chunk", [1, 7, 1000, 10**9])
def test_a_writer_that_takes_fewer_bytes_gets_the_rest(chunk):
    w = Partial(chunk)
    qb.save(w, TREE)
    expect_tree(qb.load(io.BytesIO(bytes(w.buf))))
    size = len(w.buf)
    assert w.calls == -(-size // chunk)


class Reports:
    def __init__(self, count):
        self.count, self.buf = count, bytearray()

    def write(self, b):
        self.buf += bytes(b)
        return self.count(len(b)) if callable(self.count) else self.count


@pytest.mark.parametrize(
    "count",
    [0, -1, "many", 2.5, True, lambda n: n + 1, lambda n: 2**70],
    ids=["zero", "negative", "str", "float", "bool", "too many", "huge"],
)
def test_a_writer_reporting_a_garbage_count_is_an_os_error(count):
    with pytest.raises(OSError, match=r"write\(\) returned .* when offered \d+ bytes"):
        qb.save(Reports(count), TREE)


def test_none_is_everything_for_a_plain_object_and_nothing_for_a_raw_stream():
    w = Reports(None)
    qb.save(w, TREE)
    expect_tree(qb.load(io.BytesIO(bytes(w.buf))))

    class WouldBlock(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            return None

    with pytest.raises(OSError, match=r"write\(\) returned None"):
        qb.save(WouldBlock(), TREE)


def test_real_files_and_buffers_round_trip(tmp_path):
    for target in [io.BytesIO(), open(tmp_path / "a.qb", "wb"), open(tmp_path / "b.qb", "wb", buffering=0)]:
        qb.save(target, TREE)
        if isinstance(target, io.BytesIO):
            target.seek(0)
            expect_tree(qb.load(target))
        else:
            target.close()
            expect_tree(qb.load(target.name))
            with open(target.name, "rb") as f:
                expect_tree(qb.load(f))


@pytest.mark.parametrize("bad", [12345, None, 1.5, object(), b"bytes", [1]])
def test_neither_a_path_nor_a_file_object_is_a_type_error(bad):
    with pytest.raises(TypeError, match="file must be a path"):
        qb.save(bad, TREE)
    with pytest.raises(TypeError, match="file must be a path"):
        qb.load(bad)


def test_load_of_a_text_stream_is_a_type_error():
    with pytest.raises(TypeError, match="read\\(\\) returned str, expected bytes"):
        qb.load(io.StringIO("not bytes"))


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
