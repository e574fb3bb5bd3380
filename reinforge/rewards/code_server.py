"""The solution's process for `code_tests`: runs INSIDE the sandbox, started by the judge.

Never imported on the host: `code_judge.py` (the sandbox's main program) starts it as
`python -I -S -B -c <this file's text>` and sends the solution as the first line of its stdin.
It loads the solution, then answers the judge's requests (call, attribute, item, iteration,
len, bool, repr), one JSON line each way, until stdin closes.

Results travel as plain data of exact builtin types (None, bool, int, float, complex, str,
bytes, list, tuple, dict, set, frozenset), encoded by type; anything else (a subclass included)
stays here and the judge gets a handle to it. So the judge never holds an object of the
solution's: an overridden `__eq__` or `__bool__` cannot decide a comparison the judge makes.
Everything in this process can be changed by the solution; the judge trusts no more than that
what comes back is data.
"""

import json
import os
import sys

_MAX_DEPTH = 200
_PLAIN_SEQUENCES = {list: "l", tuple: "t", set: "set", frozenset: "fs"}


def _encode(value, handles, depth=0):
    kind = type(value)
    if value is None:
        return ["n"]
    if kind is bool:
        return ["b", value]
    if kind is int:
        return ["i", hex(value)]  # hex: no int-to-str digit limit
    if kind is float:
        return ["f", value.hex()]
    if kind is complex:
        return ["c", value.real.hex(), value.imag.hex()]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        return ["y", value.hex()]
    if depth < _MAX_DEPTH and kind in _PLAIN_SEQUENCES:
        return [_PLAIN_SEQUENCES[kind], [_encode(item, handles, depth + 1) for item in value]]
    if depth < _MAX_DEPTH and kind is dict:
        return ["d", [[_encode(k, handles, depth + 1), _encode(v, handles, depth + 1)] for k, v in value.items()]]
    handles.append(value)
    return ["r", len(handles) - 1]


def _decode(data, handles):
    tag = data[0]
    if tag == "n":
        return None
    if tag in ("b", "s"):
        return data[1]
    if tag == "i":
        return int(data[1], 16)
    if tag == "f":
        return float.fromhex(data[1])
    if tag == "c":
        return complex(float.fromhex(data[1]), float.fromhex(data[2]))
    if tag == "y":
        return bytes.fromhex(data[1])
    if tag == "r":
        return handles[data[1]]
    items = [_decode(item, handles) for item in data[1]] if tag != "d" else None
    if tag == "l":
        return items
    if tag == "t":
        return tuple(items)
    if tag == "set":
        return set(items)
    if tag == "fs":
        return frozenset(items)
    if tag == "d":
        return {_decode(k, handles): _decode(v, handles) for k, v in data[1]}
    raise ValueError(f"unknown tag {tag!r}")


def _answer(request, handles):
    op = request["op"]
    target = handles[request["ref"]] if "ref" in request else None
    if op == "call":
        args = [_decode(a, handles) for a in request["args"]]
        kwargs = {k: _decode(v, handles) for k, v in request["kwargs"]}
        return target(*args, **kwargs)
    if op == "getattr":
        return getattr(target, request["name"])
    if op == "getitem":
        return target[_decode(request["key"], handles)]
    if op == "contains":
        return bool(_decode(request["item"], handles) in target)
    if op == "iter":
        return iter(target)  # an iterator is never of a plain type: it comes back as a handle
    if op == "next":
        return next(target)
    if op == "len":
        return len(target)
    if op == "bool":
        return bool(target)
    if op == "repr":
        return repr(target)
    raise ValueError(f"unknown op {op!r}")


def _main():
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)  # the solution's input() sees end of file
    os.dup2(2, 1)  # its prints go to stderr, not into the replies
    sys.stdout = sys.stderr
    solution = json.loads(requests.readline())
    handles = []
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(solution, "solution.py", "exec"), namespace)
    except BaseException as err:
        print(f"solution failed to load: {type(err).__name__}: {err}", file=sys.stderr)
        replies.write(json.dumps({"load_error": type(err).__name__}) + "\n")
        replies.flush()
        return
    names = [[name, _encode(value, handles)] for name, value in namespace.items() if not name.startswith("__")]
    replies.write(json.dumps({"globals": names}) + "\n")
    replies.flush()
    for line in requests:
        try:
            reply = {"ok": _encode(_answer(json.loads(line), handles), handles)}
        except StopIteration:
            reply = {"stop": True}
        except BaseException as err:
            reply = {"raise": [type(err).__name__, str(err)[:500]]}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    _main()
