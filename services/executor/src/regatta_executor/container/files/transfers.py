"""Files in and out of the container environment's container (the base of `ContainerEnvironment`):
uploads staged and sent as one archive before anything could see them, a folder's archive kept to
answer several reads and `test -d` checks until anything runs, the download budget, and the check
that the engine still sees the container's files. Each transfer tells the attempt's turn first
(verifier_turn.py: a read of the agent's logs may end it, an upload of the tests start the verifier)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, override

from docker import DockerClient
from docker.errors import DockerException, NotFound
from harbor.environments.base import BaseEnvironment

from regatta_executor.container.exec import commands as execs
from regatta_executor.container.exec.harbor_commands import AGENT_LOGS, LOGS, ROOT_USERS, within
from regatta_executor.container.files import archive as files
from regatta_executor.container.files import snapshots

_MIB = 1024 * 1024
# A folder read back to answer several reads is not worth more than this; past it, each read goes alone.
SNAPSHOT_MAX_BYTES = 64 * _MIB
# A folder every container has (the engine makes it) and no process in it can remove (it is a mount point
# there): if the engine cannot see it, it has lost its view of the container's files.
_ALWAYS_THERE = "/proc"


class TurnHooks(Protocol):
    """What the attempt's turn hears of the transfers (verifier_turn.VerifierTurn)."""

    async def before_operation(self) -> None: ...

    async def before_download(self, path: str) -> None: ...

    async def expect_tests(self, source: Path, target: str, *, single: bool) -> None: ...

    async def before_upload_dir(self, source: Path, target: str) -> None: ...


class ContainerTransfers(BaseEnvironment):
    """The file transfers of `ContainerEnvironment`; the state they use is its (made in its `__init__`)."""

    _client: DockerClient
    _name: str
    _container_id: str | None
    _staged: files.StagedArchive | None
    _snapshot: snapshots.Snapshot | None
    _download_budget: int
    # Folders downloaded as they were then on the host: (container folder, host folder, manifest).
    _downloaded: dict[str, tuple[Path, files.Manifest]]
    _turn: TurnHooks

    @override
    async def is_dir(self, path: str, user: str | int | None = None) -> bool:
        # As root (what Harbor asks), `test -d` sees what the engine's archive of the folder shows.
        if self._resolve_user(user) in ROOT_USERS:
            snapshot = await self._snapshot_for(files.container_path(path), root=files.container_path(path))
            if snapshot is not None:
                member = snapshot.member(path)
                if member is not None and not member.issym() and not snapshot.through_link(path):
                    return member.isdir()
        return await super().is_dir(path, user)

    @override
    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = files.container_path(target_path)
        await self._turn.expect_tests(Path(source_path), target, single=True)
        self._forget_downloads(target)
        await execs.in_thread(self._stage().add_file, Path(source_path), target)

    @override
    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        target = files.container_path(target_dir)
        if await self.unchanged_since_download(Path(source_dir), target):
            # What Harbor read back, sent back unchanged: the container holds it already, as the agent
            # left it, which is what a verifier sees where the logs are mounted (Harbor's docker).
            return
        self._forget_downloads(target)
        await self._turn.before_upload_dir(Path(source_dir), target)
        if not any(Path(source_dir).iterdir()):
            # Nothing to archive, but the folder must exist afterwards (`mkdir -p`: an archive entry
            # for it would reset an existing folder's owner and mode).
            await self.exec(self._ensure_dirs_command([target], chmod=False), user="root")
            return
        await execs.in_thread(self._stage().add_dir, Path(source_dir), target)

    def _forget_downloads(self, target: str) -> None:
        """An upload into a folder read back earlier: sending the host's copy back is no longer a no-op."""
        for path in [p for p in self._downloaded if within(p, target) or within(target, p)]:
            del self._downloaded[path]

    def _stage(self) -> files.StagedArchive:
        if self._staged is None:
            self._staged = files.StagedArchive()
        return self._staged

    async def _flush(self) -> None:
        """Send the staged uploads (before anything that could see them), once the turn is settled."""
        await self._turn.before_operation()
        staged, self._staged = self._staged, None
        if staged is None:
            return
        if not staged:
            staged.discard()
            return
        buffer = staged.take()
        try:
            await execs.in_thread(self._client.api.put_archive, self._running(), "/", buffer)
        finally:
            buffer.close()
        # Written where the engine sees the container's files, which must be the container's own.
        await self._check_engine_view()
        snapshot = self._snapshot
        if snapshot is not None:
            # The archive of a folder still answers for its parts no upload went into, if the uploads
            # could not reach past their own folders (no symlink on the way or inside).
            if all(snapshot.covers(target) and snapshot.is_plain_tree(target) for target in staged.targets):
                snapshot.stale.extend(staged.targets)
            else:
                self._drop_snapshot()

    def _discard_transfers(self) -> None:
        """The attempt ends: uploads not sent yet and the folder read back are dropped."""
        if self._staged is not None:
            self._staged.discard()
            self._staged = None
        self._drop_snapshot()

    def _drop_snapshot(self) -> None:
        if self._snapshot is not None:
            self._snapshot.close()
            self._snapshot = None

    async def _snapshot_for(self, path: str, root: str | None) -> snapshots.Snapshot | None:
        """An archive that answers for `path`: the one already read if nothing ran since, else one of
        `root` read now (None: when `root` is None, or the archive cannot answer)."""
        await self._flush()
        if self._snapshot is not None and self._snapshot.covers(path):
            return self._snapshot
        if root is None:
            return None
        self._drop_snapshot()
        limit = min(self._download_budget, SNAPSHOT_MAX_BYTES)
        try:
            snapshot, size = await execs.in_thread(
                snapshots.fetch_snapshot, self._client.api, self._running(), root, limit
            )
        except NotFound:
            await self._check_engine_view()
            return None
        except files.DownloadTooLargeError:
            return None
        self._download_budget -= size
        if not snapshot.usable or not snapshot.covers(path):
            snapshot.close()
            return None
        self._snapshot = snapshot
        return snapshot

    async def _check_engine_view(self) -> None:
        """The engine reads and writes a running container's files through its own mount of them on
        the host. If that mount is gone (unmounted on the host by something else while the container
        runs), the archive API silently works on an empty folder instead and execs by user name fail:
        the attempt cannot go on, and must not be scored."""
        try:
            response = await execs.in_thread(
                self._client.api.head,
                self._client.api._url("/containers/{0}/archive", self._running()),
                params={"path": _ALWAYS_THERE},
            )
        except (DockerException, OSError):
            return
        if response.status_code == 404:
            raise EngineViewLostError(
                f"the Docker engine no longer sees the files of container {self._name} (its mount of "
                "the container's file system was removed on the host while the container ran); "
                "files cannot be moved in or out of it"
            )

    @override
    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        path = files.container_path(source_path)
        # The agent's logs are read file by file and then as a folder, and the artifacts right after:
        # one archive of /logs answers for all of them.
        root = LOGS if within(path, AGENT_LOGS) else None
        snapshot = await self._snapshot_for(path, root)
        if snapshot is not None and snapshot.member(path) is not None and not snapshot.through_link(path):
            await execs.in_thread(snapshot.extract_file, path, Path(target_path))
            return
        try:
            size = await execs.in_thread(
                files.download_file,
                self._client.api,
                self._running(),
                path,
                Path(target_path),
                self._download_budget,
            )
        except NotFound:
            await self._check_engine_view()
            raise
        self._download_budget -= size

    @override
    async def download_dir(self, source_dir: Path | str, target_dir: Path | str) -> None:
        path = files.container_path(str(source_dir))
        await self._turn.before_download(path)
        snapshot = await self._snapshot_for(path, LOGS if within(path, AGENT_LOGS) else path)
        if snapshot is not None and not snapshot.through_link(path):
            member = snapshot.member(path)
            if member is not None and member.isdir():
                await execs.in_thread(snapshot.extract_dir, path, Path(target_dir))
                await self._downloaded_as(path, Path(target_dir))
                return
        try:
            size = await execs.in_thread(
                files.download_dir,
                self._client.api,
                self._running(),
                path,
                Path(target_dir),
                self._download_budget,
            )
        except NotFound:
            await self._check_engine_view()
            raise
        self._download_budget -= size
        await self._downloaded_as(path, Path(target_dir))

    async def _downloaded_as(self, path: str, target: Path) -> None:
        self._downloaded[path] = (target.resolve(), await execs.in_thread(files.manifest, target))

    async def unchanged_since_download(self, source: Path, target: str) -> bool:
        """Whether uploading `source` to `target` would only send back what was downloaded from there
        (Harbor uploads the agent's logs back after reading them, for environments without mounts)."""
        downloaded = self._downloaded.get(target)
        if downloaded is None or downloaded[0] != source.resolve():
            return False
        return downloaded[1] == await execs.in_thread(files.manifest, source)

    def _running(self) -> str:
        if self._container_id is None:
            raise RuntimeError("the container environment has not been started")
        return self._container_id


class EngineViewLostError(RuntimeError):
    """The engine lost its view of a running container's files (an infrastructure fault)."""
