"""Request bodies as inference requests: scanning, parsing and (later) rewriting."""

from kinference.requests.fields import Fields, LargeValue, MalformedRequest, read_fields
from kinference.requests.parse import InferenceRequest, Shape, parse_request
from kinference.requests.scan import JsonScanner

__all__ = [
    "Fields",
    "InferenceRequest",
    "JsonScanner",
    "LargeValue",
    "MalformedRequest",
    "Shape",
    "parse_request",
    "read_fields",
]
