"""Tool calling through the official openai Python client.

Reads SUPERFLUID_BASE_URL (ending in /v1) and SUPERFLUID_TEST_MODEL from the
environment. Each case prints `ok NAME` or `FAIL NAME: why`; the script
exits non-zero when any failed.
"""

import json
import os
import sys

import jsonschema
import openai

import cases

BASE_URL = os.environ["SUPERFLUID_BASE_URL"]
MODEL = os.environ["SUPERFLUID_TEST_MODEL"]
CLIENT = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=120)

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "maxLength": 40}},
    "required": ["timezone"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather forecast for a city.",
            "parameters": WEATHER,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The current time in a timezone.",
            "parameters": TIME,
        },
    },
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What will the weather be in Paris this week?"}]


def create(**kwargs):
    kwargs.setdefault("model", MODEL)
    kwargs.setdefault("messages", ASK)
    kwargs.setdefault("tools", TOOLS)
    kwargs.setdefault("temperature", 0)
    kwargs.setdefault("max_tokens", 96)
    return CLIENT.chat.completions.create(**kwargs)


def check_call(call, names):
    assert call.type == "function", call
    assert call.id.startswith("call_"), call.id
    assert call.function.name in names, call.function.name
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, SCHEMAS[call.function.name])
    return arguments


def named_tool_choice_returns_that_function_with_valid_arguments():
    for name in ["get_weather", "get_time"]:
        answer = create(tool_choice={"type": "function", "function": {"name": name}})
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls", answer
        calls = choice.message.tool_calls
        assert calls and len(calls) == 1, answer
        check_call(calls[0], [name])


def required_returns_a_call():
    for question in ["What time is it in Tokyo?", "Is it going to rain in Oslo?"]:
        answer = create(
            messages=[{"role": "user", "content": question}], tool_choice="required"
        )
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls", answer
        assert choice.message.tool_calls, answer
        for call in choice.message.tool_calls:
            check_call(call, SCHEMAS)


def auto_returns_text_or_a_call():
    for question in ["What will the weather be in Paris this week?", "Tell me a joke."]:
        answer = create(messages=[{"role": "user", "content": question}])
        choice = answer.choices[0]
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls", answer
            for call in choice.message.tool_calls:
                check_call(call, SCHEMAS)
        else:
            assert choice.message.content and choice.message.content.strip(), answer
            assert choice.finish_reason in ("stop", "length"), answer


def streamed_tool_call_deltas_assemble_to_valid_json():
    stream = create(
        stream=True, tool_choice={"type": "function", "function": {"name": "get_weather"}}
    )
    calls, finishes = {}, []
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        if choice.finish_reason:
            finishes.append(choice.finish_reason)
        for delta in choice.delta.tool_calls or []:
            if delta.index not in calls:
                # The first delta of a call names it.
                assert delta.id and delta.type == "function", delta
                assert delta.function.name and delta.function.arguments == "", delta
                calls[delta.index] = {"id": delta.id, "name": delta.function.name, "arguments": ""}
            else:
                assert delta.id is None and delta.function.name is None, delta
                calls[delta.index]["arguments"] += delta.function.arguments or ""
    assert finishes == ["tool_calls"], finishes
    assert list(calls) == [0], calls
    assert calls[0]["name"] == "get_weather", calls
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER)


def a_tool_result_on_the_next_turn_gets_a_text_answer():
    first = create(tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = first.choices[0].message.tool_calls[0]
    history = ASK + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        },
    ]
    result = {"role": "tool", "tool_call_id": call.id, "content": "Sunny all week, 24 degrees celsius."}
    answer = create(messages=history + [result], tool_choice="auto")
    choice = answer.choices[0]
    assert choice.message.tool_calls is None, answer
    assert choice.message.content and choice.message.content.strip(), answer
    # The call and its result were both in the prompt, not dropped.
    assert answer.usage.prompt_tokens > first.usage.prompt_tokens + 20, (first.usage, answer.usage)


def tool_choice_none_gets_no_call():
    answer = create(tool_choice="none")
    choice = answer.choices[0]
    assert choice.message.tool_calls is None, answer
    assert choice.finish_reason in ("stop", "length"), answer
    assert choice.message.content and choice.message.content.strip(), answer


def expect_bad_request(param, **kwargs):
    try:
        create(**kwargs)
    except openai.BadRequestError as error:
        assert error.status_code == 400, error
        assert error.body and error.body.get("param") == param, (param, error.body)
        assert param.split("[")[0] in str(error), str(error)
        return
    raise AssertionError(f"answered instead of refusing {param}")


def bad_tools_get_a_400_naming_the_field():
    expect_bad_request("tools[0].type", tools=[{"type": "code_interpreter"}])
    bad_schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": "(a"}}}
    expect_bad_request(
        "tools[0].function.parameters",
        tools=[{"type": "function", "function": {"name": "f", "parameters": bad_schema}}],
    )
    expect_bad_request(
        "tool_choice",
        tool_choice={"type": "function", "function": {"name": "not_offered"}},
    )


CASES = [
    named_tool_choice_returns_that_function_with_valid_arguments,
    required_returns_a_call,
    auto_returns_text_or_a_call,
    streamed_tool_call_deltas_assemble_to_valid_json,
    a_tool_result_on_the_next_turn_gets_a_text_answer,
    tool_choice_none_gets_no_call,
    bad_tools_get_a_400_naming_the_field,
]


if __name__ == "__main__":
    sys.exit(cases.run(CASES))
