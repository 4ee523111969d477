//! Human times for operators: an RFC 3339 instant with or without seconds (`2026-12-01T10:00Z`,
//! `2026-12-01T10:00:30.5+00:00` is not accepted: UTC only, as the logs are), a date (`2026-12-01`, midnight
//! UTC), epoch milliseconds, or a duration back from now (`2h`, `90m`, `3d`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parses an instant into epoch milliseconds.
pub fn parse_instant(text: &str) -> Result<i64, String> {
    let t = text.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) {
        return t.parse().map_err(|e| format!("{t:?}: {e}"));
    }
    let normalized = normalize(t);
    let at = humantime::parse_rfc3339_weak(&normalized)
        .map_err(|e| format!("{t:?} is not a time ({e}); use 2026-12-01T10:00Z, 2026-12-01, or epoch milliseconds"))?;
    millis(at)
}

/// `2026-12-01` -> midnight; `...T10:00Z` -> `...T10:00:00Z`; a trailing `Z` is what humantime's weak
/// parser does not take.
fn normalize(t: &str) -> String {
    let t = t.trim_end_matches('Z').trim_end_matches('z');
    match t.split_once('T').or_else(|| t.split_once(' ')) {
        None => format!("{t} 00:00:00"),
        Some((date, time)) if time.matches(':').count() == 1 => format!("{date} {time}:00"),
        Some((date, time)) => format!("{date} {time}"),
    }
}

/// Parses a duration such as `2h` or `15m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("{text:?} is not a duration ({e}); use 2h, 90m, 3d"))
}

fn millis(at: SystemTime) -> Result<i64, String> {
    at.duration_since(UNIX_EPOCH)
        .map_err(|_| "time before 1970".to_owned())
        .and_then(|d| i64::try_from(d.as_millis()).map_err(|e| e.to_string()))
}

/// A window `[from, to)` in epoch milliseconds from `--from`/`--to` or `--last` (`now` is passed in).
pub fn window(from: Option<&str>, to: Option<&str>, last: Option<&str>, now_ms: i64) -> Result<(i64, i64), String> {
    let to_ms = match to {
        Some(t) => parse_instant(t)?,
        None => now_ms + 1,
    };
    let from_ms = match (from, last) {
        (Some(_), Some(_)) => return Err("give --from or --last, not both".into()),
        (Some(f), None) => parse_instant(f)?,
        (None, Some(l)) => now_ms - i64::try_from(parse_duration(l)?.as_millis()).map_err(|e| e.to_string())?,
        (None, None) => return Err("give --from <time> or --last <duration>".into()),
    };
    if from_ms >= to_ms {
        return Err(format!(
            "empty window: {} is not before {}",
            format_ms(from_ms),
            format_ms(to_ms)
        ));
    }
    Ok((from_ms, to_ms))
}

/// Epoch milliseconds as RFC 3339 UTC with milliseconds.
pub fn format_ms(ms: i64) -> String {
    match u64::try_from(ms) {
        Ok(ms) => humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string(),
        Err(_) => format!("{ms} ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_write_times_the_way_the_issue_shows() {
        let ten = parse_instant("2026-12-01T10:00Z").unwrap();
        assert_eq!(format_ms(ten), "2026-12-01T10:00:00.000Z");
        assert_eq!(parse_instant("2026-12-01T10:00:00Z").unwrap(), ten);
        assert_eq!(parse_instant("2026-12-01 10:00").unwrap(), ten);
        assert_eq!(parse_instant("2026-12-01").unwrap(), ten - 10 * 3600 * 1000);
        assert_eq!(parse_instant(&ten.to_string()).unwrap(), ten);
        assert!(parse_instant("yesterday").is_err());
    }

    #[test]
    fn a_window_comes_from_from_and_to_or_from_last() {
        let now = parse_instant("2026-12-01T12:00Z").unwrap();
        assert_eq!(
            window(None, None, Some("2h"), now).unwrap(),
            (now - 2 * 3600 * 1000, now + 1)
        );
        let (from, to) = window(Some("2026-12-01T10:00Z"), Some("2026-12-01T11:00Z"), None, now).unwrap();
        assert_eq!(to - from, 3600 * 1000);
        assert!(window(Some("2026-12-01T10:00Z"), None, Some("1h"), now).is_err());
        assert!(window(None, None, None, now).is_err());
        assert!(window(Some("2026-12-01T11:00Z"), Some("2026-12-01T10:00Z"), None, now).is_err());
    }
}
