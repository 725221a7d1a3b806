"""The judge of an assert test: runs the test code in a process of its own and reaches the program's
functions over a channel (threat model: rewards/sandbox/runner.py).

Why a separate process: a program that shares an interpreter with its tests can rewrite their outcome
(walk the frames up to the harness, patch builtins.exec or json.dumps, install sys.settrace, read
the asserts' expected values out of memory). Here the test code and its expected values never enter
the program's process: the judge reads the code from a descriptor init opened (and unlinked) before
anything else, so it is not in init's memory either, which every forked process inherits. The
program's process (rewards/sandbox/child.py) only answers requests — call this, read that attribute,
iterate that — with plain data; the judge runs under another private uid, is not dumpable (no
ptrace, no /proc/<pid>/mem or fd), holds no descriptor the program holds except its end of the
channel, and writes its verdict to fd 3, which only it and init can reach.

Names: the test code sees builtins, the prelude, its own definitions and, for any other name it
mentions, the program's top-level object of that name. A program name never shadows a builtin or a
prelude name: a program that defines `sorted` or `math` must not compute the test's expected side.

What crosses from the program: plain data of exact builtin types (rewards/sandbox/wire.py) and
`Remote` stand-ins for everything else (functions, classes, instances, iterators). A Remote can be
called, indexed, iterated, measured with len(), turned into str/repr/bool, and its attributes read,
one request each; it equals no plain data and has no arithmetic or ordering, so an object whose
`__eq__` always says True stays in the program's process, where no assertion ever asks it. Comparing
two Remotes with == or != fails the test (UnjudgeableComparison): the expected side of such a test was
made by the program (`assert mid(p, q) == Point(2, 2)`), and identity would pass a `Point` whose
constructor always returns one object while failing a right answer with its own `__eq__`.
A StopIteration or StopAsyncIteration the program raises reaches the test as a RuntimeError (PEP 479's
rule), so it cannot end the test's own loop (`all(map(lambda x: f(x) == x * x, xs))` would be vacuously
true); only the protocol's end of iteration, StopIteration from a `next` request, stays one.
A module of the program crosses by name and the test gets the judge's own copy, but only of a module
the judge has already loaded or a few pure stdlib ones (_IMPORTABLE): the program chooses the name, and
whatever the judge imports runs as the judge, beside the verdict channel.
Containers the test passes in (list, dict, set) come back after each call and are updated in place;
test-side functions and objects cannot be passed (the test fails); a plain-data global of the program
is a copy taken when the test starts. Residual: a test that judges with a function the *program*
defines (HumanEval's `poly` in a prompt) trusts that function.
"""

import builtins
import importlib
import json
import os
import sys

_NOT_PASSED_THROUGH = (SystemExit, KeyboardInterrupt, GeneratorExit, BaseExceptionGroup)
_BUILTIN_EXCEPTIONS = {name: obj for name, obj in vars(builtins).items()
                       if isinstance(obj, type) and issubclass(obj, BaseException)
                       and not issubclass(obj, _NOT_PASSED_THROUGH)}


class ProgramError(Exception):
    """The program raised an exception of its own class (named in the message)."""


class UnjudgeableComparison(Exception):
    """The test compares two objects of the program: only the program's own code could say if they are equal."""


class ProgramExited(Exception):
    """The program's process left (sys.exit, os._exit, a crash) before the test finished."""


class Remote:
    """An object that stays in the program's process (see module docstring for what it supports)."""

    __slots__ = ("_client", "_id", "_type")

    def __init__(self, client, ident: int, type_name: str):
        object.__setattr__(self, "_client", client)
        object.__setattr__(self, "_id", ident)
        object.__setattr__(self, "_type", type_name)

    def _ask(self, op: str, *args, want: type | None = None):
        value = self._client.request(op, self._id, *args)
        if want is not None and type(value) is not want:
            raise TypeError(f"{op}() of a {self._type} object did not give a {want.__name__}")
        return value

    def __call__(self, *args, **kwargs):
        """One call in the program's process. Containers passed in (list, dict, set) come back in their
        state after the call and are updated in place here, so `a = [3, 1]; sort(a); assert a == [1, 3]`
        behaves as in one process."""
        containers = {str(i): a for i, a in enumerate(args) if type(a) in _CONTAINERS}
        containers.update((k, v) for k, v in kwargs.items() if type(v) in _CONTAINERS)
        client = self._client
        result, after = client.call(self._id, client.arg(list(args)), client.arg(kwargs), sorted(containers))
        for key, new in after.items():
            _refill(containers[key], new)
        return result

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # protocol probes (copy, pickle, numpy) stay local
        return self._ask("getattr", name)

    def __setattr__(self, name, value):
        raise TypeError(f"cannot set attributes of a {self._type} object that lives in the program")

    def __getitem__(self, key):
        return self._ask("getitem", self._client.arg(key))

    def __iter__(self):
        return self._ask("iter")

    def __next__(self):
        return self._ask("next")

    def __len__(self):
        return self._ask("len", want=int)

    def __bool__(self):
        return self._ask("bool", want=bool)

    def __str__(self):
        return self._ask("str", want=str)

    def __repr__(self):
        return self._ask("repr", want=str)

    def __eq__(self, other):
        if type(other) is Remote:
            raise UnjudgeableComparison(f"the test compares two objects of the program ({self._type} and "
                                        f"{other._type}): their equality would be the "
                                        "program's own claim")
        return False

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__


class _Client:
    def __init__(self, fd: int, max_bytes: int, wire):
        self.fd, self.max_bytes, self.wire = fd, max_bytes, wire
        self.remotes: dict[int, Remote] = {}

    def receive(self, op: str = ""):
        """The next reply; the program's exception, raised here, if it holds one (`op`: the request)."""
        try:
            reply = self.wire.recv(self.fd, self.max_bytes)
        except self.wire.ChannelClosed:
            raise ProgramExited("the program's process exited before the test finished") from None
        if type(reply) is not dict:
            raise ProgramError("malformed reply from the program's process")
        if "exc" in reply:
            raise _exception(reply, end_of_iteration=op == "next")
        return reply

    def request(self, op: str, *args):
        return self.wire.decode(self._exchange([op, *args]).get("ok"), self.remote)

    def call(self, ident: int, args, kwargs, containers: list[str]):
        """-> (return value, {argument position or keyword: its state after the call})."""
        reply = self._exchange(["call", ident, args, kwargs, containers])
        after = self.wire.decode(reply.get("after", {"d": []}), self.remote)
        if type(after) is not dict or not set(after) <= set(containers):
            raise ProgramError("malformed reply from the program's process")
        return self.wire.decode(reply.get("ok"), self.remote), after

    def _exchange(self, message: list) -> dict:
        try:
            self.wire.send(self.fd, message)
        except self.wire.ChannelClosed:
            raise ProgramExited("the program's process exited before the test finished") from None
        return self.receive(message[0])

    def remote(self, tag: dict):
        if "m" in tag:
            return _module(str(tag["m"]))
        ident = tag["h"]
        if type(ident) is not int:
            raise ProgramError("malformed object reference from the program's process")
        r = self.remotes.get(ident)
        if r is None:
            r = self.remotes[ident] = Remote(self, ident, str(tag.get("type", "?"))[:80])
        return r

    def arg(self, x):
        return self.wire.encode(x, self._reference)

    def _reference(self, x) -> dict:
        if type(x) is Remote:
            return {"h": object.__getattribute__(x, "_id")}
        raise TypeError(f"a {type(x).__name__} object cannot be passed to the program (plain data only)")


_CONTAINERS = (list, dict, set)
# Modules the judge imports when the program passes one it has not loaded (a test using the program's
# `import fractions as fr`): standard-library computation with no side effects on import.
_IMPORTABLE = frozenset({"array", "bisect", "cmath", "collections", "collections.abc", "copy", "datetime",
                         "decimal", "enum", "fractions", "functools", "heapq", "itertools", "json", "math",
                         "numbers", "operator", "random", "re", "statistics", "string", "textwrap", "typing",
                         "unicodedata"})


def _module(name: str):
    """The judge's copy of the module the program named: one already loaded here (the prelude's and
    what they pulled in) or one of _IMPORTABLE; never an import on the program's say-so."""
    module = None if name.startswith("_") else sys.modules.get(name)
    if module is None and name in _IMPORTABLE:
        module = importlib.import_module(name)
    if module is None:
        raise ProgramError(f"the program passed module {name[:80]!r}, which the judge does not load")
    return module


def _refill(container, new) -> None:
    if type(new) is not type(container):
        raise ProgramError(f"the program turned a {type(container).__name__} argument into a {type(new).__name__}")
    if type(container) is list:
        container[:] = new
    else:
        container.clear()
        container.update(new)


_ITERATION_ENDS = ("StopIteration", "StopAsyncIteration")


def _exception(reply: dict, end_of_iteration: bool = False) -> BaseException:
    """The judge-side exception for the program's. StopIteration is passed through only as the answer
    to a `next` request (`end_of_iteration`); anywhere else it, and StopAsyncIteration, would end a loop
    of the test's that happens to be running (map, all, `async for`): a RuntimeError, as PEP 479 does."""
    name, message = str(reply.get("exc"))[:80], str(reply.get("msg", ""))[:500]
    if name == "SystemExit":
        return ProgramExited("SystemExit before the test finished")
    if name in _ITERATION_ENDS and not (end_of_iteration and name == "StopIteration"):
        return RuntimeError(f"the program raised {name} ({message})" if message else f"the program raised {name}")
    cls = _BUILTIN_EXCEPTIONS.get(name)
    if cls is not None:
        try:
            return cls(message)
        except Exception:  # noqa: BLE001 - exceptions whose constructor wants more arguments
            pass
    return ProgramError(f"{name}: {message}")


def _mentioned_names(tree) -> set[str]:
    import ast

    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def run_judge(job: dict, fds: list[int], work: str, nonce: str, confine, prelude: str, wire) -> None:
    """Never returns: confines this process (fds: stdin, stdout, stderr, verdict, channel, test code),
    judges, exits."""
    uid = None if job["uid"] is None else job["uid"] + (1 << 24)  # not the program's uid
    confine(job, fds, work, uid, oom_score=500, dumpable=False)
    verdict = {"status": "ok"}
    try:
        _judge(_read_all(5).decode("utf-8", "replace"), prelude, _Client(4, 16 * job["max_output_bytes"], wire))
    except MemoryError:
        verdict = {"status": "memory", "error": "MemoryError"}
    except BaseException as e:  # noqa: BLE001 - a failed assertion, the program's exception, anything
        verdict = {"status": "exception", "error": f"{type(e).__name__}: {e}"[:500]}
    verdict["nonce"] = nonce
    try:
        os.write(3, (json.dumps(verdict) + "\n").encode())
    except OSError:
        os._exit(1)
    os._exit(0)


def _read_all(fd: int) -> bytes:
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _judge(code: str, prelude: str, client: _Client) -> None:
    import ast  # here, not at module level: the launcher loads this module for every run

    tree = ast.parse(code, "<tests>")
    ns = {"__name__": "__main__", "__builtins__": builtins}
    exec(prelude, ns)
    hello = client.receive()  # waits for the program to finish its top level (or raises its exception)
    if hello.get("ready") is not True:
        raise ProgramError("malformed greeting from the program's process")
    wanted = sorted(_mentioned_names(tree) - ns.keys() - vars(builtins).keys())
    if wanted:
        found = client.request("names", wanted)
        if type(found) is not dict:
            raise ProgramError("malformed name table from the program's process")
        ns.update((name, value) for name, value in found.items() if name in wanted)
    exec(compile(tree, "<tests>", "exec"), ns)
