//! What held tool-call markup becomes: the calls it writes (read by its
//! family's parser, the learnt syntax, or as a message addressed to a tool), a
//! call the text was cut inside, or plain text with a notice.

use serde_json::Value;

use super::{cut_notice, OutputFilter};
use crate::core::{Event, EventSink, Flow, ToolCall};
use crate::stream::{format, textcalls};

impl OutputFilter {
    /// The calls held `markup` writes, read as if it were whole.
    fn parse_held(&mut self, markup: &str) -> Option<Vec<ToolCall>> {
        let learnt = self
            .learnt
            .filter(|l| markup.trim_start().starts_with(l.marker));
        match (self.recipient.take(), learnt) {
            (Some(name), _) => {
                textcalls::parse_addressed(&name, format::message_body(markup), &self.tools)
            }
            (None, Some(learnt)) => learnt
                .read(markup)
                .and_then(|calls| textcalls::named_calls(calls, &self.tools)),
            (None, None) => format::parse_markup(markup, &self.tools),
        }
    }

    /// Markup the text ended inside: a call the model did not finish (see
    /// [`OutputFilter::finish_as`]). Its arguments stay as far as written: the
    /// value read as if whole, without the closing the model never wrote.
    pub(super) fn cut_markup(&mut self, markup: &str, sink: &mut dyn EventSink) -> Flow {
        let recipient = self.recipient.clone();
        let calls: Vec<ToolCall> = match self.parse_held(markup) {
            Some(calls) => calls
                .into_iter()
                .map(|call| ToolCall {
                    arguments: Value::String(textcalls::unclosed(&call.arguments)),
                    ..call
                })
                .collect(),
            // JSON cut short does not parse: its name and its text as written.
            None => match recipient {
                Some(name) => textcalls::cut_addressed(&name, markup, &self.tools),
                None => textcalls::cut_json_call(markup, &self.tools),
            }
            .into_iter()
            .collect(),
        };
        let notice = cut_notice(calls.last().map_or("a tool", |c| c.name.as_str()));
        self.cut_call = true;
        self.tool_calls.extend(calls);
        sink.emit(Event::System(notice))
    }

    pub(super) fn resolve_markup(&mut self, markup: &str, sink: &mut dyn EventSink) -> Flow {
        let parsed = self.parse_held(markup);
        match parsed {
            Some(calls) => {
                self.tool_calls.extend(calls);
                Flow::Continue
            }
            None => {
                // Tool-call markup that names no offered tool (or does not parse) is a
                // failed call the user should hear about, not silently plain text.
                let notice = "the model wrote a tool call that names no available tool \
                              or could not be parsed; it is shown as text";
                if sink.emit(Event::System(notice.into())) == Flow::Cancel {
                    return Flow::Cancel;
                }
                self.show(markup, sink)
            }
        }
    }
}
