"""Log output: one JSON object per line for collectors, or readable text for a terminal.

Fields given as `extra={...}` on a log call (`client_request_id`, `response_id`, `outcome`,
`endpoint`, ...) become keys of the JSON object, or `key=value` pairs after the message.
Configured once by `kinference serve`; library code only calls `logging.getLogger`.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

# Attributes every LogRecord has; anything else on a record came from `extra`.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a log call passed in `extra`, in the order given."""
    return {key: value for key, value in record.__dict__.items() if key not in _STANDARD}


def _timestamp(record: logging.LogRecord) -> str:
    """RFC 3339 UTC with milliseconds: `2026-05-01T12:00:00.123Z`."""
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(record.msecs):03d}Z"


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "msg", ...extra fields, "exc"}` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            entry.setdefault(key, value)  # an extra never hides a standard key
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        # default=str: an odd extra (a Path, an enum) is written as text, never dropped.
        return json.dumps(entry, ensure_ascii=False, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """`TS LEVEL LOGGER message key=value ...` for people reading a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, record.name, record.getMessage()]
        parts += [f"{key}={value}" for key, value in extra_fields(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


_CHATTY_LIBRARIES = ("httpx", "httpcore")


def resolve_format(log_format: str, stream: TextIO) -> str:
    """`auto` is `text` on a terminal and `json` otherwise (a pod's log)."""
    if log_format != "auto":
        return log_format
    isatty = getattr(stream, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


def configure_logging(level: str, log_format: str, stream: TextIO | None = None) -> None:
    """Send every log record at `level` and above to `stream` (stderr) in `log_format`."""
    stream = stream if stream is not None else sys.stderr
    handler = _Handler(stream)
    chosen = resolve_format(log_format, stream)
    handler.setFormatter(JsonFormatter() if chosen == "json" else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:  # replace, not add
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # httpx logs every request at INFO: one line per engine scrape (tens a second) would
    # drown the picker's own lines and cost CPU. Their warnings still come through.
    for chatty in _CHATTY_LIBRARIES:
        logging.getLogger(chatty).setLevel(logging.WARNING)


class _Handler(logging.StreamHandler[TextIO]):
    """The handler `configure_logging` installs (others, e.g. a test's, are left alone)."""
