"""A throwaway PostgreSQL server for a test: a new cluster in a temporary dir, on 127.0.0.1 and a
free port, trusting local connections, stopped and deleted afterwards. Needs Debian's
`postgresql` package (`apt-get install -y postgresql`: initdb and pg_ctl); run as root, the server
runs as the `postgres` user (PostgreSQL refuses to run as root)."""

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

USER = "attnexp"


def server_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl: on the PATH, or Debian's /usr/lib/postgresql/<v>/bin."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def postgres_server(database: str = "searches") -> Iterator[str]:
    """Start a server; yield the SQLAlchemy URL of a new database on it (psycopg 3)."""
    binaries = server_binaries()
    if binaries is None:
        raise FileNotFoundError("no initdb/pg_ctl: apt-get install -y postgresql")
    as_root = os.geteuid() == 0
    runner = ["runuser", "-u", "postgres", "--"] if as_root else []
    root = Path(tempfile.mkdtemp(prefix="attnexp-pg-"))
    data = root / "data"
    if as_root:
        shutil.chown(root, "postgres")
    port = free_port()

    def run(*cmd: str) -> None:
        subprocess.run([*runner, *cmd], check=True, capture_output=True, text=True, timeout=120)

    try:
        run(str(binaries / "initdb"), "-D", str(data), "-U", USER, "-A", "trust", "--no-sync")
        options = f"-k {root} -p {port} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"),
            "-w", "start")  # fmt: skip
        try:
            run(str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", USER,
                database)  # fmt: skip
            yield f"postgresql+psycopg://{USER}@127.0.0.1:{port}/{database}"
        finally:
            run(str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":  # python tests/postgres_server.py: a server until Enter or Ctrl-C
    with postgres_server() as url, suppress(KeyboardInterrupt, EOFError):
        input(f"{url}\nEnter stops it ")
