//! Block hashes: how head and node name a cached prompt prefix.
//!
//! A token sequence is cut into blocks of [`BLOCK_TOKENS`] tokens; a trailing
//! partial block has no hash. Each block's hash chains the hash before it
//! (for the first block, the model's [`model_seed`]), so two sequences whose
//! `n`th block hashes are equal have equal first `n` blocks, for the same
//! model. Head and node call these same functions, so the head can look up a
//! prompt's blocks in what nodes report holding.

use crate::TokenId;

/// Tokens per block.
pub const BLOCK_TOKENS: usize = 32;

/// A block's hash; it stands for the block and every block before it.
pub type BlockHash = u64;

/// The murmur3 64-bit finaliser: spreads every input bit over the output.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The hash the first block of `model_id`'s sequences chains from: FNV-1a
/// over the id's bytes, finalised. Different models never share blocks.
pub fn model_seed(model_id: &str) -> BlockHash {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in model_id.bytes() {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

/// The hash of `block` following the block hashed `prev`.
pub fn chain_block(prev: BlockHash, block: &[TokenId]) -> BlockHash {
    let mut h = prev ^ 0x9e37_79b9_7f4a_7c15;
    for &token in block {
        h = (h ^ u64::from(token)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
    }
    mix(h ^ block.len() as u64)
}

/// The hashes of every full block of `tokens`, in order.
pub fn block_hashes(seed: BlockHash, tokens: &[TokenId]) -> Vec<BlockHash> {
    let mut chain = Vec::with_capacity(tokens.len() / BLOCK_TOKENS);
    extend_chain(&mut chain, seed, tokens);
    chain
}

/// Appends to `chain` (the hashes of the first `chain.len()` blocks of
/// `tokens`) the hashes of the further full blocks of `tokens`; returns how
/// many it added. Only tokens past `chain.len() * BLOCK_TOKENS` are read.
pub fn extend_chain(chain: &mut Vec<BlockHash>, seed: BlockHash, tokens: &[TokenId]) -> usize {
    let before = chain.len();
    let mut prev = chain.last().copied().unwrap_or(seed);
    let start = before * BLOCK_TOKENS;
    if start >= tokens.len() {
        return 0;
    }
    for block in tokens[start..].chunks_exact(BLOCK_TOKENS) {
        prev = chain_block(prev, block);
        chain.push(prev);
    }
    chain.len() - before
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: usize, salt: u32) -> Vec<TokenId> {
        (0..n as u32).map(|i| i.wrapping_mul(7919) ^ salt).collect()
    }

    #[test]
    fn only_full_blocks_are_hashed() {
        let seed = model_seed("m");
        assert!(block_hashes(seed, &tokens(BLOCK_TOKENS - 1, 0)).is_empty());
        assert_eq!(
            block_hashes(seed, &tokens(BLOCK_TOKENS * 3 + 5, 0)).len(),
            3
        );
    }

    #[test]
    fn equal_prefixes_have_equal_hashes_and_a_difference_changes_every_later_block() {
        let seed = model_seed("m");
        let a = tokens(BLOCK_TOKENS * 4, 0);
        let mut b = a.clone();
        b[BLOCK_TOKENS + 3] ^= 1;
        let (ha, hb) = (block_hashes(seed, &a), block_hashes(seed, &b));
        assert_eq!(ha[0], hb[0]);
        for i in 1..4 {
            assert_ne!(ha[i], hb[i], "block {i}");
        }
    }

    #[test]
    fn the_model_is_part_of_every_hash() {
        let t = tokens(BLOCK_TOKENS, 0);
        assert_ne!(
            block_hashes(model_seed("a"), &t),
            block_hashes(model_seed("b"), &t)
        );
    }

    #[test]
    fn the_same_block_at_another_place_hashes_differently() {
        let seed = model_seed("m");
        let block = tokens(BLOCK_TOKENS, 0);
        let twice: Vec<TokenId> = block.iter().chain(&block).copied().collect();
        let h = block_hashes(seed, &twice);
        assert_ne!(h[0], h[1]);
    }

    #[test]
    fn extending_a_chain_equals_hashing_at_once() {
        let seed = model_seed("m");
        let t = tokens(BLOCK_TOKENS * 5 + 7, 3);
        let mut chain = block_hashes(seed, &t[..BLOCK_TOKENS * 2 + 1]);
        assert_eq!(extend_chain(&mut chain, seed, &t), 3);
        assert_eq!(chain, block_hashes(seed, &t));
        assert_eq!(extend_chain(&mut chain, seed, &t), 0);
    }

    #[test]
    fn hashes_are_stable_across_builds() {
        // Head and node may be different builds of the same protocol version:
        // this value must only change with PROTOCOL_VERSION.
        let h = block_hashes(
            model_seed("SmolLM2-135M-Instruct.Q4_1"),
            &tokens(BLOCK_TOKENS, 0),
        );
        assert_eq!(h, vec![STABLE]);
    }

    const STABLE: BlockHash = 0xc0c1_335b_4e8c_7191;
}
