"""Drives a running superfluid with the official anthropic Python client.

Reads SUPERFLUID_BASE_URL (the head's address, without /v1),
SUPERFLUID_TEST_KEY and SUPERFLUID_TEST_MODEL from the environment. Each
case is a function named in CASES; each prints `ok NAME` or `FAIL NAME: why`,
and the script exits non-zero when any failed.
"""

import os
import sys

import anthropic

import cases

BASE_URL = os.environ["SUPERFLUID_BASE_URL"]
KEY = os.environ["SUPERFLUID_TEST_KEY"]
MODEL = os.environ["SUPERFLUID_TEST_MODEL"]
SYSTEM = "You are a helpful assistant."
QUESTION = {"role": "user", "content": "What is the capital of France?"}
# This client has no `temperature` argument; the field goes in the body.
GREEDY = {"temperature": 0}


def client(api_key=KEY):
    # No retries: a refusal must surface as the client's exception at once.
    return anthropic.Anthropic(
        base_url=BASE_URL, api_key=api_key, max_retries=0, timeout=60
    )


def messages_create():
    message = client().messages.create(
        model=MODEL, max_tokens=32, extra_body=GREEDY, system=SYSTEM, messages=[QUESTION]
    )
    assert message.type == "message", message
    assert message.role == "assistant", message
    assert message.content[0].type == "text", message
    assert "Paris" in message.content[0].text, message
    assert message.stop_reason in ("end_turn", "max_tokens"), message
    assert message.usage.input_tokens > 10, message.usage
    assert message.usage.output_tokens > 0, message.usage


def messages_stream():
    with client().messages.stream(
        model=MODEL, max_tokens=32, extra_body=GREEDY, system=SYSTEM, messages=[QUESTION]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert "Paris" in text, text
    assert final.content[0].text == text, (final, text)
    assert final.stop_reason in ("end_turn", "max_tokens"), final
    assert final.usage.output_tokens > 0, final.usage


def second_turn_reads_the_cache():
    first = client().messages.create(
        model=MODEL, max_tokens=24, extra_body=GREEDY, system=SYSTEM, messages=[QUESTION]
    )
    turns = [
        QUESTION,
        {"role": "assistant", "content": first.content[0].text},
        {"role": "user", "content": "And of Italy?"},
    ]
    second = client().messages.create(
        model=MODEL, max_tokens=16, extra_body=GREEDY, system=SYSTEM, messages=turns
    )
    assert (second.usage.cache_read_input_tokens or 0) > 0, second.usage


def count_tokens():
    counted = client().messages.count_tokens(
        model=MODEL, system=SYSTEM, messages=[QUESTION]
    )
    assert counted.input_tokens > 10, counted


def unknown_field_raises_bad_request():
    try:
        client().messages.create(
            model=MODEL,
            max_tokens=4,
            messages=[QUESTION],
            extra_body={"frequency_penalty": 1},
        )
    except anthropic.BadRequestError as error:
        assert error.status_code == 400, error.status_code
        assert "frequency_penalty" in str(error), str(error)
        return
    raise AssertionError("the request was answered")


def wrong_key_raises_authentication_error():
    try:
        client("sk-sf-" + "0" * 64).messages.create(
            model=MODEL, max_tokens=4, messages=[QUESTION]
        )
    except anthropic.AuthenticationError as error:
        assert error.status_code == 401, error.status_code
        assert "not valid" in str(error), str(error)
        return
    raise AssertionError("the request was answered")


WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def tool_use_then_tool_result():
    ask = {"role": "user", "content": "What is the weather in Paris?"}
    first = client().messages.create(
        model=MODEL, max_tokens=64, extra_body=GREEDY, messages=[ask],
        tools=[WEATHER], tool_choice={"type": "any"},
    )
    assert first.stop_reason == "tool_use", first
    calls = [b for b in first.content if b.type == "tool_use"]
    assert calls and calls[0].name == "get_weather", first
    assert calls[0].id.startswith("toolu_"), first
    assert isinstance(calls[0].input, dict) and "city" in calls[0].input, first
    second = client().messages.create(
        model=MODEL, max_tokens=48, extra_body=GREEDY, tools=[WEATHER],
        tool_choice={"type": "none"},
        messages=[
            ask,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [{
                "type": "tool_result", "tool_use_id": calls[0].id,
                "content": "Sunny, 24 degrees Celsius.",
            }]},
        ],
    )
    assert second.content[0].type == "text" and second.content[0].text.strip(), second
    assert second.stop_reason != "tool_use", second


def tool_use_streamed():
    ask = {"role": "user", "content": "What is the weather in Paris?"}
    with client().messages.stream(
        model=MODEL, max_tokens=64, extra_body=GREEDY, messages=[ask],
        tools=[WEATHER], tool_choice={"type": "any"},
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert "input_json" in kinds, kinds
    assert final.stop_reason == "tool_use", final
    calls = [b for b in final.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather", final
    assert calls[0].id.startswith("toolu_"), final
    assert isinstance(calls[0].input, dict), final
    assert isinstance(calls[0].input.get("city"), str), final


CASES = [
    messages_create,
    messages_stream,
    second_turn_reads_the_cache,
    count_tokens,
    tool_use_then_tool_result,
    tool_use_streamed,
    unknown_field_raises_bad_request,
    wrong_key_raises_authentication_error,
]


if __name__ == "__main__":
    sys.exit(cases.run(CASES, f"anthropic {anthropic.__version__} against {BASE_URL}"))
