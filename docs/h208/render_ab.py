"""h208: thread CPU per ChatTemplate.render for the A/B of docs/h208/PLAN.txt.

PYTHONPATH=COPY:/work/wt/h208 python docs/h208/render_ab.py SIDE   # one JSON line
"""

import json
import os
import statistics
import sys
import time

import kinference.tokenize.template as template_module
from kinference.tokenize.template import ChatTemplate
from tests.tokenize.files import TEMPLATE
from tests.tokenize.test_stand_in import QWEN3, SPECIAL

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "</think>"]


def messages(count: int, words: int) -> list[dict[str, str]]:
    roles = ("user", "assistant")
    return [
        {
            "role": "system" if i == 0 else roles[i % 2],
            "content": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(words)),
        }
        for i in range(count)
    ]


def per_render_us(template: ChatTemplate, conversation: list[dict[str, str]]) -> float:
    for _ in range(20):
        template.render(conversation)
    samples = []
    for _ in range(200):
        started = time.thread_time_ns()
        template.render(conversation)
        samples.append((time.thread_time_ns() - started) / 1000)
    return statistics.median(samples)


figures = {
    "qwen3_256": per_render_us(ChatTemplate(QWEN3, SPECIAL), messages(256, 12)),
    "chatml_256": per_render_us(ChatTemplate(TEMPLATE, SPECIAL), messages(256, 12)),
    "qwen3_8_long": per_render_us(ChatTemplate(QWEN3, SPECIAL), messages(8, 900)),
}
print(
    json.dumps(
        {
            "side": sys.argv[1],
            "module": os.path.dirname(template_module.__file__),
            "utc": time.strftime("%H:%M:%S", time.gmtime()),
            "load1": os.getloadavg()[0],
            **figures,
        }
    )
)
