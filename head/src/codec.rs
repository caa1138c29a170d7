//! Chat templates, tokenization and detokenization, per model.
