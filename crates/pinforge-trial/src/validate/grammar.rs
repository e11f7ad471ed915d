//! JSON Schema → GBNF for grammar-constrained rows: the subset a structured-output request
//! uses (object with properties/required, string, number, integer, boolean, null, enum,
//! const, array with items), converted to a grammar llama.cpp's own grammar sampler runs.
//! Anything else is refused with the keyword and the file, never approximated: a grammar that
//! accepts more or less than the schema would make `token-budget` rows mean something else.
//!
//! The JSON the grammar accepts is compact (no optional whitespace), so that a row's output
//! is complete exactly when the structure closes and the engine samples end-of-generation.

use pinforge_base::error::{Error, Result};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// Keywords that only annotate a schema; they never change what it accepts.
const ANNOTATIONS: &[&str] = &["$schema", "$id", "title", "description", "$comment"];

/// Convert the schema in `text` (read from `file`) to a GBNF grammar whose start rule is
/// `root`.
pub(crate) fn schema_to_gbnf(text: &str, file: &Path) -> Result<String> {
    let schema: Value = serde_json::from_str(text).map_err(|e| {
        Error::input(
            format!("{}:{}:{}", file.display(), e.line(), e.column()),
            format!("the schema is not JSON: {e}"),
        )
    })?;
    let mut g = Gen {
        rules: Vec::new(),
        file,
    };
    let root = g.value(&schema, "")?;
    let mut out = format!("root ::= {root}\n");
    for (name, body) in &g.rules {
        let _ = writeln!(out, "{name} ::= {body}");
    }
    out.push_str(PRIMITIVES);
    Ok(out)
}

/// The shared rules (JSON's own grammar for its scalars, compact).
const PRIMITIVES: &str = r#"json-string ::= "\"" json-char* "\""
json-char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])
json-integer ::= "-"? ("0" | [1-9] [0-9]*)
json-number ::= json-integer ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
json-boolean ::= "true" | "false"
json-null ::= "null"
"#;

struct Gen<'a> {
    rules: Vec<(String, String)>,
    file: &'a Path,
}

impl Gen<'_> {
    fn refuse(&self, at: &str, keyword: &str, why: &str) -> Error {
        let at = if at.is_empty() { "#" } else { at };
        Error::input(
            self.file.display(),
            format!("schema keyword `{keyword}` at {at}: {why}"),
        )
        .with_hint(
            "validate converts type (object, array, string, number, integer, boolean, null), \
             properties, required, items, enum and const; simplify the schema to that subset",
        )
    }

    fn rule(&mut self, body: String) -> String {
        let name = format!("r{}", self.rules.len());
        self.rules.push((name.clone(), body));
        name
    }

    /// The grammar expression for the schema at JSON pointer `at`.
    fn value(&mut self, s: &Value, at: &str) -> Result<String> {
        let obj = match s {
            Value::Bool(true) => {
                return Err(self.refuse(at, "true", "an unconstrained schema is not converted"))
            }
            Value::Object(o) => o,
            _ => return Err(self.refuse(at, "(schema)", "a schema must be a JSON object")),
        };
        let allowed: &[&str] = match obj.get("type").and_then(Value::as_str) {
            Some("object") => &["type", "properties", "required", "additionalProperties"],
            Some("array") => &["type", "items"],
            Some(_) => &["type"],
            None => &["enum", "const"],
        };
        for k in obj.keys() {
            if !allowed.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()) {
                return Err(self.refuse(at, k, "not in the converted subset"));
            }
        }
        if let Some(c) = obj.get("const") {
            return Ok(literal(&json_text(c)));
        }
        if let Some(e) = obj.get("enum") {
            let Value::Array(vals) = e else {
                return Err(self.refuse(at, "enum", "must be an array"));
            };
            if vals.is_empty() {
                return Err(self.refuse(at, "enum", "an empty enum accepts nothing"));
            }
            let alts: Vec<String> = vals.iter().map(|v| literal(&json_text(v))).collect();
            return Ok(self.rule(alts.join(" | ")));
        }
        let ty = match obj.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(_) => return Err(self.refuse(at, "type", "only a single type name is converted")),
            None => return Err(self.refuse(at, "type", "missing (or give enum / const)")),
        };
        match ty {
            "string" => Ok("json-string".into()),
            "number" => Ok("json-number".into()),
            "integer" => Ok("json-integer".into()),
            "boolean" => Ok("json-boolean".into()),
            "null" => Ok("json-null".into()),
            "array" => {
                let item = match obj.get("items") {
                    Some(i) => self.value(i, &format!("{at}/items"))?,
                    None => {
                        return Err(self.refuse(at, "items", "an array needs its items schema"))
                    }
                };
                Ok(self.rule(format!(r#""[" ({item} ("," {item})*)? "]""#)))
            }
            "object" => self.object(obj, at),
            other => Err(self.refuse(at, "type", &format!("unknown type `{other}`"))),
        }
    }

    fn object(&mut self, obj: &serde_json::Map<String, Value>, at: &str) -> Result<String> {
        match obj.get("additionalProperties") {
            None | Some(Value::Bool(false)) => {}
            Some(_) => {
                return Err(self.refuse(
                    at,
                    "additionalProperties",
                    "only `false` is converted (the grammar emits the listed properties only)",
                ))
            }
        }
        let props = match obj.get("properties") {
            None => serde_json::Map::new(),
            Some(Value::Object(p)) => p.clone(),
            Some(_) => return Err(self.refuse(at, "properties", "must be an object")),
        };
        let required: Vec<String> = match obj.get("required") {
            None => Vec::new(),
            Some(Value::Array(r)) => {
                let mut out = Vec::new();
                for v in r {
                    let Some(name) = v.as_str() else {
                        return Err(self.refuse(at, "required", "must list property names"));
                    };
                    if !props.contains_key(name) {
                        return Err(self.refuse(
                            at,
                            "required",
                            &format!(
                                "names `{}`, which properties does not define",
                                name.escape_debug()
                            ),
                        ));
                    }
                    out.push(name.to_string());
                }
                out
            }
            Some(_) => return Err(self.refuse(at, "required", "must be an array")),
        };
        // Required properties first, then the optional ones, each in name order (serde_json
        // keeps keys sorted here): one fixed order, so a grammar names one output per value.
        let mut req = Vec::new();
        let mut opt = Vec::new();
        for (name, sub) in &props {
            let v = self.value(sub, &format!("{at}/properties/{}", pointer_escape(name)))?;
            let kv = format!(
                r#"{} ":" {v}"#,
                literal(&json_text(&Value::String(name.clone())))
            );
            if required.contains(name) {
                req.push(kv);
            } else {
                opt.push(kv);
            }
        }
        // tails[i]: the optional properties from i on, each preceded by a comma.
        let mut tail = String::new();
        let mut tails = vec![String::new(); opt.len() + 1];
        for i in (0..opt.len()).rev() {
            tail = if tail.is_empty() {
                format!(r#"("," {})?"#, opt[i])
            } else {
                format!(r#"("," {})? {tail}"#, opt[i])
            };
            tails[i] = tail.clone();
        }
        let body = if !req.is_empty() {
            let mut b = format!(r#""{{" {}"#, req[0]);
            for kv in &req[1..] {
                let _ = write!(b, r#" "," {kv}"#);
            }
            if !tails[0].is_empty() {
                let _ = write!(b, " {}", tails[0]);
            }
            b.push_str(r#" "}""#);
            b
        } else if opt.is_empty() {
            r#""{" "}""#.to_string()
        } else {
            let alts: Vec<String> = (0..opt.len())
                .map(|i| {
                    if tails[i + 1].is_empty() {
                        opt[i].clone()
                    } else {
                        format!("{} {}", opt[i], tails[i + 1])
                    }
                })
                .collect();
            format!(r#""{{" ({})? "}}""#, alts.join(" | "))
        };
        Ok(self.rule(body))
    }
}

fn json_text(v: &Value) -> String {
    // serde_json's compact form is canonical for a literal (sorted keys, no spaces).
    v.to_string()
}

fn pointer_escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// A GBNF string literal matching exactly `text`.
fn literal(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(s: &str) -> Result<String> {
        schema_to_gbnf(s, Path::new("s.json"))
    }

    #[test]
    fn an_object_with_required_and_optional_properties_becomes_ordered_rules() {
        let g = conv(
            r#"{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer"},
               "tag":{"enum":["a","b"]}},"required":["ok"]}"#,
        )
        .expect("converts");
        let first = g.lines().next().expect("root");
        assert_eq!(first, "root ::= r1");
        assert!(g.contains(r#"r0 ::= "\"a\"" | "\"b\"""#), "{g}");
        // Required first (ok), then optional n, tag (schema order as serde_json keeps it).
        assert!(
            g.contains(
                r#"r1 ::= "{" "\"ok\"" ":" json-boolean ("," "\"n\"" ":" json-integer)? ("," "\"tag\"" ":" r0)? "}""#
            ),
            "{g}"
        );
        assert!(g.contains("json-string ::="));
    }

    #[test]
    fn only_optional_properties_allow_any_subset_in_order_and_the_empty_object() {
        let g = conv(r#"{"type":"object","properties":{"a":{"type":"null"},"b":{"const":3}}}"#)
            .expect("converts");
        assert!(
            g.contains(
                r#"r0 ::= "{" ("\"a\"" ":" json-null ("," "\"b\"" ":" "3")? | "\"b\"" ":" "3")? "}""#
            ),
            "{g}"
        );
    }

    #[test]
    fn arrays_nest_and_literals_are_escaped() {
        let g = conv(
            r#"{"type":"array","items":{"type":"object","properties":{"q\"\\":{"type":"string"}},"required":["q\"\\"]}}"#,
        )
        .expect("converts");
        assert!(
            g.contains(r#"r0 ::= "{" "\"q\\\"\\\\\"" ":" json-string "}""#),
            "{g}"
        );
        assert!(g.contains(r#"r1 ::= "[" (r0 ("," r0)*)? "]""#), "{g}");
    }

    #[test]
    fn unsupported_keywords_are_refused_naming_the_keyword_pointer_and_file() {
        for (schema, keyword, at) in [
            (r#"{"type":"string","pattern":"a+"}"#, "pattern", "#"),
            (r#"{"anyOf":[{"type":"string"}]}"#, "anyOf", "#"),
            (
                r#"{"type":"object","properties":{"x":{"type":"string","minLength":2}}}"#,
                "minLength",
                "/properties/x",
            ),
            (r#"{"type":["string","null"]}"#, "type", "#"),
            (
                r#"{"type":"object","additionalProperties":true}"#,
                "additionalProperties",
                "#",
            ),
            (r#"{"type":"array"}"#, "items", "#"),
            (
                r#"{"type":"object","properties":{},"required":["z"]}"#,
                "required",
                "#",
            ),
            (r##"{"$ref":"#/defs/x"}"##, "$ref", "#"),
            (r#"{"enum":[]}"#, "enum", "#"),
        ] {
            let e = conv(schema).expect_err(schema);
            let msg = e.to_string();
            assert!(msg.starts_with("s.json: "), "{msg}");
            assert!(
                msg.contains(&format!("`{keyword}` at {at}")),
                "{schema}: {msg}"
            );
            assert_eq!(e.exit_code(), 2);
        }
        let e = conv("{not json").expect_err("syntax");
        assert!(e.to_string().starts_with("s.json:1:2"), "{e}");
    }

    #[test]
    fn control_characters_in_literals_become_escapes() {
        assert_eq!(literal("a\u{1}\n\"b"), r#""a\x01\n\"b""#);
    }
}
