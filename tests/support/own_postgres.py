"""A Postgres cluster of the test's own, for tests that crash or restart the database.

The machine's Postgres on 5432 is shared with everything else running (other tests, a demo stack):
restarting it with `-m immediate` would break them. A test that needs a database to crash starts its own
cluster (initdb as the `postgres` user, on a free port, its socket in the cluster's folder), restarts that
one, and removes it at the end.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from regatta import nats_server
from tests.conftest import unavailable


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


class OwnPostgres:
    def __init__(self) -> None:
        bin_dir = _bin_dir()
        if bin_dir is None or shutil.which("runuser") is None or os.geteuid() != 0:
            unavailable("an own Postgres cluster needs root, runuser and /usr/lib/postgresql/*/bin")
        assert bin_dir is not None
        self.bin = bin_dir
        # Not under pytest's tmp_path: the `postgres` user must reach the folder, and root's is 0700.
        self.root = Path(tempfile.mkdtemp(prefix="regatta-own-pg-"))
        self.data = self.root / "data"
        self.port = nats_server.free_port()
        shutil.chown(self.root, "postgres", "postgres")
        self._as_postgres("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, tool: str, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(self.bin / tool), *args],
            check=True,
            capture_output=True,
            timeout=180,
        )

    def _ctl(self, action: str, *args: str) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "postgres.log")
        self._as_postgres("pg_ctl", action, "-D", str(self.data), "-l", log, "-o", options, "-w", *args)

    def start(self) -> None:
        self._ctl("start")

    def restart_immediately(self) -> None:
        """A crash and recovery: `-m immediate` skips the shutdown checkpoint, as a power cut would."""
        self._ctl("restart", "-m", "immediate")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self._ctl("stop", "-m", "immediate")
        shutil.rmtree(self.root, ignore_errors=True)
