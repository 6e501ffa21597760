#!/usr/bin/env python3
"""Keystroke round trip through `mlrun --pty` (bench/server/session_bench.sh): runs MLRUN_ARGS...
on a local pseudo-terminal (as a user's terminal would be), whose remote side is a raw `cat`, and
times SAMPLES single bytes from the write to their echo. Prints p50, p99 and max in milliseconds.
Usage: session_rtt.py SAMPLES MLRUN [ARGS...]"""
import os
import pty
import select
import sys
import time


def main():
    samples = int(sys.argv[1])
    argv = sys.argv[2:]
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    # Wait for the remote side: it prints READY once its terminal is raw.
    buf = b""
    deadline = time.time() + 30
    while b"READY" not in buf:
        r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.time()))
        if not r:
            sys.exit("no READY from the remote side: %r" % buf)
        buf += os.read(fd, 4096)
    rtts = []
    for i in range(samples):
        byte = bytes([ord("a") + i % 26])
        t0 = time.perf_counter()
        os.write(fd, byte)
        got = b""
        while byte not in got:
            r, _, _ = select.select([fd], [], [], 5)
            if not r:
                sys.exit("byte %d did not come back" % i)
            got += os.read(fd, 4096)
        rtts.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.005)
    os.write(fd, b"\x04")  # cat's EOF is not seen in raw mode: the session is hung up below
    os.kill(pid, 15)
    os.waitpid(pid, 0)
    rtts.sort()
    p = lambda q: rtts[min(len(rtts) - 1, int(q * len(rtts)))]
    print("keystroke round trip over %d samples: p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (len(rtts), p(0.5), p(0.99), rtts[-1]))


main()
