"""A targeted parser for the Prometheus text exposition format.

A vLLM `/metrics` page is ~200 KB, almost all of it histogram buckets the picker never
reads; it wants a handful of gauges. A general parser tokenises every line in Python.
This one asks `str.find` (C speed) for "newline + wanted name" and parses only the lines it
lands on, so the cost is one scan of the page per wanted name plus a few short lines.

What it accepts is the text format as engines emit it (and as `prometheus_client`'s parser
reads it): `name{label="value",...} value [timestamp]`, label values with `\\\\`, `\\"` and
`\\n` escapes and commas or braces inside the quotes, an optional trailing comma, spaces or
tabs between tokens, values such as `NaN`, `+Inf`, `-Inf` and `1.5e-3`. Comment lines
(`# HELP`, `# TYPE`) never match: the name must start its line. A counter is found whether
the caller names it with or without its `_total` suffix.

Not supported, because no engine emits them: sample lines indented with blanks, and the
UTF-8 quoted-name form `{"metric.name", ...}`. A malformed wanted line is skipped, not
raised: one bad line must not cost the picker the rest of a scrape.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

_TOTAL = "_total"
# One label pair, its optional trailing comma, and the blanks around them. The value is a
# run of characters other than quote and backslash, or backslash escapes.
_LABEL = re.compile(
    r'[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"([^"\\]*(?:\\.[^"\\]*)*)"[ \t]*(,?)'
)
# The same without blanks or escapes, ending at a comma or the closing brace: how every
# engine writes labels, and ~3x faster to match, so it is tried first.
_PLAIN_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"\\]*)"(,|(?=\}))')
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"\\": "\\", '"': '"', "n": "\n"}
_BLANKS = " \t"


class Sample(NamedTuple):
    """One sample line: the name as written (`foo_total` for a counter), labels, value."""

    name: str
    labels: dict[str, str]
    value: float


def parse_samples(text: str, names: Iterable[str]) -> dict[str, list[Sample]]:
    """Samples of each wanted metric, in page order, keyed by the name the caller gave.

    A name with or without `_total` finds both `name` and `name_total` sample lines.
    Names absent from the page map to an empty list.
    """
    return {name: list(iter_samples(text, name)) for name in names}


def iter_samples(text: str, name: str) -> Iterator[Sample]:
    """The samples of one metric, lazily, in page order (one scan of the page)."""
    base = name.removesuffix(_TOTAL)
    for start in _line_starts(text, base):
        sample = parse_line(_line_at(text, start), base)
        if sample is not None:
            yield sample


def newest_sample(text: str, name: str) -> Sample | None:
    """The sample of an info-style gauge with the highest value, or None.

    vLLM's LoRA gauge keeps every label set it ever used, valued with the time it was last
    current, so a long-running server lists hundreds. Only values are read for the ranking;
    labels are parsed for the winner alone. Unlabelled lines are skipped: an info gauge
    carries its information in labels.
    """
    base = name.removesuffix(_TOTAL)
    ranked: list[tuple[float, str]] = []
    for start in _line_starts(text, base):
        line = _line_at(text, start)
        value = _value(line[line.rfind("}") + 1 :]) if "}" in line else None
        if value is not None and not math.isnan(value):  # NaN never wins
            ranked.append((value, line))
    ranked.sort(key=lambda pair: pair[0], reverse=True)
    for _, line in ranked:
        sample = parse_line(line, base)
        if sample is not None:
            return sample
    return None


def _line_starts(text: str, name: str) -> Iterator[int]:
    """Offsets of the lines of `text` that begin with `name` (possibly a longer name)."""
    if text.startswith(name):
        yield 0
    needle = "\n" + name
    pos = text.find(needle)
    while pos != -1:
        yield pos + 1
        pos = text.find(needle, pos + len(needle))


def _line_at(text: str, start: int) -> str:
    end = text.find("\n", start)
    return text[start:] if end == -1 else text[start:end]


def parse_line(line: str, base: str) -> Sample | None:
    """Parse a sample line that starts with `base`.

    None when the line belongs to another metric whose name merely starts with `base`
    (`foo_bucket` for `foo`), or is malformed.
    """
    name_end = len(base)
    if line.startswith(_TOTAL, name_end):
        name_end += len(_TOTAL)
    rest = line[name_end:]
    if rest[:1] not in ("{", " ", "\t"):
        return None  # the name runs on
    labels: dict[str, str] = {}
    brace = len(rest) - len(rest.lstrip(_BLANKS))
    if rest[brace : brace + 1] == "{":
        parsed = parse_labels(rest, brace + 1)
        if parsed is None:
            return None
        labels, after = parsed
        rest = rest[after:]
    value = _value(rest)
    return None if value is None else Sample(line[:name_end], labels, value)


def parse_labels(text: str, pos: int) -> tuple[dict[str, str], int] | None:
    """Labels from just after `{` through the closing `}`: the labels and the offset after
    the `}`, or None when they are malformed (or a label repeats)."""
    labels: dict[str, str] = {}
    more = True
    while more and (match := _PLAIN_LABEL.match(text, pos) or _LABEL.match(text, pos)):
        key, value, comma = match.groups()
        if key in labels:
            return None
        labels[key] = _unescape(value) if "\\" in value else value
        pos, more = match.end(), comma == ","
    while text[pos : pos + 1] in (" ", "\t"):
        pos += 1
    return (labels, pos + 1) if text[pos : pos + 1] == "}" else None


def _unescape(value: str) -> str:
    # An unknown escape keeps its backslash, as prometheus_client's parser does.
    return _ESCAPE.sub(lambda m: _UNESCAPED.get(m.group(1), m.group(0)), value)


def _value(rest: str) -> float | None:
    """The sample value from the text after the name and labels; a timestamp is ignored."""
    if rest[:1] not in (" ", "\t"):
        return None
    tokens = rest.split()
    if not tokens or "_" in tokens[0]:  # float() takes "1_000"; the format does not
        return None
    try:
        return float(tokens[0])
    except ValueError:
        return None
