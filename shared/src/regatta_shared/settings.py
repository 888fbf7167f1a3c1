"""Settings read from the environment; every process of every service uses the same names."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    nats_url: str = Field("nats://127.0.0.1:4222", alias="NATS_URL")
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
    # Seconds an attempt runs before its executor reports it started; a shorter one reports only its
    # outcome. Until then a stop waits for it by its claim (run_scheduler.scheduler.RunScheduler.claim).
    started_report_delay: float = Field(1.0, ge=0, alias="REGATTA_STARTED_REPORT_DELAY")
    health_port: int | None = Field(None, alias="REGATTA_HEALTH_PORT")
    hosted_benchmarks: str | None = Field(None, alias="REGATTA_HOSTED_BENCHMARKS")
    sync_page_size: int = Field(100, ge=1, le=10_000, alias="REGATTA_SYNC_PAGE_SIZE")
    # Largest request body the gateway accepts; larger ones get 413 before they are read.
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, alias="REGATTA_MAX_BODY_BYTES")

    @cached_property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'regatta.db').resolve()}"

    @property
    def gateway_url(self) -> str:
        return self.public_url or f"http://{self.gateway_host}:{self.gateway_port}"


def load_settings() -> Settings:
    return Settings()  # type: ignore[call-arg]
