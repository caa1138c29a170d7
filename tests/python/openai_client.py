"""Drives a running superfluid with the official openai Python client.

Reads SUPERFLUID_BASE_URL (ending in /v1), SUPERFLUID_TEST_KEY and
SUPERFLUID_TEST_MODEL from the environment. Each case is a function named
in CASES; each prints `ok NAME` or `FAIL NAME: why`, and the script exits
non-zero when any failed. A new case is one more function in CASES.
SUPERFLUID_TEST_CASES (comma-separated names) runs only those cases; the
rate-limit case runs only when named, since it needs a key created with
`keys create --rpm 1`.
"""

import os
import sys

import openai

import cases

BASE_URL = os.environ["SUPERFLUID_BASE_URL"]
KEY = os.environ["SUPERFLUID_TEST_KEY"]
MODEL = os.environ["SUPERFLUID_TEST_MODEL"]
MESSAGES = [{"role": "user", "content": "Say hello."}]


def client(api_key):
    # No retries: a refusal must surface as the client's exception at once.
    return openai.OpenAI(base_url=BASE_URL, api_key=api_key, max_retries=0, timeout=60)


def chat_completion_with_the_key():
    answer = client(KEY).chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0
    )
    text = answer.choices[0].message.content
    assert text and text.strip(), f"empty answer: {answer!r}"


def streamed_chat_completion_with_the_key():
    stream = client(KEY).chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0, stream=True
    )
    text = "".join(
        chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices
    )
    assert text.strip(), "the stream carried no text"


def models_list_names_the_model():
    ids = [model.id for model in client(KEY).models.list()]
    assert MODEL in ids, f"{MODEL} not in {ids}"


def models_retrieve_reads_the_model_and_404s_an_unknown_one():
    model = client(KEY).models.retrieve(MODEL)
    assert model.id == MODEL and model.object == "model", f"{model!r}"
    try:
        client(KEY).models.retrieve("no-such-model")
    except openai.NotFoundError as error:
        assert error.status_code == 404, error.status_code
        assert "no-such-model" in str(error), f"{error}"
        return
    raise AssertionError("an unknown model was answered")


def same_seed_gives_the_same_text():
    def sample():
        answer = client(KEY).chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=24, temperature=1.0, seed=1234
        )
        return answer.choices[0].message.content
    first, second = sample(), sample()
    assert first and first == second, f"{first!r} != {second!r}"


def completion_echo_and_refused_suffix():
    answer = client(KEY).completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=4,
        temperature=0, echo=True
    )
    text = answer.choices[0].text
    assert text.startswith("The capital of France is") and len(text) > len(
        "The capital of France is"
    ), f"{text!r}"
    try:
        client(KEY).completions.create(
            model=MODEL, prompt="def f(", suffix="    return x", max_tokens=4
        )
    except openai.BadRequestError as error:
        assert error.status_code == 400, error.status_code
        assert error.body["param"] == "suffix", f"{error.body}"
        return
    raise AssertionError("suffix was answered")


def expect_authentication_error(said, api_key, extra_headers=None):
    try:
        client(api_key).chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=4, extra_headers=extra_headers
        )
    except openai.AuthenticationError as error:
        assert error.status_code == 401, error.status_code
        assert said in str(error), f"{said!r} not in {error}"
        return
    raise AssertionError("the request was answered")


def no_key_raises_authentication_error():
    # The client will not start without a key, so it is given one and told
    # to send no `Authorization` header, as a client with no key would.
    expect_authentication_error(
        "needs a key", "unused", extra_headers={"Authorization": openai.omit}
    )


def wrong_key_raises_authentication_error():
    expect_authentication_error("not valid", "sk-sf-" + "0" * 64)


def rate_limited_key_raises_rate_limit_error():
    # The key allows one request a minute: the first is answered, the
    # second refused with OpenAI's 429, which the client raises as
    # RateLimitError.
    client(KEY).chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=4, temperature=0
    )
    try:
        client(KEY).chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=4, temperature=0
        )
    except openai.RateLimitError as error:
        assert error.status_code == 429, error.status_code
        assert error.code == "rate_limit_exceeded", f"code {error.code!r}: {error}"
        retry_after = error.response.headers.get("retry-after")
        assert retry_after and int(retry_after) >= 1, f"retry-after {retry_after!r}"
        limit = error.response.headers.get("x-ratelimit-limit-requests")
        assert limit == "1", f"x-ratelimit-limit-requests {limit!r}"
        return
    raise AssertionError("a second request within the minute was answered")


CASES = [
    chat_completion_with_the_key,
    streamed_chat_completion_with_the_key,
    models_list_names_the_model,
    models_retrieve_reads_the_model_and_404s_an_unknown_one,
    no_key_raises_authentication_error,
    wrong_key_raises_authentication_error,
    same_seed_gives_the_same_text,
    completion_echo_and_refused_suffix,
]

# Cases that need a key set up for them; they run only when named.
NAMED_ONLY = [rate_limited_key_raises_rate_limit_error]


if __name__ == "__main__":
    sys.exit(cases.run(CASES, f"openai {openai.__version__} against {BASE_URL}", NAMED_ONLY))
