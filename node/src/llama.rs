//! The llama.cpp engine.
