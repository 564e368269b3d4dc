//! The block hash against the vectors Python's hashlib computed
//! (tests/pool/block_hash_vectors.txt, docs/block-hash.md), and its errors.

use kvcache::{BLOCK_HASH_SIZE, BLOCK_HASH_VERSION, ErrorCode};

mod common;
use common::{bytes, hash, hash_list, rows, token_list};

/// The vectors, compiled in: the test needs no path at run time.
const VECTORS: &str = include_str!("../../../../tests/pool/block_hash_vectors.txt");

#[test]
fn roots_match_the_vectors() {
    for v in rows(VECTORS, "root", 5, 9) {
        let got = kvcache::block_hash_root(&bytes(v[2]), &bytes(v[3])).unwrap();
        assert_eq!(got, hash(v[4]), "root {}", v[1]);
    }
}

#[test]
fn blocks_match_the_vectors() {
    for v in rows(VECTORS, "block", 6, 11) {
        let got = kvcache::block_hash(&hash(v[2]), &token_list(v[3]), &bytes(v[4])).unwrap();
        assert_eq!(got, hash(v[5]), "block {}", v[1]);
    }
}

#[test]
fn chains_match_the_vectors() {
    for v in rows(VECTORS, "chain", 6, 8) {
        let root = hash(v[2]);
        let block_size: u32 = v[3].parse().unwrap();
        let ids = token_list(v[4]);
        let want = hash_list(v[5]);
        assert_eq!(
            want.len(),
            ids.len() / block_size as usize,
            "chain {}",
            v[1]
        );
        let got = kvcache::block_hash_chain(&root, &ids, block_size).unwrap();
        assert_eq!(got, want, "chain {}", v[1]);
        // Block by block, each hash the next one's parent.
        let mut parent = root;
        for (i, h) in want.iter().enumerate() {
            let block = &ids[i * block_size as usize..(i + 1) * block_size as usize];
            parent = kvcache::block_hash(&parent, block, b"").unwrap();
            assert_eq!(&parent, h, "chain {} block {i}", v[1]);
        }
    }
}

#[test]
fn bad_input_is_an_invalid_argument_naming_the_value() {
    let root = kvcache::block_hash_root(b"", b"").unwrap();
    let err = kvcache::block_hash(&root, &[0, 1, -7], b"").unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(
        err.message().contains("kvc_block_hash: tokens[2] is -7"),
        "{err}"
    );
    let err = kvcache::block_hash(&root, &[], b"").unwrap_err();
    assert!(err.message().contains("num_tokens is 0"), "{err}");
    let err = kvcache::block_hash_chain(&root, &[1, 2], 0).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(err.message().contains("block_size is 0"), "{err}");
    // The tail is never hashed but its ids are still checked.
    let err = kvcache::block_hash_chain(&root, &[1, 2, 3, 4, i32::MIN], 2).unwrap_err();
    assert!(err.message().contains("tokens[4] is -2147483648"), "{err}");
    assert!(
        kvcache::block_hash_chain(&root, &[], 16)
            .unwrap()
            .is_empty()
    );
    assert!(
        kvcache::block_hash_chain(&root, &[1; 15], 16)
            .unwrap()
            .is_empty()
    );
    assert_eq!((BLOCK_HASH_SIZE, BLOCK_HASH_VERSION), (32, 1));
}
