"""Drives a running superfluid's embeddings with the official openai and
ollama Python clients.

Reads SUPERFLUID_BASE_URL (ending in /v1), SUPERFLUID_OLLAMA_HOST
(http://HOST:PORT), SUPERFLUID_EMBED_MODEL and SUPERFLUID_TEST_MODEL (a
chat-only model) from the environment. Each case prints `ok NAME` or
`FAIL NAME: why`; the script exits non-zero when any failed.
"""

import base64
import math
import os
import struct
import sys

import ollama
import openai

import cases

BASE_URL = os.environ["SUPERFLUID_BASE_URL"]
OLLAMA_HOST = os.environ["SUPERFLUID_OLLAMA_HOST"]
EMBED = os.environ["SUPERFLUID_EMBED_MODEL"]
CHAT = os.environ["SUPERFLUID_TEST_MODEL"]
DIMS = 384
CAT = "A cat is sleeping on the warm windowsill."
PARAPHRASE = "On the sunny window ledge, a kitten naps."
UNRELATED = "The central bank raised interest rates by half a percent."


def client():
    return openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=60)


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def f32(values):
    """Each value rounded to float32, as the vectors are computed."""
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def embed(inputs, **kw):
    return client().embeddings.create(model=EMBED, input=inputs, **kw)


def single_input_gives_one_unit_vector_of_384():
    got = embed(CAT, encoding_format="float")
    assert got.object == "list" and got.model == EMBED, got
    assert len(got.data) == 1 and got.data[0].index == 0, got
    vector = got.data[0].embedding
    assert len(vector) == DIMS, len(vector)
    assert abs(math.sqrt(sum(x * x for x in vector)) - 1.0) < 1e-3, "not unit length"
    assert got.usage.prompt_tokens > 2 and got.usage.total_tokens == got.usage.prompt_tokens, got.usage


def batch_equals_the_inputs_one_by_one():
    inputs = [CAT, PARAPHRASE, UNRELATED]
    batch = embed(inputs, encoding_format="float")
    assert [d.index for d in batch.data] == [0, 1, 2], batch.data
    assert all(len(d.embedding) == DIMS for d in batch.data)
    singles = [embed(text, encoding_format="float") for text in inputs]
    for one, item in zip(singles, batch.data):
        worst = max(abs(a - b) for a, b in zip(one.data[0].embedding, item.embedding))
        assert worst < 1e-4, f"batch differs from single by {worst}"
    assert batch.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles), batch.usage


def paraphrase_ranks_above_unrelated():
    # The client's default: it asks for base64 and decodes it itself.
    got = embed([CAT, PARAPHRASE, UNRELATED])
    cat, para, other = (d.embedding for d in got.data)
    near, far = cosine(cat, para), cosine(cat, other)
    assert near > far + 0.2, f"paraphrase {near:.3f} vs unrelated {far:.3f}"


def base64_decodes_to_the_same_floats():
    floats = embed(CAT, encoding_format="float").data[0].embedding
    text = embed(CAT, encoding_format="base64").data[0].embedding
    assert isinstance(text, str), type(text)
    raw = base64.b64decode(text)
    assert len(raw) == 4 * DIMS, len(raw)
    decoded = list(struct.unpack(f"<{DIMS}f", raw))
    assert decoded == f32(floats), "base64 and float vectors differ"


def token_array_equals_its_text():
    # bert-base-uncased ids: [CLS] hello world [SEP]
    tokens = embed([101, 7592, 2088, 102], encoding_format="float").data[0].embedding
    text = embed("hello world", encoding_format="float").data[0].embedding
    worst = max(abs(a - b) for a, b in zip(tokens, text))
    assert worst < 1e-4, f"token input differs from its text by {worst}"
    arrays = embed([[101, 7592, 2088, 102], [101, 2088, 102]], encoding_format="float")
    assert len(arrays.data) == 2, arrays


def chat_model_is_refused_with_the_embedding_models():
    try:
        client().embeddings.create(model=CHAT, input="hello")
    except openai.BadRequestError as e:
        message = e.body["message"]
        assert "cannot compute embeddings" in message and EMBED in message, message
        assert e.body["param"] == "model", e.body
        return
    raise AssertionError("a chat model gave embeddings")


def empty_input_is_refused():
    for bad in ("", [], ["fine", ""]):
        try:
            client().embeddings.create(model=EMBED, input=bad)
        except openai.BadRequestError as e:
            assert e.body["param"] == "input" and "empty" in e.body["message"], e.body
            continue
        raise AssertionError(f"{bad!r} gave embeddings")


def other_dimensions_are_refused():
    try:
        client().embeddings.create(model=EMBED, input="hello", dimensions=128)
    except openai.BadRequestError as e:
        assert e.body["param"] == "dimensions" and "384" in e.body["message"], e.body
        got = embed("hello", dimensions=DIMS, encoding_format="float")
        assert len(got.data[0].embedding) == DIMS
        return
    raise AssertionError("dimensions=128 was accepted")


def ollama_embed_and_legacy_embeddings():
    c = ollama.Client(host=OLLAMA_HOST, timeout=60)
    got = c.embed(model=EMBED, input=[CAT, UNRELATED])
    assert len(got.embeddings) == 2 and all(len(v) == DIMS for v in got.embeddings), got
    assert got.prompt_eval_count and got.prompt_eval_count > 4, got
    one = c.embed(model=EMBED, input=CAT)
    assert len(one.embeddings) == 1
    openai_cat = embed(CAT, encoding_format="float").data[0].embedding
    worst = max(abs(a - b) for a, b in zip(one.embeddings[0], openai_cat))
    assert worst < 1e-4, f"ollama and openai vectors differ by {worst}"
    legacy = c.embeddings(model=EMBED, prompt=CAT)
    assert len(legacy.embedding) == DIMS, legacy
    try:
        c.embed(model=CHAT, input="hello")
    except ollama.ResponseError as e:
        assert e.status_code == 400 and "cannot compute embeddings" in e.error, str(e)
        return
    raise AssertionError("ollama embed of a chat model did not raise")


CASES = [
    single_input_gives_one_unit_vector_of_384,
    batch_equals_the_inputs_one_by_one,
    paraphrase_ranks_above_unrelated,
    base64_decodes_to_the_same_floats,
    token_array_equals_its_text,
    chat_model_is_refused_with_the_embedding_models,
    empty_input_is_refused,
    other_dimensions_are_refused,
    ollama_embed_and_legacy_embeddings,
]


if __name__ == "__main__":
    sys.exit(cases.run(CASES))
