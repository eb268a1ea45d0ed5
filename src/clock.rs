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

    /// Parses the contract's form exactly: `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
    ///
    /// # Errors
    /// `invalid_request` for any other form, including a naive time (no `Z`), an offset, or a
    /// different number of fractional digits.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            Error::new(
                ErrorCode::InvalidRequest,
                format!(
                    "timestamp {q_s} is not RFC 3339 UTC with 'Z' and 6 fractional digits",
                    q_s = crate::codec::quoted(s)
                ),
            )
        };
        let b = s.as_bytes();
        if b.len() != 27 || b[26] != b'Z' || b[19] != b'.' {
            return Err(bad());
        }
        let fmt = time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
        );
        let pdt = time::PrimitiveDateTime::parse(s, &fmt).map_err(|_| bad())?;
        let odt = pdt.assume_utc();
        let micros = odt.unix_timestamp_nanos() / 1000;
        Ok(Timestamp::from_micros(micros as i64))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.div_euclid(MICROS_PER_SECOND);
        let frac = self.0.rem_euclid(MICROS_PER_SECOND);
        match time::OffsetDateTime::from_unix_timestamp(secs) {
            Ok(t) => write!(
                f,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                frac
            ),
            Err(_) => Err(fmt::Error),
        }
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
