//! Durations as every `tenure` tool reads them (docs/CLI.md, "Durations"): `500ms`, `10s`,
//! `1.5s`, `2m`, `1m30s`, `1h2m3.5s`; flags such as `--ttl` and `--grace`, and `tenure
//! plan`'s TOML file, use this one syntax.

use std::time::Duration;

/// Why a duration was refused, in words that show an example of a good one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DurationError(String);

/// Parses a duration: one or more `NUMBER UNIT` parts with no space between them, such as
/// `500ms`, `10s`, `1.5s`, `2m`, `1h`, `1m30s` or `1h2m3.5s`; units are `ms`, `s`, `m` (or
/// `min`) and `h`, and a bare number alone is seconds. Exact to the nanosecond (no floating
/// point); a sum past what a [`Duration`] holds is refused, as is anything else.
pub fn parse(s: &str) -> Result<Duration, DurationError> {
    parse_text(s).map_err(DurationError)
}

fn parse_text(s: &str) -> Result<Duration, String> {
    const EXAMPLE: &str = "use a duration such as 500ms, 10s, 1.5s, 2m, 1m30s or 1h";
    let text = s.trim();
    if text.is_empty() {
        return Err(format!("an empty duration; {EXAMPLE}"));
    }
    // A bare number is seconds (only as the whole input: `1m30` is refused).
    if text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return duration_part(text, "s", s);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_end);
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        if num.is_empty() {
            return Err(format!(
                "{s:?}: expected a number before {unit:?}; {EXAMPLE}"
            ));
        }
        if unit.is_empty() {
            return Err(format!("{s:?}: {num:?} has no unit; {EXAMPLE}"));
        }
        total = total
            .checked_add(duration_part(num, unit, s)?)
            .ok_or_else(|| format!("{s:?} is too long"))?;
        rest = tail;
    }
    Ok(total)
}

/// One `NUMBER UNIT` part of [`parse`]'s input `whole`.
fn duration_part(num: &str, unit: &str, whole: &str) -> Result<Duration, String> {
    let unit_ns: u128 = match unit {
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        u => return Err(format!("{whole:?}: unknown unit {u:?} (use ms, s, m or h)")),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(format!("{whole:?}: {num:?} is not a number"));
    }
    let too_long = || format!("{whole:?} is too long");
    // Digits past the nanosecond of the largest unit change nothing; 18 keep the
    // arithmetic below far from u128's limit.
    let frac = &frac[..frac.len().min(18)];
    let int: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_long())?
    };
    let frac_ns = if frac.is_empty() {
        0
    } else {
        let digits: u128 = frac.parse().map_err(|_| too_long())?;
        digits * unit_ns / 10u128.pow(frac.len() as u32)
    };
    let ns = int
        .checked_mul(unit_ns)
        .and_then(|n| n.checked_add(frac_ns))
        .ok_or_else(too_long)?;
    let secs = u64::try_from(ns / 1_000_000_000).map_err(|_| too_long())?;
    Ok(Duration::new(secs, (ns % 1_000_000_000) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse(" 250ms "), Ok(Duration::from_millis(250)));
        assert_eq!(parse(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        // 0.1 s exactly, not the nearest binary fraction.
        assert_eq!(parse("0.1s"), Ok(Duration::from_nanos(100_000_000)));
        assert_eq!(parse("1.0000000019s"), Ok(Duration::new(1, 1)));
    }

    #[test]
    fn compound_durations_add_up() {
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h2m3.5s"), Ok(Duration::from_millis(3_723_500)));
        assert_eq!(parse("1s250ms"), Ok(Duration::from_millis(1250)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
    }

    #[test]
    fn garbage_and_overflow_are_refused_with_a_reason() {
        for (input, says) in [
            ("", "empty"),
            ("3x", "unknown unit \"x\""),
            ("1m30", "has no unit"),
            ("s", "expected a number"),
            ("ms5", "expected a number"),
            ("1..5s", "not a number"),
            (".s", "not a number"),
            ("1 m", "unknown unit \" m\""),
            ("-1s", "expected a number"),
            ("1e3s", "unknown unit \"e\""),
            ("18446744073709551616s", "too long"),
            ("99999999999999999999999999999999999999999h", "too long"),
            ("5124095576030432h", "too long"),
            ("18446744073709551615s1s", "too long"),
        ] {
            match parse(input) {
                Ok(d) => panic!("{input:?} was accepted as {d:?}"),
                Err(e) => assert!(e.to_string().contains(says), "{input:?}: {e}"),
            }
        }
        assert_eq!(
            parse("18446744073709551615s"),
            Ok(Duration::from_secs(u64::MAX))
        );
    }
}
