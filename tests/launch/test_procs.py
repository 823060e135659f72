"""Finding an attempt's processes by what they hold: the write end of its output pipe."""

from __future__ import annotations

import os
import subprocess

from pipelines.launch.procs import pipe_writers


def test_a_pipes_writers_are_found_and_its_readers_are_not():
    read, write = os.pipe()
    inode = os.fstat(read).st_ino
    reader = subprocess.Popen(["sleep", "30"], pass_fds=(read,))
    writer = subprocess.Popen(["sleep", "30"], pass_fds=(write,))
    try:
        assert pipe_writers(inode, exclude=(os.getpid(),)) == [writer.pid]  # this process holds both ends
        assert os.getpid() in pipe_writers(inode)
    finally:
        for proc in (reader, writer):
            proc.kill()
            proc.wait()
        os.close(read)
        os.close(write)
    assert pipe_writers(inode) == []
