//! The flag table's vocabulary: what one entry of [`super::FLAGS`] is
//! ([`Flag`]: spellings, value, help, [`Section`], completion values and
//! [`Apply`], how it updates [`LowArgs`]) and the `const` builder
//! ([`flag`], then `.aliases`, `.values`, `.switch`/`.text`/`.value`/`.path`)
//! the table is written with.

use std::path::PathBuf;

use super::{subcommands, LowArgs, UsageError};

/// Which part of `--help` a flag is listed under, in display order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Provider,
    Generation,
    Prompting,
    Tools,
    Output,
    Modes,
    Local,
    General,
}

impl Section {
    pub const ALL: [Section; 8] = [
        Section::Provider,
        Section::Generation,
        Section::Prompting,
        Section::Tools,
        Section::Output,
        Section::Modes,
        Section::Local,
        Section::General,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Section::Provider => "Provider and model",
            Section::Generation => "Generation and sampling",
            Section::Prompting => "Prompting",
            Section::Tools => "Tools",
            Section::Output => "Output",
            Section::Modes => "Front-end modes and servers",
            Section::Local => "Local models (llama.cpp)",
            Section::General => "General",
        }
    }
}

/// Whether a flag takes a value, and how the value is named in `--help`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    Nothing,
    Value(&'static str),
    /// Only as `--flag=VALUE` or `-fVALUE`; a following separate word is not taken.
    OptionalValue(&'static str),
}

/// How a flag updates [`LowArgs`]: the one place its meaning is written.
#[derive(Debug, Clone, Copy)]
pub enum Apply {
    /// A flag given alone.
    Switch(fn(&mut LowArgs)),
    /// A value taken as typed.
    Text(fn(&mut LowArgs, String)),
    /// A value checked (and converted); the error names the flag.
    Value(fn(&mut LowArgs, &Flag, &str) -> Result<(), UsageError>),
    /// A file or directory, any bytes.
    Path(fn(&mut LowArgs, PathBuf)),
    /// Alone (the first) or with `=VALUE` (the second).
    Optional(
        fn(&mut LowArgs),
        fn(&mut LowArgs, &Flag, &str) -> Result<(), UsageError>,
    ),
}

/// One flag, defined once: its spellings, its value, its help, what its value
/// completes from, and how it updates the arguments. The parser, `--help`, the
/// completion scripts and the man page all read [`FLAGS`].
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    pub long: &'static str,
    /// Other accepted long spellings (llama-server's among them), shown beside
    /// the flag in `--help`, not on lines of their own.
    pub aliases: &'static [&'static str],
    pub short: Option<char>,
    pub takes: Takes,
    pub help: &'static str,
    pub section: Section,
    /// What the value is completed from.
    pub values: subcommands::Values,
    pub apply: Apply,
}

/// A flag's description, before its [`Apply`] makes it a [`Flag`].
pub struct FlagDef {
    long: &'static str,
    aliases: &'static [&'static str],
    short: Option<char>,
    takes: Takes,
    help: &'static str,
    section: Section,
    values: subcommands::Values,
}

pub(super) const fn flag(
    long: &'static str,
    short: Option<char>,
    takes: Takes,
    section: Section,
    help: &'static str,
) -> FlagDef {
    FlagDef {
        long,
        aliases: &[],
        short,
        takes,
        help,
        section,
        values: subcommands::Values::Any,
    }
}

impl FlagDef {
    pub(super) const fn aliases(self, aliases: &'static [&'static str]) -> FlagDef {
        FlagDef { aliases, ..self }
    }

    pub(super) const fn values(self, values: subcommands::Values) -> FlagDef {
        FlagDef { values, ..self }
    }

    const fn with(self, apply: Apply) -> Flag {
        Flag {
            long: self.long,
            aliases: self.aliases,
            short: self.short,
            takes: self.takes,
            help: self.help,
            section: self.section,
            values: self.values,
            apply,
        }
    }

    pub(super) const fn switch(self, set: fn(&mut LowArgs)) -> Flag {
        self.with(Apply::Switch(set))
    }

    pub(super) const fn text(self, set: fn(&mut LowArgs, String)) -> Flag {
        self.with(Apply::Text(set))
    }

    pub(super) const fn value(
        self,
        set: fn(&mut LowArgs, &Flag, &str) -> Result<(), UsageError>,
    ) -> Flag {
        self.with(Apply::Value(set))
    }

    /// A file or directory: completed from the file system.
    pub(super) const fn path(self, set: fn(&mut LowArgs, PathBuf)) -> Flag {
        FlagDef {
            values: subcommands::Values::File,
            ..self
        }
        .with(Apply::Path(set))
    }
}

impl Flag {
    /// A switch that also takes `=VALUE`.
    pub(super) const fn value(
        self,
        set: fn(&mut LowArgs, &Flag, &str) -> Result<(), UsageError>,
    ) -> Flag {
        let Apply::Switch(alone) = self.apply else {
            panic!("only a switch takes an optional value");
        };
        Flag {
            apply: Apply::Optional(alone, set),
            ..self
        }
    }
}
