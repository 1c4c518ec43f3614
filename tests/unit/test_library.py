"""wakeful's Redis function library (state/library.py), as code: every function once, under the
library's versioned name, and a released library never changes (loaded and called on a real Redis:
tests/test_functions.py)."""

from __future__ import annotations

from wakeful.core.settings import Settings
from wakeful.state import library

# The library as the default settings build it: the runtime's functions, then the example bank's.
BUILT = library.of(Settings.from_env({}))

# A released library never changes under its name: roles of that version may still be calling it.
RELEASED = {
    "wakeful_v1": "8083e8300c9e80b89d08e4db9deffc0bb5e073864e7c14dead61410f4835a4ae",
    "wakeful_v2": "9834b71ea143f1faeb2aca4727707ec00273d9a6e109bcc05fc493b4364167b2",  # + the task index
    "wakeful_v3": "a9914f9a30150b27606e4d0c968cc6d9691db8169b3d23f2923036213b9ee28e",  # + memory's write door
    "wakeful_v4": "fbc5d42e0b54d29d0d9f188f94eb67343629d9ab1f6b04aaa3395334fbc9b577",  # + action records
    "wakeful_v5": "2258740bcfc5da2885bbfaa583aa0e8786cfcee720c935fa2354473e80a987af",  # + the purge
    "wakeful_v6": "8104ed76108ea237a13b88896528956c6c8e8d83474db8c3576f99c1dda7679b",  # + the outbox trim
    "wakeful_v7": "f9e51ad9629a103e33807a2200d3e96dc5dad0b325d2090073f46777533acb0d",  # + outbox_first (D87)
    "wakeful_v8": "12c739af5899e65c712bb6a475c799dc7ff2359e6e4ed4116238f40ab0a4660a",  # D93
    "wakeful_v9": "b0fdfb05719dbbfc8a7f0cfac9df2ccab7b454019d43b768e2cccf7702f31a70",  # + search sets (D107)
    "wakeful_v10": "88a37dedb5565d012fcd6f5bba354596c6806b5ca1f4f4de2b28643aa4839647",  # + limits (D108)
    "wakeful_v11": "697f3366851ca3b199252a60c4253dc660e16513b4fdebb5b981ffde12970854",  # D109, D110
    "wakeful_v12": "204a16a85b9a4dc44f2b4361dff26a9847ab7c03b795eb0fb2df5b17af5932da",  # D111, D112
}


def test_library_names_every_function_once_under_its_version() -> None:
    names = [f.qualified for f in (*BUILT.functions, BUILT.identity)]
    assert len(names) == len(set(names))
    assert all(name.startswith(f"{library.LIBRARY}_") for name in names)
    assert BUILT.code.startswith(f"#!lua name={library.LIBRARY}\n")
    assert BUILT.code.count("redis.register_function") == len(names)


def test_a_released_library_never_changes_its_code() -> None:
    assert library.LIBRARY in RELEASED, f"pin {library.LIBRARY}'s digest {BUILT.digest} in RELEASED"
    assert RELEASED[library.LIBRARY] == BUILT.digest, (
        f"the Lua of {library.LIBRARY} changed: bump VERSION in state/functions.py and pin the new digest"
    )
