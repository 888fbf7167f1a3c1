"""A task's image: named (allow-listed, or pulled through the outbound guard) or built from its
Dockerfile, checked before the engine sees it, once per content digest."""
