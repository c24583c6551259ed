"""Reading the routing policy file, with errors that point at the offending line.

The YAML text is composed into a node tree once (safe loader only); the tree gives line
numbers, the constructed Python data is validated by the `Policy` model, and each pydantic
error location (`pools`, 0, `endpoints`, 1) is walked back down the tree to the nearest
node to find its line. Cross-reference problems (`ItemErrors`) carry their own locations
from the top of the file, so each is placed at the line that uses the unknown name. The
problem on the earliest line becomes one `PolicyError` line, with a count of the others:

    policy.yaml:7: pools[0].endpoints[1]: expected HOST:PORT, got '10.0.0.5'
"""

from __future__ import annotations

import re
import reprlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from kinference.config.fields import ItemError, ItemErrors, Loc
from kinference.config.policy import Policy

_NULL_TAG = "tag:yaml.org,2002:null"
_MERGE_KEY = "<<"
# Longest offending value quoted back in an error message, in characters.
_MAX_QUOTED = 60


class PolicyError(ValueError):
    """An invalid or unreadable policy file; `str()` is one line: `source:line: path: problem`."""


def load_policy(path: Path) -> Policy:
    """Read and validate the policy file at `path`; raises `PolicyError`."""
    return decode_policy(read_policy_bytes(path), source=str(path))


def read_policy_bytes(path: Path) -> bytes:
    """The raw bytes of the policy file at `path`; raises `PolicyError`."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def decode_policy(data: bytes, source: str) -> Policy:
    """Validate the bytes of a policy file (UTF-8, BOM allowed); raises `PolicyError`."""
    try:
        text = data.decode("utf-8-sig")  # tolerate a BOM from Windows editors
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{source}: not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    return parse_policy(text, source=source)


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Validate policy YAML `text`; `source` names it in errors. Empty text is `Policy()`."""
    root, data = _compose(text, source)
    if root is None or root.tag == _NULL_TAG:
        return Policy()
    if not isinstance(root, MappingNode):
        raise PolicyError(
            f"{source}:{_line(root)}: expected a mapping at the top level (e.g. 'pools:'), "
            f"got {_quote(data)}"
        )
    _reject_duplicate_keys(root, (), source, set())
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(_one_line(exc, root, source)) from exc


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # characters that would break the one line


def _compose(text: str, source: str) -> tuple[Node | None, Any]:
    """Parse `text` into its node tree and the Python data built from it."""
    try:
        loader = yaml.SafeLoader(text)
    except ReaderError as exc:  # control characters; found before any parsing
        line = text.count("\n", 0, exc.position) + 1
        raise PolicyError(f"{source}:{line}: invalid YAML: {exc.reason}") from exc
    try:
        root = loader.get_single_node()
        return root, None if root is None else loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        raise PolicyError(_yaml_problem(exc, source)) from exc
    except RecursionError as exc:
        raise PolicyError(f"{source}: invalid YAML: nested too deeply") from exc
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise PolicyError(f"{source}: invalid YAML: {str(exc)[: _MAX_QUOTED * 2]}") from exc
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.MarkedYAMLError, source: str) -> str:
    """`source:line: invalid YAML: problem (context)`, e.g. an unclosed `[` and where it began."""
    mark = exc.problem_mark or exc.context_mark
    where = f"{source}:{mark.line + 1}" if mark else source
    problem = exc.problem or "syntax error"
    if exc.context:  # e.g. "while parsing a flow sequence"
        started = exc.context_mark
        at = f" at line {started.line + 1}" if started and started is not mark else ""
        problem = f"{problem} ({exc.context}{at})"
    return f"{where}: invalid YAML: {problem}"


def _reject_duplicate_keys(node: Node, loc: Loc, source: str, seen: set[int]) -> None:
    """Raise on a key given twice in one mapping; PyYAML would silently keep the last."""
    if id(node) in seen:  # aliases may share (or recursively contain) a node
        return
    seen.add(id(node))
    if isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            _reject_duplicate_keys(item, (*loc, index), source, seen)
    if not isinstance(node, MappingNode):
        return
    keys: set[str] = set()
    for key, value in node.value:
        name = key.value if isinstance(key, ScalarNode) else None
        if name in keys:
            raise PolicyError(f"{source}:{_line(key)}: {_path((*loc, name))}: duplicate key")
        if name is not None and name != _MERGE_KEY:
            keys.add(name)
        _reject_duplicate_keys(value, (*loc, name or "?"), source, seen)


def _one_line(exc: ValidationError, root: Node, source: str) -> str:
    """The first problem by line, plus how many more there are."""
    problems = [
        _describe(error, path, root, source)
        for error in exc.errors()
        for path in _item_paths(error)
    ]
    # On one line, a missing key is reported last: an unknown key there is likely its typo.
    problems.sort(key=lambda problem: (problem[0], problem[1]))
    text = problems[0][2]
    more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    # A key may hold a newline or another control character: escape them to keep one line.
    return _CONTROL.sub(lambda char: repr(char.group())[1:-1], f"{text}{more}")


def _item_paths(error: ErrorDetails) -> list[tuple[Loc, str | None]]:
    """`(path below the error's loc, message)` for each problem one pydantic error holds.

    A plain error holds one, at its own loc, with pydantic's message (None); an
    `ItemErrors` (the cross-reference checks) holds several.
    """
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, ItemErrors):
        return [(item.path, str(item)) for item in cause.errors]
    if isinstance(cause, ItemError):
        return [(cause.path, None)]
    return [((), None)]


def _describe(
    error: ErrorDetails, item: tuple[Loc, str | None], root: Node, source: str
) -> tuple[int, bool, str]:
    """`(line, is_missing, "source:line: path: message")` for one problem."""
    below, message = item
    loc: Loc = (*error["loc"], *below)
    line = _locate(root, loc)
    prefix = f"{source}:{line}: {_path(loc)}: " if loc else f"{source}:{line}: "
    return line, error["type"] == "missing", prefix + (message or _message(error))


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    message = error["msg"].removeprefix("Value error, ")
    if kind == "value_error":  # our validators quote the value themselves
        return message
    return f"{message} (got {_quote(error['input'])})"


def _locate(root: Node, loc: Loc) -> int:
    """1-based line of the node nearest to `loc` (the deepest part of it that exists)."""
    line = _line(root)
    node = root
    for part in loc:
        step = _child(node, part)
        if step is None:
            break
        line, node = step
    return line


def _child(node: Node, part: int | str) -> tuple[int, Node] | None:
    """`(line, child)` of `node` at `part`; a mapping entry's line is its key's line."""
    if isinstance(node, MappingNode):
        for key, value in node.value:
            if isinstance(key, ScalarNode) and key.value == str(part):
                return _line(key), value
    elif isinstance(node, SequenceNode) and isinstance(part, int) and part < len(node.value):
        item = node.value[part]
        return _line(item), item
    return None


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1  # marks count lines from 0


def _path(loc: Loc) -> str:
    """`pools[0].endpoints[1]` for `("pools", 0, "endpoints", 1)`."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.removeprefix(".")


def _bounded_repr(value: Any) -> str:
    bounded = reprlib.Repr()
    bounded.maxlevel, bounded.maxlist, bounded.maxdict = 3, 4, 4
    bounded.maxstring = _MAX_QUOTED
    return bounded.repr(value)


def _quote(value: Any) -> str:
    # Aliases can make a small file a huge tree (a "billion laughs"): quote containers
    # through a bounded repr, which never walks more than a few levels and items.
    text = _bounded_repr(value) if isinstance(value, list | dict) else repr(value)
    return text if len(text) <= _MAX_QUOTED else text[: _MAX_QUOTED - 3] + "..."
