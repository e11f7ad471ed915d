//! Issue #38 "Proof of byte identity", slow half: the pinned llama.cpp CPU variant (the
//! default recipe's `patched`) built with every unit compiled through a real sccache-dist
//! scheduler and build server on loopback has the bytes of the shared local build: `diff` says
//! `identical`, the build's counts and the server's own log show the remote compiles.

use crate::common::dist::{self, Fleet, TOKEN};
use crate::{code, json, llama_build, pinforge_cmd, skip, stderr, stdout};
use std::time::Instant;

#[test]
fn the_llama_cpp_cpu_variant_built_through_a_loopback_farm_is_identical_to_the_local_build() {
    if let Some(why) = dist::missing() {
        skip(&why);
        return;
    }
    let local = llama_build("patched");
    let fleet = Fleet::start();
    let ws = tempfile::tempdir().expect("tempdir");
    let t = Instant::now();
    // --no-cache: every unit compiles, so every unit is offered to the farm.
    let o = pinforge_cmd(ws.path())
        .env("PINFORGE_DIST_TOKEN", TOKEN)
        .args(["build", "--variant", "patched", "--no-cache", "--json"])
        .args(["--dist", &fleet.url])
        .output()
        .expect("run pinforge");
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(code(&o), 0, "{}\n{}", stderr(&o), fleet.log());
    let j = json(&o);
    let d = &j["dist"];
    let remote = d["distributed"].as_u64().expect("distributed");
    let here = d["local"].as_u64().expect("local");
    assert!(
        remote > 50,
        "most units ran remotely: {d:#}\n{}",
        fleet.log()
    );
    assert_eq!(d["fell_back"], 0, "{d:#}");
    assert!(
        fleet.server_jobs() as u64 >= remote,
        "the server's log has {} jobs for {remote} remote compiles",
        fleet.server_jobs()
    );
    let a = local["manifest"].as_str().expect("manifest");
    let b = j["manifest"].as_str().expect("manifest");
    let diff = pinforge_cmd(ws.path())
        .args(["diff", a, b])
        .output()
        .expect("diff");
    assert_eq!(code(&diff), 0, "{}{}", stdout(&diff), stderr(&diff));
    assert!(stdout(&diff).contains("identical"), "{}", stdout(&diff));
    eprintln!(
        "llama.cpp patched through the farm: {secs:.0}s, {remote} units remote, {here} here (local build: {:.0}s)",
        local["seconds"].as_f64().unwrap_or(0.0)
    );
}
