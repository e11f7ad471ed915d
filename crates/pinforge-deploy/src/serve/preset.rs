//! The router's preset file (`--models-preset`, an INI file: one section per preset, keys are
//! `llama-server` options without dashes, `[*]` shared by all) and the router's command line.
//!
//! Every preset serves the same model file: with `--models-max 1` each switch between presets
//! evicts the other child, which is how production met the prompt-cache restore path. The
//! file is generated text, so every value that goes into it is checked first: a newline, `;`
//! or `[` in a path or name would start another key or section the router would obey.

use pinforge_base::error::{Error, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// What the preset file says.
#[derive(Debug, Clone, PartialEq)]
pub struct PresetConfig {
    /// The model every preset serves (absolute).
    pub model: PathBuf,
    /// Preset names (at least two, so rows can alternate).
    pub names: Vec<String>,
    /// Context per child (`ctx-size`).
    pub ctx: u32,
    /// Slots per child (`parallel`).
    pub parallel: u32,
    /// Host-RAM prompt cache in MiB (`cache-ram`); None keeps upstream's default (8192).
    pub cache_ram_mib: Option<u64>,
    /// `slot-prompt-similarity` (0.3 in the #20093 incident).
    pub slot_prompt_similarity: f64,
}

/// The incident's slot similarity, the default.
pub const INCIDENT_SIMILARITY: f64 = 0.3;

/// A preset name: letters, digits, `-`, `_`, `.`; 1 to 64 bytes.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Error::input(
            format!("preset name {}", name.escape_debug()),
            "a preset name is letters, digits, `-`, `_` and `.` (1 to 64 bytes)",
        ))
    }
}

/// The model path as INI text: absolute, UTF-8, no control characters or INI syntax.
fn ini_path(p: &Path) -> Result<&str> {
    let s = p.to_str().ok_or_else(|| {
        Error::input(
            p.display(),
            "the model path is not UTF-8; the preset file cannot name it",
        )
    })?;
    if !p.is_absolute() || s.chars().any(|c| c.is_control() || c == ';' || c == '#') {
        return Err(Error::input(
            p.display(),
            "the model path must be absolute, without control characters, `;` or `#`",
        )
        .with_hint("the path goes into the router's INI preset file verbatim"));
    }
    Ok(s)
}

impl PresetConfig {
    /// The preset file's text (deterministic: the names in the given order).
    pub fn to_ini(&self) -> Result<String> {
        if self.names.len() < 2 {
            return Err(Error::input(
                "presets",
                "give at least two presets, so rows can alternate between children",
            ));
        }
        for n in &self.names {
            check_name(n)?;
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = self.names.iter().find(|n| !seen.insert(n.as_str())) {
            return Err(Error::input(
                format!("preset {dup}"),
                "named twice; every preset is its own child",
            ));
        }
        if !(0.0..=1.0).contains(&self.slot_prompt_similarity) {
            return Err(Error::input(
                format!("--slot-prompt-similarity {}", self.slot_prompt_similarity),
                "must be 0 to 1",
            ));
        }
        if self.ctx == 0 || self.parallel == 0 {
            return Err(Error::input(
                format!("ctx {} / parallel {}", self.ctx, self.parallel),
                "the context and the slots must be at least 1",
            ));
        }
        let model = ini_path(&self.model)?;
        // Every key sits in a section: llama-server turns keys before the first section
        // (upstream's `version = 1` example line) into a preset named `default`, served
        // beside the run's with no model (issue #35).
        let mut s = String::from("[*]\n");
        s.push_str(&format!("ctx-size = {}\n", self.ctx));
        s.push_str(&format!("parallel = {}\n", self.parallel));
        s.push_str(&format!(
            "slot-prompt-similarity = {}\n",
            self.slot_prompt_similarity
        ));
        if let Some(mib) = self.cache_ram_mib {
            s.push_str(&format!("cache-ram = {mib}\n"));
        }
        for n in &self.names {
            s.push_str(&format!("\n[{n}]\nmodel = {model}\n"));
        }
        Ok(s)
    }
}

/// The router's arguments: router mode over the preset file, on 127.0.0.1:`port`, with at
/// most `models_max` children loaded.
pub fn router_args(preset: &Path, port: u16, models_max: u32) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string().into(),
        "--models-preset".into(),
    ];
    v.push(preset.as_os_str().to_owned());
    v.push("--models-max".into());
    v.push(models_max.to_string().into());
    v
}

/// A free TCP port on 127.0.0.1: bind port 0, read the port the kernel chose, release it.
/// (The router binds it a moment later; a race with another binder is a start failure the
/// caller reports, never a silent use of someone else's server.)
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| Error::io("bind a probe socket on", Path::new("127.0.0.1:0"), e))?;
    let port = l
        .local_addr()
        .map_err(|e| Error::io("read the probe socket of", Path::new("127.0.0.1:0"), e))?
        .port();
    Ok(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> PresetConfig {
        PresetConfig {
            model: PathBuf::from("/ws/validate/r1/model.gguf"),
            names: vec!["tiny-a".into(), "tiny-b".into()],
            ctx: 512,
            parallel: 1,
            cache_ram_mib: None,
            slot_prompt_similarity: INCIDENT_SIMILARITY,
        }
    }

    #[test]
    fn the_preset_file_names_every_preset_and_the_incident_settings() {
        let ini = cfg().to_ini().expect("ini");
        assert_eq!(
            ini,
            "[*]\nctx-size = 512\nparallel = 1\nslot-prompt-similarity = 0.3\n\
             \n[tiny-a]\nmodel = /ws/validate/r1/model.gguf\n\
             \n[tiny-b]\nmodel = /ws/validate/r1/model.gguf\n"
        );
        let off = PresetConfig {
            cache_ram_mib: Some(0),
            ..cfg()
        };
        assert!(off.to_ini().expect("ini").contains("\ncache-ram = 0\n"));
    }

    #[test]
    fn values_that_would_inject_ini_syntax_are_refused() {
        for bad in ["a]\n[b", "x y", "", "a;b", "é"] {
            let c = PresetConfig {
                names: vec![bad.into(), "ok".into()],
                ..cfg()
            };
            assert!(c.to_ini().is_err(), "{bad:?}");
        }
        for p in [
            "/m\nmodel = /etc/x",
            "relative.gguf",
            "/a;b.gguf",
            "/a\u{7}b",
        ] {
            let c = PresetConfig {
                model: PathBuf::from(p),
                ..cfg()
            };
            assert!(c.to_ini().is_err(), "{p:?}");
        }
        use std::os::unix::ffi::OsStrExt;
        let c = PresetConfig {
            model: PathBuf::from(std::ffi::OsStr::from_bytes(b"/m\xff.gguf")),
            ..cfg()
        };
        assert!(c.to_ini().is_err(), "non-UTF-8 path");
        let one = PresetConfig {
            names: vec!["a".into()],
            ..cfg()
        };
        assert!(one.to_ini().is_err());
        let twice = PresetConfig {
            names: vec!["a".into(), "a".into()],
            ..cfg()
        };
        assert!(twice.to_ini().is_err());
        let sim = PresetConfig {
            slot_prompt_similarity: 1.5,
            ..cfg()
        };
        assert!(sim.to_ini().is_err());
    }

    #[test]
    fn the_router_listens_on_loopback_with_the_preset_file() {
        let a = router_args(Path::new("/r/presets.ini"), 4242, 1);
        let a: Vec<String> = a.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        assert_eq!(
            a,
            [
                "--host",
                "127.0.0.1",
                "--port",
                "4242",
                "--models-preset",
                "/r/presets.ini",
                "--models-max",
                "1"
            ]
        );
        let p = free_port().expect("port");
        assert!(p > 0);
        // Released: the port can be bound again right away.
        assert!(std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
    }
}
