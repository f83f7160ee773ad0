"""Invoke task modules, one per concern. `collect_tasks` gathers every task for tasks.py.

Two shared rules live here, so no task repeats them:

- `collect_tasks` makes every parameter a named option (`--run PATH`, never positional), so
  `invoke TASK --help` always prints help instead of being taken as a value, and marks the
  parameters without a default as "(required)" in that help.
- `user_errors` wraps every task body: a missing required option, a ReproError, or bad input
  the OS or a decoder refuses (a missing, unreadable or special file, a directory where a file
  was expected, a full disk, a refused connection, non-UTF-8 or non-JSON text) becomes one
  `error:` line and exit status 1; a closed pipe (`| head -1`) ends the task quietly, the way
  standard tools do. Anything else is a bug of ours, not the user's input: its traceback is
  printed, then one line asking to report it, and the exit status is 70 (EX_SOFTWARE).

Task modules import only invoke and this package at module level; everything else is imported
inside the task body, so `invoke --list` and a light task such as `invoke verify` never load
torch, matplotlib, docker or rich's renderers.
"""

from __future__ import annotations

import difflib
import errno
import functools
import importlib
import inspect
import os
import pkgutil
import re
import stat
import sys
import textwrap
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import invoke.program as invoke_program
from invoke import Exit, Task
from invoke.exceptions import ParseError
from invoke.parser import ParserContext
from invoke.parser.parser import ParseMachine

from ..errors import ReproError
from ..printable import printable

__all__ = ["BROKEN_PIPE_EXIT", "BUG_EXIT", "FAIL_ON_GATES_HELP", "GATES_FAILED_EXIT", "collect_tasks",
           "exit_on_failed_gates", "metavars", "option_name", "required_parameters",
           "user_errors"]

BROKEN_PIPE_EXIT = 141  # what a shell reports for a tool ended by SIGPIPE (128 + 13)
BUG_EXIT = 70  # EX_SOFTWARE (sysexits.h): an internal error, not the user's input
# OS errors a task expects at its boundary without a file name attached: the disk, the network.
_EXPECTED_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EMFILE,
                              errno.ENFILE, errno.ENOMEM})
GATES_FAILED_EXIT = 3  # `--fail-on-gates`: the command did its work, and a declared gate FAILED
FAIL_ON_GATES_HELP = f"exit {GATES_FAILED_EXIT} when a declared gate FAILED (for CI; without it a FAILED gate is only reported)"


def collect_tasks() -> Iterator[Task]:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if isinstance(obj, Task):
                yield named_options(obj)


def option_name(parameter: str) -> str:
    """`json_` -> `--json`, `inputs_root` -> `--inputs-root`, as invoke spells them."""
    return "--" + parameter.strip("_").replace("_", "-")


def required_parameters(func: Callable) -> list[str]:
    """The task body's parameters without a default (after the context): required options."""
    params = list(inspect.signature(func).parameters.values())[1:]
    return [p.name for p in params if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]


class NamedOptionsTask(Task):
    """A task whose parameters are all named options, and whose numbers are parsed by `user_errors`.

    invoke itself would make parameters without a default positional, and would turn `--requests
    many` into a ValueError traceback while parsing; here a number option arrives as text and
    `user_errors` converts it, answering a bad one with an `error:` line."""

    value_names: dict[str, str]  # option -> what its help shows as the value (INT, FLOAT, NAME=PATH)

    def arg_opts(self, name: str, default: Any, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names)
        kind = opts.get("kind")
        if kind in (int, float):  # parsed by `user_errors`, so that a bad one is an `error:` line
            self.value_names[name] = "INT" if kind is int else "FLOAT"
        # invoke takes the first free character of the name as the short flag, even `-` (`--=STRING`)
        return {**opts, "positional": False, "names": [n for n in opts["names"] if len(n) > 1 or n.isalnum()],
                **({"kind": str} if kind in (int, float) else {})}

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Any]:
        arguments = super().get_arguments(ignore_unknown_help)
        for argument in arguments:
            argument.value_name = self.value_names.get(argument.attr_name or argument.name or "")  # type: ignore[attr-defined]
            if argument.kind is list:  # so that `--python` without a value is refused, as for other options
                argument.raw_value = None
        return arguments


def _help_for(self: Any, flag: str) -> tuple[str, str]:
    """invoke's help entry, with each value's type: INT, FLOAT, or a repeatable option's metavar."""
    names, text = _invoke_help_for(self, flag)
    argument = self.flags[flag]
    value_name = getattr(argument, "value_name", None)
    if value_name and argument.kind is str:
        names = names.replace("STRING", value_name)
    elif value_name and argument.kind is list:  # invoke shows a list option as a bare flag
        names = ", ".join(f"{n}={value_name}" if n.startswith("--") else f"{n} {value_name}"
                          for n in names.split(", "))
    return names, text


_invoke_help_for = ParserContext.help_for
ParserContext.help_for = _help_for  # type: ignore[method-assign]

_UNKNOWN = re.compile(r"^No idea what '(?P<token>.*)' is!$", re.DOTALL)
_NO_VALUE = re.compile(r"^Flag <Argument: (?P<name>[\w-]+)\b.*> needed value and was not given one!$", re.DOTALL)


def _parse_error(self: Any, msg: str) -> None:
    """invoke's parse errors as one `error:` line; an unknown option or task names the closest one."""
    unknown, no_value = _UNKNOWN.match(msg), _NO_VALUE.match(msg)
    if no_value is not None:
        raise ParseError(f"error: {option_name(no_value['name'])} needs a value.", self.context)
    if unknown is None:
        raise ParseError(f"error: {printable(msg)}", self.context)
    token = unknown["token"]
    task = self.context.name if self.context is not None and self.context.name else None
    if token.startswith("-") and task:
        known = [f for f in self.context.flags if f.startswith("--")]
        where = f"`invoke {task}`"
        listing = f"`invoke {task} --help` lists every option"
    else:
        known, where, listing = list(self.contexts), "this project", "`invoke --list` lists every task"
    close = difflib.get_close_matches(token, known, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    what = "an option of" if token.startswith("-") else "a task of"
    raise ParseError(f"error: {printable(token)} is not {what} {where}{hint} ({listing}).", self.context)


ParseMachine.error = _parse_error  # type: ignore[method-assign]


def _quiet_broken_pipe(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
    """A closed pipe outside a task body (invoke's own `--list`, `--help`): end quietly with 141, as
    tasks do (`user_errors`); anything else reaches the usual hook."""
    if issubclass(kind, BrokenPipeError):
        _quiet_exit_on_broken_pipe()
        os._exit(BROKEN_PIPE_EXIT)
    _previous_excepthook(kind, exc, tb)


_previous_excepthook = sys.excepthook
sys.excepthook = _quiet_broken_pipe


HELP_WIDTH = 76  # `invoke TASK --help` prints the docstring indented by 2: it fits 80 columns, never folded mid-word


def _fitted(docstring: str) -> str:
    """Each paragraph of a docstring re-wrapped at HELP_WIDTH (invoke prints it as it is)."""
    paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(docstring).split("\n\n")]
    return "\n\n".join(textwrap.fill(p, HELP_WIDTH, break_long_words=False, break_on_hyphens=False)
                       for p in paragraphs if p)


def _summary(obj: object) -> str | None:
    """`invoke --list`'s line for a task: its docstring's first paragraph, whole (invoke folds it into
    its column), not the first physical line, which a wrapped docstring ends mid-sentence."""
    doc = getattr(obj, "__doc__", None)
    if not doc or not doc.strip():
        return None
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


invoke_program.helpline = _summary


def named_options(task: Task) -> Task:
    """Every parameter a named option; the required ones say so in `invoke TASK --help`.

    A repeatable (iterable) option names its value with `metavars={"python": "NAME=PATH"}` on
    the task body (set by `@metavars`); numbers show as INT or FLOAT."""
    task.__class__ = NamedOptionsTask
    if task.__doc__:
        task.__doc__ = _fitted(task.__doc__)
    task.value_names = dict(getattr(task.body, "metavars", {}))  # type: ignore[attr-defined]
    task.positional = []
    for name in required_parameters(task.body):
        key = name.strip("_")
        key = key if key in task.help else name
        task.help[key] = (task.help.get(key, "") + " (required)").strip()
    return task


def metavars(**names: str) -> Callable[[Callable], Callable]:
    """Name an option's value in help, e.g. `@metavars(python="NAME=PATH")` for a repeatable option."""

    def mark(func: Callable) -> Callable:
        func.metavars = names  # type: ignore[attr-defined]
        return func

    return mark


def exit_on_failed_gates(summary_path: Path, where: str) -> None:
    """Exit GATES_FAILED_EXIT, with one `error:` line naming them, when summary.json has a FAILED gate."""
    from ..evidence.summary import read_summary

    gates = read_summary(summary_path).gates
    failed = [g.name for g in gates if g.passed is False]
    if failed:
        raise Exit(f"error: {len(failed)} of {len(gates)} gates FAILED in {printable(where)}: {printable(', '.join(failed))} "
                   f"(exit {GATES_FAILED_EXIT}: --fail-on-gates).", code=GATES_FAILED_EXIT)


def _input_error(exc: BaseException) -> str | None:
    """One line for what the OS or a decoder refused at a task's boundary (the user's input or machine);
    None for a bug of ours.

    Bad input: an OSError naming a file, a connection or timeout error, a full or read-only disk or a
    refused permission; text that is not UTF-8 or not JSON. Any other exception is a bug of ours.
    """
    import json

    if isinstance(exc, UnicodeDecodeError):
        return f"a file is not UTF-8 text ({exc.reason} at byte {exc.start}); give the file the option expects."
    if isinstance(exc, json.JSONDecodeError):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if not isinstance(exc, OSError) or not (exc.filename is not None or isinstance(exc, (ConnectionError, TimeoutError))
                                            or exc.errno in _EXPECTED_ERRNOS):
        return None
    if isinstance(exc, IsADirectoryError):
        return f"{exc.filename} is a directory; give a file."
    if isinstance(exc, NotADirectoryError):
        return f"{exc.filename} (or a folder above it) is not a directory."
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}."


def _special_file(value: object) -> bool:
    """A FIFO, socket or device: opening one to read may block forever, so no option may name one."""
    if not isinstance(value, str) or not value:
        return False
    try:
        mode = os.stat(value).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _quiet_exit_on_broken_pipe() -> Exit:
    """The reader went away (`| head -1`): stop quietly, as standard tools do, exit 141."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
    except (OSError, ValueError):
        pass
    return Exit(code=BROKEN_PIPE_EXIT)


def _fail(message: str, as_json: bool, code: int = 1) -> Exit:
    """One `error:` line on stderr, exit 1; under `--json`, `{"error": ...}` on stdout instead. The
    message may quote outside text (a recipe's url, a server's /health): escaped, it stays one line."""
    if as_json:
        import json

        print(json.dumps({"error": message}))
        return Exit(code=code)
    return Exit(f"error: {printable(message)}", code=code)


def user_errors(func: Callable) -> Callable:
    """Run a task body so that no traceback reaches a user (see the module docstring)."""
    required = required_parameters(func)
    signature = inspect.signature(func)
    numbers = {p.name: type(p.default) for p in signature.parameters.values()
               if type(p.default) in (int, float)}

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = signature.bind_partial(*args, **kwargs).arguments
        as_json = bool(values.get("json_"))
        missing = [name for name in required if values.get(name) in (None, "")]
        if missing:
            task_name = func.__name__.removesuffix("_task").replace("_", "-")
            raise _fail(f"{option_name(missing[0])} is required; `invoke {task_name} --help` lists every option.",
                        as_json)
        special = [name for name, value in values.items() if _special_file(value)]
        if special:
            raise _fail(f"{values[special[0]]} ({option_name(special[0])}) is a FIFO, socket or device; "
                        "give a regular file or directory.", as_json)
        for name, kind in numbers.items():
            if isinstance(values.get(name), str):
                try:
                    values[name] = kind(values[name])
                except ValueError:
                    what = "a whole number" if kind is int else "a number"
                    raise _fail(f"{option_name(name)} expects {what}, not {values[name]!r}.", as_json) from None
        try:
            return func(**values)
        except ReproError as exc:
            raise _fail(str(exc), as_json) from None
        except BrokenPipeError:
            raise _quiet_exit_on_broken_pipe() from None
        except (Exit, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - sorted here: the user's input, or a bug of ours
            line = _input_error(exc)
            if line is not None:
                raise _fail(line, as_json) from None
            traceback.print_exception(exc, file=sys.stderr)  # a bug: the whole traceback, then one line saying so
            raise _fail(f"internal error ({type(exc).__name__}), a bug in openjev-repro rather than in your input; "
                        "please report it with the command you ran and the traceback above.", as_json,
                        code=BUG_EXIT) from None

    return wrapper
