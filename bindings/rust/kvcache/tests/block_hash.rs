//! The block hash against the vectors Python's hashlib computed
//! (tests/pool/block_hash_vectors.txt, docs/block-hash.md), and its errors.

use kvcache::{BLOCK_HASH_SIZE, BLOCK_HASH_VERSION, BlockHash, ErrorCode};

/// The vectors, compiled in: the test needs no path at run time.
const VECTORS: &str = include_str!("../../../../tests/pool/block_hash_vectors.txt");

fn bytes(field: &str) -> Vec<u8> {
    if field == "-" {
        return Vec::new();
    }
    assert!(field.len() % 2 == 0, "odd hex field {field}");
    (0..field.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&field[i..i + 2], 16).expect("hex"))
        .collect()
}

fn hash(field: &str) -> BlockHash {
    bytes(field).try_into().expect("32 bytes")
}

fn tokens(field: &str) -> Vec<i32> {
    if field == "-" {
        return Vec::new();
    }
    field
        .split(',')
        .map(|t| t.parse().expect("token id"))
        .collect()
}

/// The vector lines of one kind, split into fields (the kind dropped).
fn vectors(kind: &str) -> Vec<Vec<&'static str>> {
    VECTORS
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| line.split(' ').collect::<Vec<_>>())
        .filter(|fields| fields[0] == kind)
        .map(|fields| fields[1..].to_vec())
        .collect()
}

#[test]
fn roots_match_the_vectors() {
    let roots = vectors("root");
    assert_eq!(roots.len(), 9);
    for v in roots {
        let got = kvcache::block_hash_root(&bytes(v[1]), &bytes(v[2])).unwrap();
        assert_eq!(got, hash(v[3]), "root {}", v[0]);
    }
}

#[test]
fn blocks_match_the_vectors() {
    let blocks = vectors("block");
    assert_eq!(blocks.len(), 11);
    for v in blocks {
        let got = kvcache::block_hash(&hash(v[1]), &tokens(v[2]), &bytes(v[3])).unwrap();
        assert_eq!(got, hash(v[4]), "block {}", v[0]);
    }
}

#[test]
fn chains_match_the_vectors() {
    let chains = vectors("chain");
    assert_eq!(chains.len(), 8);
    for v in chains {
        let root = hash(v[1]);
        let block_size: u32 = v[2].parse().unwrap();
        let ids = tokens(v[3]);
        let want: Vec<BlockHash> = if v[4] == "-" {
            Vec::new()
        } else {
            v[4].split(',').map(hash).collect()
        };
        assert_eq!(
            want.len(),
            ids.len() / block_size as usize,
            "chain {}",
            v[0]
        );
        let got = kvcache::block_hash_chain(&root, &ids, block_size).unwrap();
        assert_eq!(got, want, "chain {}", v[0]);
        // Block by block, each hash the next one's parent.
        let mut parent = root;
        for (i, h) in want.iter().enumerate() {
            let block = &ids[i * block_size as usize..(i + 1) * block_size as usize];
            parent = kvcache::block_hash(&parent, block, b"").unwrap();
            assert_eq!(&parent, h, "chain {} block {i}", v[0]);
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
