//! Ids, names and timestamps.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh random id: a UUID v4, lower-case and hyphenated.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// The pattern agent ids, capability ids, tool names and question ids must match, as text.
pub const NAME_PATTERN: &str = "^[A-Za-z0-9_-]{1,64}$";

/// Whether `name` matches [`NAME_PATTERN`]: 1 to 64 ASCII letters, digits, `_` or `-`.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A UTC instant written as fixed-width RFC 3339 with microseconds,
/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` (27 characters), so that string order is time order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(String);

/// The last microsecond handed out by [`Timestamp::now`], process-wide.
static LAST_MICROS: AtomicI64 = AtomicI64::new(i64::MIN);

impl Timestamp {
    /// The current time from a process clock that never repeats and never goes back: a call in
    /// the same microsecond as the previous one (or after the wall clock stepped back) gets the
    /// previous value plus one microsecond.
    pub fn now() -> Timestamp {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        let mut last = LAST_MICROS.load(Ordering::Relaxed);
        loop {
            let next = if wall > last {
                wall
            } else {
                last.saturating_add(1)
            };
            match LAST_MICROS.compare_exchange_weak(
                last,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Timestamp::from_unix_micros(next),
                Err(seen) => last = seen,
            }
        }
    }

    /// The timestamp of a number of microseconds since the Unix epoch (clamped to years 0..=9999).
    pub fn from_unix_micros(micros: i64) -> Timestamp {
        let nanos = i128::from(micros) * 1000;
        let at = time::OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap_or(if micros < 0 {
            time::OffsetDateTime::UNIX_EPOCH
        } else {
            time::macros::datetime!(9999-12-31 23:59:59.999999 UTC)
        });
        let Ok(year) = u32::try_from(at.year()) else {
            // Before year 0: the general formatter writes the sign.
            return Timestamp(format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                at.year(),
                u8::from(at.month()),
                at.day(),
                at.hour(),
                at.minute(),
                at.second(),
                at.microsecond()
            ));
        };
        // Digits written by position: every event of a run is stamped, and a streamed answer
        // has thousands, so this skips the general formatter's work.
        let mut text = *b"0000-00-00T00:00:00.000000Z";
        for (at_byte, width, value) in [
            (0, 4, year),
            (5, 2, u32::from(u8::from(at.month()))),
            (8, 2, u32::from(at.day())),
            (11, 2, u32::from(at.hour())),
            (14, 2, u32::from(at.minute())),
            (17, 2, u32::from(at.second())),
            (20, 6, at.microsecond()),
        ] {
            let mut rest = value;
            for slot in text[at_byte..at_byte + width].iter_mut().rev() {
                // `rest % 10` is a single digit.
                *slot = b'0' + (rest % 10) as u8;
                rest /= 10;
            }
        }
        Timestamp(String::from_utf8_lossy(&text).into_owned())
    }

    /// Reads a timestamp written in the fixed 27-character form; `None` for anything else.
    pub fn parse(text: &str) -> Option<Timestamp> {
        let format = time::format_description::well_known::Rfc3339;
        let bytes = text.as_bytes();
        let shaped = bytes.len() == 27 && bytes[19] == b'.' && bytes[26] == b'Z';
        if !shaped {
            return None;
        }
        time::OffsetDateTime::parse(text, &format).ok()?;
        Some(Timestamp(text.to_owned()))
    }

    /// Microseconds since the Unix epoch, when the text is exactly what
    /// [`Timestamp::from_unix_micros`] writes for them (so writing them again gives this text
    /// back); `None` otherwise. Read by position rather than with a general parser: a run asks
    /// it of every streamed fragment it keeps.
    pub fn canonical_micros(&self) -> Option<i64> {
        let b = self.0.as_bytes();
        let shaped = b.len() == 27
            && [
                (4, b'-'),
                (7, b'-'),
                (10, b'T'),
                (13, b':'),
                (16, b':'),
                (19, b'.'),
                (26, b'Z'),
            ]
            .iter()
            .all(|(at, byte)| b[*at] == *byte);
        if !shaped {
            return None;
        }
        let number = |from: usize, to: usize| -> Option<u32> {
            b[from..to].iter().try_fold(0u32, |n, digit| {
                digit
                    .is_ascii_digit()
                    .then(|| n * 10 + u32::from(digit - b'0'))
            })
        };
        let small = |from: usize, to: usize| number(from, to).and_then(|n| u8::try_from(n).ok());
        let year = i32::try_from(number(0, 4)?).ok()?;
        let month = time::Month::try_from(small(5, 7)?).ok()?;
        let date = time::Date::from_calendar_date(year, month, small(8, 10)?).ok()?;
        let clock = time::Time::from_hms_micro(
            small(11, 13)?,
            small(14, 16)?,
            small(17, 19)?,
            number(20, 26)?,
        )
        .ok()?;
        let nanos = time::PrimitiveDateTime::new(date, clock)
            .assume_utc()
            .unix_timestamp_nanos();
        i64::try_from(nanos / 1000).ok()
    }

    /// Microseconds since the Unix epoch.
    pub fn unix_micros(&self) -> i64 {
        let format = time::format_description::well_known::Rfc3339;
        time::OffsetDateTime::parse(&self.0, &format)
            .map(|at| i64::try_from(at.unix_timestamp_nanos() / 1000).unwrap_or(0))
            .unwrap_or(0)
    }

    /// The text form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Timestamp {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_micros_reads_exactly_what_from_unix_micros_writes() {
        for micros in [
            0,
            1,
            -1,
            1_780_000_000_123_456,
            Timestamp::now().unix_micros(),
            253_402_300_799_999_999,
            -62_167_219_200_000_000,
        ] {
            let written = Timestamp::from_unix_micros(micros);
            assert_eq!(written.canonical_micros(), Some(micros), "{written}");
        }
        for text in [
            "2026-12-02T05:00:00Z",
            "2026-12-02T05:00:00.000000+00:00",
            "2026-12-02 05:00:00.000000Z",
            "2026-13-02T05:00:00.000000Z",
            "2026-02-30T05:00:00.000000Z",
            "2026-12-02T24:00:00.000000Z",
            "2026-12-02T05:00:60.000000Z",
            "2026-12-02T05:00:00.00000aZ",
            "+026-12-02T05:00:00.000000Z",
        ] {
            assert_eq!(
                Timestamp(text.to_owned()).canonical_micros(),
                None,
                "{text}"
            );
        }
    }

    #[test]
    fn digits_written_by_position_match_the_general_formatter() {
        let form = time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
        );
        // From year 0 to 9999 in steps of about 114 days and an odd number of microseconds, so
        // every field takes many values, one-digit and two-digit ones alike.
        let mut micros = -62_167_219_200_000_000_i64;
        while micros < 253_402_300_799_999_999 {
            let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(micros) * 1000)
                .expect("in range");
            let expected = at.format(&form).expect("formats");
            assert_eq!(Timestamp::from_unix_micros(micros).as_str(), expected);
            micros += 9_876_543_210_987;
        }
    }

    #[test]
    fn ids_are_lower_case_hyphenated_v4() {
        let id = new_id();
        assert_eq!(id.len(), 36);
        assert_eq!(id, id.to_lowercase());
        assert_eq!(
            uuid::Uuid::parse_str(&id).expect("uuid").get_version_num(),
            4
        );
        assert_ne!(id, new_id());
    }

    #[test]
    fn names_follow_the_pattern() {
        assert!(is_valid_name("read_file"));
        assert!(is_valid_name("a-B_9"));
        assert!(is_valid_name(&"x".repeat(64)));
        assert!(!is_valid_name(&"x".repeat(65)));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("a b"));
        assert!(!is_valid_name("a:b"));
        assert!(!is_valid_name("é"));
    }

    #[test]
    fn timestamps_are_fixed_width_and_round_trip() {
        let at = Timestamp::from_unix_micros(1_735_787_045_678_901);
        assert_eq!(at.as_str(), "2025-01-02T03:04:05.678901Z");
        assert_eq!(at.unix_micros(), 1_735_787_045_678_901);
        assert_eq!(Timestamp::parse(at.as_str()), Some(at));
        assert_eq!(Timestamp::parse("2025-01-02T03:04:05Z"), None);
        assert_eq!(Timestamp::parse("yesterday"), None);
    }

    #[test]
    fn ten_thousand_timestamps_strictly_increase() {
        let mut last = Timestamp::now();
        for _ in 0..10_000 {
            let next = Timestamp::now();
            assert_eq!(next.as_str().len(), 27);
            assert!(next.as_str().ends_with('Z'));
            assert!(next > last, "{next} should follow {last}");
            last = next;
        }
    }
}
