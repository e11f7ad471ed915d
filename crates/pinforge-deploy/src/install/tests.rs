//! Unit tests of the install root: layer names, the strict parsers of every record read back
//! from the root (with property tests over arbitrary and damaged bytes), and the fs probe.

use super::journal::parse_journal;
use super::layout::parse_gen;
use super::*;
use proptest::prelude::*;

#[test]
fn layer_names_round_trip() {
    for l in Layer::ALL {
        assert_eq!(Layer::parse(l.as_str()).expect("parse"), l);
    }
    assert!(Layer::parse("staging").is_err());
}

#[test]
fn gen_links_parse_strictly() {
    assert_eq!(parse_gen(Path::new("gens/12")), Some(12));
    assert_eq!(parse_gen(Path::new("/elsewhere/12")), None);
    assert_eq!(parse_gen(Path::new("gens/x")), None);
    assert_eq!(parse_gen(Path::new("gens/012")), None);
    assert_eq!(parse_gen(Path::new("gens/12/../../..")), None);
    assert_eq!(parse_gen(Path::new("gens/+1")), None);
}

#[test]
fn receipt_names_parse_strictly_and_never_wrap() {
    // issue #7 class 10: a stray name must not move or wrap the sequence.
    assert_eq!(
        parse_receipt_name("000007-install.json"),
        Some((7, Op::Install))
    );
    assert_eq!(
        parse_receipt_name("1234567-rollback.json"),
        Some((1_234_567, Op::Rollback))
    );
    for stray in [
        "18446744073709551616-install.json",
        "7-install.json",
        "000007-recover.json",
        "000007-install.json.bak",
        "+00007-install.json",
        "000000-install.json",
        "x-install.json",
    ] {
        assert_eq!(parse_receipt_name(stray), None, "{stray}");
    }
}

fn journal(from: u64, to: u64, staging: Option<&str>) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "txid": 3, "op": "install", "from_gen": from, "to_gen": to,
        "staging": staging, "entry": null, "entry_preexisted": false,
        "phase": "staging", "layer": "live"
    }))
    .expect("json")
}

#[test]
fn journal_paths_and_generations_are_checked() {
    // issue #7 class 1: the staging value and the generations are data, not paths.
    assert!(parse_journal(&journal(4, 5, Some("store/.stage-3"))).is_ok());
    assert!(parse_journal(&journal(4, 5, None)).is_ok());
    for bad in [
        journal(4, 5, Some("/etc")),
        journal(4, 5, Some("../../outside")),
        journal(4, 5, Some("store/.stage-4")),
        journal(5, 5, None),
        journal(u64::MAX, 0, None),
        journal(4, 7, None),
    ] {
        assert!(parse_journal(&bad).is_err());
    }
}

#[test]
fn state_must_name_its_own_generation() {
    let gs = GenState {
        gen: 3,
        ..GenState::default()
    };
    let bytes = serde_json::to_vec(&gs).expect("json");
    assert!(parse_state(&bytes, 3).is_ok());
    assert!(parse_state(&bytes, 4).is_err());
    let bad = br#"{"gen":1,"layers":{},"current":"live","live_history":[]}"#;
    assert!(parse_state(bad, 1).is_err(), "current names an empty layer");
}

fn record(files: &[(&str, &str)], links: &[(&str, &str)]) -> Vec<u8> {
    let files: BTreeMap<String, FileRec> = files
        .iter()
        .map(|(p, c)| {
            (
                p.to_string(),
                FileRec {
                    sha256: Sha256::of_bytes(c.as_bytes()),
                    size: c.len() as u64,
                    executable: false,
                },
            )
        })
        .collect();
    let links: BTreeMap<String, String> = links
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let info = EntryInfo {
        digest: identity(&files, &links),
        recipe: "r".into(),
        variant: "v".into(),
        input_digest: Sha256::of_bytes(b""),
        files,
        links,
    };
    serde_json::to_vec(&info).expect("json")
}

#[test]
fn entry_records_are_believed_only_when_they_hash_to_their_name() {
    let good = record(&[("lib/a.so", "x")], &[("lib/b.so", "a.so")]);
    assert!(parse_entry_record(&good).is_ok());
    // issue #7 class 1: escaping links and paths through links are refused on read too.
    assert!(parse_entry_record(&record(&[("a", "x")], &[("l", "../out")])).is_err());
    assert!(parse_entry_record(&record(&[("zz/f", "x")], &[("zz", "d")])).is_err());
    assert!(parse_entry_record(&record(&[("entry.json", "x")], &[])).is_err());
    // issue #7 class 2: a record edited to agree with an edited file no longer hashes
    // to the name it claims.
    let mut v: serde_json::Value = serde_json::from_slice(&good).expect("json");
    v["files"]["lib/a.so"]["size"] = serde_json::json!(2);
    let edited = serde_json::to_vec(&v).expect("json");
    assert!(parse_entry_record(&edited).is_err());
}

#[test]
fn probe_refuses_simulated_filesystem_without_symlinks() {
    // No set_var here: the unit tests run in threads, and another test opening a root
    // would see the variable.
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Root {
        path: dir.path().to_path_buf(),
        signer: pinforge_record::sign::record::Signer::none(),
    };
    root.probe_fs(false)
        .expect("a real filesystem passes the probe");
    let e = root.probe_fs(true).expect_err("refused");
    assert!(e.to_string().contains("symbolic links"), "{e}");
    assert_eq!(e.exit_code(), 2);
}

/// Valid documents with a few bytes changed: closer to real damage than random bytes.
fn mutated(seed: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6).prop_map(move |edits| {
        let mut b = seed.clone();
        for (i, x) in edits {
            if b.is_empty() {
                break;
            }
            let i = i % b.len();
            if x % 3 == 0 {
                b.truncate(i);
            } else {
                b[i] = x;
            }
        }
        b
    })
}

fn sample_receipt() -> Vec<u8> {
    let slot = GenSlot {
        sharing: Sharing::Linked,
        digest: Sha256::of_bytes(b"e"),
        recipe: "r".into(),
        variant: "v".into(),
    };
    let r = Receipt {
        seq: 4,
        op: Op::Install,
        layer: Layer::Live,
        from: None,
        to: Some(slot),
        current_before: None,
        current_after: Some(Layer::Live),
        time: "2026-12-01T00:00:00Z".into(),
        verification: Verification {
            ok: true,
            through: "/r/current".into(),
            files: 1,
            bytes_hashed: 0,
            mismatches: vec![],
        },
        reverted: false,
        restoration_matches_recorded: None,
        unchanged: false,
        repaired: false,
        store: None,
        timings_us: BTreeMap::new(),
        gen: 1,
    };
    serde_json::to_vec_pretty(&r).expect("json")
}

fn sample_state() -> Vec<u8> {
    let slot = GenSlot {
        sharing: Sharing::Linked,
        digest: Sha256::of_bytes(b"e"),
        recipe: "r".into(),
        variant: "v".into(),
    };
    let gs = GenState {
        gen: 2,
        layers: BTreeMap::from([(Layer::Live, slot.clone())]),
        current: Some(Layer::Live),
        live_history: vec![slot],
    };
    serde_json::to_vec_pretty(&gs).expect("json")
}

// The trust boundary: arbitrary bytes into every install-root parser, never a panic. 10,000 cases
// of raw bytes and 10,000 of damaged valid documents per parser.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn journal_parser_never_panics(b in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_journal(&b);
    }

    #[test]
    fn damaged_journals_never_panic(b in mutated(journal(4, 5, Some("store/.stage-3")))) {
        if let Ok(j) = parse_journal(&b) {
            prop_assert_eq!(j.from_gen + 1, j.to_gen);
        }
    }

    #[test]
    fn state_parser_never_panics(b in proptest::collection::vec(any::<u8>(), 0..512), g in any::<u64>()) {
        let _ = parse_state(&b, g);
    }

    #[test]
    fn damaged_states_never_panic(b in mutated(sample_state())) {
        if let Ok(gs) = parse_state(&b, 2) {
            prop_assert_eq!(gs.gen, 2);
        }
    }

    #[test]
    fn receipt_parser_never_panics(b in proptest::collection::vec(any::<u8>(), 0..512), name in ".{0,40}") {
        let _ = parse_receipt(&b);
        let _ = parse_receipt_name(&name);
    }

    #[test]
    fn damaged_receipts_never_panic(b in mutated(sample_receipt())) {
        let _ = parse_receipt(&b);
    }

    #[test]
    fn entry_record_parser_never_panics(b in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_entry_record(&b);
    }

    #[test]
    fn damaged_entry_records_never_panic(b in mutated(record(&[("lib/a.so", "x"), ("include/a.h", "y")], &[("lib/b.so", "a.so")]))) {
        if let Ok(i) = parse_entry_record(&b) {
            prop_assert_eq!(identity(&i.files, &i.links), i.digest);
        }
    }

    #[test]
    fn link_resolution_never_panics(t in "[a-z./]{0,24}", n in "[a-z]{1,3}(/[a-z]{1,3}){0,2}") {
        let links = BTreeMap::from([("l".to_string(), ".".to_string()), ("u".to_string(), "..".to_string())]);
        if let Ok(end) = safe::resolve_inside(&links, &n, &t) {
            prop_assert!(!end.iter().any(|c| c == ".."));
        }
    }
}
