"""An attempt's reported exception message is bounded (regatta_executor.attempt.reasons): the headline and
the last lines that say why, never more than the limit, whatever a harness or a task prints."""

from __future__ import annotations

from regatta_executor.attempt.outcome import redact
from regatta_executor.attempt.reasons import FULL_LOG, LIMIT, short_reason

APT = "\n".join(
    f"Get:{i} http://deb.debian.org/debian bookworm/main amd64 pkg{i} [{i} kB]" for i in range(300)
)


def failed(stdout: str, stderr: str) -> str:
    headline = "Command failed (exit 100): apt-get update && apt-get install -y curl"
    return f"{headline}\nstdout: {stdout}\nstderr: {stderr}"


def test_a_short_message_is_kept_as_it_is() -> None:
    assert short_reason("Agent timed out after 60 s") == "Agent timed out after 60 s"
    assert short_reason(None) is None


def test_a_long_install_failure_keeps_its_headline_and_stderr_s_last_lines_once() -> None:
    message = failed(APT + "\nE: Unable to locate package curl", "E: Unable to locate package curl\n")
    reason = short_reason(message)
    assert reason is not None and len(reason) <= LIMIT
    assert reason.splitlines()[0] == "Command failed (exit 100): apt-get update && apt-get install -y curl"
    assert reason.count("E: Unable to locate package curl") == 1
    assert "Get:" not in reason and FULL_LOG in reason


def test_stdout_speaks_when_stderr_says_nothing() -> None:
    reason = short_reason(failed(APT + "\nnpm ERR! 404 Not Found: left-pad@9", "None"))
    assert reason is not None and "npm ERR! 404 Not Found: left-pad@9" in reason


def test_one_endless_line_is_cut_to_the_limit() -> None:
    reason = short_reason("x" * 10_000 + "\n" + "y" * 10_000)
    assert reason is not None and len(reason) <= LIMIT and reason.endswith(f"(full text in {FULL_LOG})")


def test_redacting_before_shortening_leaves_no_piece_of_a_secret() -> None:
    # attempts.py redacts first: a cut made afterwards can never split a secret into an unredacted part.
    secret = "sk-" + "s3cr3t" * 20
    message = failed(APT, "auth failed with key " + secret * 3)
    reason = short_reason(redact(message, {"KEY": secret}))
    assert reason is not None and "s3cr3t" not in reason
