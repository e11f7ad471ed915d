//! `history`, `rollback --to-generation` and rolling forward again (issue #8), on real tiny
//! builds installed into a real install root.

use crate::{code, json, stderr, stdout, Installed};

#[test]
fn history_lists_every_transaction_and_rollback_to_a_generation_goes_back_and_forward() {
    let i = Installed::new();
    let o = i.install(&i.patched, "live");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let g1 = json(&o)["gen"].as_u64().expect("gen");
    let o = i.install(&i.unpatched, "live");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let installed = json(&o);
    let g2 = installed["gen"].as_u64().expect("gen");
    assert_eq!(installed["left"]["variant"], "patched");
    assert_eq!(installed["reached"]["variant"], "unpatched");
    assert_eq!(installed["unchanged"], false);
    // The same build again: unchanged, and the human output says so.
    let again = i.run(&[
        "install",
        i.unpatched.to_str().expect("utf8"),
        "--layer",
        "live",
    ]);
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert!(
        stdout(&again).contains("unchanged: live already shows tiny/unpatched"),
        "{}",
        stdout(&again)
    );

    let h = json(&i.run(&["history", "--json"]));
    assert_eq!(h["schema"], "pinforge.history/v1");
    let rows = h["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "three receipts: {h}");
    assert_eq!(rows[0]["record"]["gen"], g1);
    assert_eq!(rows[1]["record"]["gen"], g2);
    assert_eq!(rows[2]["record"]["unchanged"], true);
    assert_eq!(rows[1]["state"]["layers"]["live"]["variant"], "unpatched");
    assert!(rows[1]["input_digests"]["live"].is_string(), "{h}");

    // Back to generation 1: live shows the patched build again, as a new generation.
    let o = i.run(&["rollback", "--to-generation", &g1.to_string(), "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let back = json(&o);
    assert_eq!(back["reached"]["variant"], "patched");
    assert!(back["gen"].as_u64().expect("gen") > g2);
    assert_eq!(i.current_variant().as_deref(), Some("patched"));
    assert!(i.verify_ok());
    // And forward again to generation 2.
    let o = i.run(&["rollback", "--to-generation", &g2.to_string()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("reached tiny/unpatched"),
        "{}",
        stdout(&o)
    );
    assert_eq!(i.current_variant().as_deref(), Some("unpatched"));

    let human = i.run(&["history"]);
    assert_eq!(code(&human), 0);
    assert!(
        stdout(&human).contains("5 transaction(s)"),
        "{}",
        stdout(&human)
    );

    // A generation that is not on disk is an input error with a hint.
    let o = i.run(&["rollback", "--to-generation", "999"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("pinforge history"), "{}", stderr(&o));
    // --to and --to-generation exclude each other.
    let o = i.run(&["rollback", "--to", "live", "--to-generation", "1"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}
