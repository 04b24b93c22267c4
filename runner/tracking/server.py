"""A tracking server for many writers: MLflow's server on PostgreSQL, with an artifact store it serves itself.

Children of a sweep on any machine log over HTTP to one server; the server writes the database and the artifact
folder. Without a database URI, runner keeps a PostgreSQL cluster of its own in the server's folder (initdb on first
start, reachable only through a Unix socket there), started with the server and stopped with it.
"""
from __future__ import annotations

import glob
import hashlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from runner.errors import RunnerError

# psycopg is imported where the server's database is made: only `runner tracking server` needs it.

DATABASE = "mlflow"
DB_USER = "mlflow"
PG_PORT = 5432          # names the socket file in the cluster's own folder; nothing listens on TCP
SOCKET_PATH_MAX = 100   # a Unix socket's path is at most ~107 bytes


@dataclass(frozen=True)
class Postgres:
    """A PostgreSQL cluster runner keeps in `data`, run as `user` (PostgreSQL refuses to run as root)."""
    bindir: Path
    data: Path
    socket_dir: Path
    user: str | None        # the account the server runs as when this process is root; None: this process's

    @property
    def uri(self) -> str:
        return f"postgresql://{DB_USER}@/{DATABASE}?host={self.socket_dir}&port={PG_PORT}"

    @property
    def version(self) -> str:
        out = subprocess.run([str(self.bindir / "postgres"), "--version"], capture_output=True, text=True).stdout
        found = re.search(r"\d+(\.\d+)+", out)
        return found[0] if found else "?"


def find_bindir() -> Path:
    """Where PostgreSQL's server programs are: on PATH, else Debian's /usr/lib/postgresql/N/bin (the newest)."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if versions:
        return Path(versions[-1]).parent
    raise RunnerError("PostgreSQL's server is not installed here (no pg_ctl or initdb on PATH or in "
                      "/usr/lib/postgresql/*/bin). Install it (Debian: apt-get install postgresql), or point "
                      "--backend-uri at an existing database: postgresql://USER:PASSWORD@HOST:PORT/DATABASE.",
                      where="--backend-uri")


def postgres_in(folder: Path) -> Postgres:
    bindir = find_bindir()
    user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise RunnerError("PostgreSQL does not run as root, and this machine has no 'postgres' account to run it "
                              "as. Run runner tracking server as another user, or point --backend-uri at an existing "
                              "database.", where="--backend-uri") from None
        user = "postgres"
    data = folder.resolve() / "postgres"
    if user is not None:
        _check_reachable(data, user)
    sock = folder.resolve() / "postgres-socket"
    if len(str(sock)) > SOCKET_PATH_MAX:  # a deep folder: the socket goes to a short path of its own
        sock = Path(tempfile.gettempdir()) / f"runner-pg-{hashlib.sha1(str(data).encode()).hexdigest()[:12]}"
    return Postgres(bindir=bindir, data=data, socket_dir=sock, user=user)


def _check_reachable(data: Path, user: str) -> None:
    """The account PostgreSQL runs as can enter every folder above its data (root's own folders are often closed)."""
    account = pwd.getpwnam(user)
    for folder in reversed(data.parents):
        if not folder.exists():
            return
        st = folder.stat()
        if st.st_uid != account.pw_uid and not st.st_mode & 0o001:
            raise RunnerError(f"PostgreSQL runs as the '{user}' account (it refuses root), and {folder} is closed to "
                              f"it, so it cannot keep its data in {data}. Give --dir a folder it can reach (e.g. "
                              f"/srv/mlflow-server), open the folder to it (chmod o+x {folder}), or point "
                              "--backend-uri at an existing database.", where="--dir")


def _as_owner(pg: Postgres, argv: list[str]) -> list[str]:
    return ["runuser", "-u", pg.user, "--", *argv] if pg.user else argv


def _run(pg: Postgres, argv: list[str], what: str) -> None:
    done = subprocess.run(_as_owner(pg, argv), capture_output=True, text=True)
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()
        raise RunnerError(f"PostgreSQL could not {what}: {lines[-1][:300]} (data in {pg.data}; its log: "
                          f"{pg.data / 'server.log'}).", where="--dir")


def start_postgres(pg: Postgres) -> None:
    """initdb on first use, then start the cluster and make the database; idempotent."""
    owner = pwd.getpwnam(pg.user) if pg.user else None
    pg.data.parent.mkdir(parents=True, exist_ok=True)
    pg.socket_dir.mkdir(mode=0o700, exist_ok=True)  # only the server's account may connect
    if owner is not None:
        os.chown(pg.socket_dir, owner.pw_uid, owner.pw_gid)
    if not (pg.data / "PG_VERSION").exists():
        if owner is not None:
            pg.data.mkdir(mode=0o700, exist_ok=True)
            os.chown(pg.data, owner.pw_uid, owner.pw_gid)
        # trust on the socket only: nothing listens on TCP, and the socket's folder is this user's
        _run(pg, [str(pg.bindir / "initdb"), "-D", str(pg.data), "-U", DB_USER, "-A", "trust", "-E", "UTF8"],
             "create its database cluster")
    if not _running(pg):
        options = f"-c listen_addresses='' -k {pg.socket_dir} -p {PG_PORT} -c max_connections=200"
        _run(pg, [str(pg.bindir / "pg_ctl"), "-D", str(pg.data), "-l", str(pg.data / "server.log"), "-o", options,
                  "-w", "-t", "60", "start"], "start")
    _create_database(pg)


def _running(pg: Postgres) -> bool:
    done = subprocess.run(_as_owner(pg, [str(pg.bindir / "pg_ctl"), "-D", str(pg.data), "status"]),
                          capture_output=True, text=True)
    return done.returncode == 0


def _create_database(pg: Postgres) -> None:
    import psycopg

    with psycopg.connect(host=str(pg.socket_dir), port=PG_PORT, user=DB_USER, dbname="postgres",
                         autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
            conn.execute(f"CREATE DATABASE {DATABASE}")


def stop_postgres(pg: Postgres) -> None:
    if _running(pg):
        _run(pg, [str(pg.bindir / "pg_ctl"), "-D", str(pg.data), "-m", "fast", "-w", "stop"], "stop")


def allowed_hosts(host: str, extra: list[str]) -> str:
    """The Host headers the server answers: this machine by every name children may use, on any port, and `extra`
    (MLflow's default, localhost and private addresses, leaves out a cluster's host names)."""
    names = ["localhost", "127.0.0.1", socket.gethostname(), socket.getfqdn()]
    if host not in ("0.0.0.0", "::", "127.0.0.1", "localhost"):
        names.append(host)
    try:
        names += socket.gethostbyname_ex(socket.gethostname())[2]
    except OSError:
        pass
    return ",".join(dict.fromkeys([*(f"{n}:*" for n in names if n), *(n for n in names if n), *extra]))


def server_argv(backend_uri: str, artifacts: Path, host: str, port: int, workers: int, hosts: str) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri,
            "--artifacts-destination", str(artifacts), "--serve-artifacts", "--host", host, "--port", str(port),
            "--workers", str(workers), "--allowed-hosts", hosts]


def shown_uri(uri: str) -> str:
    """A database URI without its password, for the console."""
    parts = urlsplit(uri)
    if parts.password:
        netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return uri
