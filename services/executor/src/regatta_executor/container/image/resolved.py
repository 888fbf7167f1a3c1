"""An image resolved for an attempt: what the container's creation needs of it (its id, USER, ENTRYPOINT
and WORKDIR, read from the one inspect made when it was found) and where it came from, for the attempt's
report and build log."""

from __future__ import annotations

from dataclasses import dataclass

import docker

from regatta_executor.container.image.references import LocatedImage


@dataclass(frozen=True)
class ResolvedImage:
    reference: str
    built: bool
    """True when this call built it (false: cached, present or pulled)."""
    image_id: str
    user: str
    """The image's USER ("" when it names none)."""
    entrypoint: tuple[str, ...] = ()
    """The image's ENTRYPOINT (pid 1 starts it, pid1.py)."""
    workdir: str = ""
    """The image's WORKDIR ("" when it names none)."""
    facts: tuple[str, ...] = ()
    """What the attempt's build log records of where the image came from (pulled digests, base ids)."""
    source: str = "built"
    """"pulled" (from its registry), "local" (an allow-listed image of the engine) or "built"."""
    registry_digest: str | None = None
    """`repository@sha256:…` of a named image, when the engine knows it (always after a pull)."""

    @classmethod
    def of(
        cls,
        reference: str,
        image: docker.models.images.Image | dict,
        *,
        built: bool,
        facts: tuple[str, ...] = (),
        located: LocatedImage | None = None,
    ) -> ResolvedImage:
        # One inspect per attempt: what the container's creation needs comes from the lookup itself.
        attrs = image if isinstance(image, dict) else image.attrs
        config = attrs.get("Config") or {}
        user = str(config.get("User") or "")
        entrypoint = tuple(str(part) for part in config.get("Entrypoint") or ())
        workdir = str(config.get("WorkingDir") or "")
        image_id = str(attrs["Id"])
        if located is None:
            return cls(reference, built, image_id, user, entrypoint, workdir, facts)
        source = "pulled" if located.pulled else "local"
        digest = located.registry_digest
        return cls(reference, built, image_id, user, entrypoint, workdir, facts, source, digest)


def located_fact(what: str, located: LocatedImage) -> str:
    source = f"pulled {located.registry_digest or 'without a registry digest'}" if located.pulled else "local"
    return f"{what} {located.reference.familiar}: {source}, image {located.image_id}"
