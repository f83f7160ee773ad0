"""Invoke tasks: `.venv/bin/invoke --list`. Thin: each task parses arguments and calls the package.

The tasks themselves live in `openjev_repro/cli/<area>.py`, one module per concern, so each
area's commands sit beside its code; this file only collects them into one namespace.
"""

from invoke import Collection

from openjev_repro.cli import collect_tasks

ns = Collection()
for _task in collect_tasks():
    ns.add_task(_task)
