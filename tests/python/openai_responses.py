"""Drives the Responses API of a running superfluid with the official openai
Python client: `client.responses.create`, its streaming forms, retrieve,
input_items, delete, `store=False` and refused fields.

Reads SUPERFLUID_BASE_URL (ending in /v1), SUPERFLUID_TEST_KEY and
SUPERFLUID_TEST_MODEL from the environment. Each case prints `ok NAME` or
`FAIL NAME: why`; the script exits non-zero when any failed.
SUPERFLUID_TEST_CASES (comma-separated names) runs only those cases.
"""

import os
import sys

import openai

import cases

BASE_URL = os.environ["SUPERFLUID_BASE_URL"]
KEY = os.environ["SUPERFLUID_TEST_KEY"]
MODEL = os.environ["SUPERFLUID_TEST_MODEL"]


def client():
    # No retries: a refusal must surface as the client's exception at once.
    return openai.OpenAI(base_url=BASE_URL, api_key=KEY, max_retries=0, timeout=120)


def expect_not_found(response_id):
    try:
        client().responses.retrieve(response_id)
    except openai.NotFoundError as error:
        assert error.status_code == 404, error.status_code
        assert response_id in str(error), f"{error}"
        body = error.body if isinstance(error.body, dict) else {}
        assert body.get("code") == "response_not_found", f"{error.body!r}"
        return
    raise AssertionError(f"{response_id} was still found")


def stored_response_is_continued_with_previous_response_id():
    first = client().responses.create(
        model=MODEL,
        instructions="You are a helpful assistant.",
        input="My name is Ada. Say hello to me.",
        max_output_tokens=24,
        temperature=0,
    )
    assert first.object == "response" and first.id.startswith("resp_"), f"{first!r}"
    assert first.status in ("completed", "incomplete"), first.status
    assert first.output_text.strip(), f"empty answer: {first!r}"
    assert first.output[0].type == "message" and first.output[0].role == "assistant"
    assert first.output[0].content[0].type == "output_text"
    usage = first.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0, f"{usage!r}"
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens

    second = client().responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input="What is my name?",
        max_output_tokens=24,
        temperature=0,
    )
    assert second.previous_response_id == first.id, f"{second!r}"
    assert second.output_text.strip(), f"empty answer: {second!r}"
    # The head sent the earlier turn (question and answer) to the model.
    grown = second.usage.input_tokens
    earlier = first.usage.input_tokens + first.usage.output_tokens
    assert grown > earlier, f"input did not carry the earlier turn: {grown} <= {earlier}"

    # Only the new turn is this response's input.
    items = client().responses.input_items.list(second.id)
    texts = [part.text for item in items.data for part in item.content]
    assert texts == ["What is my name?"], texts

    # Continuing from the first response again forks the conversation:
    # the same earlier turn, so the same prompt length.
    again = client().responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input="What is my name?",
        max_output_tokens=24,
        temperature=0,
    )
    assert again.id not in (first.id, second.id), again.id
    assert again.usage.input_tokens == grown, (again.usage.input_tokens, grown)
    # And the branch it left is as it was.
    kept = client().responses.retrieve(second.id)
    assert kept.output_text == second.output_text


def streamed_response_events_arrive_in_order_and_text_assembles():
    stream = client().responses.create(
        model=MODEL, input="Say hello.", max_output_tokens=24, temperature=0, stream=True
    )
    kinds, deltas, numbers, final = [], [], [], None
    for event in stream:
        kinds.append(event.type)
        numbers.append(event.sequence_number)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        if event.type in ("response.completed", "response.incomplete"):
            final = event.response
    assert numbers == list(range(len(numbers))), numbers
    opening = [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[:4] == opening, kinds
    assert kinds[4:-4] == ["response.output_text.delta"] * len(deltas), kinds
    closing = [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert kinds[-4:-1] == closing, kinds
    assert kinds[-1] in ("response.completed", "response.incomplete"), kinds
    text = "".join(deltas)
    assert text.strip(), "the stream carried no text"
    assert final.output_text == text, (final.output_text, text)
    # The streamed response was stored like any other.
    stored = client().responses.retrieve(final.id)
    assert stored.output_text == text and stored.status == final.status


def stream_helper_accumulates_the_response():
    with client().responses.stream(
        model=MODEL, input="Say hi.", max_output_tokens=48, temperature=0
    ) as stream:
        kinds, deltas = [], []
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        text = "".join(deltas)
        assert text.strip(), "the stream carried no text"
        if kinds[-1] == "response.completed":
            final = stream.get_final_response()
            assert final.output_text == text, (final.output_text, text)
        else:
            assert kinds[-1] == "response.incomplete", kinds


def retrieve_then_delete_then_404():
    created = client().responses.create(
        model=MODEL, input="Say hello.", max_output_tokens=8, temperature=0
    )
    got = client().responses.retrieve(created.id)
    assert got.id == created.id and got.output_text == created.output_text, f"{got!r}"
    assert got.usage.output_tokens == created.usage.output_tokens
    later = client().responses.create(
        model=MODEL, previous_response_id=created.id, input="Again.", max_output_tokens=8
    )
    client().responses.delete(later.id)
    expect_not_found(later.id)
    # Deleting the latest response keeps the one it continued.
    assert client().responses.retrieve(created.id).output_text == created.output_text
    client().responses.delete(created.id)
    expect_not_found(created.id)


def unstored_response_is_not_kept():
    answer = client().responses.create(
        model=MODEL, input="Say hello.", max_output_tokens=8, temperature=0, store=False
    )
    assert answer.output_text.strip() and answer.store is False, f"{answer!r}"
    expect_not_found(answer.id)
    try:
        client().responses.create(
            model=MODEL, previous_response_id=answer.id, input="And?", max_output_tokens=8
        )
    except openai.BadRequestError as error:
        assert "previous_response_id" in str(error), f"{error}"
    else:
        raise AssertionError("continuing an unstored response was accepted")


def unsupported_fields_are_refused_by_name():
    refused = {
        "tools[0].type": {"tools": [{"type": "web_search"}]},
        "reasoning": {"reasoning": {"effort": "high"}},
        "text": {"text": {"format": {"type": "json_object"}}},
        "background": {"background": True},
    }
    for field, extra in refused.items():
        try:
            client().responses.create(model=MODEL, input="hi", **extra)
        except openai.BadRequestError as error:
            assert error.status_code == 400
            body = error.body if isinstance(error.body, dict) else {}
            assert body.get("param") == field, f"{field}: {error.body!r}"
            assert field.split("[")[0] in str(error), f"{error}"
        else:
            raise AssertionError(f"`{field}` was accepted")


def max_output_tokens_cuts_an_incomplete_response():
    answer = client().responses.create(
        model=MODEL, input="Count from 1 to 100.", max_output_tokens=3, temperature=0
    )
    assert answer.status == "incomplete", f"{answer!r}"
    assert answer.incomplete_details.reason == "max_output_tokens", f"{answer!r}"
    assert answer.usage.output_tokens == 3, f"{answer.usage!r}"


CASES = [
    stored_response_is_continued_with_previous_response_id,
    streamed_response_events_arrive_in_order_and_text_assembles,
    stream_helper_accumulates_the_response,
    retrieve_then_delete_then_404,
    unstored_response_is_not_kept,
    unsupported_fields_are_refused_by_name,
    max_output_tokens_cuts_an_incomplete_response,
]


if __name__ == "__main__":
    sys.exit(cases.run(CASES, f"openai {openai.__version__} against {BASE_URL}"))
