"""wakeful's Redis function library (state/library.py), as code: every function once, under the
library's versioned name, and a released library never changes (loaded and called on a real Redis:
tests/test_functions.py)."""

from __future__ import annotations

from wakeful.state import library

# A released library never changes under its name: roles of that version may still be calling it.
RELEASED = {"wakeful_v1": "8083e8300c9e80b89d08e4db9deffc0bb5e073864e7c14dead61410f4835a4ae"}


def test_library_names_every_function_once_under_its_version() -> None:
    names = [f.qualified for f in (*library.FUNCTIONS, library.IDENTITY)]
    assert len(names) == len(set(names))
    assert all(name.startswith(f"{library.LIBRARY}_") for name in names)
    assert library.CODE.startswith(f"#!lua name={library.LIBRARY}\n")
    assert library.CODE.count("redis.register_function") == len(names)


def test_a_released_library_never_changes_its_code() -> None:
    assert library.LIBRARY in RELEASED, f"pin {library.LIBRARY}'s digest {library.DIGEST} in RELEASED"
    assert RELEASED[library.LIBRARY] == library.DIGEST, (
        f"the Lua of {library.LIBRARY} changed: bump VERSION in state/functions.py and pin the new digest"
    )
