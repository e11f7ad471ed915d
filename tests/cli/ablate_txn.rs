//! An ablation's final files — `record.json` with its signature sidecars (`--sign`) and
//! `summary.md` — appear in its record folder at once (`trial::record::commit_final`): killed
//! after staging (`ablate:1`) the folder holds the last unfinished record, signed, and no
//! summary; killed after the exchange (`ablate:2`) it holds the finished record, signed, and
//! its summary; the staged folder a kill leaves is removed by the next ablation. The smoke
//! and the soak trial end in the same commit; the tiny recipe's smoke trial is the one cheap
//! enough to kill at every step.

use crate::{code, pinforge, pinforge_cmd, stderr, which, Tiny};
use std::path::{Path, PathBuf};
use std::process::Command;

fn ssh_verified(file: &Path, signers: &Path) -> bool {
    let o = Command::new("ssh-keygen")
        .args(["-Y", "verify", "-n", "pinforge", "-f"])
        .arg(signers)
        .args(["-I", "k@example.org", "-s"])
        .arg(format!("{}.sig", file.display()))
        .stdin(std::fs::File::open(file).expect("open record"))
        .output()
        .expect("ssh-keygen");
    o.status.success()
}

/// The names in `dir`, sorted (none when it is missing).
pub(crate) fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn record(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("record.json")).expect("record")).expect("json")
}

#[test]
fn an_ablation_killed_at_every_step_of_its_final_commit_leaves_a_whole_signed_folder() {
    if which("ssh-keygen").is_none() {
        crate::skip("ssh-keygen is not installed");
        return;
    }
    let t = Tiny::new();
    let key = t.ws.join("k");
    let o = pinforge(
        &t.ws,
        &[
            "key",
            "generate",
            "-o",
            key.to_str().expect("utf-8"),
            "--comment",
            "k@example.org",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let public = std::fs::read_to_string(t.ws.join("k.pub")).expect("pub");
    let signers = t.ws.join("allowed_signers");
    std::fs::write(
        &signers,
        format!("k@example.org namespaces=\"pinforge\" {public}"),
    )
    .expect("signers");
    let args = [
        "ablate",
        "recipes/tiny.toml",
        "--variant",
        "patched",
        "--sign",
        key.to_str().expect("utf-8"),
    ];
    let ablations = t.ws.join("ablations");
    use pinforge_base::txn::Step;
    // Every step of the final commit, as the library declares them.
    for &at in pinforge_trial::ablate::AblateStep::ALL {
        let step = at.index();
        let o = pinforge_cmd(&t.ws)
            .args(args)
            .env("PINFORGE_CRASH_AT", at.crash_at())
            .output()
            .expect("ablate");
        assert_eq!(o.status.code(), None, "step {step}: killed: {}", stderr(&o));
        let dir: PathBuf = ablations.join(format!("tiny--patched-{step:04}"));
        let names = entries(&dir);
        let rec = record(&dir);
        assert!(
            ssh_verified(&dir.join("record.json"), &signers),
            "step {step}: signed"
        );
        let stages: Vec<String> = entries(&ablations)
            .into_iter()
            .filter(|n| n.starts_with(".pinforge-final-"))
            .collect();
        assert_eq!(
            stages.len(),
            1,
            "step {step}: the stage a kill leaves: {stages:?}"
        );
        if at == pinforge_trial::ablate::AblateStep::Staged {
            assert!(rec["finished_at"].is_null(), "step 1: unfinished: {rec}");
            assert_eq!(
                names,
                ["record.json", "record.json.dsse.json", "record.json.sig"],
                "step 1: no summary before the commit"
            );
        } else {
            assert!(rec["finished_at"].is_string(), "step 2: finished: {rec}");
            assert_eq!(
                names,
                [
                    "record.json",
                    "record.json.dsse.json",
                    "record.json.sig",
                    "summary.md"
                ],
                "step 2: every final file"
            );
            let summary = std::fs::read_to_string(dir.join("summary.md")).expect("summary");
            assert!(
                summary.contains(rec["id"].as_str().expect("id")),
                "{summary}"
            );
        }
    }
    // A run that is not killed finishes its own folder and removes the dead runs' stages.
    let o = pinforge(&t.ws, &args);
    assert!(matches!(code(&o), 0 | 1), "{}", stderr(&o));
    let dir = ablations.join("tiny--patched-0003");
    assert!(record(&dir)["finished_at"].is_string());
    assert!(dir.join("summary.md").is_file());
    assert!(ssh_verified(&dir.join("record.json"), &signers));
    let left: Vec<String> = entries(&ablations)
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "stages left: {left:?}");
}
