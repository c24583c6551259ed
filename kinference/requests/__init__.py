"""Request bodies as inference requests: scanning, parsing, prompt extraction, rewriting."""

from kinference.requests.fields import Fields, LargeValue, MalformedRequest, read_fields
from kinference.requests.parse import InferenceRequest, parse_request
from kinference.requests.prompt import Prompt
from kinference.requests.rewrite import RewritePlan, rewrite
from kinference.requests.scan import JsonScanner
from kinference.requests.shapes import Shape

__all__ = [
    "Fields",
    "InferenceRequest",
    "JsonScanner",
    "LargeValue",
    "MalformedRequest",
    "Prompt",
    "RewritePlan",
    "Shape",
    "parse_request",
    "read_fields",
    "rewrite",
]
