"""The ``locked`` decorator's work: each call of the decorated function runs under the lock
whose name is a template formatted with the call's arguments by name. Written for asyncio;
``scripts/unasync.py`` generates the threads flavour.
"""

from __future__ import annotations

import functools
import inspect
import string
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from tenure._async.lock import AsyncLock
from tenure._concurrency import async_io as io
from tenure._errors import InvalidArgument, InvalidArgumentType

__all__ = ["locking_each_call"]

P = ParamSpec("P")
R = TypeVar("R")


def locking_each_call(
    name_template: object, lock: Callable[[str], AsyncLock]
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """A decorator running each call under ``lock(name_template.format(**arguments))``.
    The template is checked here, against each decorated function's parameters when it is
    decorated: a field the function does not take raises InvalidArgument then, not at a
    call."""
    if not isinstance(name_template, str):
        raise InvalidArgumentType("the name template must be a str")
    fields = {f for _, f, _, _ in string.Formatter().parse(name_template) if f is not None}

    def decorate(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        io.check_function_kind(function)
        signature = inspect.signature(function)
        unknown = {f.split(".")[0].split("[")[0] for f in fields} - set(signature.parameters)
        if unknown - {""}:
            raise InvalidArgument(
                f"name template {name_template!r} uses {sorted(unknown)}, which "
                f"{function.__qualname__} does not take"
            )

        @functools.wraps(function)
        async def locked_call(*args: P.args, **kwargs: P.kwargs) -> R:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            name = name_template.format(**bound.arguments)
            async with lock(name):
                return await function(*args, **kwargs)

        return locked_call

    return decorate
