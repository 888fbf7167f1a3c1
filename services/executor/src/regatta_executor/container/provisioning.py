"""Provisioning an attempt's container, for ContainerEnvironment.start: the engine checked (root remapped)
and swept of what a killed executor left, the platform's tools, the task's image (named, or built from its
`environment/`, once per content digest), its network (none, the sandbox bridge or the allowlist's), the
container's engine configuration (limits, hardening, the janitor's ownership marks), its allowlist opened,
and what it ran recorded for the attempt's report. It knows nothing of Harbor's calls: the environment
hands it the task's values."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, NotFound
from harbor.environments.base import SandboxBuildFailedError
from harbor.models.task.config import EnvironmentConfig
from regatta_shared.events import AttemptImage
from regatta_shared.security.outbound import OutboundPolicy

from regatta_executor.attempt.image_record import write_image_record
from regatta_executor.container import janitor
from regatta_executor.container.compose.attempt import ComposeServices
from regatta_executor.container.compose.model import Service
from regatta_executor.container.config import NAME_CHARS, container_config, create_container
from regatta_executor.container.engine import LABEL_MANAGED, LABEL_SESSION
from regatta_executor.container.exec import commands as execs
from regatta_executor.container.exec import tools
from regatta_executor.container.exec.platform import has_platform_mount
from regatta_executor.container.hardening import EngineRoot, engine_root, require_remapped_root
from regatta_executor.container.image.build_defects import TaskDefectError
from regatta_executor.container.image.build_errors import ImageBuildError, ImageDefectError
from regatta_executor.container.image.resolved import ResolvedImage
from regatta_executor.container.image.task_images import ImageCache
from regatta_executor.container.integrity import file_listing
from regatta_executor.container.network import allowlist, dns
from regatta_executor.container.network.bridge import (
    ensure_allowlist_network,
    ensure_sandbox_network,
    gateway_address,
)
from regatta_executor.container.options import ContainerEnvironmentOptions

MIB = 1024 * 1024
BUILD_LOG = "environment-build.log"


@dataclass(frozen=True)
class Created:
    """The attempt's container, started, and what its creation settled."""

    container_id: str
    enforced: frozenset[str]  # the limits the engine holds it to
    default_user: str  # the user of commands given none
    platform_shell: bool  # whether the platform's tools are mounted in it


class Provisioning:
    """What one attempt's container is made of, on one engine client, under the executor's state folder."""

    def __init__(
        self,
        client: docker.DockerClient,
        options: ContainerEnvironmentOptions,
        state_dir: Path,
        session_id: str,
        logger: logging.Logger,
    ) -> None:
        self.client = client
        self.options = options
        self.state_dir = state_dir
        self.session_id = session_id
        self.logger = logger
        self.engine_root = EngineRoot(remapped=False)

    @property
    def owners_dir(self) -> Path:
        return self.state_dir / "owners"

    @property
    def tools_dir(self) -> Path:
        # Absolute: the engine mounts it by its path.
        return (
            Path(self.options.tools_dir) if self.options.tools_dir else self.state_dir / "tools"
        ).absolute()

    async def prepare_engine(self, sweep_sidecars: Callable[[docker.DockerClient, Path], list[str]]) -> None:
        """The engine's root mapping checked, what a killed executor left removed (its sidecars by
        `sweep_sidecars`), and the platform's tools ready to mount."""
        check = engine_root if self.options.allow_host_root else require_remapped_root
        self.engine_root = await execs.in_thread(check, self.client)
        await execs.in_thread(janitor.sweep_once, self.client, self.owners_dir, sweep_sidecars)
        await execs.in_thread(tools.prepared, self.tools_dir)

    def labels(self) -> dict[str, str]:
        """The janitor's ownership marks and the attempt's session, on everything made for it."""
        return {
            LABEL_MANAGED: "1",
            **janitor.ownership_labels(self.owners_dir),
            LABEL_SESSION: NAME_CHARS.sub("-", self.session_id)[:200],
        }

    def _image_cache(self) -> ImageCache:
        options = self.options
        return ImageCache(
            self.client,
            self.state_dir,
            options.image_cache_max_mb * MIB if options.image_cache_max_mb else None,
            local_images=options.local_images,
            outbound=OutboundPolicy.parse(options.outbound_allow),
            max_image_bytes=options.max_image_mb * MIB if options.max_image_mb else None,
        )

    async def image(
        self,
        force_build: bool,
        *,
        task: EnvironmentConfig,
        trial_dir: Path,
        environment_dir: Path,
        network_disabled: bool,
        reference: str | None = None,
        context: Path | None = None,
        dockerfile: str = "Dockerfile",
        buildargs: dict[str, str] | None = None,
    ) -> ResolvedImage:
        """The task's image (or a compose service's): named, or built from `context` (the task's
        environment folder unless given)."""
        cache = self._image_cache()
        reference = reference or task.docker_image
        try:
            trial_dir.mkdir(parents=True, exist_ok=True)
            # Where the image came from (pulled digests, base image ids) stays with the attempt: the
            # build log is among its downloads.
            with open(trial_dir / BUILD_LOG, "a", encoding="utf-8", errors="replace") as log:
                if reference and context is None:
                    resolved = await execs.in_thread(cache.named, reference)
                    log.writelines(f"{fact}\n" for fact in resolved.facts)
                    return resolved
                network = await self.build_network(disabled=network_disabled)
                return await execs.in_thread(
                    cache.built,
                    context or environment_dir,
                    timeout_sec=task.build_timeout_sec,
                    network_mode=network,
                    log=log,
                    force=force_build,
                    dockerfile=dockerfile,
                    buildargs=buildargs,
                    run_id=self.options.run_id,
                )
        except ImageDefectError as exc:
            raise TaskDefectError(f"task defect: {exc}") from exc
        except ImageBuildError as exc:
            raise SandboxBuildFailedError(str(exc)) from exc

    async def network(self, *, allowlisted: bool, disabled: bool) -> str:
        """The network of the task's container: none, the isolated sandbox bridge or the allowlist's."""
        if allowlisted:
            await execs.in_thread(
                ensure_allowlist_network,
                self.client,
                self.options.allowlist_network,
                self.options.allowlist_bridge,
                os.environ.get("REGATTA_OUTBOUND_ALLOW"),
            )
            return self.options.allowlist_network
        return await self.build_network(disabled=disabled)

    async def build_network(self, *, disabled: bool) -> str:
        """The network of the task's build steps: the sandbox bridge unless the task has no network
        (an allowlist restricts the agent and verifier, not the task's own image, as in Harbor)."""
        if disabled:
            return "none"
        return await execs.in_thread(
            ensure_sandbox_network,
            self.client,
            self.options.sandbox_network,
            self.options.sandbox_bridge,
            self.options.sandbox_dns_upstreams,
        )

    def limits(self, *, memory_mb: int | None, cpus: float | None, storage_mb: int | None) -> dict[str, Any]:
        """The container's limits: the task's (as Harbor resolves them), else the executor's defaults;
        its log folders get the task's storage too."""
        options = self.options
        return {
            "memory_mb": memory_mb or options.default_memory_mb,
            "cpus": cpus or options.default_cpus,
            "storage_mb": storage_mb or options.default_storage_mb,
            "logs_mb": storage_mb or options.default_logs_mb,
        }

    def config(
        self,
        *,
        image: str,
        name: str,
        network: str,
        workdir: str | None,
        image_entrypoint: Sequence[str],
        image_workdir: str,
        limits: dict[str, Any],
    ) -> tuple[dict[str, Any], set[str]]:
        """The engine's configuration of a container of the attempt (main's or a sidecar's)."""
        return container_config(
            image=image,
            name=name,
            session_id=self.session_id,
            network=network,
            workdir=workdir,
            image_entrypoint=image_entrypoint,
            image_workdir=image_workdir,
            tools_dir=self.tools_dir,
            options=self.options,
            owners_dir=self.owners_dir,
            engine_root=self.engine_root,
            **limits,
        )

    def create_and_start(
        self,
        resolved: ResolvedImage,
        name: str,
        network: str,
        *,
        workdir: str | None,
        main: Service | None,
        services: ComposeServices | None,
        limits: dict[str, Any],
        on_created: Callable[[str], None],
    ) -> Created:
        """The agent's container of `resolved`, created (`on_created` hears its id before it starts)
        and started. It runs as the image's USER: so do commands given no user, as under Harbor (uid 0
        rather than an empty user: see harbor_commands.ROOT_USERS); a compose task's main sets its own."""
        default_user = resolved.user or "0"
        config, enforced = self.config(
            image=resolved.image_id,
            name=name,
            network=network,
            workdir=workdir,
            # Compose's entrypoint for main replaces the image's, as under Compose.
            image_entrypoint=main.entrypoint if main and main.entrypoint is not None else resolved.entrypoint,
            image_workdir=resolved.workdir,
            limits=limits,
        )
        if services is not None:
            # Compose's main: its environment, its user for commands given none, its named volumes,
            # and its name on the attempt's network.
            default_user = services.configure_main(config, default_user)
        container = create_container(self.client, config, enforced, self.logger)
        on_created(str(container.id))
        platform_shell = has_platform_mount(container.attrs)
        container.start()
        return Created(str(container.id), frozenset(enforced), default_user, platform_shell)

    def remove(self, container_id: str | None, name: str, delete: bool) -> None:
        """The attempt's container removed (with its anonymous volumes), or only killed."""
        for ident in filter(None, (container_id, name)):
            try:
                if delete:
                    self.client.api.remove_container(ident, force=True, v=True)
                else:
                    self.client.api.kill(ident)
                return
            except NotFound:
                continue
            except APIError as exc:
                if exc.status_code == 409:  # already being removed
                    return
                raise

    def address(self, container: str, network: str) -> str:
        attrs = self.client.api.inspect_container(container)
        networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
        return str(networks.get(network, {}).get("IPAddress") or "")

    def open_allowlist(
        self, container: str, name: str, network: str, allowed_hosts: list[str]
    ) -> allowlist.AttemptState:
        """The container's allowed hosts, opened before anything but its pid 1 runs in it."""
        address = self.address(container, network)
        try:
            upstreams = dns.parse_upstreams(self.options.sandbox_dns_upstreams) or dns.host_upstreams()
            return allowlist.open_attempt(
                bridge=self.options.allowlist_bridge,
                gateway=gateway_address(self.client, network),
                container=name,
                address=str(address or ""),
                allowed_hosts=allowed_hosts,
                upstreams=upstreams,
            )
        except (ValueError, dns.ForwarderError) as exc:
            raise allowlist.AllowlistError(f"cannot open the allowlist: {exc}") from exc

    async def list_image_files(self, container: str, image: ResolvedImage) -> None:
        """The image's files, for the tool chain's evidence, from this container before anything of
        the agent's runs (kept per image, so once per image and executor); then, only right after the
        image was made, the wait that closes the listing's blind spot (file_listing.py)."""
        try:
            listing = await execs.in_thread(file_listing.of_image, self.client.api, container, image.image_id)
        except (DockerException, file_listing.ListingError) as exc:
            # The check then asks the engine for the changes instead.
            self.logger.warning("the image's files could not be listed: %s", exc)
            return
        await asyncio.sleep(file_listing.seconds_to_wait(listing))


def record_image(trial_dir: Path, image: ResolvedImage | None) -> None:
    """What the container runs, for the attempt's report (attempt/image_record.py)."""
    if image is None:
        return
    record = AttemptImage(
        reference=image.reference,
        image_id=image.image_id,
        registry_digest=image.registry_digest,
        source=image.source,  # type: ignore[arg-type]
    )
    write_image_record(trial_dir, record)
