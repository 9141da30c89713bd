"""The fork server (tests/forkserver.py) runs a command as a fresh interpreter would, passes
signals on, and takes a run with it when its client is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forkserver import HERE

# Prints what a run sees of its interpreter and exits with the code it is given.
SCRIPT = """
import os, sys
print("argv", sys.argv[1:])
print("cwd", os.getcwd())
print("path0", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
print("env", os.environ.get("SEEN"))
print("bytecode", sys.dont_write_bytecode)
print("stdin", sys.stdin.read())
print("to stderr", file=sys.stderr)
import mod
print("mod", mod.WHERE)
sys.exit(int(sys.argv[1]))
"""


def project(folder: Path, where: str) -> Path:
    """A folder with the script, and a module ``mod`` in its src folder."""
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "mod.py").write_text(f"WHERE = {where!r}\n")
    (folder / "script.py").write_text(SCRIPT)
    return folder


def run(args: list[str], cwd: Path, fork_server, forked: bool, **env: str):
    python = [sys.executable, str(HERE)] if forked else [sys.executable]
    return subprocess.run(
        [*python, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": "src", **fork_server.env, **env},
        input="given",
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("bytecode", ["", "1"], ids=["bytecode", "no-bytecode"])
def test_a_run_is_what_a_fresh_interpreter_runs(fork_server, tmp_path, bytecode):
    """Arguments, folder, sys.path (the script's folder, then PYTHONPATH from that folder),
    environment, standard streams and exit code: the same both ways. Two folders with a
    module of one name: each run imports its own."""
    for name in ["a", "b"]:
        root = project(tmp_path / name, name)
        results = [
            run(
                ["script.py", "3", "x y"],
                root,
                fork_server,
                forked,
                PYTHONDONTWRITEBYTECODE=bytecode,
                SEEN=name,
            )
            for forked in (False, True)
        ]
        fresh, forked = ((r.returncode, r.stdout, r.stderr) for r in results)
        assert fresh == forked
        assert fresh[0] == 3 and f"mod {name}" in fresh[1], fresh


def test_an_exception_ends_a_run_with_its_traceback_and_exit_1(fork_server, tmp_path):
    (tmp_path / "fails.py").write_text("import sys\nsys.stdout.write('before\\n')\n1 / 0\n")
    for forked in (False, True):
        result = run(["fails.py"], tmp_path, fork_server, forked)
        assert result.returncode == 1
        assert result.stdout == "before\n"
        assert result.stderr.startswith("Traceback")
        assert result.stderr.endswith("ZeroDivisionError: division by zero\n")


# Says it is ready (a file), then waits: with a handler, SIGTERM ends it with exit 7.
WAITS = """
import os, signal, sys, time
if sys.argv[2] == "handled":
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(7))
with open(sys.argv[1], "w") as marker:
    marker.write(str(os.getpid()))
time.sleep(60)
"""


def start(tmp_path: Path, fork_server, handled: str) -> tuple[subprocess.Popen, int]:
    """A run that waits, through the server, and the pid of the run (not its client)."""
    (tmp_path / "waits.py").write_text(WAITS)
    marker = tmp_path / f"ready-{handled}"
    client = subprocess.Popen(
        [sys.executable, str(HERE), "waits.py", str(marker), handled],
        cwd=tmp_path,
        env={**os.environ, **fork_server.env},
    )
    deadline = time.monotonic() + 30
    while not (marker.exists() and marker.read_text()):
        assert client.poll() is None and time.monotonic() < deadline, "the run did not start"
        time.sleep(0.02)
    pid = int(marker.read_text())
    assert pid != client.pid
    return client, pid


@pytest.mark.parametrize("handled", ["handled", "default"])
def test_a_signal_to_the_client_reaches_its_run_and_the_client_ends_as_it_did(
    fork_server, tmp_path, handled
):
    client, _ = start(tmp_path, fork_server, handled)
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=30) == (7 if handled == "handled" else -signal.SIGTERM)


def test_a_killed_client_takes_its_run_with_it(fork_server, tmp_path):
    client, pid = start(tmp_path, fork_server, "default")
    client.kill()
    client.wait(timeout=30)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists():  # the server reaps it once it is killed
        assert time.monotonic() < deadline, f"run {pid} outlived its killed client"
        time.sleep(0.02)
