//! Shell completion scripts (bash, zsh, fish) and the man page, generated from
//! the flag table ([`super::FLAGS`]) and the subcommand table
//! ([`super::subcommands::COMMANDS`]), so none of them can drift from the parser.
//!
//! The scripts carry the tables as data (one shell function per question:
//! which actions a command has, which options an action takes, what a value
//! is completed from) and share one small driver per shell. Names that live in
//! config.json (providers, profiles, MCP servers) are asked of the binary at
//! completion time with `shepherd [-c FILE] completions names KIND`, which
//! `commands::completions` answers.

use super::subcommands::{Action, ActionFlag, Command, Form, Values, COMMANDS};
use super::{Flag, Section, Takes, DESCRIPTION, FLAGS};

/// A value spec as the scripts' data functions print it: `file`, `choices:a,b`,
/// `names:KIND` or `any`.
fn spec(values: Values) -> String {
    match values {
        Values::Any => "any".into(),
        Values::File => "file".into(),
        Values::Choices(list) => format!("choices:{}", list.join(",")),
        Values::Names(kind) => format!("names:{}", kind.as_str()),
    }
}

fn visible_commands() -> impl Iterator<Item = &'static Command> {
    COMMANDS.iter().filter(|c| !c.hidden)
}

/// Every spelling of a top-level flag: `-p`, `--provider`, an alias.
fn spellings(f: &Flag) -> Vec<String> {
    let mut out: Vec<String> = f.short.map(|c| format!("-{c}")).into_iter().collect();
    out.push(format!("--{}", f.long));
    out.extend(f.aliases.iter().map(|a| format!("--{a}")));
    out
}

fn action_spellings(f: &ActionFlag) -> Vec<String> {
    let mut out: Vec<String> = f.short.map(|c| format!("-{c}")).into_iter().collect();
    out.push(format!("--{}", f.long));
    out
}

/// One `case` arm per non-empty row: `  key) echo 'value';;`.
fn case_fn(name: &str, rows: Vec<(String, String)>) -> String {
    let mut out = format!("{name}() {{\n    case \"$1\" in\n");
    for (key, value) in rows.into_iter().filter(|(_, v)| !v.is_empty()) {
        out.push_str(&format!("        {key}) echo '{value}';;\n"));
    }
    out.push_str("    esac\n}\n");
    out
}

fn each_action() -> impl Iterator<Item = (&'static Command, &'static Action)> {
    visible_commands().flat_map(|c| c.visible_actions().map(move |a| (c, a)))
}

/// The data functions both the bash and the zsh script read (plain `case`, valid in both).
fn shared_data() -> String {
    let value_flags = FLAGS.iter().filter_map(|f| match f.takes {
        Takes::Value(_) => Some((spellings(f).join("|"), spec(f.values))),
        _ => None,
    });
    let actions = visible_commands().map(|c| {
        let names: Vec<&str> = c.visible_actions().map(|a| a.name).collect();
        (c.name.to_string(), names.join(" "))
    });
    let name_first = visible_commands().map(|c| {
        let names: Vec<&str> = c
            .visible_actions()
            .filter(|a| a.form != Form::ActionFirst)
            .map(|a| a.name)
            .collect();
        (c.name.to_string(), names.join(" "))
    });
    let operand = visible_commands()
        .filter(|c| c.operand != Values::Any)
        .map(|c| (c.name.to_string(), spec(c.operand)));
    let key = |c: &Command, a: &Action| format!("{}:{}", c.name, a.name);
    let forms = each_action().map(|(c, a)| {
        let form = match a.form {
            Form::ActionFirst => "actionfirst",
            Form::Either => "either",
            Form::NameFirst => "namefirst",
        };
        (key(c, a), form.to_string())
    });
    let operands = each_action().map(|(c, a)| {
        let specs: Vec<String> = a.operands.iter().map(|v| spec(*v)).collect();
        (key(c, a), specs.join(" "))
    });
    let flags = each_action().map(|(c, a)| {
        let all: Vec<String> = a.flags.iter().flat_map(action_spellings).collect();
        (key(c, a), all.join(" "))
    });
    let flag_specs = each_action().flat_map(|(c, a)| {
        a.flags.iter().filter(|f| f.value.is_some()).map(move |f| {
            let keys: Vec<String> = action_spellings(f)
                .iter()
                .map(|s| format!("{}:{}:{s}", c.name, a.name))
                .collect();
            (keys.join("|"), spec(f.values))
        })
    });
    [
        case_fn("_shepherd_flag_spec", value_flags.collect()),
        case_fn("_shepherd_actions", actions.collect()),
        case_fn("_shepherd_name_actions", name_first.collect()),
        case_fn("_shepherd_operand", operand.collect()),
        case_fn("_shepherd_action_form", forms.collect()),
        case_fn("_shepherd_operands", operands.collect()),
        case_fn("_shepherd_action_flags", flags.collect()),
        case_fn("_shepherd_action_flag_spec", flag_specs.collect()),
    ]
    .concat()
}

/// Asks the binary being completed for configured names, passing on `-c FILE`.
const NAMES_FN: &str = r#"_shepherd_names() {
    "$_shepherd_prog" "${_shepherd_cfg[@]}" completions names "$1" 2>/dev/null
}
"#;

/// The bash driver: finds the subcommand and action in `COMP_WORDS`, then asks the data.
const BASH_DRIVER: &str = r#"_shepherd_values() {
    case "$1" in
        file) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$2"));;
        choices:*) local choices="${1#choices:}"; COMPREPLY=($(compgen -W "${choices//,/ }" -- "$2"));;
        names:*) COMPREPLY=($(compgen -W "$(_shepherd_names "${1#names:}")" -- "$2"));;
        *) COMPREPLY=();;
    esac
}

_shepherd_sub() {
    local cmd="$1" cmdi="$2" cur="$3" prev="$4" action="" ai=0 i n=0 word spec form
    local actions=" $(_shepherd_actions "$cmd") "
    for ((i = cmdi + 1; i < COMP_CWORD && i <= cmdi + 2; i++)); do
        if [[ "$actions" == *" ${COMP_WORDS[i]} "* ]]; then action="${COMP_WORDS[i]}"; ai=$i; break; fi
    done
    if [[ -z "$action" ]]; then
        if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "--help" -- "$cur")); return; fi
        if ((COMP_CWORD == cmdi + 1)); then
            _shepherd_values "$(_shepherd_operand "$cmd")" "$cur"
            COMPREPLY+=($(compgen -W "$actions" -- "$cur"))
        elif ((COMP_CWORD == cmdi + 2)); then
            COMPREPLY=($(compgen -W "$(_shepherd_name_actions "$cmd")" -- "$cur"))
        fi
        return
    fi
    local key="$cmd:$action"
    spec="$(_shepherd_action_flag_spec "$key:$prev")"
    if [[ -n "$spec" ]]; then _shepherd_values "$spec" "$cur"; return; fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_shepherd_action_flags "$key") --help" -- "$cur")); return
    fi
    form="$(_shepherd_action_form "$key")"
    if ((ai > cmdi + 1)) && [[ "$form" != namefirst ]]; then return; fi
    for ((i = ai + 1; i < COMP_CWORD; i++)); do
        word="${COMP_WORDS[i]}"
        if [[ "$word" == -* ]]; then
            [[ "$word" != *=* && -n "$(_shepherd_action_flag_spec "$key:$word")" ]] && ((i++))
            continue
        fi
        ((n++))
    done
    local operands=($(_shepherd_operands "$key"))
    _shepherd_values "${operands[n]}" "$cur"
}

_shepherd() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" cmd="" cmdi=0 i word spec
    ((COMP_CWORD > 0)) && prev="${COMP_WORDS[COMP_CWORD - 1]}"
    COMPREPLY=()
    _shepherd_prog="${COMP_WORDS[0]/#\~/$HOME}"
    _shepherd_cfg=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${COMP_WORDS[i]}"
        case "$word" in
            -c|--config) _shepherd_cfg=(-c "${COMP_WORDS[i + 1]/#\~/$HOME}");;
            --config=*) _shepherd_cfg=(-c "${word#--config=}");;
        esac
        if [[ "$word" == -* ]]; then
            [[ "$word" != *=* && -n "$(_shepherd_flag_spec "$word")" ]] && ((i++))
            continue
        fi
        cmd="$word"; cmdi=$i; break
    done
    if [[ -n "$cmd" ]]; then _shepherd_sub "$cmd" "$cmdi" "$cur" "$prev"; return; fi
    spec="$(_shepherd_flag_spec "$prev")"
    if [[ -n "$spec" ]] && ((COMP_CWORD > 1)); then _shepherd_values "$spec" "$cur"; return; fi
    if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "$_shepherd_flags" -- "$cur")); return; fi
    COMPREPLY=($(compgen -W "$_shepherd_commands" -- "$cur"))
}

complete -F _shepherd shepherd
"#;

fn header(shell: &str) -> String {
    format!(
        "# {shell} completion for shepherd {}, generated by `shepherd completions {shell}`.\n\
         # Regenerate it after an upgrade; it reads configured names from the binary.\n\n",
        env!("CARGO_PKG_VERSION")
    )
}

fn all_flag_spellings() -> String {
    let mut all: Vec<String> = FLAGS.iter().flat_map(spellings).collect();
    all.sort();
    all.join(" ")
}

fn command_names() -> String {
    visible_commands()
        .map(|c| c.name)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The bash completion script (`shepherd completions bash`).
pub fn bash() -> String {
    format!(
        "{}_shepherd_flags='{}'\n_shepherd_commands='{}'\n\n{}{NAMES_FN}{BASH_DRIVER}",
        header("bash"),
        all_flag_spellings(),
        command_names(),
        shared_data()
    )
}

/// The zsh driver over the same data functions: `_arguments` for the top-level
/// flags, then the subcommand's words as in bash.
const ZSH_DRIVER: &str = r#"_shepherd_zvalues() {
    local -a found
    case "$1" in
        file) _files;;
        choices:*) found=(${(s:,:)${1#choices:}}); compadd -a found;;
        names:*) found=(${(f)"$(_shepherd_names ${1#names:})"}); compadd -a found;;
    esac
}

_shepherd_zsub() {
    local cmd=$words[1] action="" ai=0 i n=0 spec form key
    local -a acts found
    acts=(${=$(_shepherd_actions $cmd)})
    for ((i = 2; i < CURRENT && i <= 3; i++)); do
        if (( ${acts[(Ie)$words[i]]} )); then action=$words[i]; ai=$i; break; fi
    done
    local cur=$words[CURRENT] prev=$words[CURRENT-1]
    if [[ -z $action ]]; then
        if [[ $cur == -* ]]; then compadd -- --help; return; fi
        if (( CURRENT == 2 )); then
            _shepherd_zvalues "$(_shepherd_operand $cmd)"
            _shepherd_zactions $cmd
        elif (( CURRENT == 3 )); then
            found=(${=$(_shepherd_name_actions $cmd)}); compadd -a found
        fi
        return
    fi
    key=$cmd:$action
    spec=$(_shepherd_action_flag_spec "$key:$prev")
    if [[ -n $spec ]]; then _shepherd_zvalues $spec; return; fi
    if [[ $cur == -* ]]; then
        found=(${=$(_shepherd_action_flags $key)} --help); compadd -a found; return
    fi
    form=$(_shepherd_action_form $key)
    if (( ai > 2 )) && [[ $form != namefirst ]]; then return; fi
    for ((i = ai + 1; i < CURRENT; i++)); do
        if [[ $words[i] == -* ]]; then
            [[ $words[i] != *=* && -n $(_shepherd_action_flag_spec "$key:$words[i]") ]] && ((i++))
            continue
        fi
        ((n++))
    done
    found=(${=$(_shepherd_operands $key)})
    _shepherd_zvalues "${found[n+1]}"
}

_shepherd() {
    local curcontext="$curcontext" state line i ret=1
    _shepherd_prog=${~words[1]}
    _shepherd_cfg=()
    for ((i = 2; i < CURRENT; i++)); do
        case "$words[i]" in
            -c|--config) _shepherd_cfg=(-c ${~words[i+1]});;
            --config=*) _shepherd_cfg=(-c ${~words[i]#--config=});;
        esac
    done
    _arguments -C -s -S : "${_shepherd_specs[@]}" '1: :->command' '*:: :->args' && ret=0
    case $state in
        command) _shepherd_zcommands && ret=0;;
        args) _shepherd_zsub && ret=0;;
    esac
    return ret
}

if [ "$funcstack[1]" = "_shepherd" ]; then
    _shepherd "$@"
else
    compdef _shepherd shepherd
fi
"#;

/// Text inside a single-quoted shell word, and inside `_arguments`' `[...]` and `:` fields.
fn zsh_text(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('[', "\\[")
        .replace(']', "\\]")
        .replace(':', "\\:")
        .replace('\'', "'\\''")
}

fn zsh_action(values: Values) -> String {
    match values {
        Values::Any => " ".into(),
        Values::File => "_files".into(),
        Values::Choices(list) => format!("({})", list.join(" ")),
        Values::Names(kind) => format!("{{_shepherd_zvalues names:{}}}", kind.as_str()),
    }
}

/// One `_arguments` spec per spelling of a top-level flag.
fn zsh_flag_specs(f: &Flag) -> Vec<String> {
    let help = zsh_text(f.help);
    let all = spellings(f);
    let exclusive = format!("({})", all.join(" "));
    all.iter()
        .map(|s| {
            let long = s.starts_with("--");
            match f.takes {
                Takes::Nothing => format!("'{exclusive}{s}[{help}]'"),
                Takes::Value(name) => {
                    let suffix = if long { "=" } else { "+" };
                    let action = zsh_action(f.values);
                    format!(
                        "'{exclusive}{s}{suffix}[{help}]:{}:{action}'",
                        zsh_text(name)
                    )
                }
                Takes::OptionalValue(name) => {
                    let suffix = if long { "=-" } else { "-" };
                    let action = zsh_action(f.values);
                    format!(
                        "'{exclusive}{s}{suffix}[{help}]::{}:{action}'",
                        zsh_text(name)
                    )
                }
            }
        })
        .collect()
}

fn zsh_describe(name: &str, label: &str, rows: &[(&str, &str)]) -> String {
    let items: Vec<String> = rows
        .iter()
        .map(|(word, text)| format!("'{}:{}'", word, zsh_text(text)))
        .collect();
    format!(
        "{name}() {{\n    local -a items\n    items=({})\n    _describe -t {label} {label} items\n}}\n",
        items.join(" ")
    )
}

fn zsh_actions_fn() -> String {
    let mut out = String::from("_shepherd_zactions() {\n    local -a items\n    case \"$1\" in\n");
    for c in visible_commands() {
        let items: Vec<String> = c
            .visible_actions()
            .map(|a| format!("'{}:{}'", a.name, zsh_text(a.summary)))
            .collect();
        out.push_str(&format!(
            "        {}) items=({});;\n",
            c.name,
            items.join(" ")
        ));
    }
    out.push_str("    esac\n    _describe -t actions action items\n}\n");
    out
}

/// The zsh completion script (`shepherd completions zsh`), for a `_shepherd` file on `$fpath`.
pub fn zsh() -> String {
    let specs: Vec<String> = FLAGS.iter().flat_map(zsh_flag_specs).collect();
    let commands: Vec<(&str, &str)> = visible_commands().map(|c| (c.name, c.summary)).collect();
    format!(
        "#compdef shepherd\n{}_shepherd_specs=(\n    {}\n)\n\n{}{}{}{NAMES_FN}{ZSH_DRIVER}",
        header("zsh"),
        specs.join("\n    "),
        shared_data(),
        zsh_describe("_shepherd_zcommands", "commands", &commands),
        zsh_actions_fn()
    )
}

/// The fish helpers: the command and action typed so far (`-` for none), skipping flag values.
const FISH_HELPERS: &str = r#"function __shepherd_words
    set -l tokens (commandline -opc)
    set -e tokens[1]
    set -l cmd -
    set -l action -
    set -l rest
    while set -q tokens[1]
        set -l word $tokens[1]
        set -e tokens[1]
        if test "$cmd" = -
            if string match -q -- '-*' $word
                if contains -- $word $__shepherd_value_flags
                    set -e tokens[1]
                end
                continue
            end
            set cmd $word
        else
            set -a rest $word
        end
    end
    for word in $rest[1..2]
        if contains -- $word (__shepherd_actions $cmd)
            set action $word
            break
        end
    end
    echo $cmd
    echo $action
end

function __shepherd_using
    set -l state (__shepherd_words)
    test "$state[1]" = "$argv[1]"; or return 1
    set -q argv[2]; or return 0
    test "$state[2]" = "$argv[2]"
end

function __shepherd_names
    set -l tokens (commandline -opc)
    set -l cfg
    for i in (seq (count $tokens))
        switch $tokens[$i]
            case -c --config
                set -l next (math $i + 1)
                set -q tokens[$next]; and set cfg -c $tokens[$next]
            case '--config=*'
                set cfg -c (string replace -- '--config=' '' $tokens[$i])
        end
    end
    $tokens[1] $cfg completions names $argv[1] 2>/dev/null
end

"#;

/// Text inside a single-quoted fish word.
fn fish_text(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\'', "\\'")
}

/// `-r -F`, `-x -a '...'` and so on: how fish completes a value of this kind.
fn fish_value(values: Values) -> String {
    match values {
        Values::Any => "-x".into(),
        Values::File => "-r -F".into(),
        Values::Choices(list) => format!("-x -a '{}'", list.join(" ")),
        Values::Names(kind) => format!("-x -a '(__shepherd_names {})'", kind.as_str()),
    }
}

fn fish_flag(
    condition: &str,
    short: Option<char>,
    long: &str,
    value: String,
    help: &str,
) -> String {
    let short = short.map(|c| format!(" -s {c}")).unwrap_or_default();
    format!(
        "complete -c shepherd -n '{condition}'{short} -l {long} {value} -d '{}'\n",
        fish_text(help)
    )
}

fn fish_top_flags() -> String {
    let mut out = String::new();
    for f in FLAGS {
        let value = match f.takes {
            Takes::Nothing => "-f".to_string(),
            Takes::Value(_) => fish_value(f.values),
            // fish takes an optional value only as `--flag=VALUE`.
            Takes::OptionalValue(_) => fish_value(f.values).replacen("-x", "-f", 1),
        };
        let cond = "__shepherd_using -";
        out.push_str(&fish_flag(cond, f.short, f.long, value.clone(), f.help));
        for alias in f.aliases {
            out.push_str(&fish_flag(cond, None, alias, value.clone(), f.help));
        }
    }
    out
}

fn fish_commands() -> String {
    let mut out = String::new();
    for c in visible_commands() {
        out.push_str(&format!(
            "complete -c shepherd -n '__shepherd_using -' -a {} -d '{}'\n",
            c.name,
            fish_text(c.summary)
        ));
        let at_command = format!("__shepherd_using {} -", c.name);
        for a in c.visible_actions() {
            out.push_str(&format!(
                "complete -c shepherd -n '{at_command}' -a {} -d '{}'\n",
                a.name,
                fish_text(a.summary)
            ));
        }
        if let Values::Choices(_) | Values::Names(_) = c.operand {
            out.push_str(&format!(
                "complete -c shepherd -n '{at_command}' {}\n",
                fish_value(c.operand)
            ));
        }
        out.push_str(&fish_action_parts(c));
    }
    out
}

fn fish_action_parts(c: &Command) -> String {
    let mut out = String::new();
    for a in c.visible_actions() {
        let cond = format!("__shepherd_using {} {}", c.name, a.name);
        if let Some(values @ (Values::Choices(_) | Values::Names(_) | Values::File)) =
            a.operands.first().copied()
        {
            out.push_str(&format!(
                "complete -c shepherd -n '{cond}' {}\n",
                fish_value(values)
            ));
        }
        for f in a.flags {
            let value = match f.value {
                Some(_) => fish_value(f.values),
                None => "-f".into(),
            };
            out.push_str(&fish_flag(&cond, f.short, f.long, value, f.help));
        }
    }
    out
}

/// The fish completion script (`shepherd completions fish`).
pub fn fish() -> String {
    let value_flags: Vec<String> = FLAGS
        .iter()
        .filter(|f| matches!(f.takes, Takes::Value(_)))
        .flat_map(spellings)
        .collect();
    let actions: Vec<String> = visible_commands()
        .map(|c| {
            let names: Vec<&str> = c.visible_actions().map(|a| a.name).collect();
            format!(
                "        case {}\n            echo {}\n",
                c.name,
                names.join("\n            echo ")
            )
        })
        .collect();
    format!(
        "{}set -g __shepherd_value_flags {}\n\nfunction __shepherd_actions\n    switch $argv[1]\n{}    end\nend\n\n{FISH_HELPERS}complete -c shepherd -f\n{}{}",
        header("fish"),
        value_flags.join(" "),
        actions.concat(),
        fish_top_flags(),
        fish_commands()
    )
}

/// Text for roff: backslashes and hyphens escaped, no line starting a request.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    match escaped.chars().next() {
        Some('.' | '\'') => format!("\\&{escaped}"),
        _ => escaped,
    }
}

fn man_flag(f: &Flag) -> String {
    let mut names: Vec<String> = Vec::new();
    if let Some(c) = f.short {
        names.push(format!("\\fB\\-{c}\\fR"));
    }
    names.push(format!("\\fB\\-\\-{}\\fR", roff(f.long)));
    for alias in f.aliases {
        names.push(format!("\\fB\\-\\-{}\\fR", roff(alias)));
    }
    let value = match f.takes {
        Takes::Nothing => String::new(),
        Takes::Value(name) => format!(" \\fI{}\\fR", roff(name)),
        Takes::OptionalValue(name) => format!("[=\\fI{}\\fR]", roff(name)),
    };
    format!(".TP\n{}{value}\n{}\n", names.join(", "), roff(f.help))
}

fn man_command(c: &Command) -> String {
    let mut out = format!(".SS {}\n{}.\n", c.name, roff(c.summary));
    for a in c.visible_actions() {
        // A usage line that starts with spaces continues the one before (the
        // help wraps it); each other line is another form, a tag of its own.
        let mut forms: Vec<String> = Vec::new();
        for line in a.usage {
            match forms.last_mut() {
                Some(form) if line.starts_with(' ') => {
                    form.push(' ');
                    form.push_str(line.trim());
                }
                _ => forms.push(line.trim().to_string()),
            }
        }
        let tags: Vec<String> = forms
            .iter()
            .map(|form| format!("\\fBshepherd {}\\fR {}", c.name, roff(form)))
            .collect();
        out.push_str(&format!(
            ".TP\n{}\n{}.\n",
            tags.join("\n.TQ\n"),
            roff(a.summary)
        ));
        for f in a.flags {
            let label = roff(&super::subcommands::action_flag_label(f));
            out.push_str(&format!(
                ".RS\n.TP\n\\fB{label}\\fR\n{}\n.RE\n",
                roff(f.help)
            ));
        }
    }
    if !c.note.is_empty() {
        out.push_str(&format!(".PP\n{}\n", roff(c.note)));
    }
    out
}

/// The man page `shepherd.1` (`shepherd man`), in roff with the `man` macros.
pub fn man_page() -> String {
    let version = env!("CARGO_PKG_VERSION");
    let mut out = format!(
        ".TH SHEPHERD 1 \"\" \"shepherd {version}\" \"User Commands\"\n\
         .SH NAME\nshepherd \\- {}\n\
         .SH SYNOPSIS\n\\fBshepherd\\fR [\\fIFLAGS\\fR] [\\fB\\-e\\fR \\fITEXT\\fR]\n.br\n\
         \\fBshepherd\\fR [\\fIFLAGS\\fR] \\fICOMMAND\\fR [\\fIACTION\\fR] [\\fIARGS\\fR...]\n\
         .SH DESCRIPTION\nshepherd talks to LLM APIs or runs a GGUF model in-process, \
         runs the tools the model asks for, and serves the same over HTTP. \
         Without \\fB\\-e\\fR it reads prompts from a terminal or, one a line, from a pipe.\n\
         Every command answers \\fB\\-\\-help\\fR with its own usage.\n\
         .SH COMMANDS\n",
        roff(DESCRIPTION)
    );
    for c in visible_commands() {
        out.push_str(&man_command(c));
    }
    out.push_str(".SH OPTIONS\n");
    for section in Section::ALL {
        out.push_str(&format!(".SS {}\n", roff(section.title())));
        for f in FLAGS.iter().filter(|f| f.section == section) {
            out.push_str(&man_flag(f));
        }
    }
    out.push_str(
        ".SH FILES\n.TP\n\\fI$XDG_CONFIG_HOME/shepherd/config.json\\fR\n\
         Providers, profiles, MCP servers and settings (\\fB\\-c\\fR \\fIFILE\\fR names another).\n\
         .SH SEE ALSO\nThe README and docs/ installed under \\fI/usr/local/share/doc/shepherd\\fR \
         (or the \\fBPREFIX\\fR it was installed with).\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_name_every_flag_command_and_action() {
        let (bash, zsh, fish, man) = (bash(), zsh(), fish(), man_page());
        for f in FLAGS {
            assert!(
                bash.contains(&format!("--{}", f.long)),
                "bash lacks --{}",
                f.long
            );
            assert!(
                zsh.contains(&format!("--{}", f.long)),
                "zsh lacks --{}",
                f.long
            );
            assert!(
                fish.contains(&format!("-l {}", f.long)),
                "fish lacks --{}",
                f.long
            );
            assert!(
                man.contains(&format!("\\-\\-{}", roff(f.long))),
                "man lacks --{}",
                f.long
            );
        }
        for (c, a) in each_action() {
            assert!(bash.contains(&format!("{}:{}", c.name, a.name)));
            assert!(fish.contains(&format!("'__shepherd_using {} -' -a {}", c.name, a.name)));
            assert!(man.contains(&format!("shepherd {}", c.name)));
        }
    }

    #[test]
    fn a_wrapped_usage_is_one_tag_and_another_form_a_tag_of_its_own() {
        let man = man_page();
        // `provider add` wraps in --help; the man page tags the whole usage.
        let add = "\\fBshepherd provider\\fR add NAME [\\-\\-type TYPE]";
        let line = man
            .lines()
            .find(|l| l.starts_with(add))
            .expect("the add usage");
        assert!(line.ends_with("[\\-\\-model\\-path PATH]"), "{line}");
        // `mcp add` has two forms: the second is a tag too, not body text.
        let url = "\\fBshepherd mcp\\fR add NAME \\-\\-url URL";
        let at = man
            .lines()
            .position(|l| l.starts_with(url))
            .expect("the URL form");
        assert_eq!(man.lines().nth(at - 1), Some(".TQ"));
        // No usage line lands in a paragraph's body.
        for (c, a) in each_action() {
            for line in a.usage.iter().filter(|l| l.starts_with(' ')) {
                let alone = format!("\\fBshepherd {}\\fR {}", c.name, roff(line.trim()));
                assert!(!man.contains(&alone), "{alone}");
            }
        }
    }

    #[test]
    fn roff_escapes_what_roff_would_read_as_requests() {
        assert_eq!(roff("a-b"), "a\\-b");
        assert_eq!(roff(".x"), "\\&.x");
        assert_eq!(roff("a\\b"), "a\\eb");
    }
}
