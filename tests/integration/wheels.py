"""Python wheels the container tests install with a real pip, offline: pip's own (the one CPython bundles
for ensurepip), a newer-looking copy of it, and small libraries made here."""

from __future__ import annotations

import base64
import ensurepip
import hashlib
import zipfile
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A pure-Python wheel of `files` (paths inside the wheel), with its dist-info and RECORD."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    contents = dict(files)
    contents[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    contents[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: regatta-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    lines = [_record_line(path, data) for path, data in contents.items()] + [f"{info}/RECORD,,"]
    contents[f"{info}/RECORD"] = ("\n".join(lines) + "\n").encode()
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in contents.items():
            # A fixed date: the same wheel is the same bytes, so a task's image is built once per digest.
            archive.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return wheel


def bundled_pip() -> Path:
    """The pip wheel this interpreter carries for ensurepip."""
    (wheel,) = (Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl")
    return wheel


def newer_pip(folder: Path) -> tuple[Path, str]:
    """A copy of the bundled pip under the next patch version (its `__version__` changed too), so that
    `pip install -U pip` finds an upgrade; returns the wheel and its version."""
    source = bundled_pip()
    old = source.name.split("-")[1]
    major, minor, *patch = old.split(".")
    new = f"{major}.{minor}.{int(patch[0]) + 1 if patch else 1}"
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(source) as archive:
        for entry in archive.namelist():
            data = archive.read(entry)
            if entry.endswith(".dist-info/entry_points.txt"):
                files[f"pip-{new}.dist-info/entry_points.txt"] = data
            elif ".dist-info/" not in entry:
                if entry == "pip/__init__.py":
                    data = data.replace(f'__version__ = "{old}"'.encode(), f'__version__ = "{new}"'.encode())
                files[entry] = data
    return write_wheel(folder, "pip", new, files), new
