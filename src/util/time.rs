//! UTC calendar dates both ways (Unix seconds to a date, a date to days) and a
//! strftime subset, computed by hand (no chrono).
//!
//! Times are always UTC: reading the local zone would mean parsing tzdata,
//! which shepherd does not do. The `get_time` tool, session ids and the audit
//! log format through [`strftime`]; the HTTP client reads `Retry-After`
//! dates through [`days_from_civil`].

/// A UTC calendar date and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

/// Converts Unix seconds to a UTC date (Howard Hinnant's `civil_from_days`).
pub fn civil(unix: i64) -> Civil {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400) as u32;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    Civil {
        year,
        month,
        day,
        hour: secs / 3600,
        minute: secs / 60 % 60,
        second: secs % 60,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`, the inverse of [`civil`]); `None` before the epoch.
pub fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    let y = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day.checked_sub(1)?;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn day_of_year(c: &Civil) -> u32 {
    const BEFORE: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    BEFORE[(c.month - 1) as usize] + c.day + u32::from(c.month > 2 && is_leap(c.year))
}

const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Formats `unix` with a strftime subset; unknown fields are kept as written.
pub fn strftime(format: &str, unix: i64) -> String {
    let c = civil(unix);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        match chars.next() {
            Some(field) => out.push_str(&field_text(field, &c, unix)),
            None => out.push('%'),
        }
    }
    out
}

fn field_text(field: char, c: &Civil, unix: i64) -> String {
    match field {
        'Y' => format!("{:04}", c.year),
        'm' => format!("{:02}", c.month),
        'd' => format!("{:02}", c.day),
        'H' => format!("{:02}", c.hour),
        'M' => format!("{:02}", c.minute),
        'S' => format!("{:02}", c.second),
        'j' => format!("{:03}", day_of_year(c)),
        'a' => WEEKDAYS[unix.div_euclid(86_400).rem_euclid(7) as usize].to_string(),
        'b' => MONTHS[(c.month - 1) as usize][..3].to_string(),
        'B' => MONTHS[(c.month - 1) as usize].to_string(),
        's' => unix.to_string(),
        'z' => "+0000".to_string(),
        'Z' => "UTC".to_string(),
        '%' => "%".to_string(),
        other => format!("%{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(unix: i64, expected: &str) {
        assert_eq!(
            strftime("%Y-%m-%dT%H:%M:%S %a %b %j", unix),
            expected,
            "{unix}"
        );
    }

    #[test]
    fn days_from_civil_inverts_civil() {
        for unix in [0, 86_399, 951_782_400, 1_709_164_800, 4_102_444_800] {
            let c = civil(unix);
            let days = days_from_civil(c.year as u64, u64::from(c.month), u64::from(c.day));
            assert_eq!(days, Some(unix as u64 / 86_400), "{c:?}");
        }
        assert_eq!(days_from_civil(1969, 12, 31), None);
    }

    #[test]
    fn known_dates() {
        check(0, "1970-01-01T00:00:00 Thu Jan 001");
        check(951_782_400, "2000-02-29T00:00:00 Tue Feb 060");
        check(1_709_251_199, "2024-02-29T23:59:59 Thu Feb 060");
        check(1_735_689_600, "2025-01-01T00:00:00 Wed Jan 001");
        check(4_102_444_800, "2100-01-01T00:00:00 Fri Jan 001");
        check(-1, "1969-12-31T23:59:59 Wed Dec 365");
    }

    #[test]
    fn other_fields() {
        assert_eq!(strftime("%s %z %Z %% %q %", 42), "42 +0000 UTC % %q %");
    }
}
