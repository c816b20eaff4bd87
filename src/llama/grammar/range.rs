//! Integer bounds (`minimum`, `maximum`, ...) as GBNF digit ranges, as
//! llama.cpp's `build_min_max_int` writes them.
//!
//! Two of llama.cpp's one-sided cases are fixed here, so the same bounds can
//! give different text: a minimum with a zero after its first digit (llama.cpp
//! lets `minimum: 105` accept 100), and a negative maximum (llama.cpp lets
//! `maximum: -5` produce `-05`, which is not JSON). Bounds reach this module
//! checked: at least one is set, both within ±10^18, `min <= max`, and a lone
//! minimum (or negated maximum) under 10^15.

/// The body of a rule for the integers from `min` to `max` (`None`: unbounded).
pub(super) fn int_range(min: Option<i64>, max: Option<i64>) -> String {
    let mut out = String::new();
    write_range(&mut out, min, max);
    out
}

/// Digits after the first: 15 more at most, as in llama.cpp's `integral-part`.
const MORE_DIGITS: usize = 15;

fn write_range(out: &mut String, min: Option<i64>, max: Option<i64>) {
    match (min, max) {
        (Some(min), Some(max)) => between(out, min, max),
        (Some(min), None) if min < 0 => {
            // Down to `min`: "-" then 0 to -min, or any non-negative integer.
            out.push_str("\"-\" (");
            between(out, 0, -min);
            out.push_str(") | [0] | [1-9] ");
            more_digits(out, 0, MORE_DIGITS);
        }
        (Some(min), None) => at_least(out, &min.to_string(), MORE_DIGITS + 1, true),
        (None, Some(max)) if max >= 0 => {
            out.push_str("\"-\" [1-9] ");
            more_digits(out, 0, MORE_DIGITS);
            out.push_str(" | ");
            between(out, 0, max);
        }
        (None, Some(max)) => {
            // Up to a negative `max`: "-" then at least -max, without leading zeros.
            out.push_str("\"-\" (");
            at_least(out, &(-max).to_string(), MORE_DIGITS + 1, true);
            out.push(')');
        }
        (None, None) => out.push_str("\"-\"? ([0] | [1-9] [0-9]{0,15})"),
    }
}

/// The integers from `min` to `max`, both set.
fn between(out: &mut String, min: i64, max: i64) {
    if max < 0 {
        out.push_str("\"-\" (");
        between(out, -max, -min);
        out.push(')');
        return;
    }
    let mut min = min;
    if min < 0 {
        out.push_str("\"-\" (");
        between(out, 0, -min);
        out.push_str(") | ");
        min = 0;
    }
    let mut low = min.to_string();
    let high = max.to_string();
    for digits in low.len()..high.len() {
        uniform_range(out, &low, &"9".repeat(digits));
        low = format!("1{}", "0".repeat(digits));
        out.push_str(" | ");
    }
    uniform_range(out, &low, &high);
}

/// The digit strings of `from`'s length from `from` to `to`.
fn uniform_range(out: &mut String, from: &str, to: &str) {
    let (from, to) = (from.as_bytes(), to.as_bytes());
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    if common > 0 {
        out.push('"');
        out.push_str(&String::from_utf8_lossy(&from[..common]));
        out.push('"');
    }
    if common >= from.len() || common >= to.len() {
        return;
    }
    if common > 0 {
        out.push(' ');
    }
    let (first, last) = (from[common], to[common]);
    let rest = from.len() - common - 1;
    if rest == 0 {
        out.push_str(&format!("[{}-{}]", char::from(first), char::from(last)));
        return;
    }
    let (from_rest, to_rest) = (&from[common + 1..], &to[common + 1..]);
    let zeros = "0".repeat(rest);
    let nines = "9".repeat(rest);
    let mut to_reached = false;
    out.push('(');
    if from_rest == zeros.as_bytes() {
        digit_range(out, first, last - 1);
        out.push(' ');
        more_digits(out, rest, rest);
    } else {
        out.push_str(&format!("[{}] (", char::from(first)));
        uniform_range(out, &String::from_utf8_lossy(from_rest), &nines);
        out.push(')');
        if first < last - 1 {
            out.push_str(" | ");
            if to_rest == nines.as_bytes() {
                digit_range(out, first + 1, last);
                to_reached = true;
            } else {
                digit_range(out, first + 1, last - 1);
            }
            out.push(' ');
            more_digits(out, rest, rest);
        }
    }
    if !to_reached {
        out.push_str(" | ");
        digit_range(out, last, last);
        out.push(' ');
        uniform_range(out, &zeros, &String::from_utf8_lossy(to_rest));
    }
    out.push(')');
}

/// Digit strings at least `min` (which has no leading zero when `top`, and
/// then the strings have none either), of at most `max_len` digits: longer
/// than `min`, or as long and not smaller. Below the top, `min` is the rest
/// of a bound after its first digits, leading zeros included.
fn at_least(out: &mut String, min: &str, max_len: usize, top: bool) {
    let less = max_len.saturating_sub(1).max(1);
    let digits = min.as_bytes();
    let Some(&first) = digits.first() else {
        return;
    };
    let all_zeros = digits.iter().all(|&d| d == b'0');
    if all_zeros && top {
        out.push_str("[0] | [1-9] ");
        more_digits(out, 0, less);
    } else if all_zeros {
        more_digits(out, digits.len(), max_len);
    } else if digits.len() == 1 {
        let start = if top { b'1' } else { b'0' };
        if first > start {
            digit_range(out, start, first - 1);
            out.push(' ');
            more_digits(out, 1, less);
            out.push_str(" | ");
        }
        digit_range(out, first, b'9');
        out.push(' ');
        more_digits(out, 0, less);
    } else {
        let start = if top { b'1' } else { b'0' };
        if first > start {
            digit_range(out, start, first - 1);
            out.push(' ');
            more_digits(out, digits.len(), less);
            out.push_str(" | ");
        }
        digit_range(out, first, first);
        out.push_str(" (");
        at_least(out, &min[1..], less, false);
        out.push(')');
        if first < b'9' {
            out.push_str(" | ");
            digit_range(out, first + 1, b'9');
            out.push(' ');
            more_digits(out, digits.len() - 1, less);
        }
    }
}

fn digit_range(out: &mut String, from: u8, to: u8) {
    if from == to {
        out.push_str(&format!("[{}]", char::from(from)));
    } else {
        out.push_str(&format!("[{}-{}]", char::from(from), char::from(to)));
    }
}

/// `[0-9]` repeated `min` to `max` times.
fn more_digits(out: &mut String, min: usize, max: usize) {
    out.push_str("[0-9]");
    if min == max && min == 1 {
        return;
    }
    if min == max {
        out.push_str(&format!("{{{min}}}"));
    } else {
        out.push_str(&format!("{{{min},{max}}}"));
    }
}
