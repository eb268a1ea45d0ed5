//! The report's parameters as the command line and the route give them (strings), checked
//! into a [`Query`]: every bad input is a stable code, before anything is read.

use crate::clock::Timestamp;
use crate::error::{Error, ErrorCode, Result};

/// How counts are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// By the request's tool.
    Tool,
    /// By the principal of the request's closing decision or rejection.
    Reviewer,
    /// By the principal that opened the request.
    Agent,
}

impl By {
    /// The name in `--by` and the report's `by`.
    pub fn as_str(self) -> &'static str {
        match self {
            By::Tool => "tool",
            By::Reviewer => "reviewer",
            By::Agent => "agent",
        }
    }

    /// Parses `tool`, `reviewer` or `agent`.
    ///
    /// # Errors
    /// `invalid_report_group` for anything else.
    pub fn parse(s: &str) -> Result<By> {
        match s {
            "tool" => Ok(By::Tool),
            "reviewer" => Ok(By::Reviewer),
            "agent" => Ok(By::Agent),
            _ => Err(Error::new(
                ErrorCode::InvalidReportGroup,
                format!(
                    "by {q} is not one of tool, reviewer, agent",
                    q = crate::codec::quoted(s)
                ),
            )),
        }
    }
}

/// The most windows one report may have.
pub const MAX_WINDOWS: u64 = 10_000;

/// The default significance of the shift tests.
pub const DEFAULT_ALPHA: f64 = 0.01;

/// The default window: one day.
pub const DEFAULT_WINDOW_MICROS: i64 = 86_400 * 1_000_000;

/// A checked report query.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// Start of the range (inclusive), µs; `None`: derived from the records (section 13.3).
    pub since: Option<i64>,
    /// End of the range (exclusive), µs; `None`: derived from the records.
    pub until: Option<i64>,
    /// The window's length, µs (a whole number of seconds, at least one).
    pub window: i64,
    /// The grouping.
    pub by: By,
    /// Only this thread's records.
    pub thread: Option<String>,
    /// The shift tests' significance, 0 < alpha < 1.
    pub alpha: f64,
}

/// The raw parameters, as given.
#[derive(Debug, Clone, Default)]
pub struct RawQuery<'a> {
    /// `since`: RFC 3339, or a duration back from `now` (`7d`, `12h`, `30m`, `45s`).
    pub since: Option<&'a str>,
    /// `until`: as `since`.
    pub until: Option<&'a str>,
    /// `window`: a duration (`1h`, `1d`, `7d`, …).
    pub window: Option<&'a str>,
    /// `by`: `tool`, `reviewer` or `agent` (default `tool`).
    pub by: Option<&'a str>,
    /// `thread`: a thread id.
    pub thread: Option<&'a str>,
    /// `alpha`: a decimal number strictly between 0 and 1 (default 0.01).
    pub alpha: Option<&'a str>,
}

/// Parses a duration: a positive decimal integer without a leading zero followed by one unit,
/// `s`, `m`, `h`, `d` or `w`; µs.
///
/// # Errors
/// `invalid_duration`.
pub fn parse_duration(s: &str) -> Result<i64> {
    let bad = || {
        Error::new(
            ErrorCode::InvalidDuration,
            format!(
                "duration {q} is not a positive whole number followed by s, m, h, d or w (e.g. 30m, 12h, 7d)",
                q = crate::codec::quoted(s)
            ),
        )
    };
    let unit = s.chars().last().ok_or_else(bad)?;
    let secs: i64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        'w' => 604_800,
        _ => return Err(bad()),
    };
    let digits = &s[..s.len() - 1];
    if digits.is_empty()
        || digits.starts_with('0')
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || digits.len() > 9
    {
        return Err(bad());
    }
    let n: i64 = digits.parse().map_err(|_| bad())?;
    Ok(n * secs * 1_000_000)
}

/// Parses an instant: RFC 3339 (any offset; converted to UTC, µs resolution), or a duration
/// back from `now` (µs).
///
/// # Errors
/// `invalid_duration` when it is neither.
pub fn parse_instant(s: &str, now: i64) -> Result<i64> {
    if let Ok(t) = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339) {
        let micros = t.unix_timestamp_nanos() / 1_000;
        return i64::try_from(micros)
            .ok()
            .filter(|m| Timestamp::from_micros(*m).micros() == *m)
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::InvalidDuration,
                    format!(
                        "instant {q} is outside years 0001 to 9999",
                        q = crate::codec::quoted(s)
                    ),
                )
            });
    }
    match parse_duration(s) {
        Ok(d) => Ok(now.saturating_sub(d)),
        Err(_) => Err(Error::new(
            ErrorCode::InvalidDuration,
            format!(
                "{q} is neither an RFC 3339 instant (2026-11-30T20:00:00Z) nor a duration back from now (7d, 12h, 30m)",
                q = crate::codec::quoted(s)
            ),
        )),
    }
}

impl Query {
    /// Checks the raw parameters (`now` resolves durations back from now). An explicit range
    /// must have `since` before `until` and hold at least one window, and at most
    /// [`MAX_WINDOWS`].
    ///
    /// # Errors
    /// `invalid_duration`, `invalid_report_group`, `invalid_identifier` (thread),
    /// `invalid_request` (alpha), `invalid_report_range` (since not before until, a window
    /// longer than the range), `too_many_windows`.
    pub fn parse(raw: &RawQuery<'_>, now: i64) -> Result<Query> {
        let since = raw.since.map(|s| parse_instant(s, now)).transpose()?;
        let until = raw.until.map(|s| parse_instant(s, now)).transpose()?;
        let window = raw
            .window
            .map(parse_duration)
            .transpose()?
            .unwrap_or(DEFAULT_WINDOW_MICROS);
        let by = raw.by.map(By::parse).transpose()?.unwrap_or(By::Tool);
        if let Some(t) = raw.thread {
            crate::format::record::check_id("thread", t)?;
        }
        let alpha = match raw.alpha {
            None => DEFAULT_ALPHA,
            Some(a) => a
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0 && *x < 1.0 && !a.starts_with('+'))
                .ok_or_else(|| {
                    Error::new(
                        ErrorCode::InvalidRequest,
                        format!(
                            "alpha {q} is not a number strictly between 0 and 1",
                            q = crate::codec::quoted(a)
                        ),
                    )
                })?,
        };
        if let (Some(s), Some(u)) = (since, until) {
            if s >= u {
                return Err(Error::new(
                    ErrorCode::InvalidReportRange,
                    format!(
                        "since {} is not before until {}",
                        Timestamp::from_micros(s),
                        Timestamp::from_micros(u)
                    ),
                ));
            }
            let range = u - s;
            if window > range {
                return Err(Error::new(
                    ErrorCode::InvalidReportRange,
                    format!(
                        "the window ({} s) is longer than the range ({} s)",
                        window / 1_000_000,
                        range as f64 / 1e6
                    ),
                ));
            }
            check_windows(s, u, window)?;
        }
        Ok(Query {
            since,
            until,
            window,
            by,
            thread: raw.thread.map(str::to_owned),
            alpha,
        })
    }
}

/// The number of windows of a range: ⌈(until − since) / window⌉.
pub fn window_count(since: i64, until: i64, window: i64) -> u64 {
    let range = (until as i128 - since as i128).max(0);
    let w = window.max(1) as i128;
    ((range + w - 1) / w) as u64
}

/// Refuses a range of more than [`MAX_WINDOWS`] windows.
///
/// # Errors
/// `too_many_windows`.
pub fn check_windows(since: i64, until: i64, window: i64) -> Result<()> {
    let n = window_count(since, until, window);
    if n > MAX_WINDOWS {
        return Err(Error::new(
            ErrorCode::TooManyWindows,
            format!(
                "the range holds {n} windows of {} s; a report has at most {MAX_WINDOWS} (choose a longer window or a shorter range)",
                window / 1_000_000
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000_000;

    fn q(raw: RawQuery<'_>) -> Result<Query> {
        Query::parse(&raw, NOW)
    }

    #[test]
    fn durations_and_instants() {
        assert_eq!(parse_duration("30m").unwrap(), 1_800_000_000);
        assert_eq!(parse_duration("7d").unwrap(), 604_800_000_000);
        for bad in [
            "",
            "d",
            "0d",
            "07d",
            "1.5h",
            "-1h",
            "1y",
            "1 h",
            "h1",
            "9999999999d",
        ] {
            assert_eq!(
                parse_duration(bad).unwrap_err().code(),
                ErrorCode::InvalidDuration,
                "{bad}"
            );
        }
        assert_eq!(parse_instant("12h", NOW).unwrap(), NOW - 43_200_000_000);
        assert_eq!(
            parse_instant("2026-11-30T20:00:00Z", NOW).unwrap(),
            Timestamp::parse("2026-11-30T20:00:00.000000Z")
                .unwrap()
                .micros()
        );
        assert_eq!(
            parse_instant("2026-11-30T21:00:00+01:00", NOW).unwrap(),
            parse_instant("2026-11-30T20:00:00.000000Z", NOW).unwrap()
        );
        assert_eq!(
            parse_instant("yesterday", NOW).unwrap_err().code(),
            ErrorCode::InvalidDuration
        );
    }

    #[test]
    fn bad_queries_have_stable_codes() {
        let code = |raw| q(raw).unwrap_err().code();
        assert_eq!(
            code(RawQuery {
                by: Some("tenant"),
                ..Default::default()
            }),
            ErrorCode::InvalidReportGroup
        );
        assert_eq!(
            code(RawQuery {
                since: Some("1d"),
                until: Some("2d"),
                ..Default::default()
            }),
            ErrorCode::InvalidReportRange
        );
        assert_eq!(
            code(RawQuery {
                since: Some("1d"),
                window: Some("7d"),
                until: Some("1h"),
                ..Default::default()
            }),
            ErrorCode::InvalidReportRange
        );
        assert_eq!(
            code(RawQuery {
                since: Some("30d"),
                window: Some("1m"),
                until: Some("1s"),
                ..Default::default()
            }),
            ErrorCode::TooManyWindows
        );
        assert_eq!(
            code(RawQuery {
                window: Some("1.5d"),
                ..Default::default()
            }),
            ErrorCode::InvalidDuration
        );
        for a in ["0", "1", "-0.1", "nan", "inf", "x", "+0.5"] {
            assert_eq!(
                code(RawQuery {
                    alpha: Some(a),
                    ..Default::default()
                }),
                ErrorCode::InvalidRequest,
                "{a}"
            );
        }
        let ok = q(RawQuery {
            since: Some("7d"),
            window: Some("1h"),
            by: Some("reviewer"),
            alpha: Some("0.05"),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(ok.since, Some(NOW - 604_800_000_000));
        assert_eq!(ok.by, By::Reviewer);
        assert_eq!(ok.alpha, 0.05);
        // Exactly the limit is allowed.
        assert!(check_windows(0, 10_000 * 60_000_000, 60_000_000).is_ok());
        assert!(check_windows(0, 10_000 * 60_000_000 + 1, 60_000_000).is_err());
    }
}
