"""Invoke task modules, one per concern. `collect_tasks` gathers every task for tasks.py."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Callable, Iterator

from invoke import Exit, Task

from ..errors import ReproError

__all__ = ["collect_tasks", "user_errors"]


def collect_tasks() -> Iterator[Task]:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if isinstance(obj, Task):
                yield obj


def user_errors(func: Callable) -> Callable:
    """Turn a ReproError into invoke's Exit: a clear message, exit status 1, no traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except ReproError as exc:
            raise Exit(f"error: {exc}", code=1) from None

    return wrapper
