//! Time: the one home for formatting and parsing times (RFC 3339 UTC for manifests, receipts
//! and journals; RFC 2822 mail dates and `YYYY-MM-DD` dates of patch headers) and the clock
//! "now" is read from. The clock is injectable per thread ([`with_clock`]), so a test can pin
//! the time a receipt or a manifest records without touching the process's other threads.
//! No external time crate: seconds resolution and UTC are all pinforge records.

use std::cell::Cell;

/// Where "now" comes from.
pub trait Clock {
    /// Seconds since the Unix epoch.
    fn now_secs(&self) -> i64;
}

/// The system clock (the default).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now_secs(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that always says the same instant (tests pin "now" with it).
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub i64);

#[cfg(any(test, feature = "testing"))]
impl Clock for FixedClock {
    fn now_secs(&self) -> i64 {
        self.0
    }
}

thread_local! {
    static FIXED: Cell<Option<i64>> = const { Cell::new(None) };
}

#[cfg(any(test, feature = "testing"))]
/// Run `f` with this thread's clock fixed at `clock`'s instant (read once, at the start).
pub fn with_clock<R>(clock: &dyn Clock, f: impl FnOnce() -> R) -> R {
    let before = FIXED.with(|c| c.replace(Some(clock.now_secs())));
    let out = f();
    FIXED.with(|c| c.set(before));
    out
}

/// Seconds since the epoch, from this thread's clock.
pub(crate) fn now_secs() -> i64 {
    FIXED
        .with(Cell::get)
        .unwrap_or_else(|| SystemClock.now_secs())
}

/// RFC 3339 UTC time of now.
pub fn now_rfc3339() -> String {
    rfc3339(now_secs())
}

/// Format epoch seconds as RFC 3339 UTC.
pub(crate) fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// `YYYY-MM-DD` (UTC) of epoch seconds.
pub(crate) fn ymd(secs: i64) -> String {
    let (y, m, d) = civil_from_days(secs.div_euclid(86400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Today's date (UTC, `YYYY-MM-DD`): `SOURCE_DATE_EPOCH` when set to a number (a reproducible
/// run), else this thread's clock.
pub fn today() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(now_secs);
    ymd(secs)
}

/// An RFC 2822 mail date (`Mon, 30 Nov 2026 01:00:00 +0100`, what `git format-patch` writes)
/// of epoch seconds shown at `offset_minutes` east of UTC: the inverse of [`parse_rfc2822`].
pub fn rfc2822(secs: i64, offset_minutes: i32) -> String {
    let local = secs + i64::from(offset_minutes) * 60;
    let days = local.div_euclid(86400);
    let rem = local.rem_euclid(86400);
    let (y, m, d) = civil_from_days(days);
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // 1970-01-01 was a Thursday.
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    let sign = if offset_minutes < 0 { '-' } else { '+' };
    let off = offset_minutes.unsigned_abs();
    format!(
        "{}, {d} {} {y} {:02}:{:02}:{:02} {sign}{:02}{:02}",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(m - 1).clamp(0, 11) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        off / 60,
        off % 60
    )
}

/// (year, month, day) of a day count since the epoch (Howard Hinnant's civil_from_days).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Days since the epoch of a civil date (the inverse of [`civil_from_days`]).
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// `YYYY-MM-DD` (four, two and two digits; month 1–12, day 1–31) as epoch seconds at
/// midnight UTC; `None` for anything else.
pub fn parse_ymd(s: &str) -> Option<i64> {
    let parts: Vec<&str> = s.split('-').collect();
    if parts.len() != 3 || parts[0].len() != 4 || parts[1].len() != 2 || parts[2].len() != 2 {
        return None;
    }
    let y: i64 = parts[0].parse().ok()?;
    let m: u32 = parts[1].parse().ok()?;
    let d: u32 = parts[2].parse().ok()?;
    ((1..=12).contains(&m) && (1..=31).contains(&d)).then(|| days_from_civil(y, m, d) * 86400)
}

/// Parse `[Day, ]DD Mon YYYY HH:MM:SS +ZZZZ` into (epoch seconds, offset minutes).
pub fn parse_rfc2822(s: &str) -> Option<(i64, i32)> {
    let s = s.split_once(',').map(|(_, r)| r).unwrap_or(s);
    let parts: Vec<&str> = s.split_whitespace().collect();
    if parts.len() < 5 {
        return None;
    }
    let day: u32 = parts[0].parse().ok()?;
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let month = MONTHS
        .iter()
        .position(|m| parts[1].to_ascii_lowercase().starts_with(m))? as u32
        + 1;
    let year: i64 = parts[2].parse().ok()?;
    let hms: Vec<i64> = parts[3]
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if hms.len() != 3 {
        return None;
    }
    let tz = parts[4];
    let sign = if tz.starts_with('-') { -1 } else { 1 };
    let digits = tz.trim_start_matches(['+', '-']);
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hh: i32 = digits[..2].parse().ok()?;
    let mm: i32 = digits[2..].parse().ok()?;
    let off_min = sign * (hh * 60 + mm);
    let local = days_from_civil(year, month, day) * 86400 + hms[0] * 3600 + hms[1] * 60 + hms[2];
    Some((local - i64::from(off_min) * 60, off_min))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_996_800), "2026-11-30T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn rfc2822_dates_parse_to_utc_seconds() {
        assert_eq!(
            parse_rfc2822("Thu, 1 Jan 1970 00:00:00 +0000"),
            Some((0, 0))
        );
        assert_eq!(
            parse_rfc2822("Mon, 30 Nov 2026 01:00:00 +0100"),
            Some((1_795_996_800, 60))
        );
        assert_eq!(parse_rfc2822("yesterday"), None);
        assert_eq!(parse_rfc2822("1 Jan 1970 00:00:00 +0x00"), None);
    }

    #[test]
    fn ymd_dates_parse_and_reject_what_is_not_one() {
        assert_eq!(parse_ymd("2026-11-30"), Some(1_795_996_800));
        for bad in [
            "2026-13-01",
            "2026-1-01",
            "26-11-30",
            "2026-11-30x",
            "",
            "2026-00-10",
        ] {
            assert_eq!(parse_ymd(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_fixed_clock_pins_now_on_this_thread_only() {
        let pinned = with_clock(&FixedClock(1_795_996_800), || {
            let other = std::thread::spawn(now_rfc3339).join().expect("thread");
            (now_rfc3339(), other)
        });
        assert_eq!(pinned.0, "2026-11-30T00:00:00Z");
        assert_ne!(pinned.1, pinned.0, "another thread keeps the system clock");
        assert!(now_secs() > 1_795_996_800 - 86400 * 365 * 10);
    }

    #[test]
    fn ymd_and_mail_dates_format_known_instants() {
        assert_eq!(ymd(0), "1970-01-01");
        assert_eq!(ymd(1_795_996_800), "2026-11-30");
        assert_eq!(ymd(-1), "1969-12-31");
        assert_eq!(
            rfc2822(1_795_996_800, 60),
            "Mon, 30 Nov 2026 01:00:00 +0100"
        );
        assert_eq!(rfc2822(0, -90), "Wed, 31 Dec 1969 22:30:00 -0130");
    }

    proptest::proptest! {
        #[test]
        fn mail_dates_round_trip(secs in -4_000_000_000i64..8_000_000_000, off in -720i32..840) {
            proptest::prop_assert_eq!(parse_rfc2822(&rfc2822(secs, off)), Some((secs, off)));
        }

        #[test]
        fn civil_days_round_trip(days in -1_000_000i64..1_000_000) {
            let (y, m, d) = civil_from_days(days);
            proptest::prop_assert_eq!(days_from_civil(y, m as u32, d as u32), days);
        }
    }
}
