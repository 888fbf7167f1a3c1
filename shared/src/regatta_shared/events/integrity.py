"""What the platform saw of an attempt's integrity before its verifier ran (AttemptFinished.integrity).

Evidence, not a verdict: under the default policy (`record`) none of it changes the score, which is the
verifier's, as under Harbor. Under `enforce` the attempt fails when `unexplained` is more than 0 (and no
agent process is alive when the verifier starts); in Harbor's `separate` verifier mode the verifier's
container never held anything of the agent's but the outputs collected into it (docs/reliability.md).

Every list is bounded: the counts say how many there were, the lists name the first of them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

VerifierIntegrity = Literal["record", "enforce"]
VERIFIER_INTEGRITY_POLICIES: tuple[VerifierIntegrity, ...] = ("record", "enforce")
VerifierMode = Literal["shared", "separate"]
MAX_NAMED_FILES = 50
MAX_NAMED_PROCESSES = 20
MAX_NAMED_WRITES = 20


class FileFacts(BaseModel):
    """One side (the image's, or the container's after the agent) of a changed file."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["file", "symlink", "directory", "other"]
    size: int | None = Field(None, ge=0)
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    mode: int = Field(0, ge=0, le=0o7777)
    uid: int = Field(0, ge=0, le=2**32)
    gid: int = Field(0, ge=0, le=2**32)
    link: str | None = Field(None, max_length=1024)


class Explanation(BaseModel):
    """What accounts for a change, and how far it can be trusted."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # `dpkg`: the file's MD5 is the one /var/lib/dpkg/info/<package>.md5sums lists for it (a symlink:
    # the package's file list names it); `pip`: the file's SHA-256 and size are those a `RECORD` of an
    # installed distribution lists for it; `bytecode`: a Python byte-code cache (Python rebuilds it from
    # its source; under `enforce` it is removed before the verifier runs); `ldconfig`: the loader's cache,
    # every library it names being the image's or explained.
    source: Literal["dpkg", "pip", "bytecode", "ldconfig"]
    package: str = Field(max_length=300)
    # Both records live in the container, which the agent (root there) can write: they explain an
    # honest install, they do not prove one.
    trust: Literal["container-record"] = "container-record"


class ToolChainChange(BaseModel):
    """A file of the verifier's tool chain that differs from the image's: a program on the image's
    PATH, a library, the loader's configuration or cache, or an interpreter start-up hook."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    path: str = Field(max_length=4096)
    change: Literal["added", "changed", "deleted"]
    before: FileFacts | None = None
    after: FileFacts | None = None
    explained_by: Explanation | None = None

    @property
    def unexplained(self) -> bool:
        # A deletion runs nothing: alone, it cannot turn a failing test into a pass.
        return self.change != "deleted" and self.explained_by is None


class AgentProcess(BaseModel):
    """A process the agent started that was alive when the verifier started."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    pid: int = Field(ge=1)
    name: str = Field(max_length=64)
    command: str = Field("", max_length=300)


class AttemptIntegrity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    policy: VerifierIntegrity = "record"
    verifier_mode: VerifierMode = "shared"
    # False when the platform could not look (the listing failed, the environment does not say):
    # nothing below is known then.
    checked: bool = True
    changes: list[ToolChainChange] = Field(default_factory=list, max_length=MAX_NAMED_FILES)
    changes_total: int = Field(0, ge=0)
    unexplained: int = Field(0, ge=0)
    # Alive when the verifier started (shared mode under `record`; always none under `enforce`).
    processes: list[AgentProcess] = Field(default_factory=list, max_length=MAX_NAMED_PROCESSES)
    processes_total: int = Field(0, ge=0)
    # /tests or the reward files written by something other than the platform's upload and the
    # verifier's own run (what the platform wrote differs from what the verifier found).
    verifier_files_written: list[str] = Field(default_factory=list, max_length=MAX_NAMED_WRITES)
    note: str | None = Field(None, max_length=2000)

    @property
    def suspicious(self) -> bool:
        """Something a reviewer should look at: an unexplained change to the verifier's tools, or its
        files written by another hand."""
        return self.unexplained > 0 or bool(self.verifier_files_written)
