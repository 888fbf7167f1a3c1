"""Service layer of scoring: provisional scores while a run runs, final ones and `finished` after it,
then the benchmark's leaderboard; on request, final scores again under the current rules. Every number is
computed here once and stored as an event."""

from __future__ import annotations

import logging
import time

from regatta_shared.events import (
    AgentScores,
    AttemptFinished,
    BenchmarkTaskExcluded,
    LeaderboardComputed,
    RescoreRequested,
    RunExecutionCompleted,
    RunFailed,
    RunFinished,
    RunScored,
    RunStopped,
    RunSubmitted,
)
from regatta_shared.events.envelope import deterministic_id, new_event
from regatta_shared.eventstore import EventStore, NewEvent, StoredEvent
from regatta_shared.ids import benchmark_stream, leaderboard_stream, run_stream
from regatta_shared.rules.scoring_rules import RULES_VERSION

from .leaderboard import (
    LeaderboardEntry,
    build_leaderboard,
    entries_from_run,
    exclusions,
    finished_now,
    needs_rescore,
    rank_run_agents,
    rerun_round,
)
from .scores import score_run, tally

PROVISIONAL_INTERVAL = 1.0
log = logging.getLogger("regatta.scoring")


class ScoringError(Exception):
    """Scoring a run's history raised: the same history raises again on every retry."""


class Scorer:
    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._last_provisional: dict[str, float] = {}

    def on_events(self, events: list[StoredEvent]) -> None:
        """A batch: at most one provisional score per run, then the terminal events in order."""
        latest_finished: dict[str, StoredEvent] = {}
        for event in events:
            if event.type == AttemptFinished.type_name:
                latest_finished[event.data["run_id"]] = event
        for event in latest_finished.values():
            self.on_event(event)
        for event in events:
            if event.type != AttemptFinished.type_name:
                self.on_event(event)

    def on_event(self, event: StoredEvent) -> None:
        run_id = event.data.get("run_id")
        if event.type == AttemptFinished.type_name and run_id:
            now = time.monotonic()
            if now - self._last_provisional.get(run_id, 0.0) >= PROVISIONAL_INTERVAL:
                self._last_provisional[run_id] = now
                try:
                    self.score(run_id, final=False, through=event.position)
                except ScoringError as error:  # the final scoring decides what it means for the run
                    log.warning("run %s: no provisional scores: %s", run_id, error)
        elif event.type == RunExecutionCompleted.type_name and run_id:
            rerun = rerun_round(self.store.read_stream(run_stream(run_id)))
            finished = new_event(
                RunFinished(run_id=run_id),
                event_id=deterministic_id(run_id, "finished", *rerun),
                actor="scoring",
            )
            try:
                self.score(run_id, final=True, through=event.position, then=[finished])
            except ScoringError as error:
                # Redelivering would fail the same way forever: the run ends `failed`, its attempts kept.
                failed = RunFailed(run_id=run_id, reason=f"scoring failed: {error}"[:1000])
                event_id = deterministic_id(run_id, "failed")
                self.store.append(run_stream(run_id), [new_event(failed, event_id=event_id, actor="scoring")])
        elif event.type in (RunStopped.type_name, RunFailed.type_name) and run_id:
            # Final scores of what the run measured (a run failed by scoring itself has none).
            try:
                self.score(run_id, final=True, through=event.position)
            except ScoringError as error:
                log.warning("run %s ended without final scores: %s", run_id, error)
        elif event.type == RunFinished.type_name and run_id:
            self.update_leaderboard(event.data.get("benchmark_id") or self._benchmark_of(run_id))
        elif event.type == BenchmarkTaskExcluded.type_name:
            # Every run of the version now ranks without the task: the leaderboard again.
            self.update_leaderboard(
                event.data["benchmark_id"], event_id=deterministic_id(event.event_id, "board")
            )
        elif event.type == RescoreRequested.type_name:
            request = event.payload()
            assert isinstance(request, RescoreRequested)
            self.rescore(request)

    def score(self, run_id: str, *, final: bool, through: int, then: list[NewEvent] | None = None) -> None:
        """`then`: events recorded in the same transaction as the scores (`finished` with the final ones)."""
        history = self.store.read_stream(run_stream(run_id))
        if finished_now(history) and not final:
            return
        agents = _computed(history)
        if agents is None:
            return
        scored = RunScored(
            run_id=run_id, final=final, agents=agents, through_position=through, rules_version=RULES_VERSION
        )
        key = "final" if final else f"provisional-{through}"
        event_id = deterministic_id(run_id, key, *rerun_round(history))
        scored_event = new_event(scored, event_id=event_id, actor="scoring")
        # Insert-or-ignore by event id: events recorded earlier (final scores, by a scorer that crashed
        # before `finished`) are skipped, the rest stored.
        self.store.append(run_stream(run_id), [scored_event, *(then or [])])

    def _benchmark_of(self, run_id: str) -> str:
        first = self.store.read_stream(run_stream(run_id))[0]
        return first.data["benchmark_id"]

    def rescore(self, request: RescoreRequested) -> None:
        """Final scores under the current rules for each run of the benchmark whose latest ones are of an
        older version, then the leaderboard. A run already current gets nothing, so a second request
        appends no scores; a redelivered one appends nothing at all (ids derive from the request)."""
        for run_stream_id in self._run_streams(request.benchmark_id):
            history = self.store.read_stream(run_stream_id)
            if not needs_rescore(history, request.benchmark_version):
                continue
            agents = _computed(history)
            if agents is None:
                continue
            run_id = history[0].data["run_id"]
            scored = RunScored(
                run_id=run_id,
                final=True,
                agents=agents,
                through_position=history[-1].position,
                rules_version=RULES_VERSION,
            )
            event_id = deterministic_id(run_id, f"final-rules-{RULES_VERSION}")
            self.store.append(run_stream_id, [new_event(scored, event_id=event_id, actor="scoring")])
        self.update_leaderboard(request.benchmark_id, event_id=deterministic_id(request.rescore_id, "board"))

    def _run_streams(self, benchmark_id: str) -> list[str]:
        return [
            submitted.stream_id
            for submitted in self.store.read_all(0, 10**9, types=[RunSubmitted.type_name])
            if submitted.data["benchmark_id"] == benchmark_id
        ]

    def update_leaderboard(self, benchmark_id: str, *, event_id: str | None = None) -> None:
        excluded = exclusions(self.store.read_stream(benchmark_stream(benchmark_id)))
        entries: list[LeaderboardEntry] = []
        for stream_id in self._run_streams(benchmark_id):
            history = self.store.read_stream(stream_id)
            version = history[0].data.get("benchmark_version") if history else None
            entries.extend(entries_from_run(history, excluded.get(version or "")))
        rows = build_leaderboard(entries)
        stream = leaderboard_stream(benchmark_id)
        computed = LeaderboardComputed(benchmark_id=benchmark_id, rows=rows)
        self.store.append(stream, [new_event(computed, event_id=event_id, actor="scoring")])


def _computed(history: list[StoredEvent]) -> list[AgentScores] | None:
    """The run's ranked scores (None before its submission); a failure of this pure computation is
    deterministic, so it is raised as ScoringError."""
    try:
        run = tally(history)
        return None if run is None else rank_run_agents(score_run(run))
    except Exception as error:  # any bug or poisoned value in the statistics, by kind and message
        log.exception("scoring run failed")
        raise ScoringError(f"{type(error).__name__}: {error}") from error
