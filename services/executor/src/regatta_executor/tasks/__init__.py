"""Getting a task ready for its attempt: the archive cache, Harbor's loading of the task folder once,
and the checks of what the task asks for (features, ceilings, its environment, its variables)."""
