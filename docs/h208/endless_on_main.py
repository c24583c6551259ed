"""h208: what each of tests/tokenize/test_render_budget.py's ENDLESS templates costs through
ChatTemplate.render (thread CPU), and what it raises. Run from the repository root:
PYTHONPATH=. python docs/h208/endless_on_main.py"""

import time

from kinference.tokenize.template import ChatTemplate
from tests.tokenize.test_render_budget import ENDLESS, _messages

for name, source in ENDLESS.items():
    started = time.thread_time()
    try:
        ChatTemplate(source).render(_messages(100))
        outcome = "rendered"
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {str(exc)[:70]}"
    print(f"{name:16s} {time.thread_time() - started:7.3f} s  {outcome}")
