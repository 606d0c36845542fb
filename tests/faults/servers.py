"""Redis and PostgreSQL servers of a fault test's own, on ports of this run's range
(``LASER_FAULT_PORTS``, default 18400-18499), never the ones CI's test database and broker live
on: a test stops and starts them at will.

PostgreSQL refuses to run as root: as root the cluster is made and run as the ``postgres`` user
(``runuser``), in a temporary directory that user owns.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")


_handed_out: set[int] = set()


def free_port() -> int:
    """A port of the range that nothing listens on and this process has not handed out."""
    low, high = (int(x) for x in os.environ.get("LASER_FAULT_PORTS", "18400-18499").split("-"))
    for port in range(low, high + 1):
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free port in {low}-{high}")


def _wait(check, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise RuntimeError(f"{what} within {timeout} s")
        time.sleep(0.05)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


class RedisServer:
    """``redis-server`` on a free port with its data in ``workdir``; ``appendonly`` keeps the
    broker's queues across a restart, as a production Redis does."""

    def __init__(self, workdir: Path, *, appendonly: bool = True) -> None:
        self.workdir, self.port = workdir, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                     "--dir", str(workdir), "--save", "", "--daemonize", "no",
                     "--appendonly", "yes" if appendonly else "no", "--appendfsync", "always"]
        self.proc: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        _wait(lambda: _listening(self.port), 10, f"redis on {self.port} did not start")
        return self

    def kill(self) -> None:
        """SIGKILL: a crash (what ``appendfsync always`` wrote survives)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def client(self):
        import redis

        return redis.Redis.from_url(self.url)


class PostgresServer:
    """A throwaway cluster (``initdb`` + ``pg_ctl``) on a free port, trust auth, in a temporary
    directory of its own (the ``postgres`` user cannot enter pytest's, which root owns)."""

    def __init__(self) -> None:
        self.workdir, self.port = Path(tempfile.mkdtemp(prefix="laser-pg-")), free_port()
        self.data = self.workdir / "data"
        self.user = "postgres"
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/laser"

    def _run(self, *argv: str) -> str:
        command = [str(a) for a in argv]
        if os.geteuid() == 0:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def init(self) -> PostgresServer:
        if os.geteuid() == 0:
            shutil.chown(self.workdir, self.user, self.user)
        self._run(PG_BIN / "initdb", "-D", self.data, "-U", "postgres", "--auth", "trust",
                  "-E", "UTF8", "--no-sync")
        self.start()
        self._run(PG_BIN / "createdb", "-h", "127.0.0.1", "-p", self.port, "-U", "postgres",
                  "laser")
        return self

    def start(self) -> None:
        self._run(PG_BIN / "pg_ctl", "-D", self.data, "-l", self.workdir / "pg.log", "-w",
                  "-o", f"-p {self.port} -k {self.workdir} -c listen_addresses=127.0.0.1 "
                        "-c fsync=off", "start")

    def stop(self, mode: str = "fast") -> None:
        """``fast``: every session is cut, as a restart does; ``immediate``: a crash."""
        self._run(PG_BIN / "pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.stop("immediate")
        shutil.rmtree(self.workdir, ignore_errors=True)
