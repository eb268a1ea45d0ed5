//! Time: microsecond UTC timestamps in the contract's one format, and the injectable clock.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::error::{Error, ErrorCode, Result};

/// An instant as whole microseconds since the Unix epoch, UTC. Formats as RFC 3339 with `Z` and
/// exactly six fractional digits (`2026-11-30T20:00:00.123456Z`), the only form the contract uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

/// Microseconds in one second.
pub const MICROS_PER_SECOND: i64 = 1_000_000;

const MIN_MICROS: i64 = -62_135_596_800 * MICROS_PER_SECOND; // 0001-01-01T00:00:00Z
const MAX_MICROS: i64 = 253_402_300_799 * MICROS_PER_SECOND + 999_999; // 9999-12-31T23:59:59.999999Z

impl Timestamp {
    /// From microseconds since the epoch.
    pub fn from_micros(micros: i64) -> Self {
        Timestamp(micros.clamp(MIN_MICROS, MAX_MICROS))
    }

    /// Microseconds since the epoch.
    pub fn micros(self) -> i64 {
        self.0
    }

    /// This instant plus whole seconds, saturating at year 9999.
    pub fn plus_seconds(self, seconds: u64) -> Self {
        let delta = i64::try_from(seconds)
            .unwrap_or(i64::MAX)
            .saturating_mul(MICROS_PER_SECOND);
        Timestamp::from_micros(self.0.saturating_add(delta))
    }

    /// Parses the contract's form exactly: `YYYY-MM-DDTHH:MM:SS.ffffffZ`, a date of the
    /// proleptic Gregorian calendar (year 0000 to 9999; an instant before 0001-01-01 reads as
    /// that day's first microsecond, the earliest a timestamp holds), hours 00 to 23, minutes
    /// and seconds 00 to 59 (no leap second).
    ///
    /// Read digit by digit, without a date library: this runs for every timestamp of every
    /// record written and verified. A test holds it equal to the `time` crate's parse of the
    /// same format on generated text, valid or not.
    ///
    /// # Errors
    /// `invalid_request` for any other form, including a naive time (no `Z`), an offset, or a
    /// different number of fractional digits.
    pub fn parse(s: &str) -> Result<Self> {
        Self::parse_bytes(s.as_bytes()).ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidRequest,
                format!(
                    "timestamp {q_s} is not RFC 3339 UTC with 'Z' and 6 fractional digits",
                    q_s = crate::codec::quoted(s)
                ),
            )
        })
    }

    /// [`Timestamp::parse`] without the error.
    pub(crate) fn parse_bytes(b: &[u8]) -> Option<Self> {
        let b: &[u8; 27] = b.try_into().ok()?;
        for (at, sep) in [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')] {
            if b[at] != sep {
                return None;
            }
        }
        if b[19] != b'.' || b[26] != b'Z' {
            return None;
        }
        // The value of the ASCII digits b[from..to].
        let num = |from: usize, to: usize| -> Option<u32> {
            b[from..to].iter().try_fold(0u32, |n, &c| {
                c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
            })
        };
        let year = num(0, 4)?;
        let month = num(5, 7)?;
        let day = num(8, 10)?;
        let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
        let micros = num(20, 26)?;
        if !(1..=12).contains(&month)
            || day == 0
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return None;
        }
        let days = days_from_civil(i64::from(year), month, day);
        let seconds =
            days * 86_400 + i64::from(hour) * 3_600 + i64::from(minute) * 60 + i64::from(second);
        Some(Timestamp::from_micros(
            seconds * MICROS_PER_SECOND + i64::from(micros),
        ))
    }

    /// The contract's form as 27 ASCII bytes, `YYYY-MM-DDTHH:MM:SS.ffffffZ`, written digit by
    /// digit (what [`fmt::Display`] writes).
    pub fn to_text(self) -> [u8; 27] {
        let secs = self.0.div_euclid(MICROS_PER_SECOND);
        let micros = self.0.rem_euclid(MICROS_PER_SECOND) as u32;
        let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
        let in_day = secs.rem_euclid(86_400) as u32;
        let mut out = *b"0000-00-00T00:00:00.000000Z";
        // Writes `n` as the ASCII digits of out[from..to], zero-padded.
        let mut put = |from: usize, to: usize, mut n: u32| {
            for c in out[from..to].iter_mut().rev() {
                *c = b'0' + (n % 10) as u8;
                n /= 10;
            }
        };
        // The clamp in `from_micros` keeps the year within 0001..=9999: four digits.
        put(0, 4, year as u32);
        put(5, 7, month);
        put(8, 10, day);
        put(11, 13, in_day / 3_600);
        put(14, 16, in_day / 60 % 60);
        put(17, 19, in_day % 60);
        put(20, 26, micros);
        out
    }
}

/// Days in `month` (1 to 12) of `year`, proleptic Gregorian.
fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (H. Hinnant's
/// `days_from_civil`: years counted from March, in eras of 400 years).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date `days` after 1970-01-01 (the inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.to_text();
        // ASCII by construction.
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

/// A source of the current time. Production uses [`SystemClock`]; tests inject a
/// [`ManualClock`] into the library (never into a running server).
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Timestamp;

    /// True for a clock a test injects: it is then the only time, also where the storage
    /// engine has a clock of its own (a database server's), which otherwise wins.
    fn is_injected(&self) -> bool {
        false
    }
}

/// The system clock in UTC.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    // The one place the wall clock is read (clippy.toml bans it everywhere else).
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Timestamp {
        let nanos = time::OffsetDateTime::now_utc().unix_timestamp_nanos();
        Timestamp::from_micros((nanos / 1000) as i64)
    }
}

/// A clock that moves only when told to; clones share the same reading.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock(Arc::new(AtomicI64::new(start.micros())))
    }

    /// Sets the reading.
    pub fn set(&self, t: Timestamp) {
        self.0.store(t.micros(), Ordering::SeqCst);
    }

    /// Moves the reading by `micros` (negative steps back).
    pub fn advance_micros(&self, micros: i64) {
        self.0.fetch_add(micros, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(self.0.load(Ordering::SeqCst))
    }

    fn is_injected(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::Strategy;

    #[test]
    fn formats_and_parses_six_digits() {
        let t = Timestamp::parse("2026-11-30T20:00:00.123456Z").unwrap();
        assert_eq!(t.to_string(), "2026-11-30T20:00:00.123456Z");
        assert_eq!(
            Timestamp::from_micros(0).to_string(),
            "1970-01-01T00:00:00.000000Z"
        );
        assert_eq!(
            Timestamp::from_micros(-1).to_string(),
            "1969-12-31T23:59:59.999999Z"
        );
        for bad in [
            "2026-11-30T20:00:00.123456",
            "2026-11-30T20:00:00.123Z",
            "2026-11-30T20:00:00.123456+00:00",
            "2026-11-30 20:00:00.123456Z",
            "2026-13-30T20:00:00.123456Z",
        ] {
            assert!(Timestamp::parse(bad).is_err(), "{bad}");
        }
    }

    /// The definition: the `time` crate's parse of the contract's format (what
    /// [`Timestamp::parse`] was before it read digits itself).
    fn parse_by_time_crate(s: &str) -> Option<Timestamp> {
        let b = s.as_bytes();
        if b.len() != 27 || b[26] != b'Z' || b[19] != b'.' {
            return None;
        }
        let fmt = time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
        );
        let pdt = time::PrimitiveDateTime::parse(s, &fmt).ok()?;
        Some(Timestamp::from_micros(
            (pdt.assume_utc().unix_timestamp_nanos() / 1000) as i64,
        ))
    }

    /// The definition of the text: the `time` crate's calendar, fields zero-padded.
    fn format_by_time_crate(t: Timestamp) -> String {
        let secs = t.micros().div_euclid(MICROS_PER_SECOND);
        let d = time::OffsetDateTime::from_unix_timestamp(secs).unwrap();
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            d.year(),
            u8::from(d.month()),
            d.day(),
            d.hour(),
            d.minute(),
            d.second(),
            t.micros().rem_euclid(MICROS_PER_SECOND)
        )
    }

    /// Text near the contract's form: fields in and out of range, then up to three bytes
    /// replaced by characters that matter to a parser, and sometimes one removed or added.
    fn near_timestamp() -> impl Strategy<Value = String> {
        let fields = (
            0u32..=10_000,
            0u32..=13,
            0u32..=32,
            0u32..=25,
            0u32..=61,
            0u32..=61,
            0u32..=999_999,
        );
        let odd = proptest::sample::select(vec![
            '0', '9', '-', '+', 'T', 't', 'Z', 'z', ':', '.', ' ', '/', 'é', '\u{0}',
        ]);
        (
            fields,
            proptest::collection::vec((0usize..27, odd), 0..=3),
            0u8..8,
            0usize..27,
        )
            .prop_map(|((y, mo, d, h, mi, s, us), swaps, shape, at)| {
                let mut text: Vec<char> =
                    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}Z")
                        .chars()
                        .collect();
                for (i, c) in swaps {
                    if i < text.len() {
                        text[i] = c;
                    }
                }
                match shape {
                    0 if at < text.len() => {
                        text.remove(at);
                    }
                    1 => text.insert(at.min(text.len()), '1'),
                    _ => {}
                }
                text.into_iter().collect()
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]

        /// The digit reader accepts exactly what the `time` crate accepts, as the same instant.
        #[test]
        fn parse_is_the_time_crates(s in near_timestamp()) {
            proptest::prop_assert_eq!(Timestamp::parse(&s).ok(), parse_by_time_crate(&s), "{}", s);
        }

        /// The digit writer writes the `time` crate's calendar, and reads back as the instant.
        #[test]
        fn text_is_the_time_crates(micros in MIN_MICROS - 5..=MAX_MICROS + 5) {
            let t = Timestamp::from_micros(micros);
            let text = t.to_string();
            proptest::prop_assert_eq!(&text, &format_by_time_crate(t));
            proptest::prop_assert_eq!(Timestamp::parse(&text).ok(), Some(t));
        }
    }

    #[test]
    fn the_calendars_edges_read_and_write_as_the_time_crate_does() {
        for text in [
            "0000-01-01T00:00:00.000000Z",
            "0000-12-31T23:59:59.999999Z",
            "0001-01-01T00:00:00.000000Z",
            "1600-02-29T00:00:00.000000Z",
            "1700-02-29T00:00:00.000000Z",
            "1900-02-29T00:00:00.000000Z",
            "2000-02-29T12:00:00.000000Z",
            "2024-02-29T23:59:59.999999Z",
            "2025-02-29T00:00:00.000000Z",
            "1969-12-31T23:59:59.999999Z",
            "1970-01-01T00:00:00.000000Z",
            "2026-04-31T00:00:00.000000Z",
            "2026-12-31T23:59:60.000000Z",
            "9999-12-31T23:59:59.999999Z",
        ] {
            let parsed = Timestamp::parse(text).ok();
            assert_eq!(parsed, parse_by_time_crate(text), "{text}");
            if let Some(t) = parsed {
                assert_eq!(t.to_string(), format_by_time_crate(t), "{text}");
            }
        }
    }

    #[test]
    fn manual_clock_moves_by_microseconds() {
        let c = ManualClock::new(Timestamp::from_micros(10));
        c.advance_micros(5);
        assert_eq!(c.now().micros(), 15);
    }
}

/// A lowercase canonical UUID v7 made from an instant (its milliseconds) and 10 random bytes:
/// ticket ids and the request ids of edits. The writer passes the batch time, so ids never read
/// a hidden clock.
pub fn uuid_v7(at: Timestamp, random: [u8; 10]) -> String {
    let millis = u64::try_from(at.micros().div_euclid(1000)).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &random)
        .into_uuid()
        .hyphenated()
        .to_string()
}

#[cfg(test)]
mod uuid_tests {
    use super::*;

    #[test]
    fn uuid_v7_carries_the_instant() {
        let t = Timestamp::parse("2026-11-30T20:00:00.123456Z").unwrap();
        let id = uuid_v7(t, [7; 10]);
        let u = uuid::Uuid::parse_str(&id).unwrap();
        assert_eq!(u.get_version_num(), 7);
        let (secs, nanos) = u.get_timestamp().unwrap().to_unix();
        assert_eq!((secs, nanos / 1_000_000), (1_796_068_800, 123));
        assert_eq!(id, id.to_lowercase());
        assert_ne!(uuid_v7(t, [8; 10]), id);
    }
}
