"""A fork server for the end-to-end runs: torch is imported once, and each run is a fork.

A rendered project's short run costs about 3.7 CPU-seconds in a fresh interpreter, nearly all
of it ``import torch`` and the ``torch._dynamo`` that building the first optimizer imports; the
training is a few tenths. Under torchrun with 2 ranks there are three such interpreters. A
test process starts one server (``Server``), which imports them once; each run it is asked
for is a child forked from it, which then runs the command's module or script as a fresh
``python`` would: its arguments, folder, environment, standard streams and ``sys.path``; an
exception ends it with a traceback and exit 1, ``sys.exit`` with its code, and it exits
through the interpreter's usual shutdown.

    python forkserver.py serve SOCKET        the server (``Server`` starts it)
    python forkserver.py -m MODULE ARGS...   a run: what ``python -m MODULE ARGS...`` does
    python forkserver.py SCRIPT ARGS...      a run: what ``python SCRIPT ARGS...`` does

A run is a client (it imports no torch) that sends the server its arguments, folder,
environment and standard streams' file descriptors, and the server's socket path is in its
environment (FORK_SERVER). The client passes on the signals it gets to its run, and exits as
its run did: the same code, or killed by the same signal. A client killed outright (SIGKILL)
takes its run with it. So torchrun, which starts its ranks as ``python -u SCRIPT`` and stops
them with signals, starts and stops them through this file like any script: torchrun itself
runs through it too.

Where a run differs from a fresh interpreter: the modules the server imported are already
imported (PRELOAD: torch's own, never a project's), so what they read from the environment as
they were imported is the server's (OpenMP's threads: 1, as every run here asks), Python's
hash seed is the server's, and so are the exit handlers that PRELOAD registered. The rendered
suites' tests start fresh interpreters, as a user's are.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
from pathlib import Path

# What each run would import anyway, and all but the tenths of its CPU-seconds.
PRELOAD = ["torch", "torch._dynamo", "torch.distributed.launcher.api", "numpy"]
FORWARDED = [
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGABRT,
]
HERE = Path(__file__).resolve()
# The interpreter of a command forked from the server: [*PYTHON, "-m", MODULE, ...] runs as
# [python, "-m", MODULE, ...] would, with Server.env in its environment.
PYTHON = [sys.executable, str(HERE)]


def torchrun(nproc: int, module: str) -> list[str]:
    """``torchrun --standalone --nproc-per-node NPROC -m MODULE`` forked from the server,
    which starts each rank through it too (as the script this file is, ``-m MODULE`` its
    arguments)."""
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    return [*PYTHON, *launch, str(HERE), "-m", module]


SERVER_STREAMS: list[object] = []


class Server:
    """The fork server of one test process, started on construction: a command
    ``[python, forkserver.py, ...]`` run with ``env`` in its environment is forked from it. It
    ends when ``close`` closes its standard input, or when its test process ends."""

    def __init__(self, folder: Path) -> None:
        self.path = str(folder / "fork-server")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.process = subprocess.Popen(
            [sys.executable, str(HERE), "serve", self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**env, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        assert ready == b"ready\n", f"the fork server did not start: {ready!r}"
        self.env = {"FORK_SERVER": self.path}

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


# ---------------------------------------------------------------- the client: a run
def client(argv: list[str]) -> None:
    """Have the server run ``argv`` here, as this process, and end as that run ends."""
    if not argv or (argv[0].startswith("-") and argv[0] != "-m"):
        sys.exit(f"forkserver: runs -m MODULE or a SCRIPT, not {argv[:1]}")
    # Blocked until the run's pid is known; a signal that came meanwhile is then passed on.
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["FORK_SERVER"])
    request = {
        "argv": argv,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "unbuffered": sys.stdout.write_through,  # -u, or PYTHONUNBUFFERED
    }
    payload = json.dumps(request).encode()
    message = len(payload).to_bytes(8, "big") + payload
    sent = socket.send_fds(sock, [message], [0, 1, 2])
    sock.sendall(message[sent:])
    replies = sock.makefile("rb")
    pid = int(replies.readline())

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):  # it ended, and its status is coming
            os.kill(pid, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    line = replies.readline()
    if not line:
        sys.exit(f"forkserver: the server ended before run {pid} did")
    code = int(line)
    if code < 0:  # killed by a signal: so is this process
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
        code = 128 - code
    sys.exit(code)


# ---------------------------------------------------------------- the server
def serve(path: str) -> tuple[dict, list[int]]:
    """Accept runs until standard input closes; returns only in a forked child, with its
    request and the client's standard streams."""
    import gc
    import importlib
    import threading

    for name in PRELOAD:
        importlib.import_module(name)
    # What a pre-fork server does (the gc module's documentation): the objects made so far
    # stay out of every collection, so that no child's collection copies their memory or
    # walks them, at its exit included.
    gc.freeze()
    # A fork copies the calling thread alone: one with more would leave its children locks
    # that no thread of theirs can release.
    assert threading.active_count() == 1 and len(os.listdir("/proc/self/task")) == 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C reaches runs via clients
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    runs: dict[int, tuple[socket.socket, int]] = {}  # pid: the client's connection, pidfd
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.data == "stdin":  # closed: the test process is done
                for pid in runs:
                    os.kill(pid, signal.SIGKILL)
                sys.exit(0)
            if key.data == "accept":
                conn, _ = listener.accept()
                received = receive(conn)
                if received is None:  # the client went before it asked
                    conn.close()
                    continue
                request, fds = received
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    conn.close()
                    for other, pidfd in runs.values():
                        other.close()
                        os.close(pidfd)
                    return request, fds
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                runs[pid] = (conn, pidfd)
                conn.sendall(b"%d\n" % pid)
                selector.register(conn, selectors.EVENT_READ, ("client", pid))
                selector.register(pidfd, selectors.EVENT_READ, ("ended", pid))
                continue
            what, pid = key.data
            if pid not in runs:  # it ended earlier in this batch of events
                continue
            conn, pidfd = runs[pid]
            if what == "client":  # the client said nothing more: it ended, so does its run
                os.kill(pid, signal.SIGKILL)
                selector.unregister(conn)
                continue
            _, status = os.waitpid(pid, 0)
            selector.unregister(pidfd)
            os.close(pidfd)
            del runs[pid]
            with contextlib.suppress(KeyError):  # unless its client went first
                selector.unregister(conn)
            with contextlib.suppress(OSError):  # the client may be gone
                conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
            conn.close()


def receive(conn: socket.socket) -> tuple[dict, list[int]] | None:
    """A client's request and its three file descriptors, or None if it closed first."""
    try:
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    except OSError:  # reset by a client killed as it connected
        return None
    if len(fds) != 3 or len(data) < 8:
        for fd in fds:
            os.close(fd)
        return None
    size = int.from_bytes(data[:8], "big")
    data = data[8:]
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return json.loads(data), fds


def become(request: dict, fds: list[int]) -> None:
    """In the forked child: take the client's streams, folder, environment and arguments, and
    the ``sys.path`` and interpreter settings a fresh ``python`` there would have."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.setpgid(0, 0)  # a terminal's signals come through the client, once
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    unbuffered = request["unbuffered"] or bool(os.environ.get("PYTHONUNBUFFERED"))
    # The server's stream objects close their descriptors when they are freed: kept, so that
    # they never close the client's, which now have those numbers.
    SERVER_STREAMS.extend([sys.stdin, sys.stdout, sys.stderr])
    stdin = io.BufferedReader(io.FileIO(0, "r", closefd=False))
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(stdin)
    sys.stdout = sys.__stdout__ = stream(1, unbuffered, errors="strict")
    sys.stderr = sys.__stderr__ = stream(2, unbuffered, errors="backslashreplace")
    if os.environ.get("PYTHONFAULTHANDLER"):
        import faulthandler

        faulthandler.enable()
    argv = request["argv"]
    first = os.getcwd() if argv[0] == "-m" else os.path.dirname(os.path.abspath(argv[0]))
    paths = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *paths, *sys.path[1:]]
    if "numpy" in sys.modules:  # a fresh process seeds numpy's global generator anew
        sys.modules["numpy"].random.seed()


def stream(fd: int, unbuffered: bool, errors: str) -> io.TextIOWrapper:
    """A standard stream as Python opens it: line-buffered on a terminal (stderr always),
    block-buffered elsewhere, written through at once under -u."""
    raw = io.FileIO(fd, "w", closefd=False)
    interactive = raw.isatty()
    buffered = io.BufferedWriter(raw) if not unbuffered else raw
    return io.TextIOWrapper(
        buffered,  # type: ignore[arg-type]
        errors=errors,
        line_buffering=interactive or fd == 2,
        write_through=unbuffered,
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        child_request, child_fds = serve(sys.argv[2])
        become(child_request, child_fds)
        run_argv = child_request["argv"]
        if run_argv[0] == "-m":
            sys.argv = [run_argv[1], *run_argv[2:]]
            runpy.run_module(run_argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = run_argv
            runpy.run_path(run_argv[0], run_name="__main__")
    else:
        client(sys.argv[1:])
