import asyncio, json, logging, sys
from pathlib import Path

sys.path.insert(0, "/work/wt/h191")
from kinference.bodies import Body
from kinference.requests.parse import parse_request
from kinference.tokenize.prepare import PromptPreparer
from tests.tokenize.files import precise_chat_policy, write_model

errors = []


class H(logging.Handler):
    def emit(self, r):
        errors.append((r.levelname, r.getMessage()[:80]))


logging.getLogger().addHandler(H())
logging.getLogger().setLevel(logging.WARNING)
d = Path("/tmp/h191-model")
files = write_model(d)
policy = precise_chat_policy(files, 16)
deep = "x"
for _ in range(100):
    deep = [deep]
bodies = {
    "5000 msgs": {"messages": [{"role": "user", "content": "hi"}] * 5000},
    "4000 msgs": {"messages": [{"role": "user", "content": "hi"}] * 4000},
    "int content": {"messages": [{"role": "user", "content": 12345}]},
    "dict content": {"messages": [{"role": "user", "content": {"a": 1}}]},
    "null content": {"messages": [{"role": "user", "content": None}]},
    "deep content": {"messages": [{"role": "user", "content": [{"type": "text", "text": deep}]}]},
    "deep content2": {"messages": [{"role": "user", "content": deep}]},
    "odd role": {"messages": [{"role": {"x": [1]}, "content": "hi"}]},
    "no role": {"messages": [{"content": "hi"}]},
    "msg not dict": {"messages": [1, "two", None, [3]]},
    "tool calls": {
        "messages": [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            }
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": deep}}],
    },
    "surrogate": None,
    "surrogate role": None,
    "big int": None,
    "messages str": {"messages": "hello"},
    "tools str": {"messages": [{"role": "user", "content": "hi"}], "tools": "x"},
}
raw_over = {
    "surrogate": b'{"model":"m","messages":[{"role":"user","content":"a\\ud800b"}]}',
    "surrogate role": b'{"model":"m","messages":[{"role":"\\udfff","content":"ab"}]}',
    "big int": b'{"model":"m","messages":[{"role":"user","content":' + b"9" * 5000 + b"}]}",
}


async def main():
    p = PromptPreparer(policy)
    await p.warmed()
    for name, b in bodies.items():
        raw = raw_over.get(name) or json.dumps({"model": "m", **b}).encode()
        body = Body([raw], reserved=len(raw))
        n = len(errors)
        try:
            req = parse_request(body)
            if isinstance(req, str):
                print(name, "PARSE:", req[:80])
                continue
            q = await asyncio.wait_for(p.prepare(req, body), 30)
            print(
                f"{name:15}",
                "->",
                (q.problem if q else q)
                if (q is None or q.problem)
                else f"blocks {q.blocks[next(iter(q.blocks))].tokens} tokens",
                errors[n:],
            )
        except Exception as e:
            print(name, "RAISED", type(e), e)
    p.close()


asyncio.run(main())
