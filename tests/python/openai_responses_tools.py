"""Function tools on the Responses API through the official openai Python
client: a named `tool_choice` returns a `function_call` item whose arguments
match the function's schema, `required` returns a call, the call's output
sent back (with `previous_response_id`, or as the whole item list) gets a
text answer, streamed calls arrive as `function_call` items whose argument
deltas assemble to the final arguments, and `tool_choice: "none"` gets text.

Reads SUPERFLUID_BASE_URL (ending in /v1), SUPERFLUID_TEST_KEY and
SUPERFLUID_TEST_MODEL from the environment. Each case prints `ok NAME` or
`FAIL NAME: why`; the script exits non-zero when any failed.
"""

import json
import os
import sys

import jsonschema
import openai

import cases

BASE_URL = os.environ["SUPERFLUID_BASE_URL"]
KEY = os.environ["SUPERFLUID_TEST_KEY"]
MODEL = os.environ["SUPERFLUID_TEST_MODEL"]
CLIENT = openai.OpenAI(base_url=BASE_URL, api_key=KEY, max_retries=0, timeout=120)
# A small model asked for text may write until the context ends.
LIMIT = 64
# A required call ends by itself once its constraint is met; its arguments
# (a city of up to 40 characters) can take more than LIMIT tokens.
CALL_LIMIT = 160

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather forecast for a city.",
        "parameters": WEATHER,
        "strict": True,
    }
]
ASK = "What will the weather be in Paris tomorrow?"
NAMED = {"type": "function", "name": "get_weather"}


def calls_of(response):
    return [item for item in response.output if item.type == "function_call"]


def check_call(call):
    assert call.name == "get_weather", call
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    assert call.call_id, call


def named_tool_choice_returns_a_function_call_with_valid_arguments():
    answer = CLIENT.responses.create(model=MODEL, max_output_tokens=CALL_LIMIT, input=ASK, tools=TOOLS, tool_choice=NAMED)
    calls = calls_of(answer)
    assert len(calls) == 1, answer
    check_call(calls[0])
    assert answer.status == "completed", answer
    assert answer.tools[0].name == "get_weather", answer.tools


def required_returns_a_call():
    answer = CLIENT.responses.create(model=MODEL, max_output_tokens=CALL_LIMIT, input=ASK, tools=TOOLS, tool_choice="required")
    calls = calls_of(answer)
    assert calls, answer
    check_call(calls[0])


def the_calls_output_gets_a_text_answer_with_previous_response_id():
    first = CLIENT.responses.create(model=MODEL, max_output_tokens=CALL_LIMIT, input=ASK, tools=TOOLS, tool_choice=NAMED)
    call = calls_of(first)[0]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 24 degrees celsius."}
    answer = CLIENT.responses.create(
        model=MODEL,
        max_output_tokens=LIMIT,
        previous_response_id=first.id,
        input=[result],
        tools=TOOLS,
        tool_choice="none",
    )
    assert not calls_of(answer), answer
    assert answer.output_text.strip(), answer
    # The question, the call and its result were in the prompt (the tools
    # are not described with tool_choice "none").
    alone = CLIENT.responses.create(model=MODEL, max_output_tokens=1, input=ASK, store=False)
    assert answer.usage.input_tokens > alone.usage.input_tokens + 20, (alone.usage, answer.usage)
    items = CLIENT.responses.input_items.list(answer.id, order="asc")
    kinds = [item.type for item in items.data]
    assert kinds == ["function_call_output"], kinds
    assert items.data[0].call_id == call.call_id, items.data


def the_whole_item_list_with_call_and_output_gets_a_text_answer():
    first = CLIENT.responses.create(
        model=MODEL, max_output_tokens=CALL_LIMIT, input=ASK, tools=TOOLS, tool_choice=NAMED, store=False
    )
    call = calls_of(first)[0]
    history = [
        {"role": "user", "content": ASK},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 24 degrees celsius."},
    ]
    answer = CLIENT.responses.create(model=MODEL, max_output_tokens=LIMIT, input=history, tools=TOOLS, tool_choice="none")
    assert answer.output_text.strip(), answer
    items = CLIENT.responses.input_items.list(answer.id, order="asc")
    kinds = [item.type for item in items.data]
    assert kinds == ["message", "function_call", "function_call_output"], kinds


def streamed_call_deltas_assemble_to_its_arguments():
    events = list(
        CLIENT.responses.create(model=MODEL, max_output_tokens=CALL_LIMIT, input=ASK, tools=TOOLS, tool_choice=NAMED, stream=True)
    )
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    added = [e for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    assert len(added) == 1, kinds
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and done[0].arguments == deltas, (deltas, done)
    final = events[-1].response
    calls = calls_of(final)
    assert len(calls) == 1 and calls[0].arguments == deltas, final
    check_call(calls[0])
    # The stream helper accumulates the same.
    with CLIENT.responses.stream(
        model=MODEL, max_output_tokens=CALL_LIMIT, input=ASK, tools=TOOLS, tool_choice=NAMED
    ) as stream:
        for _ in stream:
            pass
        response = stream.get_final_response()
    check_call(calls_of(response)[0])


def tool_choice_none_gets_text():
    answer = CLIENT.responses.create(model=MODEL, max_output_tokens=LIMIT, input=ASK, tools=TOOLS, tool_choice="none")
    assert not calls_of(answer), answer
    assert answer.output_text.strip(), answer


def a_bad_function_gets_a_400_naming_the_field():
    try:
        CLIENT.responses.create(model=MODEL, input=ASK, tools=[{"type": "function", "name": "has space"}])
    except openai.BadRequestError as error:
        body = error.body if isinstance(error.body, dict) else {}
        assert body.get("param") == "tools[0].name", f"{error.body!r}"
    else:
        raise AssertionError("a function named 'has space' was accepted")


CASES = [
    named_tool_choice_returns_a_function_call_with_valid_arguments,
    required_returns_a_call,
    the_calls_output_gets_a_text_answer_with_previous_response_id,
    the_whole_item_list_with_call_and_output_gets_a_text_answer,
    streamed_call_deltas_assemble_to_its_arguments,
    tool_choice_none_gets_text,
    a_bad_function_gets_a_400_naming_the_field,
]


if __name__ == "__main__":
    sys.exit(cases.run(CASES, f"openai {openai.__version__} against {BASE_URL}"))
