"""Drives a running superfluid with the official ollama Python client.

Reads SUPERFLUID_OLLAMA_HOST (http://HOST:PORT) and SUPERFLUID_TEST_MODEL
from the environment. Each case is a function named in CASES; each prints
`ok NAME` or `FAIL NAME: why`, and the script exits non-zero when any failed.
"""

import os
import sys

import ollama

import cases

HOST = os.environ["SUPERFLUID_OLLAMA_HOST"]
MODEL = os.environ["SUPERFLUID_TEST_MODEL"]
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]
GREEDY = {"temperature": 0, "num_predict": 24}


def client():
    return ollama.Client(host=HOST, timeout=60)


def chat():
    answer = client().chat(model=MODEL, messages=MESSAGES, options=GREEDY)
    assert answer.done, f"not done: {answer!r}"
    assert "Paris" in answer.message.content, f"no Paris in {answer.message.content!r}"
    assert answer.eval_count and answer.eval_count > 0, f"no eval_count: {answer!r}"


def streamed_chat():
    parts = list(client().chat(model=MODEL, messages=MESSAGES, options=GREEDY, stream=True))
    assert len(parts) > 1, f"one part only: {parts!r}"
    assert parts[-1].done and parts[-1].done_reason in ("stop", "length"), parts[-1]
    text = "".join(p.message.content or "" for p in parts)
    assert "Paris" in text, f"no Paris in {text!r}"


def generate():
    answer = client().generate(
        model=MODEL,
        prompt="What is the capital of France?",
        system="You are a helpful assistant.",
        options=GREEDY,
    )
    assert "Paris" in answer.response, f"no Paris in {answer.response!r}"
    assert answer.total_duration and answer.total_duration > 0, answer


def structured_chat():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    answer = client().chat(model=MODEL, messages=MESSAGES, format=schema, options={"temperature": 0, "num_predict": 64})
    import json

    assert isinstance(json.loads(answer.message.content)["city"], str), answer.message.content


def list_names_the_model():
    names = [m.model for m in client().list().models]
    assert MODEL in names, f"{MODEL} not in {names}"


def show_gives_template_and_model_info():
    shown = client().show(MODEL)
    assert shown.template and "im_start" in shown.template, shown.template
    assert shown.modelinfo["general.architecture"] == "llama", shown.modelinfo
    assert shown.details.format == "gguf", shown.details


def embed_of_a_chat_model_raises_bad_request():
    try:
        client().embed(model=MODEL, input="hello")
    except ollama.ResponseError as e:
        assert e.status_code == 400 and "cannot compute embeddings" in e.error, str(e)
        return
    raise AssertionError("embed did not raise")


def pull_raises_with_how_models_arrive():
    try:
        client().pull("llama3")
    except ollama.ResponseError as e:
        assert e.status_code == 400 and "--model" in e.error, str(e)
        return
    raise AssertionError("pull did not raise")


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
ASK_FOR_THE_CALL = [{"role": "user", "content": "Call the get_weather function for Paris."}]
TOOL_OPTIONS = {"temperature": 0, "num_predict": 64}


def assert_text_or_call(answer):
    """The model decides whether to call (Ollama has no tool_choice); the
    small test model answers with text. Either must be well formed."""
    assert answer.done, answer
    calls = answer.message.tool_calls
    if calls:
        call = calls[0]
        assert call.function.name == "get_weather", call
        assert isinstance(call.function.arguments, dict), call
        assert isinstance(call.function.arguments.get("city"), str), call
        assert answer.done_reason == "stop", answer
    else:
        assert answer.message.content and answer.message.content.strip(), answer
        assert answer.done_reason in ("stop", "length"), answer
    return calls


def chat_with_tools():
    answer = client().chat(model=MODEL, messages=ASK_FOR_THE_CALL, tools=[WEATHER], options=TOOL_OPTIONS)
    assert_text_or_call(answer)


def streamed_chat_with_tools():
    parts = list(
        client().chat(model=MODEL, messages=ASK_FOR_THE_CALL, tools=[WEATHER], options=TOOL_OPTIONS, stream=True)
    )
    whole = client().chat(model=MODEL, messages=ASK_FOR_THE_CALL, tools=[WEATHER], options=TOOL_OPTIONS)
    # A cached prompt may change greedy text a little: compare the kind of
    # answer, not its text.
    calls = [c for p in parts for c in (p.message.tool_calls or [])]
    assert bool(calls) == bool(whole.message.tool_calls), (calls, whole)
    text = "".join(p.message.content or "" for p in parts)
    assert calls or text.strip(), parts
    assert all(not p.done for p in parts[:-1]) and parts[-1].done, parts[-1]
    assert parts[-1].done_reason in ("stop", "length"), parts[-1]


def tool_result_gets_text():
    call = ollama.Message.ToolCall(
        function=ollama.Message.ToolCall.Function(name="get_weather", arguments={"city": "Paris"})
    )
    messages = ASK_FOR_THE_CALL + [
        ollama.Message(role="assistant", content="", tool_calls=[call]),
        {"role": "tool", "tool_name": "get_weather", "content": "Sunny, 24 degrees Celsius."},
    ]
    answer = client().chat(model=MODEL, messages=messages, tools=[WEATHER], options={"temperature": 0, "num_predict": 48})
    assert answer.message.content and answer.message.content.strip(), answer
    assert not answer.message.tool_calls, answer


CASES = [
    chat,
    streamed_chat,
    generate,
    structured_chat,
    chat_with_tools,
    streamed_chat_with_tools,
    tool_result_gets_text,
    list_names_the_model,
    show_gives_template_and_model_info,
    embed_of_a_chat_model_raises_bad_request,
    pull_raises_with_how_models_arrive,
]


if __name__ == "__main__":
    sys.exit(cases.run(CASES))
