"""Running one job's attempt: the Harbor trial (runner.py, trials.py), its outcome and its
reports, its artifacts, the live view of its output and the redaction of its secrets."""
