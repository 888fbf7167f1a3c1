"""Files in and out of a container through the engine's archive API, and the cap of what its writable
layer holds."""
