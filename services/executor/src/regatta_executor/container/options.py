"""The container environment's kwargs (Harbor's `environment.kwargs`): limits applied when a task sets
none, the engine's hardening and the sandbox network's names."""

from __future__ import annotations

import re

from harbor.environments.options import EnvironmentOptions
from pydantic import Field, field_validator

# Docker's default capabilities minus those a task never needs and an attacker would like: raw
# sockets (spoofing on the bridge), device nodes, audit writes, file capabilities.
DEFAULT_CAP_DROP = ["NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP"]


class ContainerEnvironmentOptions(EnvironmentOptions):
    """Kwargs of the container environment (Harbor's `environment.kwargs`)."""

    state_dir: str | None = Field(
        default=None,
        description="Host folder for build locks, image use times and executor ownership; "
        "default <tmp>/regatta-containers. Executors sharing an engine must share it.",
    )
    default_memory_mb: int | None = Field(
        default=2048, ge=16, description="Memory limit (swap included) when the task sets none."
    )
    default_cpus: float | None = Field(default=None, gt=0, description="CPU limit when the task sets none.")
    default_storage_mb: int | None = Field(
        default=None,
        ge=1,
        description="Writable-layer size when the task sets none (only on engines "
        "whose storage driver supports a size, e.g. overlay2 on xfs with pquota).",
    )
    default_logs_mb: int = Field(
        default=1024,
        ge=1,
        description="Size of /logs (agent logs and artifacts together) and of /logs/verifier, each, "
        "when the task sets no storage_mb (a task's storage_mb caps them too).",
    )
    allow_host_root: bool = Field(
        default=False,
        description="Run on an engine whose containers run as the host's root (no userns-remap, "
        "not rootless). Only when every task is trusted.",
    )
    max_processes: int = Field(default=1024, ge=16, description="Process (pid) limit per container.")
    image_cache_max_mb: int | None = Field(
        default=20480, ge=1, description="Built images past this total are removed least recently used first."
    )
    max_image_mb: int | None = Field(
        default=10240,
        ge=1,
        description="Largest image an attempt may run: a built one over it is removed and the attempt "
        "ends with an error; a pulled one over it is refused.",
    )
    local_images: list[str] = Field(
        default_factory=list,
        description="References of local images tasks may use without a pull (air-gapped sites, the "
        "tests' base images); any other reference is pulled from its registry (REGATTA_LOCAL_IMAGES).",
    )
    outbound_allow: str = Field(
        default="",
        max_length=10_000,
        description="Internal addresses registries and ADD URLs may be at anyway (REGATTA_OUTBOUND_ALLOW).",
    )
    run_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_.:-]{1,200}$",
        description="The attempt's run (set by the executor): a build that failed is not repeated in it.",
    )
    max_download_mb: int = Field(
        default=1024,
        ge=1,
        description="Most an attempt may bring back out of its container (logs, artifacts).",
    )
    max_output_mb: int = Field(default=16, ge=1, description="Most of one command's stdout and stderr kept.")
    sandbox_network: str = Field(default="regatta-sandbox", description="Bridge network of `public` tasks.")
    sandbox_bridge: str = Field(default="regatta0", max_length=15, description="Its host interface name.")
    cap_drop: list[str] = Field(default=list(DEFAULT_CAP_DROP), description="Capabilities removed.")
    auto_mounting: bool = Field(default=False, description="Always false: nothing of the host is mounted.")

    @field_validator("auto_mounting")
    @classmethod
    def _never_mounted(cls, value: bool) -> bool:
        if value:
            raise ValueError("the container environment never bind-mounts host folders")
        return value

    @field_validator("local_images")
    @classmethod
    def _references(cls, value: list[str]) -> list[str]:
        from regatta_executor.container.references import ImageRefusedError, parse_reference

        for entry in value:
            try:
                parse_reference(entry, "local_images entry")
            except ImageRefusedError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("cap_drop")
    @classmethod
    def _capabilities(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.fullmatch(r"[A-Z_]{2,32}", name):
                raise ValueError(f"{name!r} is not a capability name")
        return value
