"""The container environment's kwargs (Harbor's `environment.kwargs`): limits applied when a task sets
none, the engine's hardening and the sandbox network's names."""

from __future__ import annotations

import re

from harbor.environments.options import EnvironmentOptions
from pydantic import Field, field_validator, model_validator
from regatta_shared.events.integrity import VerifierIntegrity

from regatta_executor.container.network.dns import ForwarderError, parse_upstreams

# Docker's default capabilities, all of them, as Harbor's docker environment gives: tasks use ping
# (NET_RAW), package scripts use mknod and setcap. The boundary is the engine's user namespace.
DEFAULT_CAP_DROP: list[str] = []


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
        description="Writable-layer cap when the task sets none: enforced by engines whose storage "
        "driver supports a size (e.g. overlay2 on xfs with pquota), else measured (storage_cap.py).",
    )
    default_logs_mb: int = Field(
        default=1024,
        ge=1,
        description="Size of /logs (agent logs and artifacts together) and of /logs/verifier, each, "
        "when the task sets no storage_mb (a task's storage_mb caps them too).",
    )
    tools_dir: str | None = Field(
        default=None,
        description="Host folder of the platform's static busybox, mounted read-only at /.regatta in "
        "every container (pid 1 and the platform's own commands run from it); default <state_dir>/tools. "
        "Made by an executor running as root, else by root beforehand.",
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
    verifier_integrity: VerifierIntegrity = Field(
        default="record",
        description="The run's verifier-integrity policy (set by the executor): `record` keeps Harbor's "
        "semantics and records evidence; `enforce` restarts the container before a shared verifier "
        "(no agent process survives) and fails the attempt on an unexplained tool-chain change.",
    )
    max_download_mb: int = Field(
        default=1024,
        ge=1,
        description="Most an attempt may bring back out of its container (logs, artifacts).",
    )
    max_output_mb: int = Field(default=16, ge=1, description="Most of one command's stdout and stderr kept.")
    sandbox_network: str = Field(default="regatta-sandbox", description="Bridge network of `public` tasks.")
    sandbox_bridge: str = Field(default="regatta0", max_length=15, description="Its host interface name.")
    allowlist_network: str = Field(
        default="regatta-allowlist", description="Bridge network of `allowlist` tasks."
    )
    allowlist_bridge: str = Field(default="regatta1", max_length=15, description="Its host interface name.")
    sandbox_dns_upstreams: list[str] = Field(
        default_factory=list,
        max_length=8,
        description="Nameserver addresses the sandbox bridge's DNS forwarder asks; "
        "default: the host's (/etc/resolv.conf).",
    )
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
        from regatta_executor.container.image.references import ImageRefusedError, parse_reference

        for entry in value:
            try:
                parse_reference(entry, "local_images entry")
            except ImageRefusedError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _networks_apart(self) -> ContainerEnvironmentOptions:
        # One bridge cannot be both open (public) and shut until an attempt opens it (allowlist).
        if self.allowlist_network == self.sandbox_network or self.allowlist_bridge == self.sandbox_bridge:
            raise ValueError(
                "allowlist_network/allowlist_bridge must differ from sandbox_network/sandbox_bridge"
            )
        return self

    @field_validator("sandbox_dns_upstreams")
    @classmethod
    def _upstreams(cls, value: list[str]) -> list[str]:
        try:
            return [str(address) for address in parse_upstreams(value)]
        except ForwarderError as exc:
            raise ValueError(str(exc)) from exc

    @field_validator("cap_drop")
    @classmethod
    def _capabilities(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.fullmatch(r"[A-Z_]{2,32}", name):
                raise ValueError(f"{name!r} is not a capability name")
        return value
