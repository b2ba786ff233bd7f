//! The line formats of an election's leader that tenure's script commands print on stdout
//! (docs/CLI.md), in text and in JSON Lines, for any program that prints the same.
//!
//! **Text.** A leader is `token=T session=S value=V`, nobody is `none`, one line each. A
//! value is arbitrary bytes chosen by whoever campaigned, so it is escaped: `\\` for a
//! backslash, `\n`, `\r`, `\t`, `\xNN` for any other control byte and for each byte that is
//! not UTF-8, and `\u{NNNN}` for the Unicode control, line and paragraph separators. A
//! value can therefore never start a second line or forge another field's line, and the
//! escapes are reversible.
//!
//! **JSON** (`--json`): one object per line, nothing else on stdout.
//!
//! - a leader: `{"election":E,"leader":{"token":T,"session":S,"value":V,"value_base64":B}}`,
//!   nobody: `{"election":E,"leader":null}`;
//! - `tenure campaign`'s line once it leads:
//!   `{"election":E,"token":T,"session":S,"value":V,"value_base64":B}`.
//!
//! `value` is the value as a string when it is UTF-8 and `null` when it is not;
//! `value_base64` (standard alphabet, padded) always holds its exact bytes. Tokens and
//! session ids are unsigned 64-bit integers, printed exactly (a parser that reads numbers as
//! doubles, such as JavaScript's, loses precision above 2^53).

use crate::LeaderInfo;
use base64::Engine as _;
use serde_json::{json, Value};

/// `bytes` escaped for one line of text (see the module docs).
pub fn escape_value(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c.is_ascii_control() => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                // Controls, line separators, and the bidirectional-text controls that could
                // make a name display as another (a right-to-left override hides what follows).
                c if c.is_control()
                    || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}'
                        | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
                {
                    let _ = write!(out, "\\u{{{:04x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// A leader (or nobody) as one line of text.
pub fn leader_text(leader: Option<&LeaderInfo>) -> String {
    match leader {
        Some(l) => format!(
            "token={} session={} value={}",
            l.token,
            l.session,
            escape_value(&l.value)
        ),
        None => "none".into(),
    }
}

/// A leader (or nobody) of `election` as one JSON line.
pub fn leader_json(election: &str, leader: Option<&LeaderInfo>) -> String {
    let leader = match leader {
        Some(l) => {
            let mut o = json!({ "token": l.token, "session": l.session });
            add_value(&mut o, &l.value);
            o
        }
        None => Value::Null,
    };
    json!({ "election": election, "leader": leader }).to_string()
}

/// `tenure campaign`'s line once it leads, as JSON.
pub fn campaign_json(election: &str, token: u64, session: u64, value: &[u8]) -> String {
    let mut o = json!({ "election": election, "token": token, "session": session });
    add_value(&mut o, value);
    o.to_string()
}

fn add_value(o: &mut Value, value: &[u8]) {
    o["value"] = match std::str::from_utf8(value) {
        Ok(s) => Value::from(s),
        Err(_) => Value::Null,
    };
    o["value_base64"] = Value::from(base64::engine::general_purpose::STANDARD.encode(value));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(value: &[u8]) -> LeaderInfo {
        LeaderInfo {
            token: 42,
            session: u64::MAX,
            value: value.to_vec(),
        }
    }

    /// Reverses [`escape_value`], as a script would: the escapes lose nothing.
    fn unescape(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = s;
        while let Some(c) = rest.chars().next() {
            rest = &rest[c.len_utf8()..];
            if c != '\\' {
                out.extend_from_slice(c.to_string().as_bytes());
                continue;
            }
            let e = rest.chars().next().expect("an escape");
            rest = &rest[1..];
            match e {
                '\\' => out.push(b'\\'),
                'n' => out.push(b'\n'),
                'r' => out.push(b'\r'),
                't' => out.push(b'\t'),
                'x' => {
                    out.push(u8::from_str_radix(&rest[..2], 16).expect("hex"));
                    rest = &rest[2..];
                }
                'u' => {
                    let end = rest.find('}').expect("a closing brace");
                    let n = u32::from_str_radix(&rest[1..end], 16).expect("hex");
                    let c = char::from_u32(n).expect("a char");
                    out.extend_from_slice(c.to_string().as_bytes());
                    rest = &rest[end + 1..];
                }
                other => panic!("unknown escape {other:?}"),
            }
        }
        out
    }

    #[test]
    fn a_value_cannot_start_a_second_line() {
        let forged = b"x\ntoken=99 session=1 value=forged\r\x1b[2J\x00\x7f";
        let line = leader_text(Some(&leader(forged)));
        assert_eq!(
            line,
            "token=42 session=18446744073709551615 \
             value=x\\ntoken=99 session=1 value=forged\\r\\x1b[2J\\x00\\x7f"
        );
        assert!(!line.chars().any(char::is_control), "{line:?}");
    }

    #[test]
    fn escapes_are_reversible_for_any_bytes() {
        let values: [&[u8]; 6] = [
            b"plain value with spaces",
            b"back\\slash \\n not a newline",
            b"\xff\xfe not utf-8 \xc3",
            "caf\u{e9} \u{85} \u{2028} \u{2029} \u{9f}".as_bytes(),
            b"\t\r\n\x01",
            b"",
        ];
        for v in values {
            let line = escape_value(v);
            assert!(
                !line
                    .chars()
                    .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}'),
                "{line:?}"
            );
            assert_eq!(unescape(&line), v, "{line:?}");
        }
        assert_eq!(escape_value(b"\xff"), "\\xff");
        assert_eq!(escape_value("\u{85}".as_bytes()), "\\u{0085}");
    }

    /// A name with a right-to-left override displays as another name in a terminal
    /// (`billing\u{202e}exe.` shows as `billing.exe`); every bidirectional control is escaped
    /// and comes back unchanged.
    #[test]
    fn bidirectional_controls_are_escaped() {
        let name = "billing/\u{202e}esolc\u{202c} \u{2066}x\u{2069} \u{200f}\u{061c}";
        let line = escape_value(name.as_bytes());
        assert_eq!(
            line,
            "billing/\\u{202e}esolc\\u{202c} \\u{2066}x\\u{2069} \\u{200f}\\u{061c}"
        );
        assert_eq!(unescape(&line), name.as_bytes());
    }

    #[test]
    fn json_lines_round_trip_any_value() {
        let v = b"a\nb \xff\"";
        let line = leader_json("e\n1", Some(&leader(v)));
        assert!(!line.contains('\n'), "{line}");
        let parsed: Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(parsed["election"], "e\n1");
        assert_eq!(parsed["leader"]["token"], 42);
        assert_eq!(parsed["leader"]["session"].as_u64(), Some(u64::MAX));
        assert_eq!(parsed["leader"]["value"], Value::Null, "not UTF-8");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(parsed["leader"]["value_base64"].as_str().expect("a string"))
            .expect("base64");
        assert_eq!(bytes, v);

        let line = leader_json("e", Some(&leader(b"holder \"1\"\n")));
        let parsed: Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(parsed["leader"]["value"], "holder \"1\"\n");

        assert_eq!(leader_json("e", None), r#"{"election":"e","leader":null}"#);

        let line = campaign_json("e", 7, 3, b"v");
        let parsed: Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(
            parsed,
            json!({"election": "e", "token": 7, "session": 3, "value": "v", "value_base64": "dg=="})
        );
    }
}
