"""The official openai client against a full fleet: a 429 it can read
(RateLimitError, code fleet_busy, Retry-After), and its own retries that
succeed once the slot is free. Prints `ok CASE` per passing case."""

import os
import sys

import openai

BASE = os.environ["SUPERFLUID_BASE_URL"]
MODEL = os.environ["SUPERFLUID_TEST_MODEL"]
MESSAGES = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]


def main() -> int:
    client = openai.OpenAI(base_url=BASE, api_key="unused", max_retries=0, timeout=60)
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=1000, temperature=0, stream=True
    )
    next(iter(stream))
    try:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)
        print("a full fleet answered instead of refusing")
        return 1
    except openai.RateLimitError as e:
        assert e.status_code == 429, e.status_code
        assert e.code == "fleet_busy", e.body
        assert int(e.response.headers["retry-after"]) >= 1, e.response.headers
        assert "x-superfluid-queue" in e.response.headers, e.response.headers
        print("ok full_fleet_raises_rate_limit_error_fleet_busy")
    # Leaving the stream frees the slot; the client's own retries get in.
    stream.close()
    patient = openai.OpenAI(base_url=BASE, api_key="unused", max_retries=5, timeout=60)
    answer = patient.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)
    assert answer.choices[0].finish_reason in ("length", "stop"), answer
    print("ok retries_succeed_once_the_slot_is_free")
    return 0


if __name__ == "__main__":
    sys.exit(main())
