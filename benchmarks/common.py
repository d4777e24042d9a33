"""What every benchmark script shares: a timestamped log line, a description of the machine, a free port, and
:class:`Processes`, which ends every process a benchmark started however the benchmark ends."""

from __future__ import annotations

import glob
import os
import platform
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = int(Path("/proc/meminfo").read_text().split()[1]) / 1024**2
    except OSError:
        mem = 0
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, Python {platform.python_version()}"


def md_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def free_port() -> int:
    """A port free on loopback now, for a server the benchmark starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the processes a benchmark starts -----------------------------------------------------------------------------
STOP_SECONDS = 15.0  # a server given SIGTERM has this long to exit (lcrag drains for --shutdown-seconds, 10) ...
ENDINGS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # ... and is stopped at once on these


def stop_group(process: subprocess.Popen, seconds: float = STOP_SECONDS) -> None:
    """SIGTERM to ``process`` (started by :meth:`Processes.popen`: the leader of a process group of its own), SIGKILL
    after ``seconds``; then SIGKILL to whatever is left of its group (its fork server, parsing processes, any
    helper it started), which a parent's exit does not end."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    kill_group(process.pid)


def kill_group(group: int) -> None:
    """SIGKILL to every process left in the process group ``group`` (none left: nothing to do). Linux does not give
    a group's number to another process while any process of the group remains."""
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Processes:
    """Every process a benchmark starts through :meth:`popen`, each the leader of a session (so a process group) of
    its own, so that what it starts in turn can be found and ended with it. Leaving the ``with`` block, whether by
    the end of the run, an exception, Ctrl-C, SIGTERM or SIGHUP, stops them all (:func:`stop_group`). On one of
    those signals they are stopped first, in the handler, and then the run is interrupted (KeyboardInterrupt, or
    SystemExit 128 + the signal's number): a thread blocked on a server that is still up would otherwise hold the
    unwinding for as long as its request may take. Enter it in the main thread (signal handlers are set there)."""

    def __init__(self, seconds: float = STOP_SECONDS):
        self.seconds = seconds
        self.running: list[subprocess.Popen] = []
        self._handlers: dict[int, object] = {}

    def __enter__(self) -> "Processes":
        self._owner = os.getpid()  # a forked helper (an attacking process) inherits the handlers, not the duty
        for ending in ENDINGS:
            self._handlers[ending] = signal.signal(ending, self._interrupted)
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()
        for ending, handler in self._handlers.items():
            signal.signal(ending, handler)

    def popen(self, args: list[str], **kw) -> subprocess.Popen:
        process = subprocess.Popen(args, start_new_session=True, **kw)
        self.running.append(process)
        return process

    def run(self, args: list[str], timeout: float, **kw) -> tuple[int | str, str]:
        """Run ``args`` to its end (its output as text): its exit status and its standard error, or, past
        ``timeout`` seconds, a note that it was still running (it and its group are then stopped)."""
        process = self.popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, **kw)
        try:
            _, err = process.communicate(timeout=timeout)
            return process.returncode, err
        except subprocess.TimeoutExpired:
            return f"still running after {timeout:g} s", ""
        finally:
            self.stop(process)

    def stop(self, process: subprocess.Popen) -> None:
        stop_group(process, self.seconds)
        if process in self.running:
            self.running.remove(process)

    def stop_all(self) -> None:
        """SIGTERM to every process still running at once, then :func:`stop_group` each (one wait in all), with
        Ctrl-C, SIGTERM and SIGHUP ignored meanwhile, so that stopping them is not itself cut short."""
        ignored = {ending: signal.signal(ending, signal.SIG_IGN) for ending in ENDINGS}
        try:
            for process in self.running:
                if process.poll() is None:
                    process.terminate()
            deadline = time.monotonic() + self.seconds
            for process in list(self.running):
                stop_group(process, max(0.0, deadline - time.monotonic()))
            self.running.clear()
        finally:
            for ending, handler in ignored.items():
                signal.signal(ending, handler)

    def _interrupted(self, number: int, frame) -> None:
        if os.getpid() != self._owner:  # a forked child: the signal does what it would have done there
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
            return
        log(f"{signal.Signals(number).name}: stopping {len(self.running)} processes")
        self.stop_all()
        if number == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + number)


# -- a PostgreSQL server of the benchmark's own ----------------------------------------------------------------------
def postgres_programs() -> Path:
    """The folder of PostgreSQL's server programs (initdb, pg_ctl), the newest installed: on the PATH, or where Debian
    keeps them (/usr/lib/postgresql/N/bin). RuntimeError naming what is missing when there are none."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not versions:
        raise RuntimeError("PostgreSQL's server programs (initdb, pg_ctl) are not installed: "
                           "sh tests/install-system-packages.sh installs them")
    return Path(versions[-1]).parent


@contextmanager
def postgres_server() -> Iterator[tuple[str, Path]]:
    """A PostgreSQL server made with initdb in a temporary folder, on a free loopback port (trust authentication,
    loopback only), stopped and removed on leaving: its URL, postgresql://postgres@127.0.0.1:PORT/postgres, and its
    log (the errors it refused statements with, among the rest). As root
    it runs as the postgres user (through runuser), since PostgreSQL refuses to run as root; the same approach as
    tests/postgres_fixtures.py."""
    programs = postgres_programs()
    folder = Path(tempfile.mkdtemp(prefix="lcrag-bench-pg-"))  # not under a root-only folder: postgres reads it
    folder.chmod(0o755)
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir()
    as_user = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        for path in (folder, sockets):
            os.chown(path, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    try:
        run = dict(check=True, capture_output=True, text=True, timeout=120)
        try:
            subprocess.run([*as_user, str(programs / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                            "--encoding=UTF8", "--locale=C.UTF-8"], **run)
            options = f"-h 127.0.0.1 -p {port} -k {sockets} -F -c max_connections=200 -c shared_buffers=64MB"
            subprocess.run([*as_user, str(programs / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-o",
                            options, "-w", "-t", "60", "start"], **run)
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"PostgreSQL did not start: {' '.join((exc.stderr or '').split())[-300:]}") from None
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres", folder / "log"
    finally:
        subprocess.run([*as_user, str(programs / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True, timeout=60, check=False)
        shutil.rmtree(folder, ignore_errors=True)
