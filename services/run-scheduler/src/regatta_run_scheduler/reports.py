"""Which reports and claims the scheduler believes: only those signed with their attempt's key.

A report that does not parse, or whose MAC does not verify (a forger on the bus, or an executor
without the job), is dropped and logged, never NACKed: redelivering it would change nothing and would
block the reports behind it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from pydantic import ValidationError
from regatta_shared.messaging.jobs import AttemptReport
from regatta_shared.security.attempt_auth import MAC_HEADER, AttemptKeys

log = logging.getLogger("regatta.run_scheduler.reports")
_MAX_ID = 200


def authentic_reports(
    keys: AttemptKeys, messages: Iterable[tuple[bytes, dict[str, str] | None]]
) -> list[AttemptReport]:
    """The reports among (payload, headers) whose MAC verifies, in order."""
    accepted = []
    for payload, headers in messages:
        try:
            report = AttemptReport.model_validate_json(payload)
        except ValidationError as error:
            log.warning("dropped a report that is not an attempt report: %d errors", error.error_count())
            continue
        if keys.verify(report.run_id, report.attempt_id, payload, (headers or {}).get(MAC_HEADER)):
            accepted.append(report)
        else:
            log.warning(
                "dropped a %s report for attempt %r of run %r: it does not carry the attempt's MAC "
                "(forged, or from a client that never received the job)",
                report.kind,
                report.attempt_id[:_MAX_ID],
                report.run_id[:_MAX_ID],
            )
    return accepted


def authentic_claim(
    keys: AttemptKeys, run_id: str, payload: bytes, headers: dict[str, str] | None
) -> str | None:
    """The attempt id a claim names, if its MAC verifies; None (logged) otherwise."""
    try:
        attempt_id = payload.decode()
    except UnicodeDecodeError:
        attempt_id = ""
    if attempt_id and keys.verify(run_id, attempt_id, payload, (headers or {}).get(MAC_HEADER)):
        return attempt_id
    log.warning("dropped a claim on run %r without its attempt's MAC", run_id[:_MAX_ID])
    return None
