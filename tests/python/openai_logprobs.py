"""Log probabilities and `n` through the official openai Python client.

Reads SUPERFLUID_BASE_URL (ending in /v1) and SUPERFLUID_TEST_MODEL from the
environment. Each case prints `ok NAME` or `FAIL NAME: why`; the script
exits non-zero when any failed.
"""

import math
import os
import sys

import openai

import cases

BASE_URL = os.environ["SUPERFLUID_BASE_URL"]
MODEL = os.environ["SUPERFLUID_TEST_MODEL"]
CLIENT = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=120)

ASK = [{"role": "user", "content": "Name three colors of the rainbow."}]
PROMPT = "The capital of France is"


def chat(**kwargs):
    kwargs.setdefault("model", MODEL)
    kwargs.setdefault("messages", ASK)
    kwargs.setdefault("temperature", 0)
    kwargs.setdefault("max_tokens", 16)
    return CLIENT.chat.completions.create(**kwargs)


def check_entry(entry, top):
    """One token's entry: a real log-probability, `top` sorted alternatives."""
    assert math.isfinite(entry.logprob) and entry.logprob <= 0, entry
    assert entry.bytes is not None and bytes(entry.bytes).decode("utf-8", "replace") == entry.token, entry
    assert len(entry.top_logprobs) == top, (top, entry)
    values = [t.logprob for t in entry.top_logprobs]
    assert all(math.isfinite(v) and v <= 0 for v in values), values
    assert values == sorted(values, reverse=True), values
    assert sum(math.exp(v) for v in values) <= 1.0 + 1e-3, values


def chat_logprobs_are_real_sorted_and_the_greedy_token_is_the_top_one():
    answer = chat(logprobs=True, top_logprobs=5)
    choice = answer.choices[0]
    content = choice.logprobs.content
    assert len(content) == answer.usage.completion_tokens, (len(content), answer.usage)
    for entry in content:
        check_entry(entry, 5)
        best = entry.top_logprobs[0]
        assert best.token == entry.token, (best, entry)
        assert abs(best.logprob - entry.logprob) < 1e-4, (best, entry)
    # Real probabilities: not every position is certain, and no
    # alternative outranks the greedy pick.
    assert any(e.top_logprobs[1].logprob < e.logprob for e in content), content
    assert any(e.logprob < -1e-3 for e in content) or len(content) < 3, content
    assert "".join(e.token for e in content) == choice.message.content, (content, choice.message.content)
    plain = chat()
    assert plain.choices[0].logprobs is None, plain
    assert plain.choices[0].message.content == choice.message.content, "asking changed the text"
    none_top = chat(logprobs=True)
    assert all(e.top_logprobs == [] for e in none_top.choices[0].logprobs.content), none_top


def streamed_logprobs_concatenate_to_the_text():
    text, tokens = "", []
    stream = chat(logprobs=True, top_logprobs=3, stream=True)
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.logprobs is not None and choice.logprobs.content:
                for entry in choice.logprobs.content:
                    check_entry(entry, 3)
                    tokens.append(entry.token)
    assert tokens, "no logprobs in the stream"
    assert "".join(tokens) == text, (tokens, text)
    whole = chat(logprobs=True, top_logprobs=3).choices[0].message.content
    assert text == whole, (text, whole)


def n_gives_indexed_choices_with_summed_usage():
    answer = chat(n=3, temperature=1.0, seed=11, max_tokens=12, logprobs=True)
    assert len(answer.choices) == 3, answer
    assert [c.index for c in answer.choices] == [0, 1, 2], answer
    tokens = sum(len(c.logprobs.content) for c in answer.choices)
    assert answer.usage.completion_tokens == tokens, (answer.usage, tokens)
    for c in answer.choices:
        assert c.finish_reason in ("stop", "length"), c
        assert "".join(e.token for e in c.logprobs.content) == c.message.content, c


def seeded_n_is_reproducible_whole_and_streamed():
    def whole():
        answer = chat(n=3, temperature=1.0, seed=1234, max_tokens=16)
        return [c.message.content for c in answer.choices]

    first, second = whole(), whole()
    assert first == second, (first, second)
    texts, finishes = ["", "", ""], [None, None, None]
    stream = chat(
        n=3, temperature=1.0, seed=1234, max_tokens=16, stream=True, stream_options={"include_usage": True}
    )
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason is not None:
                assert finishes[choice.index] is None, "two finish reasons for one choice"
                finishes[choice.index] = choice.finish_reason
    assert texts == first, (texts, first)
    assert all(f in ("stop", "length") for f in finishes), finishes
    assert usage is not None and usage.completion_tokens > 0, usage


def legacy_completions_logprobs_shape():
    answer = CLIENT.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3)
    choice = answer.choices[0]
    lp = choice.logprobs
    count = answer.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == count, lp
    assert "".join(lp.tokens) == choice.text, (lp.tokens, choice.text)
    offset = 0
    for token, value, top, start in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset):
        assert start == offset, (start, offset)
        offset += len(token)
        assert math.isfinite(value) and value <= 0, value
        assert 1 <= len(top) <= 3, top
        assert abs(max(top.values()) - value) < 1e-4, (token, value, top)
        assert token in top, (token, top)
    streamed = CLIENT.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=2, stream=True
    )
    text, tokens = "", []
    for chunk in streamed:
        for c in chunk.choices:
            text += c.text
            if c.logprobs is not None:
                tokens.extend(c.logprobs.tokens)
    assert "".join(tokens) == text == choice.text, (tokens, text, choice.text)
    several = CLIENT.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, n=2, seed=5, temperature=1.0)
    assert [c.index for c in several.choices] == [0, 1], several


def expect_bad_request(param, call):
    try:
        call()
    except openai.BadRequestError as error:
        assert error.status_code == 400, error
        assert error.body and error.body.get("param") == param, (param, error.body)
        assert param in str(error), str(error)
        return
    raise AssertionError(f"answered instead of refusing {param}")


def out_of_range_is_a_400_naming_the_field():
    expect_bad_request("top_logprobs", lambda: chat(logprobs=True, top_logprobs=21))
    expect_bad_request("top_logprobs", lambda: chat(top_logprobs=2))
    expect_bad_request("n", lambda: chat(n=9))
    expect_bad_request("n", lambda: chat(n=0))
    expect_bad_request(
        "logprobs", lambda: CLIENT.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, logprobs=6)
    )
    expect_bad_request(
        "n", lambda: CLIENT.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, n=9)
    )


CASES = [
    chat_logprobs_are_real_sorted_and_the_greedy_token_is_the_top_one,
    streamed_logprobs_concatenate_to_the_text,
    n_gives_indexed_choices_with_summed_usage,
    seeded_n_is_reproducible_whole_and_streamed,
    legacy_completions_logprobs_shape,
    out_of_range_is_a_400_naming_the_field,
]


if __name__ == "__main__":
    sys.exit(cases.run(CASES))
