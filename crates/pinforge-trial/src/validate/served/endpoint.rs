//! The endpoint arm of `validate --endpoint URL`: a server pinforge did not start, so its
//! identity is only what it reports (`/props`), its presets are what `/models` lists (each
//! checked to be a plain name before it is sent back in every row), and its context the one it
//! reports. Kept apart from the managed arms, whose identity pinforge hashes itself.

use super::state;
use super::{rowloop, Identity, RoundCtx, ENDPOINT_ARM};
use crate::validate::serve::Limits;
use pinforge_base::error::{Error, Result};
use pinforge_deploy::serve::client::Server;
use std::collections::BTreeMap;
use std::time::Duration;

/// The endpoint's identity: what it reports (never a hash pinforge took). An endpoint that
/// does not answer `/props` reports no build; one that answers with bad data (exit 2) or a
/// `build_info` that is not a string is refused naming the field.
fn endpoint_identity(s: &Server, preset: &str) -> Result<Identity> {
    let props = match s.props(Some(preset)).or_else(|_| s.props(None)) {
        Ok(p) => p,
        Err(e) if e.exit_code() == 2 => return Err(e),
        Err(_) => serde_json::Value::Null,
    };
    let build = match &props["build_info"] {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(b) if !b.chars().any(char::is_control) => b.clone(),
        _ => {
            return Err(Error::input(
                format!("{}/props", s.base()),
                "field build_info is not a plain string",
            ))
        }
    };
    Ok(Identity {
        exe: BTreeMap::new(),
        mapped: BTreeMap::new(),
        model_sha256: String::new(),
        preset_sha256: String::new(),
        build,
    })
}

/// The context per slot the endpoint reports (`/props` `default_generation_settings.n_ctx`,
/// of the first model, or of the server itself), for the context-exhausted rule; the tiny
/// model's context when it reports none.
fn endpoint_n_ctx(s: &Server, preset: &str) -> u64 {
    [s.props(Some(preset)).ok(), s.props(None).ok()]
        .into_iter()
        .flatten()
        .find_map(|p| {
            p["default_generation_settings"]["n_ctx"]
                .as_u64()
                .filter(|n| *n > 0)
        })
        .unwrap_or(crate::validate::engine::N_CTX as u64)
}

/// A preset name an endpoint reported: it is sent back in every request and recorded in every
/// row, so it must be a plain printable name (never a path, never a control character).
fn check_preset_name(url: &str, i: usize, id: &str) -> Result<()> {
    let plain = !id.is_empty() && id.len() <= 200 && !id.chars().any(char::is_control);
    let path_like = id.contains("..") || id.starts_with('/');
    if plain && !path_like {
        return Ok(());
    }
    Err(Error::input(
        format!("{url}/models"),
        format!(
            "field data[{i}].id `{}` is not a plain model name",
            id.escape_debug()
        ),
    ))
}

pub(super) fn arm(
    ctx: &RoundCtx<'_>,
    s: &Server,
    had: Vec<rowloop::ServedRow>,
) -> Result<(state::ArmRecord, rowloop::ArmRows)> {
    let o = ctx.o;
    s.wait_healthy(Duration::from_secs(30), &mut || {
        !pinforge_sys::signal::interrupted()
    })?;
    let presets: Vec<String> = s.models()?.into_iter().map(|m| m.id).collect();
    if presets.is_empty() {
        return Err(Error::check(
            s.base(),
            "/models lists no model to send rows to",
        ));
    }
    for (i, p) in presets.iter().enumerate() {
        check_preset_name(s.base(), i, p)?;
    }
    let before = endpoint_identity(s, &presets[0])?;
    let old = state::read_arm(ctx.dir, ENDPOINT_ARM)?;
    if let Some(rec) = &old {
        if rec.presets != presets {
            return Err(Error::check(
                s.base(),
                format!(
                    "/models lists {presets:?}; the run's first rows went to {:?}",
                    rec.presets
                ),
            ));
        }
    }
    let mut rec = state::ArmRecord {
        name: ENDPOINT_ARM.into(),
        mode: "endpoint".into(),
        server: s.base().to_string(),
        url: s.base().to_string(),
        presets: presets.clone(),
        identity_before: old
            .map(|r| r.identity_before)
            .unwrap_or_else(|| before.clone()),
        identity_after: None,
    };
    state::write_arm(ctx.dir, &rec)?;
    let plan = rowloop::RowPlan {
        arm: ENDPOINT_ARM,
        prompts: ctx.prompts,
        presets: &presets,
        switch_every: o.switch_every,
        schema: ctx.schema,
        grammar: ctx.grammar,
        limits: Limits {
            max_tokens: o.base.budget as u64,
            n_ctx: endpoint_n_ctx(s, &presets[0]),
        },
        stream: o.stream,
        log: None,
        on_response: &|_| {},
        reporter: ctx.reporter,
    };
    let rows = rowloop::run(s, &plan, ctx.rows_file, had)?;
    if rows.interrupted {
        return Ok((rec, rows));
    }
    let after = endpoint_identity(s, &presets[0])?;
    let first = &rec.identity_before;
    // An endpoint that stopped answering reports no build: that is the rows' finding (crash,
    // then harness errors), not a drift.
    if !first.build.is_empty() && !after.build.is_empty() && first.build != after.build {
        return Err(Error::check(
            s.base(),
            format!("/props build changed: {} -> {}", first.build, after.build),
        ));
    }
    rec.identity_after = Some(after);
    state::write_arm(ctx.dir, &rec)?;
    Ok((rec, rows))
}
