//! Go's `time.ParseDuration` format (`1h`, `30s`, `1h30m`, `1.5s`, `300ms`), which the Go
//! server's duration variables use.

use std::time::Duration;

/// `text` as a duration; `Err` with the reason. Negative durations are refused.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("{text:?} is not a Go duration such as 1h or 30s: {why}");
    let rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return Err(bad("negative"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    let mut total = 0f64;
    let mut rest = rest;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad("a number without a unit"))?;
        let (number, after) = rest.split_at(number_end);
        let value: f64 = number.parse().map_err(|_| bad("not a number"))?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let nanos_per_unit = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad(&format!("unknown unit {unit:?}"))),
        };
        total += value * nanos_per_unit;
        rest = after;
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err(bad("too long"));
    }
    Ok(Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_forms() {
        let s = Duration::from_secs;
        assert_eq!(parse("1h"), Ok(s(3600)));
        assert_eq!(parse("30s"), Ok(s(30)));
        assert_eq!(parse("1h30m"), Ok(s(5400)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse("2us"), Ok(Duration::from_micros(2)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("24h"), Ok(s(86_400)));
        for bad in ["", "10", "1d", "-1s", "s", "1.2.3s"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
