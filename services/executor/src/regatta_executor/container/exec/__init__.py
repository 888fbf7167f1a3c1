"""Commands in a container: exec with a deadline, the platform's own tools and pid 1, and what the
environment knows of Harbor's commands."""
