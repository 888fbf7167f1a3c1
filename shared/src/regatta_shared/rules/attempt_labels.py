"""An attempt label's stored form, once: the gateway stores labels in it, and the CLI finds a label
given in any case or spacing by it."""

from __future__ import annotations


def normal_label(value: str) -> str:
    """Lower case, runs of white space as one space, none at either end."""
    return " ".join(value.split()).lower()
