"""Realistic request bodies, after the examples in each API's reference documentation."""

from __future__ import annotations

from typing import Any

from kinference.requests import Shape

IMAGE_URL = (
    "https://upload.wikimedia.org/wikipedia/commons/thumb/d/dd/"
    "Gfp-wisconsin-madison-the-nature-boardwalk.jpg/2560px-Gfp-wisconsin-madison-the-nature-"
    "boardwalk.jpg"
)
B64_IMAGE = "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAMCAgMCAgMDAwMEAwMEBQgFBQQEBQoHBwYIDAoMDAsKCwsN" * 40
WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. Boston, MA"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["location"],
}

CHAT_BASIC: dict[str, Any] = {
    "model": "gpt-4.1",
    "messages": [
        {"role": "developer", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello!"},
    ],
}
CHAT_IMAGE: dict[str, Any] = {
    "model": "gpt-4.1",
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this image?"},
                {"type": "image_url", "image_url": {"url": IMAGE_URL, "detail": "high"}},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/jpeg;base64," + B64_IMAGE},
                },
            ],
        }
    ],
    "max_tokens": 300,
}
CHAT_TOOLS: dict[str, Any] = {
    "model": "gpt-4.1",
    "messages": [
        {"role": "system", "content": "You answer weather questions."},
        {"role": "user", "content": "What is the weather like in Boston today?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc123",
                    "type": "function",
                    "function": {
                        "name": "get_current_weather",
                        "arguments": '{"location": "Boston, MA"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc123", "content": '{"temperature": 22}'},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_current_weather",
                "description": "Get the current weather in a given location",
                "parameters": WEATHER_PARAMETERS,
            },
        }
    ],
    "tool_choice": "auto",
    "stream": True,
    "stream_options": {"include_obfuscation": False},
    "max_completion_tokens": 512,
}
CHAT_AUDIO: dict[str, Any] = {
    "model": "gpt-4o-audio-preview",
    "modalities": ["text"],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this recording?"},
                {"type": "input_audio", "input_audio": {"data": "UklGRiQ" * 100, "format": "wav"}},
                {"type": "file", "file": {"file_id": "file-6F2ksmvXxt4VdoqmHRw6kL"}},
            ],
        }
    ],
}
COMPLETION: dict[str, Any] = {
    "model": "gpt-3.5-turbo-instruct",
    "prompt": "Say this is a test",
    "max_tokens": 7,
    "temperature": 0,
    "stream": True,
}
COMPLETION_TOKENS: dict[str, Any] = {"model": "llama", "prompt": [[1, 2, 3], [4, 5]]}
EMBEDDINGS: dict[str, Any] = {
    "input": "The food was delicious and the waiter was very friendly.",
    "model": "text-embedding-3-small",
    "encoding_format": "float",
}
EMBEDDINGS_BATCH: dict[str, Any] = {
    "model": "text-embedding-3-small",
    "input": ["first document", "second document"],
    "dimensions": 256,
}
RESPONSES_INSTRUCTIONS: dict[str, Any] = {
    "model": "gpt-4.1",
    "instructions": "You are a coding assistant that talks like a pirate.",
    "input": "Are semicolons optional in JavaScript?",
}
RESPONSES_IMAGE: dict[str, Any] = {
    "model": "gpt-4.1",
    "input": [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "what is in this image?"},
                {"type": "input_image", "image_url": IMAGE_URL},
            ],
        }
    ],
}
RESPONSES_TOOLS: dict[str, Any] = {
    "model": "gpt-4.1",
    "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER_PARAMETERS}],
    "input": [
        {"role": "user", "content": "What's the weather in Paris?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"location":"Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": '{"temperature": 14}'},
    ],
    "max_output_tokens": 1024,
    "stream": True,
}
RESPONSES_FOLLOW_UP: dict[str, Any] = {
    "model": "gpt-4.1",
    "previous_response_id": "resp_68af4030592c81938ec0a5fbab4a3e9f",
    "input": [{"role": "user", "content": "explain why this is funny."}],
}
ANTHROPIC_SYSTEM: dict[str, Any] = {
    "model": "claude-sonnet-4-20250514",
    "max_tokens": 1024,
    "system": "You are a seasoned data scientist at a Fortune 500 company.",
    "messages": [{"role": "user", "content": "Analyze this dataset for anomalies."}],
}
ANTHROPIC_IMAGE: dict[str, Any] = {
    "model": "claude-sonnet-4-20250514",
    "max_tokens": 1024,
    "messages": [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/jpeg", "data": B64_IMAGE},
                },
                {"type": "text", "text": "Describe this image."},
            ],
        }
    ],
}
ANTHROPIC_TOOLS: dict[str, Any] = {
    "model": "claude-sonnet-4-20250514",
    "max_tokens": 1024,
    "tools": [
        {
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "input_schema": WEATHER_PARAMETERS,
        }
    ],
    "messages": [
        {"role": "user", "content": "What's the weather like in San Francisco?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll check the weather."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A09q90qw90lq917835lq9",
                    "name": "get_weather",
                    "input": {"location": "San Francisco, CA"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                    "content": "15 degrees",
                }
            ],
        },
    ],
    "stream": True,
}
ANTHROPIC_SAMPLING: dict[str, Any] = {
    "anthropic_version": "vertex-2023-10-16",
    "model": "claude-sonnet-4",
    "max_tokens": 100,
    "stop_sequences": ["\n\nHuman:"],
    "top_k": 5,
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello, Claude"}]}],
}
ANTHROPIC_DOCUMENTS: dict[str, Any] = {
    "model": "claude-opus-4-1",
    "max_tokens": 2048,
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "messages": [
        {
            "role": "user",
            "content": [
                {
                    "type": "document",
                    "source": {
                        "type": "base64",
                        "media_type": "application/pdf",
                        "data": "JVBERi0xLjcK" * 50,
                    },
                },
                {
                    "type": "document",
                    "source": {
                        "type": "text",
                        "media_type": "text/plain",
                        "data": "Grass is green.",
                    },
                    "title": "My Document",
                    "citations": {"enabled": True},
                },
                {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
                {"type": "image", "source": {"type": "file", "file_id": "file_011CNha8iCJcU1w"}},
                {"type": "text", "text": "Summarize these."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Let me read them.", "signature": "WaUjzkyp"},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlx"},
                {"type": "text", "text": "Here is a summary."},
            ],
        },
        {"role": "user", "content": "Thanks"},
    ],
}
RESPONSES_REASONING: dict[str, Any] = {
    "model": "o4-mini",
    "reasoning": {"effort": "medium", "summary": "auto"},
    "include": ["reasoning.encrypted_content"],
    "store": False,
    "input": [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Read this file"},
                {
                    "type": "input_file",
                    "filename": "draconomicon.pdf",
                    "file_data": "data:application/pdf;base64," + "JVBERi0x" * 30,
                },
                {"type": "input_file", "file_id": "file-6F2ksmvXxt4VdoqmHRw6kL"},
            ],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Reading the file."}],
            "encrypted_content": "gAAAAABo" * 20,
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
        },
        {"type": "custom_tool_call", "call_id": "c2", "name": "code_exec", "input": "print(1)"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "1"},
        {"type": "item_reference", "id": "msg_123"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    ],
}
CHAT_LEGACY: dict[str, Any] = {
    "model": "gpt-3.5-turbo",
    "messages": [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "get_weather", "arguments": "{}"},
        },
        {"role": "function", "name": "get_weather", "content": "sunny"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]},
    ],
    "functions": [{"name": "get_weather", "parameters": {"type": "object"}}],
    "function_call": "auto",
}

SAMPLES: dict[str, tuple[dict[str, Any], Shape]] = {
    "chat-basic": (CHAT_BASIC, Shape.CHAT),
    "chat-image": (CHAT_IMAGE, Shape.CHAT),
    "chat-tools": (CHAT_TOOLS, Shape.CHAT),
    "chat-audio": (CHAT_AUDIO, Shape.CHAT),
    "chat-legacy": (CHAT_LEGACY, Shape.CHAT),
    "completion": (COMPLETION, Shape.COMPLETION),
    "completion-tokens": (COMPLETION_TOKENS, Shape.COMPLETION),
    "embeddings": (EMBEDDINGS, Shape.EMBEDDINGS),
    "embeddings-batch": (EMBEDDINGS_BATCH, Shape.EMBEDDINGS),
    "responses-instructions": (RESPONSES_INSTRUCTIONS, Shape.RESPONSES),
    "responses-image": (RESPONSES_IMAGE, Shape.RESPONSES),
    "responses-tools": (RESPONSES_TOOLS, Shape.RESPONSES),
    "responses-follow-up": (RESPONSES_FOLLOW_UP, Shape.RESPONSES),
    "responses-reasoning": (RESPONSES_REASONING, Shape.RESPONSES),
    "anthropic-system": (ANTHROPIC_SYSTEM, Shape.ANTHROPIC_MESSAGES),
    "anthropic-image": (ANTHROPIC_IMAGE, Shape.ANTHROPIC_MESSAGES),
    "anthropic-tools": (ANTHROPIC_TOOLS, Shape.ANTHROPIC_MESSAGES),
    "anthropic-sampling": (ANTHROPIC_SAMPLING, Shape.ANTHROPIC_MESSAGES),
    "anthropic-documents": (ANTHROPIC_DOCUMENTS, Shape.ANTHROPIC_MESSAGES),
}
