"""Choosing the environment that runs the attempts (choice.py) and what each one does with a task
(traits.py, capabilities.py); the environments themselves are `container/` and `local/`."""
