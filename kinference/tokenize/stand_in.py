"""A chat template rendered with its long strings stood in for, then put back, where the
render provably did nothing with them but place them in its output.

A 1 MiB conversation's render copies its long content three or four times (the template's
`+` chain, then the output's join), each copy a fresh mapping whose pages fault: ~2.5 ms
holding the GIL on the tokenizer thread every turn, which the event loop waits for
(docs/benchmarks.md, h96, h104). Here every string of `STAND_IN_CHARS` or more in the
messages is replaced by a `StandIn`: a `str` whose own characters are one private-use
`MARK`, which records how it is concatenated (`+`, `sum`) and answers exactly the questions
whose answers do not depend on anything but the real text (`len`, truth, `==`, `in`,
`startswith`, `endswith`, `find`, `count`, `is...`: asked of the real text), and Jinja's
`trim` filter of one whole long text (`stand_in_trim`: Llama 3's `content | trim`). Everything
else a template can do with it (slice it, strip it, split it, `~` it, format it, iterate,
hash, pass it to a filter, a test or a call that is not one of those, `tojson`) raises
`Touched`, and the caller renders the whole conversation instead. What reaches the output
is known by the template's `finalize` (every `{{ }}` passes through it): a stand-in there is
output as its parts, real texts in place of the marks, in one join. A mark anywhere else in
the output (a stand-in's characters copied by C code that reads `str` data directly:
`str.join`) is a leak: `Touched`. Templates whose compiled code gathers output into values
(macros, `{% set %}` blocks, `{% call %}`, `{% filter %}`: `concat(`) are not rendered this
way at all: a stand-in's output could be measured or cut there without passing through it.

One case is not checked: a long string searched for inside a plain string the template
built itself (`content in built`, Python's `in` on a `str` container reads the data): false
for a stand-in, and false for the real text too unless the template built a string at
least as long as it out of other strings, none of them that long (every string that long in
the messages is a stand-in).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any

import jinja2

from kinference.tokenize.render_budget import MeteredSandbox


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


STAND_IN_CHARS = 128 * 1024  # strings this long are stood in for (64 KiB prompts: none)
MARK = "\U000f8a5d"  # a stand-in's own characters (a private-use code point)
# Answers that depend on the real text only: asked of it (a stand-in for one whole string).
_EXACT = _names(
    "startswith endswith find rfind index rindex count isalnum isalpha isascii isdecimal "
    "isdigit isidentifier islower isnumeric isprintable isspace istitle isupper"
)
_EXACT_DUNDERS = _names("__contains__ __eq__ __ne__")
_KEPT = _names(
    "__new__ __init__ __getattribute__ __setattr__ __delattr__ __init_subclass__ "
    "__subclasshook__ __sizeof__ __reduce__ __reduce_ex__ __getnewargs__ __dir__ __class__ "
    "__doc__ __len__ __add__ __radd__ __getstate__"
)
_SAFE_FILTERS = _names("length count string default d")
_SAFE_TESTS = _names(
    "defined undefined none string mapping number integer float boolean true false "
    "sequence callable sameas eq equalto == ne !="
)
_DEEP_FILTERS = frozenset({"tojson", "pprint", "urlencode", "xmlattr"})  # read containers' data
_GATHERS = re.compile(r"\bconcat\(|\bMacro\(")  # compiled code that gathers output into a value


class Touched(BaseException):
    """The template did more with a long string than place it; render the whole instead.
    A BaseException: no `except Exception` in Jinja or a filter may swallow it."""


class _Long:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


Part = str | _Long


class StandIn(str):
    """A long string (or a concatenation with some): `parts`, `length` the real one's."""

    parts: tuple[Part, ...]
    length: int

    def __new__(cls, parts: tuple[Part, ...], length: int) -> StandIn:
        self = super().__new__(cls, MARK)
        self.parts, self.length = parts, length
        return self

    @classmethod
    def of(cls, text: str) -> StandIn:
        return cls((_Long(text),), len(text))

    def __len__(self) -> int:
        return self.length

    def __add__(self, other: object) -> Any:
        parts = _parts(other)
        if parts is None:
            return NotImplemented
        return StandIn(self.parts + parts, self.length + _length(parts))

    def __radd__(self, other: object) -> Any:
        parts = _parts(other)
        if parts is None:
            return NotImplemented
        return StandIn(parts + self.parts, self.length + _length(parts))

    def real(self) -> str:
        """The one long string this stands in for (only a whole one is asked things)."""
        if len(self.parts) != 1 or not isinstance(self.parts[0], _Long):
            raise Touched
        return self.parts[0].text


class _Emitted(str):
    """A stand-in on its way to the output (`finalize`): `str()` of it is itself."""

    parts: tuple[Part, ...]

    def __new__(cls, parts: tuple[Part, ...]) -> _Emitted:
        self = super().__new__(cls, MARK)
        self.parts = parts
        return self

    def __str__(self) -> str:
        return self


def _parts(other: object) -> tuple[Part, ...] | None:
    if isinstance(other, StandIn):
        return other.parts
    if not isinstance(other, str):
        return None
    if type(other) is not str or MARK in other:  # a leak, or a str subclass (Markup): refuse
        raise Touched
    return (other,)


def _length(parts: tuple[Part, ...]) -> int:
    return sum(len(p.text) if isinstance(p, _Long) else len(p) for p in parts)


def _unwrap(value: Any) -> Any:
    if isinstance(value, StandIn):
        return value.real()
    if isinstance(value, tuple):
        return tuple(map(_unwrap, value))
    return value


def _exact(name: str) -> Callable[..., Any]:
    method = getattr(str, name)

    def asked(self: StandIn, *args: Any) -> Any:
        return method(self.real(), *map(_unwrap, args))

    return asked


def _touching(self: StandIn, *args: Any, **kwargs: Any) -> Any:
    raise Touched


for _name in dir(str):
    if _name in _KEPT or not callable(getattr(str, _name)):
        continue
    _exact_one = _name in _EXACT or _name in _EXACT_DUNDERS
    setattr(StandIn, _name, _exact(_name) if _exact_one else _touching)
StandIn.__hash__ = _touching  # type: ignore[method-assign,assignment]


def stand_in(value: Any, minimum: int = STAND_IN_CHARS) -> Any:
    """`value` (messages, tools) with every string of `minimum` characters or more stood in
    for; containers copied only where something inside was."""
    if isinstance(value, str):
        return StandIn.of(value) if len(value) >= minimum and type(value) is str else value
    if isinstance(value, dict):
        changed = {k: stand_in(v, minimum) for k, v in value.items()}
        same = all(changed[k] is v for k, v in value.items())
        return value if same else changed
    if isinstance(value, list):
        items = [stand_in(v, minimum) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def holds_long(value: Any, minimum: int = STAND_IN_CHARS) -> bool:
    """Whether some string in `value` is long enough to be stood in for (asked of every
    chat's messages: strings are looked at in the loop, only containers recursed into)."""
    if isinstance(value, str):
        return len(value) >= minimum
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, list):
        return False
    for item in value:
        if isinstance(item, str):
            if len(item) >= minimum:
                return True
        elif isinstance(item, dict | list) and holds_long(item, minimum):
            return True
    return False


class StandInEnvironment(MeteredSandbox):
    """HF's environment (`template`), guarded for stand-ins as the module says: `guard`
    once its filters and tests are all in."""

    def __init__(self, **options: Any) -> None:
        super().__init__(finalize=_finalize, **options)

    def guard(self) -> None:
        self.filters = {k: _guard(v, k) for k, v in self.filters.items()}
        tests: dict[str, Any] = self.tests
        self.tests = {k: _guard(v, k, _SAFE_TESTS) for k, v in tests.items()}

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, StandIn) and attribute not in _EXACT:
            raise Touched
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if isinstance(obj, StandIn):
            raise Touched
        return super().getitem(obj, argument)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(__obj, "__self__", None)
        if not isinstance(owner, StandIn) and (
            # str.join reads its items' data, and may be given a generator: never
            (isinstance(owner, str) and getattr(__obj, "__name__", "") == "join")
            or holds_stand_in(args)
            or holds_stand_in(kwargs.values())
        ):
            raise Touched
        return super().call(__context, __obj, *args, **kwargs)


def _any_stand_in(values: Iterable[Any]) -> bool:
    return any(isinstance(v, StandIn) for v in values)


def _guard(
    function: Callable[..., Any], name: str, safe: frozenset[str] = _SAFE_FILTERS
) -> Callable[..., Any]:
    if name in safe:
        return function
    held = holds_stand_in if name in _DEEP_FILTERS else _any_stand_in

    @functools.wraps(function)  # keeps `jinja_pass_arg` (pass_context and the like)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if held(args) or held(kwargs.values()):
            raise Touched
        return function(*args, **kwargs)

    return guarded


def holds_stand_in(value: Any) -> bool:
    """Whether a stand-in is in `value`, however deep (containers whose data C code reads)."""
    if isinstance(value, StandIn):
        return True
    if isinstance(value, dict):
        return holds_stand_in(value.keys()) or holds_stand_in(value.values())
    if isinstance(value, (list, tuple, set, frozenset, type({}.keys()), type({}.values()))):
        return any(map(holds_stand_in, value))
    return False


def _finalize(value: Any) -> Any:
    return _Emitted(value.parts) if isinstance(value, StandIn) else value


def gathers(environment: jinja2.Environment, source: str) -> bool:
    """Whether the template's code gathers output into values (then it is never stood in)."""
    return bool(_GATHERS.search(str(environment.compile(source, raw=True))))


def rendered(pieces: Iterable[str]) -> str:
    """The output of a render with stand-ins: their real texts in place, in one join."""
    out: list[str] = []
    for piece in pieces:
        if type(piece) is _Emitted:
            out.extend(p.text if isinstance(p, _Long) else p for p in piece.parts)
        elif MARK in piece:
            raise Touched
        else:
            out.append(piece)
    return "".join(out)
