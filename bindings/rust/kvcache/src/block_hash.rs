//! The block hash of prefix caching (`docs/block-hash.md`, C header
//! `kvcache/block_hash.h`).
//!
//! A sequence's tokens are cut into blocks of `block_size` tokens; every
//! *full* block gets a 32-byte key that depends on every token before it, on
//! the seed (what the K/V depends on besides the tokens: the model and its
//! weights) and on the salt (a tenant's cache salt). Version 1 is SHA-256 over
//! a fixed little-endian byte layout, so a router in any language computes the
//! same keys as the pool:
//!
//! ```text
//! root  = SHA-256("kvcache/block-hash/v1" || le32(len seed) || seed || le32(len salt) || salt)
//! block = SHA-256(parent || le32(n) || le32(token_0) .. le32(token_n-1) || le32(len extra) || extra)
//! ```
//!
//! ```
//! let root = kvcache::block_hash_root(b"my-model", b"tenant-1")?;
//! let tokens = [1, 2, 3, 4, 5];
//! let hashes = kvcache::block_hash_chain(&root, &tokens, 2)?; // token 5 is a partial block
//! assert_eq!(hashes.len(), 2);
//! assert_eq!(hashes[1], kvcache::block_hash(&hashes[0], &[3, 4], b"")?);
//! # Ok::<(), kvcache::Error>(())
//! ```

use kvcache_sys as sys;

use crate::error::{Result, check};

/// Bytes of a block hash (a SHA-256 digest).
pub const BLOCK_HASH_SIZE: usize = sys::KVC_BLOCK_HASH_SIZE;

/// The version of the specification the library implements.
pub const BLOCK_HASH_VERSION: usize = sys::KVC_BLOCK_HASH_VERSION;

/// A block hash: the key of one full block (or the root of a chain).
pub type BlockHash = [u8; BLOCK_HASH_SIZE];

/// The root of a hash chain: the parent of the first block of every sequence
/// hashed with this `seed` and `salt` (opaque bytes; either may be empty, and
/// an empty one differs from every non-empty one).
///
/// Errors: `InvalidArgument` for a seed or salt longer than `u32::MAX` bytes.
pub fn block_hash_root(seed: &[u8], salt: &[u8]) -> Result<BlockHash> {
    let mut out = [0u8; BLOCK_HASH_SIZE];
    // SAFETY: the slices are valid for their lengths for the call (an empty
    // slice's dangling pointer is never read) and `out` has room for 32 bytes.
    check(unsafe {
        sys::kvc_block_hash_root(
            seed.as_ptr().cast(),
            seed.len(),
            salt.as_ptr().cast(),
            salt.len(),
            out.as_mut_ptr(),
        )
    })?;
    Ok(out)
}

/// The hash of one full block of `tokens` (at least one id, each `>= 0`)
/// after the block `parent` (the previous block's hash, or the root for a
/// sequence's first block), with `extra` as the block's extra keys (LoRA
/// adapter, multimodal content hashes: bytes the caller encodes; empty for
/// none).
///
/// Errors: `InvalidArgument` for no tokens, a negative id (the message names
/// its index and value), more than `u32::MAX` tokens or extra bytes.
pub fn block_hash(parent: &BlockHash, tokens: &[i32], extra: &[u8]) -> Result<BlockHash> {
    let mut out = [0u8; BLOCK_HASH_SIZE];
    // SAFETY: as in block_hash_root; `tokens` is valid for tokens.len() ids.
    check(unsafe {
        sys::kvc_block_hash(
            parent.as_ptr(),
            tokens.as_ptr(),
            tokens.len(),
            extra.as_ptr().cast(),
            extra.len(),
            out.as_mut_ptr(),
        )
    })?;
    Ok(out)
}

/// The hashes of every full block of `tokens` in order, with empty extra
/// keys: what a router computes per request. The `tokens.len() % block_size`
/// tokens of a partial tail are not hashed (but must be valid ids).
///
/// Errors: `InvalidArgument` for a `block_size` of 0 or a negative id
/// anywhere in `tokens` (the message names its index and value).
pub fn block_hash_chain(
    root: &BlockHash,
    tokens: &[i32],
    block_size: u32,
) -> Result<Vec<BlockHash>> {
    // block_size 0 is the library's to refuse (with its message): room for nothing then.
    let full = tokens.len().checked_div(block_size as usize).unwrap_or(0);
    let mut out = vec![[0u8; BLOCK_HASH_SIZE]; full];
    let mut count = 0usize;
    // SAFETY: `out` has room for `full` hashes, exactly what the library
    // writes for these tokens; the other pointers as in block_hash.
    check(unsafe {
        sys::kvc_block_hash_chain(
            root.as_ptr(),
            tokens.as_ptr(),
            tokens.len(),
            block_size,
            out.as_mut_ptr(),
            full,
            &mut count,
        )
    })?;
    out.truncate(count);
    Ok(out)
}
