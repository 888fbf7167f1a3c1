"""Settings read from the environment; every process of every service uses the same names."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# Harbor's own default registry (harbor.constants.DEFAULT_REGISTRY_URL, harbor 0.26): where a bare
# `name[@version]` resolves, as `harbor run -d NAME@VERSION` does without a registry flag.
HARBOR_DEFAULT_REGISTRY_URL = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    # One server's URL, or a cluster's URLs comma separated: a client fails over among them.
    nats_url: str = Field("nats://127.0.0.1:4222", alias="NATS_URL")
    # Copies of each JetStream stream and bucket the services declare: 3 on a 3-server NATS cluster
    # (deploy/kubernetes), 1 on a single server (a count above the cluster's size is refused by NATS).
    nats_replicas: int = Field(1, ge=1, le=5, alias="REGATTA_NATS_REPLICAS")
    database_url: str | None = Field(None, alias="DATABASE_URL")
    data_dir: Path = Field(Path(".regatta"), alias="REGATTA_DATA_DIR")
    bootstrap_token: str | None = Field(None, alias="REGATTA_BOOTSTRAP_TOKEN")
    bootstrap_workspace: str = Field("default", alias="REGATTA_BOOTSTRAP_WORKSPACE")
    master_key: str | None = Field(None, alias="REGATTA_MASTER_KEY")
    gateway_host: str = Field("127.0.0.1", alias="REGATTA_GATEWAY_HOST")
    gateway_port: int = Field(8000, alias="REGATTA_GATEWAY_PORT")
    public_url: str | None = Field(None, alias="REGATTA_PUBLIC_URL")
    executor_slots: int = Field(4, alias="REGATTA_EXECUTOR_SLOTS")
    executor_environment: str = Field("auto", alias="REGATTA_EXECUTOR_ENVIRONMENT")
    executor_environment_kwargs: str = Field("{}", alias="REGATTA_EXECUTOR_ENVIRONMENT_KWARGS")
    job_ack_wait: float = Field(30.0, alias="REGATTA_JOB_ACK_WAIT")
    # What this executor host offers attempts (regatta_executor.capacity): measured from the host (its
    # cgroup and cores, its memory) unless declared lower here; a declaration above the host is refused.
    executor_cpus: float | None = Field(None, gt=0, le=4096, alias="REGATTA_EXECUTOR_CPUS")
    executor_memory_mb: int | None = Field(
        None, ge=16, le=64 * 1024 * 1024, alias="REGATTA_EXECUTOR_MEMORY_MB"
    )
    # Seconds a job that no live executor host can hold waits (handed back between hosts) for one that
    # can to announce itself, counted from its queueing; then its attempt ends errored saying what lacks.
    capacity_wait_sec: float = Field(300.0, ge=0, le=7 * 86_400, alias="REGATTA_CAPACITY_WAIT_SEC")
    # Seconds a stopping executor (SIGTERM) lets its running attempts finish; those still running then
    # are abandoned without a report and delivered again, so a restart never turns work into `cancelled`.
    executor_grace_sec: float = Field(30.0, ge=0, le=86_400, alias="REGATTA_EXECUTOR_GRACE_SEC")
    # Deliveries of one job an executor takes at most: a job whose handling fails in the executor itself
    # (or kills it) on every delivery ends its attempt `errored` at the last one instead of coming back
    # forever. Abandoned deliveries (a stopping executor's) count too, so it is well above one.
    executor_max_deliveries: int = Field(10, ge=1, le=1000, alias="REGATTA_EXECUTOR_MAX_DELIVERIES")
    # Tries the platform adds for an attempt that errored outside its sandbox (engine, network, provider),
    # with backoff REGATTA_RETRY_BASE_DELAY x 2^n, at most REGATTA_RETRY_MAX_DELAY. Not a scoring
    # condition: they come before the run's own `max_retries` and leave its leaderboard eligibility alone.
    infra_retries: int = Field(2, ge=0, le=10, alias="REGATTA_INFRA_RETRIES")
    # How long a run that finished with errored attempts keeps its secrets' key, so that those
    # attempts can be re-run; 0 shreds every run's key when its attempts end.
    rerun_secrets_hours: float = Field(24.0, ge=0, le=24 * 90, alias="REGATTA_RERUN_SECRETS_HOURS")
    retry_base_delay: float = Field(1.0, ge=0, le=3600, alias="REGATTA_RETRY_BASE_DELAY")
    retry_max_delay: float = Field(60.0, ge=0, le=3600, alias="REGATTA_RETRY_MAX_DELAY")
    # Seconds an attempt runs before its executor reports it started; a shorter one reports only its
    # outcome. Until then a stop waits for it by its claim (run_scheduler.scheduler.RunScheduler.claim).
    started_report_delay: float = Field(1.0, ge=0, alias="REGATTA_STARTED_REPORT_DELAY")
    # What an executor forwards live of one attempt's agent output (regatta_shared.messaging.live): bytes a
    # second, bytes in all, and how often it looks for new output; the rest is only in the artifacts.
    live_rate_bytes: int = Field(64 * 1024, ge=1024, le=16 * 1024 * 1024, alias="REGATTA_LIVE_RATE_BYTES")
    live_max_bytes: int = Field(1024 * 1024, ge=0, le=64 * 1024 * 1024, alias="REGATTA_LIVE_MAX_BYTES")
    live_interval: float = Field(0.5, ge=0.05, le=10, alias="REGATTA_LIVE_INTERVAL")
    health_port: int | None = Field(None, alias="REGATTA_HEALTH_PORT")
    hosted_benchmarks: str | None = Field(None, alias="REGATTA_HOSTED_BENCHMARKS")
    # OpenAI-compatible endpoints runs name as `hosted` models (regatta_shared.rules.hosted_models).
    hosted_models: str | None = Field(None, alias="REGATTA_HOSTED_MODELS")
    sync_page_size: int = Field(100, ge=1, le=10_000, alias="REGATTA_SYNC_PAGE_SIZE")
    # Largest request body the gateway accepts; larger ones get 413 before they are read.
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, alias="REGATTA_MAX_BODY_BYTES")
    # Host folders, local git repositories and file:// sources only under these roots (os.pathsep
    # separated), except for platform administrators (regatta_shared.security.source_policy).
    source_roots: str = Field("", alias="REGATTA_SOURCE_ROOTS")
    # Internal addresses that outbound fetches may reach anyway: CIDRs, hosts, host:port, comma separated
    # (regatta_shared.security.outbound).
    outbound_allow: str = Field("", alias="REGATTA_OUTBOUND_ALLOW")
    # Bounds of one answer read from a registry or the Harbor hub: its body's size, and the time from the
    # request to the body's last byte (regatta_shared.security.answers).
    fetch_max_mb: int = Field(32, ge=1, le=4096, alias="REGATTA_FETCH_MAX_MB")
    fetch_timeout_sec: float = Field(60.0, gt=0, le=3600, alias="REGATTA_FETCH_TIMEOUT_SEC")
    # Local images tasks of the `container` environment may name (FROM, docker_image) without a pull:
    # image references, comma separated; any other reference is pulled from its registry.
    local_images: str = Field("", alias="REGATTA_LOCAL_IMAGES")
    # The registry a dataset named without a registry resolves against, and that the Add Benchmark dialog
    # lists: an http(s) URL or an absolute registry.json path; empty for none (regatta_gateway.admission).
    default_registry: str = Field(HARBOR_DEFAULT_REGISTRY_URL, alias="REGATTA_DEFAULT_REGISTRY")
    # Seconds the gateway keeps the default registry's dataset list before reading it again.
    default_registry_cache_seconds: float = Field(600.0, ge=0, alias="REGATTA_DEFAULT_REGISTRY_CACHE_SECONDS")
    # Failed authentications a source address (or a token prefix) may make at once, and how many per
    # minute it regains; past them it gets 429 with Retry-After (regatta_gateway.throttle).
    auth_failure_burst: int = Field(20, ge=1, alias="REGATTA_AUTH_FAILURE_BURST")
    auth_failures_per_minute: float = Field(20.0, gt=0, alias="REGATTA_AUTH_FAILURES_PER_MINUTE")
    # Operator ceilings on what one task may ask for (regatta_shared.rules.ceilings, docs/configuration.md). A
    # task over one is listed invalid at sync, refused at run submission and refused by the executor.
    # None: derived from this machine (memory from its RAM, CPUs from its cores, storage from the disk
    # its sandboxes write on: regatta_shared.rules.sandbox_disk).
    max_memory_mb: int | None = Field(None, ge=16, alias="REGATTA_MAX_MEMORY_MB")
    max_cpus: float | None = Field(None, gt=0, alias="REGATTA_MAX_CPUS")
    max_storage_mb: int | None = Field(None, ge=16, alias="REGATTA_MAX_STORAGE_MB")
    max_agent_timeout_sec: float = Field(21_600.0, gt=0, alias="REGATTA_MAX_AGENT_TIMEOUT_SEC")
    max_verifier_timeout_sec: float = Field(7_200.0, gt=0, alias="REGATTA_MAX_VERIFIER_TIMEOUT_SEC")
    max_build_timeout_sec: float = Field(7_200.0, gt=0, alias="REGATTA_MAX_BUILD_TIMEOUT_SEC")
    max_processes: int = Field(4096, ge=16, alias="REGATTA_MAX_PROCESSES")
    # A task's files, bounded at sync (before they are hashed or archived) and again while an executor
    # unpacks its archive: total bytes, number of entries, and expanded/compressed ratio.
    max_task_mb: int = Field(512, ge=1, alias="REGATTA_MAX_TASK_MB")
    max_task_files: int = Field(10_000, ge=1, alias="REGATTA_MAX_TASK_FILES")
    max_task_expansion: float = Field(200.0, ge=1, alias="REGATTA_MAX_TASK_EXPANSION")
    # The executor's unpacked task folders, pruned least recently used first past this size.
    task_cache_mb: int = Field(10_240, ge=1, alias="REGATTA_TASK_CACHE_MB")

    @cached_property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'regatta.db').resolve()}"

    @property
    def nats_servers(self) -> list[str]:
        """NATS_URL's servers: nats-py takes one URL as a string and a cluster's as a list."""
        return [url.strip() for url in self.nats_url.split(",") if url.strip()]

    @property
    def gateway_url(self) -> str:
        return self.public_url or f"http://{self.gateway_host}:{self.gateway_port}"


# Placeholders from examples and compose files: a deployment using one has a secret anyone can guess.
KNOWN_DEFAULT_SECRETS = frozenset(
    {"change-me", "changeme", "change-me-master-key", "changeit", "secret", "password", "admin", "token"}
)


def refuse_known_default(name: str, value: str) -> None:
    """Raise ValueError naming the setting if `value` is a well-known placeholder."""
    if value.strip().lower() in KNOWN_DEFAULT_SECRETS:
        raise ValueError(f"{name} is a well-known placeholder ({value.strip()!r}): set a long random value")


def load_settings() -> Settings:
    return Settings()  # type: ignore[call-arg]
