"""Every `regatta` command and group says what it does in `--help` (issue 38): walked from the real
command tree, so a command added without a help line fails here."""

from __future__ import annotations

from collections.abc import Iterator

import typer

from regatta.cli import app


def commands(command: object, path: tuple[str, ...] = ("regatta",)) -> Iterator[tuple[str, object]]:
    yield " ".join(path), command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from commands(sub, (*path, name))


def test_every_command_has_a_help_line() -> None:
    tree = list(commands(typer.main.get_command(app)))
    assert len(tree) > 40  # the walk reaches every group's commands
    missing = [path for path, command in tree if not (command.help or "").strip()]  # type: ignore[attr-defined]
    assert missing == []
