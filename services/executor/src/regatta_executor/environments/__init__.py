"""Choosing the environment that runs the attempts (choice.py; what each one does with a task, its traits,
are the kernel's: regatta_shared.rules.environment_traits) and what our own tell Harbor they can do
(capabilities.py); the environments themselves are `container/` and `local/`."""
