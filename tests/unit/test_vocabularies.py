"""Each vocabulary of statuses is defined once in the kernel and named everywhere else: an attempt's
outcome (regatta_shared.rules.outcomes), a run's status (regatta_shared.runs.status) and a benchmark's sync
status (regatta_shared.rules.benchmark_status). A second list of their words (a tuple, a `Literal[...]`, a
script's array, a template's test) would drift from the first without anyone noticing, so no source of
services/, shared/ or src/ lists two words of one vocabulary anywhere but in its own module."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

from regatta_gateway.app import create_app
from regatta_gateway.commands import benchmark_decider
from regatta_shared.events import AttemptFinished, RunStopRequested
from regatta_shared.rules import benchmark_status, outcomes
from regatta_shared.runs import status as run_status
from regatta_shared.settings import Settings

from tests.conftest import ROOT

# The vocabulary, and the one module that may list its words.
VOCABULARIES = {
    "attempt outcomes": (frozenset(outcomes.OUTCOMES), Path(outcomes.__file__)),
    "run statuses": (frozenset(run_status.RUN_STATUSES), Path(run_status.__file__)),
    "sync statuses": (frozenset(benchmark_status.SYNC_STATUSES), Path(benchmark_status.__file__)),
}
SOURCES = ("services", "shared/src", "src")
# Lists the check lets be, each held to its vocabulary by a test below: the event contract may not import
# regatta_shared.runs (which folds the events), so RunStopRequested.ends_as names its two endings itself.
ALLOWED = {("shared/src/regatta_shared/events/runs.py", ("stopped", "failed"))}
QUOTED = re.compile(r"""(["'])([a-z]+)\1""")


def _literal_lists(source: str) -> Iterator[tuple[int, list[str]]]:
    """(line, words) of every tuple, list or set of Python strings, `Literal[...]` included."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            words = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            yield node.lineno, words


def _quoted_lists(source: str) -> Iterator[tuple[int, list[str]]]:
    """(line, words) of each run of quoted words separated by commas in a script or template: an array
    (`["pending", "syncing"]`) or a Jinja tuple (`('pending', 'syncing')`)."""
    for number, line in enumerate(source.splitlines(), start=1):
        for run in re.finditer(r"""(["'][a-z]+["']\s*,\s*)+["'][a-z]+["']""", line):
            yield number, [match.group(2) for match in QUOTED.finditer(run.group(0))]


def copies(root: Path, vocabularies: dict[str, tuple[frozenset[str], Path]]) -> list[str]:
    # The vocabularies share words ("failed", "pending"), so a home lists words of another one too.
    homes = {home.resolve() for _, home in vocabularies.values()}
    found = []
    for folder in SOURCES:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix == ".py":
                lists = _literal_lists(path.read_text())
            elif path.suffix in (".js", ".html"):
                lists = _quoted_lists(path.read_text())
            else:
                continue
            where = path.relative_to(root).as_posix()
            if path.resolve() in homes:
                continue
            for line, words in lists:
                if (where, tuple(words)) in ALLOWED:
                    continue
                for name, (vocabulary, _) in vocabularies.items():
                    # A list of the vocabulary's words only: another vocabulary that shares some of
                    # them (a test report's CTRF statuses: failed, other, pending, skipped, passed)
                    # is not a copy.
                    listed = [word for word in words if word in vocabulary]
                    if len(listed) >= 2 and len(listed) == len(words):
                        found.append(f"{where}:{line}: lists {name} {listed}")
    return found


def test_no_source_lists_the_words_of_a_vocabulary_outside_its_module() -> None:
    found = copies(ROOT, VOCABULARIES)
    assert not found, "\n".join(found)


def test_the_check_finds_a_copy_in_python_scripts_and_templates(tmp_path: Path) -> None:
    home = tmp_path / "shared" / "src" / "vocabulary.py"
    files = {
        home: 'WORDS = ("passed", "failed")\n',
        tmp_path / "services" / "a.py": 'import typing\nX = typing.Literal["failed", "passed"]\n',
        tmp_path / "services" / "b.py": 'ok = outcome in SCORED or outcome == "passed"\n',
        tmp_path / "services" / "e.py": 'CTRF = ("failed", "skipped", "passed")\n',
        tmp_path / "services" / "c.js": 'const busy = ["passed", "failed"].includes(s);\n',
        tmp_path / "src" / "d.html": "{% set x = s in ('passed', 'failed') %}\n",
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert copies(tmp_path, {"outcomes": (frozenset({"passed", "failed"}), home)}) == [
        "services/a.py:2: lists outcomes ['failed', 'passed']",
        "services/c.js:1: lists outcomes ['passed', 'failed']",
        "src/d.html:1: lists outcomes ['passed', 'failed']",
    ]


def test_the_events_record_and_the_api_filters_by_the_outcomes_in_their_order() -> None:
    assert get_args(AttemptFinished.model_fields["outcome"].annotation) == outcomes.OUTCOMES
    assert set(outcomes.OUTCOMES) > outcomes.SCORED
    assert set(outcomes.UNSCORED) == set(outcomes.OUTCOMES) - outcomes.SCORED
    schema = create_app(Settings()).openapi()  # type: ignore[call-arg]
    parameters = schema["paths"]["/api/v1/runs/{key}/attempts"]["get"]["parameters"]
    outcome = next(p for p in parameters if p["name"] == "outcome")["schema"]
    listed = next(option for option in outcome["anyOf"] if option.get("type") == "string")
    assert tuple(listed["enum"]) == outcomes.OUTCOMES


def test_a_stop_ends_a_run_as_one_of_the_statuses_that_end_it_early() -> None:
    assert set(get_args(RunStopRequested.model_fields["ends_as"].annotation)) == run_status.ENDED_EARLY


def test_the_benchmark_fold_sets_only_sync_statuses_and_a_sync_in_progress_refuses_another() -> None:
    assert set(benchmark_status.IN_PROGRESS) | set(benchmark_status.SETTLED) == set(
        benchmark_status.SYNC_STATUSES
    )
    assert not set(benchmark_status.IN_PROGRESS) & set(benchmark_status.SETTLED)
    state = benchmark_decider.BenchmarkState(benchmark_id="b")
    assert state.status in benchmark_status.IN_PROGRESS
