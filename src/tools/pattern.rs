//! Hand-written fnmatch-style globs: `*`, `?`, `[abc]`, `[a-z]`, `[!x]`, `\` escapes,
//! and `**` for whole path components.
//!
//! Used by the registry's `--enable-tools`/`--disable-tools` globs, by the `glob`
//! tool and by `grep`'s file filter. A `*` never crosses a `/` inside
//! [`path_match`]; only a `**` component does.

/// Whether `name` matches the glob `pattern` as a whole.
pub fn fnmatch(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    match_from(&pattern, &name)
}

/// The classic two-pointer match: on a mismatch, let the last `*` swallow one more char.
fn match_from(pattern: &[char], name: &[char]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && pattern[p] == '*' {
            star = Some((p + 1, n));
            p += 1;
        } else if let Some(width) = match_one(&pattern[p..], name[n]) {
            p += width;
            n += 1;
        } else if let Some((after_star, start)) = star {
            p = after_star;
            n = start + 1;
            star = Some((after_star, start + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// Matches one pattern element against `c`, giving the element's width in the pattern.
fn match_one(pattern: &[char], c: char) -> Option<usize> {
    match pattern.first()? {
        '?' => Some(1),
        '[' => match class(pattern, c) {
            Some((true, width)) => Some(width),
            Some((false, _)) => None,
            // An unclosed `[` is a literal.
            None => (c == '[').then_some(1),
        },
        '\\' if pattern.len() > 1 => (pattern[1] == c).then_some(2),
        &literal => (literal == c).then_some(1),
    }
}

/// Parses `[...]` at the start of `pattern`: (whether `c` is in it, its width).
fn class(pattern: &[char], c: char) -> Option<(bool, usize)> {
    let mut i = 1;
    let negated = matches!(pattern.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut found = false;
    let mut first = true;
    while let Some(&ch) = pattern.get(i) {
        if ch == ']' && !first {
            return Some((found != negated, i + 1));
        }
        first = false;
        if pattern.get(i + 1) == Some(&'-') && pattern.get(i + 2).is_some_and(|&e| e != ']') {
            found |= (ch..=pattern[i + 2]).contains(&c);
            i += 3;
        } else {
            found |= ch == c;
            i += 1;
        }
    }
    None
}

/// Matches a `/`-separated relative path; a `**` component matches zero or more components.
pub fn path_match(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    let path: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    components_match(&pattern, &path)
}

fn components_match(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|skip| components_match(rest, &path[skip..])),
        Some((first, rest)) => match path.split_first() {
            Some((name, tail)) => fnmatch(first, name) && components_match(rest, tail),
            None => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pattern: &str, name: &str, expected: bool) {
        assert_eq!(fnmatch(pattern, name), expected, "{pattern} vs {name}");
    }

    #[test]
    fn fnmatch_cases() {
        check("*", "", true);
        check("*", "anything", true);
        check("web*", "webfetch", true);
        check("web*", "xwebfetch", false);
        check("*fetch", "webfetch", true);
        check("a*b*c", "aXXbYYc", true);
        check("a*b*c", "aXXbYY", false);
        check("?ead", "read", true);
        check("?ead", "ead", false);
        check("[rw]*", "write", true);
        check("[rw]*", "edit", false);
        check("[!rw]*", "edit", true);
        check("[a-c]x", "bx", true);
        check("[a-c]x", "dx", false);
        check("[]]", "]", true);
        check("[abc", "[abc", true);
        check("\\*", "*", true);
        check("\\*", "a", false);
        check("*.rs", "main.rs", true);
        check("*.rs", "main.rs.bak", false);
    }

    fn check_path(pattern: &str, path: &str, expected: bool) {
        assert_eq!(path_match(pattern, path), expected, "{pattern} vs {path}");
    }

    #[test]
    fn path_globs() {
        check_path("*.rs", "main.rs", true);
        check_path("*.rs", "src/main.rs", false);
        check_path("**/*.rs", "main.rs", true);
        check_path("**/*.rs", "src/tools/fs.rs", true);
        check_path("src/**", "src/a/b", true);
        check_path("src/**/fs.rs", "src/fs.rs", true);
        check_path("src/**/fs.rs", "src/tools/fs.rs", true);
        check_path("src/**/fs.rs", "lib/tools/fs.rs", false);
        check_path("./src/*.rs", "src/a.rs", true);
    }
}
