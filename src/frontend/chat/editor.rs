//! The line editor as a pure state machine: a [`Key`] in, an [`Action`] out,
//! with the buffer, cursor and history as inspectable state.
//!
//! Nothing here touches the terminal: `terminal.rs` turns bytes into keys,
//! and the REPL and TUI draw [`Editor::text`] and [`Editor::cursor`]. That is
//! what lets the tests drive the editor with plain key sequences. The buffer
//! is a `Vec<char>` so the cursor moves by whole characters and can never
//! split a UTF-8 sequence.

use std::path::Path;

/// Most history entries kept in memory and on disk.
const HISTORY_LIMIT: usize = 1000;

/// One decoded key press (or a whole bracketed paste).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Char(char),
    /// A control key, by its lower-case letter: `Ctrl('a')` is Ctrl-A.
    Ctrl(char),
    Enter,
    Backspace,
    Delete,
    Left,
    Right,
    Up,
    Down,
    Home,
    End,
    PageUp,
    PageDown,
    Esc,
    /// Text pasted between bracketed-paste markers, newlines kept.
    Paste(String),
}

/// What the front-end should do after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Only the buffer (or nothing) changed: redraw.
    Edited,
    /// Enter: the text to send (already recorded in history when not blank).
    Submit(String),
    /// A single Esc: cancel the running generation, if any.
    Escape,
    /// Ctrl-C.
    Interrupt,
    /// Ctrl-D on an empty line.
    Eof,
    /// PgUp (`-1`) or PgDn (`+1`), for a scrollback pane.
    Scroll(i32),
}

/// Recalled prompts, oldest first, with the Up/Down browsing position.
#[derive(Debug, Default)]
struct History {
    entries: Vec<String>,
    /// Index into `entries` while browsing; `None` while editing a fresh line.
    pos: Option<usize>,
    /// The line being typed before browsing began, restored by Down past the end.
    draft: String,
}

/// The editable line with its history.
#[derive(Debug, Default)]
pub struct Editor {
    chars: Vec<char>,
    cursor: usize,
    history: History,
    /// Words Tab completes a line's first word from (the slash commands).
    completions: &'static [&'static str],
    /// The previous key was a lone Esc: a second one clears the line.
    after_escape: bool,
}

impl Editor {
    pub fn new() -> Editor {
        Editor::default()
    }

    /// An editor whose Up key recalls `entries` (oldest first).
    pub fn with_history(entries: Vec<String>) -> Editor {
        let mut editor = Editor::new();
        editor.history.entries = entries;
        editor
    }

    /// Tab completes the line's first word from `words` (e.g. `/im` to `/image `).
    pub fn with_completions(mut self, words: &'static [&'static str]) -> Editor {
        self.completions = words;
        self
    }

    /// The buffer as text.
    pub fn text(&self) -> String {
        self.chars.iter().collect()
    }

    /// The cursor position, in characters from the start of the buffer.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// The buffer's characters, for drawing.
    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    pub fn history(&self) -> &[String] {
        &self.history.entries
    }

    /// Applies one key.
    pub fn handle(&mut self, key: Key) -> Action {
        let after_escape = std::mem::replace(&mut self.after_escape, false);
        match key {
            Key::Esc if after_escape => {
                self.set_text("");
                Action::Edited
            }
            Key::Esc => {
                self.after_escape = true;
                Action::Escape
            }
            Key::Enter => Action::Submit(self.submit()),
            Key::Ctrl('c') => Action::Interrupt,
            Key::Ctrl('d') if self.chars.is_empty() => Action::Eof,
            Key::PageUp => Action::Scroll(-1),
            Key::PageDown => Action::Scroll(1),
            Key::Up => self.recall_older(),
            Key::Down => self.recall_newer(),
            Key::Char('\t') if self.complete() => Action::Edited,
            other => {
                self.edit(other);
                Action::Edited
            }
        }
    }

    fn edit(&mut self, key: Key) {
        match key {
            Key::Char(c) => self.insert(&[c]),
            Key::Paste(text) => self.insert(&paste_chars(&text)),
            Key::Backspace | Key::Ctrl('h') => self.delete_before(1),
            Key::Delete | Key::Ctrl('d') => self.delete_after(),
            Key::Left | Key::Ctrl('b') => self.cursor = self.cursor.saturating_sub(1),
            Key::Right | Key::Ctrl('f') => self.cursor = (self.cursor + 1).min(self.chars.len()),
            Key::Home | Key::Ctrl('a') => self.cursor = 0,
            Key::End | Key::Ctrl('e') => self.cursor = self.chars.len(),
            Key::Ctrl('u') => self.delete_before(self.cursor),
            Key::Ctrl('k') => self.chars.truncate(self.cursor),
            Key::Ctrl('w') => self.delete_before(self.word_start_distance()),
            _ => {}
        }
    }

    /// Completes the first word when the cursor ends it and it starts like
    /// some of the completion words: to the one that fits (and a space), or
    /// as far as all that fit agree. Returns false when Tab should be a tab.
    fn complete(&mut self) -> bool {
        let typed: String = self.chars.iter().collect();
        if self.cursor != self.chars.len()
            || typed.is_empty()
            || typed.contains(char::is_whitespace)
        {
            return false;
        }
        let fits: Vec<&str> = self
            .completions
            .iter()
            .copied()
            .filter(|word| word.starts_with(&typed))
            .collect();
        let Some(first) = fits.first() else {
            return false;
        };
        let common = fits.iter().fold(first.len(), |len, word| {
            first
                .chars()
                .zip(word.chars())
                .take_while(|(a, b)| a == b)
                .count()
                .min(len)
        });
        let mut completed: String = first.chars().take(common).collect();
        if fits.len() == 1 {
            completed.push(' ');
        }
        self.set_text(&completed);
        true
    }

    fn insert(&mut self, new: &[char]) {
        self.chars
            .splice(self.cursor..self.cursor, new.iter().copied());
        self.cursor += new.len();
    }

    fn delete_before(&mut self, count: usize) {
        let start = self.cursor.saturating_sub(count);
        self.chars.drain(start..self.cursor);
        self.cursor = start;
    }

    fn delete_after(&mut self) {
        if self.cursor < self.chars.len() {
            self.chars.remove(self.cursor);
        }
    }

    /// How far back Ctrl-W deletes: trailing spaces, then one word.
    fn word_start_distance(&self) -> usize {
        let before = &self.chars[..self.cursor];
        let spaces = before
            .iter()
            .rev()
            .take_while(|c| c.is_whitespace())
            .count();
        let word = before[..before.len() - spaces]
            .iter()
            .rev()
            .take_while(|c| !c.is_whitespace())
            .count();
        spaces + word
    }

    /// Empties the line (Ctrl-C while idle), keeping history.
    pub fn clear(&mut self) {
        self.set_text("");
    }

    fn set_text(&mut self, text: &str) {
        self.chars = text.chars().collect();
        self.cursor = self.chars.len();
    }

    /// Takes the buffer, recording it in history when it is not blank.
    fn submit(&mut self) -> String {
        let text = self.text();
        self.set_text("");
        self.history.pos = None;
        if !text.trim().is_empty() && self.history.entries.last() != Some(&text) {
            self.history.entries.push(text.clone());
            let excess = self.history.entries.len().saturating_sub(HISTORY_LIMIT);
            self.history.entries.drain(..excess);
        }
        text
    }

    fn recall_older(&mut self) -> Action {
        let pos = match self.history.pos {
            None if self.history.entries.is_empty() => return Action::Edited,
            None => {
                self.history.draft = self.text();
                self.history.entries.len() - 1
            }
            Some(pos) => pos.saturating_sub(1),
        };
        self.history.pos = Some(pos);
        let entry = self.history.entries[pos].clone();
        self.set_text(&entry);
        Action::Edited
    }

    fn recall_newer(&mut self) -> Action {
        let Some(pos) = self.history.pos else {
            return Action::Edited;
        };
        if pos + 1 < self.history.entries.len() {
            self.history.pos = Some(pos + 1);
            let entry = self.history.entries[pos + 1].clone();
            self.set_text(&entry);
        } else {
            self.history.pos = None;
            let draft = std::mem::take(&mut self.history.draft);
            self.set_text(&draft);
        }
        Action::Edited
    }
}

/// Pasted text with `\r\n` and lone `\r` turned into `\n`, other controls (but tab) dropped.
fn paste_chars(text: &str) -> Vec<char> {
    text.replace("\r\n", "\n")
        .replace('\r', "\n")
        .chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect()
}

/// Reads a history file: one entry a line, `\n` and `\\` escaped.
pub fn load_history(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut entries: Vec<String> = text.lines().map(unescape_entry).collect();
    let excess = entries.len().saturating_sub(HISTORY_LIMIT);
    entries.drain(..excess);
    entries
}

/// The history file's text for `entries`.
pub fn history_text(entries: &[String]) -> String {
    entries
        .iter()
        .map(|e| escape_entry(e) + "\n")
        .collect::<String>()
}

fn escape_entry(entry: &str) -> String {
    entry.replace('\\', "\\\\").replace('\n', "\\n")
}

fn unescape_entry(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// The part of a line that fits in `width` columns with the cursor visible:
/// the characters shown and the cursor's column within them. Newlines are
/// shown as `⏎` so a pasted block stays on the one prompt line.
pub fn visible_window(chars: &[char], cursor: usize, width: usize) -> (String, usize) {
    let width = width.max(2);
    let start = (cursor + 1).saturating_sub(width);
    let shown: String = chars
        .iter()
        .skip(start)
        .take(width)
        .map(|c| if *c == '\n' { '⏎' } else { *c })
        .collect();
    (shown, cursor - start)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Types `keys` into `editor`; returns the actions and the final buffer and cursor.
    fn check(editor: &mut Editor, keys: &[Key], text: &str, cursor: usize) -> Vec<Action> {
        let actions: Vec<Action> = keys.iter().map(|k| editor.handle(k.clone())).collect();
        assert_eq!(editor.text(), text, "after {keys:?}");
        assert_eq!(editor.cursor(), cursor, "cursor after {keys:?}");
        actions
    }

    fn typed(text: &str) -> Vec<Key> {
        text.chars().map(Key::Char).collect()
    }

    fn with(mut keys: Vec<Key>, more: &[Key]) -> Vec<Key> {
        keys.extend_from_slice(more);
        keys
    }

    #[test]
    fn tab_completes_slash_commands() {
        let words: &'static [&'static str] = &["/image", "/help", "/provider", "/profile"];
        let mut e = Editor::new().with_completions(words);
        check(
            &mut e,
            &with(typed("/im"), &[Key::Char('\t')]),
            "/image ",
            7,
        );
        e.clear();
        // Several fit: as far as they agree, then nothing more.
        check(&mut e, &with(typed("/p"), &[Key::Char('\t')]), "/pro", 4);
        check(&mut e, &[Key::Char('\t')], "/pro", 4);
        check(
            &mut e,
            &with(typed("v"), &[Key::Char('\t')]),
            "/provider ",
            10,
        );
        e.clear();
        // No fit, a second word, or the cursor inside: Tab is a tab.
        check(&mut e, &with(typed("/zz"), &[Key::Char('\t')]), "/zz\t", 4);
        e.clear();
        check(
            &mut e,
            &with(typed("/image a"), &[Key::Char('\t')]),
            "/image a\t",
            9,
        );
        e.clear();
        check(
            &mut e,
            &with(typed("/he"), &[Key::Left, Key::Char('\t')]),
            "/h\te",
            3,
        );
        let mut plain = Editor::new();
        check(
            &mut plain,
            &with(typed("/he"), &[Key::Char('\t')]),
            "/he\t",
            4,
        );
    }

    #[test]
    fn typing_and_moving_by_characters_not_bytes() {
        let mut e = Editor::new();
        check(&mut e, &typed("héllo ✓"), "héllo ✓", 7);
        check(
            &mut e,
            &[Key::Left, Key::Left, Key::Char('界')],
            "héllo界 ✓",
            6,
        );
        check(&mut e, &[Key::Home, Key::Delete], "éllo界 ✓", 0);
        check(&mut e, &[Key::End, Key::Backspace], "éllo界 ", 6);
        check(
            &mut e,
            &[Key::Ctrl('a'), Key::Right, Key::Char('x')],
            "éxllo界 ",
            2,
        );
        check(&mut e, &[Key::Ctrl('e'), Key::Char('!')], "éxllo界 !", 8);
    }

    #[test]
    fn kill_keys() {
        let mut e = Editor::new();
        let keys = with(typed("one two  three"), &[Key::Ctrl('w')]);
        check(&mut e, &keys, "one two  ", 9);
        check(&mut e, &[Key::Ctrl('w')], "one ", 4);
        check(&mut e, &[Key::Left, Key::Left, Key::Ctrl('k')], "on", 2);
        check(&mut e, &[Key::Left, Key::Ctrl('u')], "n", 0);
        // Ctrl-D deletes under the cursor on a non-empty line, exits on an empty one.
        let actions = check(&mut e, &[Key::Ctrl('d'), Key::Ctrl('d')], "", 0);
        assert_eq!(actions, [Action::Edited, Action::Eof]);
        // Edge keys on an empty line do nothing, and never panic.
        let keys = [
            Key::Left,
            Key::Backspace,
            Key::Delete,
            Key::Ctrl('w'),
            Key::Right,
        ];
        check(&mut e, &keys, "", 0);
    }

    #[test]
    fn enter_submits_and_records_history() {
        let mut e = Editor::new();
        let actions = check(&mut e, &with(typed("first"), &[Key::Enter]), "", 0);
        assert_eq!(actions.last(), Some(&Action::Submit("first".into())));
        check(&mut e, &with(typed("second"), &[Key::Enter]), "", 0);
        check(&mut e, &[Key::Enter], "", 0);
        check(&mut e, &with(typed("second"), &[Key::Enter]), "", 0);
        assert_eq!(e.history(), ["first", "second"]);
    }

    #[test]
    fn up_and_down_browse_history_and_restore_the_draft() {
        let mut e = Editor::with_history(vec!["a".into(), "b".into()]);
        check(&mut e, &typed("dra"), "dra", 3);
        check(&mut e, &[Key::Up], "b", 1);
        check(&mut e, &[Key::Up, Key::Up], "a", 1);
        check(&mut e, &[Key::Down], "b", 1);
        check(&mut e, &[Key::Down], "dra", 3);
        check(&mut e, &[Key::Down], "dra", 3);
        // A recalled entry can be edited and sent; the original entry stays.
        let actions = check(&mut e, &[Key::Up, Key::Char('!'), Key::Enter], "", 0);
        assert_eq!(actions.last(), Some(&Action::Submit("b!".into())));
        assert_eq!(e.history(), ["a", "b", "b!"]);
        let mut empty = Editor::new();
        check(&mut empty, &[Key::Up, Key::Down], "", 0);
    }

    #[test]
    fn paste_keeps_lines_as_one_prompt() {
        let mut e = Editor::new();
        let keys = [
            Key::Char('>'),
            Key::Paste("line one\r\nline two\rline ✓\x07".into()),
            Key::Enter,
        ];
        let actions = check(&mut e, &keys, "", 0);
        assert_eq!(
            actions.last(),
            Some(&Action::Submit(">line one\nline two\nline ✓".into()))
        );
    }

    #[test]
    fn single_escape_cancels_double_escape_clears() {
        let mut e = Editor::new();
        let actions = check(&mut e, &with(typed("abc"), &[Key::Esc]), "abc", 3);
        assert_eq!(actions.last(), Some(&Action::Escape));
        check(&mut e, &[Key::Esc], "", 0);
        // Esc, a key, Esc: not a double Esc.
        let keys = with(typed("x"), &[Key::Esc, Key::Char('y'), Key::Esc]);
        check(&mut e, &keys, "xy", 2);
    }

    #[test]
    fn control_and_scroll_actions() {
        let mut e = Editor::new();
        let keys = [Key::Ctrl('c'), Key::PageUp, Key::PageDown];
        let actions = check(&mut e, &keys, "", 0);
        assert_eq!(
            actions,
            [Action::Interrupt, Action::Scroll(-1), Action::Scroll(1)]
        );
    }

    #[test]
    fn history_file_round_trips_multi_line_entries() {
        let entries = vec!["plain".to_string(), "two\nlines \\ ok".to_string()];
        let text = history_text(&entries);
        assert_eq!(text.lines().count(), 2);
        let dir = crate::util::fs::test_support::temp_dir("history");
        let path = dir.join("history");
        std::fs::write(&path, text).unwrap();
        assert_eq!(load_history(&path), entries);
        assert!(load_history(&dir.join("missing")).is_empty());
        assert_eq!(unescape_entry("trailing\\"), "trailing\\");
    }

    #[test]
    fn window_keeps_the_cursor_visible() {
        let chars: Vec<char> = "abcdefgh".chars().collect();
        assert_eq!(visible_window(&chars, 8, 20), ("abcdefgh".into(), 8));
        assert_eq!(visible_window(&chars, 8, 4), ("fgh".into(), 3));
        assert_eq!(visible_window(&chars, 2, 4), ("abcd".into(), 2));
        let pasted: Vec<char> = "a\nb".chars().collect();
        assert_eq!(visible_window(&pasted, 3, 10), ("a⏎b".into(), 3));
    }
}
