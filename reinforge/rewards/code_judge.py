"""The judge for `code_tests`: the sandbox's main program (pid 1 inside it), never run on the host.

The verdict must not be computable by the solution's own code. So the solution never runs in
this process: the judge reads its payload (nonce, solution, tests, the server's source) from
stdin, makes itself non-dumpable, and starts the solution in a child process
(`code_server.py`). Each test snippet then runs HERE, with every top-level name of the solution
bound to a `Remote` proxy: calling it, reading an attribute or item, iterating, asks the child,
which answers with plain data (or a handle). Comparisons and asserts are evaluated by this
process on that data; a `Remote` compares equal only to itself (its `__eq__` is never delegated).
After each test the judge writes `<nonce> <index> <1|0>` to its stdout.

What the solution cannot reach: this process's memory (non-dumpable, so /proc/1/mem and
/proc/1/fd are closed to it; ptrace and process_vm_* are denied by the sandbox's seccomp
filter), its stdout (the child gets its own pipes; the nonce never reaches it) and its life
(signals to a pid namespace's init from inside are dropped unless it handles them). What it can
do is answer wrongly, slowly, or die: the test fails, and a dead child is restarted (solution
reloaded) for the next test.

Limits, by design: tests see only plain values; a test that compares two objects of the
solution's with `==`, passes a function of its own to the solution, or does arithmetic on the
solution's objects fails (compare their attributes or convert them to plain values instead).
"""

import builtins
import ctypes
import json
import os
import signal
import sys

_MAX_REPLY = 16 << 20  # bytes in one reply line
_PR_SET_DUMPABLE = 4
_PLAIN_SEQUENCES = {list: "l", tuple: "t", set: "set", frozenset: "fs"}


class RemoteError(Exception):
    """The solution raised an exception whose type is not a builtin Exception."""


class ProtocolError(Exception):
    """The solution's process died or sent something that is not a well-formed reply."""


class Server:
    """The solution's process and the request/reply channel to it."""

    def __init__(self, source):
        # posix_spawn, not subprocess: importing subprocess costs more than the spawn itself.
        # os.pipe() fds are close-on-exec: the child keeps only its stdin, stdout and stderr.
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        try:
            self.pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-B", "-c", source], os.environ,
                                      file_actions=[(os.POSIX_SPAWN_DUP2, request_read, 0),
                                                    (os.POSIX_SPAWN_DUP2, reply_write, 1)])
        finally:
            os.close(request_read)
            os.close(reply_write)
        self.requests = os.fdopen(request_write, "wb")
        self.replies = os.fdopen(reply_read, "rb")
        self.exit_status = None
        self.globals = {}
        self.load_failed = False

    def load(self, solution):
        """Run the solution's top level there; bind its names (as values or handles) here."""
        self._send(solution)
        reply = self._receive()
        if isinstance(reply, dict) and "load_error" in reply:
            self.load_failed = True
            raise ProtocolError("the solution failed to load")
        if not isinstance(reply, dict) or not isinstance(reply.get("globals"), list):
            raise ProtocolError("the solution did not load")
        self.globals = {}
        for entry in reply["globals"]:
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
                raise ProtocolError("malformed globals")
            if _shadows(entry[0]):
                continue
            self.globals[entry[0]] = self.decode(entry[1])

    def alive(self):
        if self.exit_status is None and os.waitpid(self.pid, os.WNOHANG) != (0, 0):
            self.exit_status = "exited"
        return self.exit_status is None

    def close(self):
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.exit_status = "killed"
        for stream in (self.requests, self.replies):
            try:
                stream.close()
            except OSError:
                pass

    def _send(self, message):
        data = json.dumps(message) + "\n"
        try:
            self.requests.write(data.encode())
            self.requests.flush()
        except OSError as err:
            raise ProtocolError(f"the solution's process is gone: {err}") from None

    def _receive(self):
        line = self.replies.readline(_MAX_REPLY)
        if not line.endswith(b"\n"):
            self.close()
            raise ProtocolError("the solution's process died or sent an over-long reply")
        try:
            return json.loads(line)
        except (ValueError, RecursionError):
            raise ProtocolError("malformed reply") from None

    def request(self, op, ref, **fields):
        self._send({"op": op, "ref": ref, **fields})
        reply = self._receive()
        if not isinstance(reply, dict):
            raise ProtocolError("malformed reply")
        if "ok" in reply:
            return self.decode(reply["ok"])
        if reply.get("stop") is True:
            raise StopIteration
        error = reply.get("raise")
        if isinstance(error, list) and len(error) == 2 and all(isinstance(e, str) for e in error):
            cls = getattr(builtins, error[0], None)
            if isinstance(cls, type) and issubclass(cls, Exception):
                raise cls(error[1])
            raise RemoteError(f"{error[0]}: {error[1]}")
        raise ProtocolError("malformed reply")

    def decode(self, data, depth=0):
        """Untrusted reply data -> plain values and Remote handles; anything else is refused."""
        try:
            tag = data[0]
            if depth > 250:
                raise ProtocolError("reply nested too deep")
            if tag == "n":
                return None
            if tag == "b" and type(data[1]) is bool:
                return data[1]
            if tag == "s" and type(data[1]) is str:
                return data[1]
            if tag == "i":
                return int(data[1], 16)
            if tag == "f":
                return float.fromhex(data[1])
            if tag == "c":
                return complex(float.fromhex(data[1]), float.fromhex(data[2]))
            if tag == "y":
                return bytes.fromhex(data[1])
            if tag == "r" and type(data[1]) is int:
                return Remote(self, data[1])
            if tag == "d":
                return {self.decode(k, depth + 1): self.decode(v, depth + 1) for k, v in data[1]}
            items = [self.decode(item, depth + 1) for item in data[1]]
            return {"l": list, "t": tuple, "set": set, "fs": frozenset}[tag](items)
        except ProtocolError:
            raise
        except Exception:  # wrong shapes, bad numbers, unhashable keys: not data we accept
            raise ProtocolError("malformed value") from None

    def encode(self, value, depth=0):
        """A value of the test's, sent to the solution: plain data or one of its own handles."""
        kind = type(value)
        if isinstance(value, Remote):
            if value._server is not self:
                raise TypeError("a value of the solution's from before it was restarted")
            return ["r", value._ref]
        if value is None:
            return ["n"]
        if kind is bool:
            return ["b", value]
        if kind is int:
            return ["i", hex(value)]
        if kind is float:
            return ["f", value.hex()]
        if kind is complex:
            return ["c", value.real.hex(), value.imag.hex()]
        if kind is str:
            return ["s", value]
        if kind is bytes:
            return ["y", value.hex()]
        if depth < 200 and kind in _PLAIN_SEQUENCES:
            return [_PLAIN_SEQUENCES[kind], [self.encode(item, depth + 1) for item in value]]
        if depth < 200 and kind is dict:
            return ["d", [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()]]
        raise TypeError(f"a test can pass only plain data to the solution, not {kind.__name__}")


class Remote:
    """A handle to an object in the solution's process; every use is a request to it."""

    __slots__ = ("_server", "_ref")

    def __init__(self, server, ref):
        self._server = server
        self._ref = ref

    def __call__(self, *args, **kwargs):
        encode = self._server.encode
        return self._server.request("call", self._ref, args=[encode(a) for a in args],
                                    kwargs=[[k, encode(v)] for k, v in kwargs.items()])

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._server.request("getattr", self._ref, name=name)

    def __getitem__(self, key):
        return self._server.request("getitem", self._ref, key=self._server.encode(key))

    def __contains__(self, item):
        return _typed(self._server.request("contains", self._ref, item=self._server.encode(item)), bool)

    def __iter__(self):
        iterator = self._server.request("iter", self._ref)
        if not isinstance(iterator, Remote):
            raise ProtocolError("iter() did not give a handle")
        return _RemoteIterator(iterator)

    def __len__(self):
        return _typed(self._server.request("len", self._ref), int)

    def __bool__(self):
        return _typed(self._server.request("bool", self._ref), bool)

    def __repr__(self):
        text = self._server.request("repr", self._ref)
        return text[:200] if type(text) is str else "<solution object>"

    def __eq__(self, other):  # never delegated: the solution does not judge its own result
        return self is other

    def __ne__(self, other):
        return self is not other

    __hash__ = object.__hash__


class _RemoteIterator:
    def __init__(self, handle):
        self._handle = handle

    def __iter__(self):
        return self

    def __next__(self):
        return self._handle._server.request("next", self._handle._ref)


def _shadows(name):
    """Names a test must not get from the solution: a solution defining `len` or `sorted`, or
    importing a patched `math`, would otherwise supply the very functions the test checks with.
    (A test uses the real builtins, and imports the stdlib modules it needs itself.)"""
    return name.startswith("__") or hasattr(builtins, name) or name in sys.stdlib_module_names


def _typed(value, kind):
    if type(value) is not kind:
        raise TypeError(f"the solution returned {type(value).__name__} where {kind.__name__} is required")
    return value


def _main():
    payload = json.loads(sys.stdin.read())
    nonce, solution, tests, source = payload["nonce"], payload["solution"], payload["tests"], payload["server"]
    del payload
    # Non-dumpable: the solution's process (same uid) cannot open /proc/1/mem or /proc/1/fd/*.
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise SystemExit("judge: prctl(PR_SET_DUMPABLE) failed; refusing to judge")
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the tests' own prints go to stderr, away from the verdicts
    sys.stdout = sys.stderr
    server = None
    for index, test in enumerate(tests):
        passed = False
        try:
            if server is not None and server.load_failed:
                raise ProtocolError("the solution failed to load")
            if server is None or not server.alive():
                if server is not None:
                    server.close()
                server = Server(source)
                server.load(solution)
            exec(compile(test, f"test_{index}.py", "exec"), {"__name__": "test", **server.globals})
            passed = True
        except BaseException as err:
            print(f"test {index} failed: {type(err).__name__}: {err}"[:2000], file=sys.stderr)
        results.write(f"{nonce} {index} {int(passed)}\n")
        results.flush()
    if server is not None:
        server.close()


if __name__ == "__main__":
    _main()
