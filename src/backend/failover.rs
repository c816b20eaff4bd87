//! The provider chain as one [`Backend`], so the agent never knows there is more than one.
//!
//! Providers are tried in priority order (the order `connect` builds them
//! in). When the active one fails with a transient error (connect, timeout,
//! 408/409/429/5xx, after its own retries in [`super::http::with_retries`])
//! *before anything was shown*, a `System` event names the switch and the next
//! provider gets the same request; it stays active for later turns. Other
//! errors do not fail over: authentication and bad requests would fail the
//! same way elsewhere or mean the user must act, so the notice says why; a
//! context overflow goes back to the agent, which evicts and retries.
//! `info()` and `count_tokens()` follow the active provider.

use super::{Backend, BackendInfo, GenerateRequest, Reply};
use crate::core::{BackendError, Event, EventSink, Flow, Message, Session};

/// One configured provider, built.
pub struct Provider {
    pub name: String,
    pub backend: Box<dyn Backend>,
}

/// A chain of providers; never empty.
pub struct FailoverBackend {
    chain: Vec<Provider>,
    active: usize,
}

impl FailoverBackend {
    /// `None` when `chain` is empty.
    pub fn new(chain: Vec<Provider>) -> Option<Self> {
        (!chain.is_empty()).then_some(FailoverBackend { chain, active: 0 })
    }
}

/// Remembers whether the user saw model output; notices (retries) do not count.
struct ShownSink<'a> {
    inner: &'a mut dyn EventSink,
    shown: bool,
}

impl EventSink for ShownSink<'_> {
    fn emit(&mut self, event: Event) -> Flow {
        if !matches!(event, Event::System(_) | Event::Stats(_)) {
            self.shown = true;
        }
        self.inner.emit(event)
    }

    fn cancelled(&self) -> bool {
        self.inner.cancelled()
    }
}

/// Why an error does not move to the next provider, for the notice; `None`
/// when it needs no notice (the agent handles it, or the user asked).
fn why_not_failover(error: &BackendError) -> Option<&'static str> {
    match error {
        BackendError::ContextOverflow { .. } | BackendError::Cancelled => None,
        BackendError::Http {
            status: 401 | 403, ..
        } => Some("authentication errors are not transient; check the API key"),
        BackendError::Config(_) => Some("the provider is misconfigured"),
        _ => Some("the error is not transient"),
    }
}

impl Backend for FailoverBackend {
    fn info(&self) -> BackendInfo {
        self.chain[self.active].backend.info()
    }

    fn generate(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        loop {
            let mut watched = ShownSink {
                inner: &mut *sink,
                shown: false,
            };
            let provider = &mut self.chain[self.active];
            let error = match provider.backend.generate(session, request, &mut watched) {
                Ok(reply) => return Ok(reply),
                Err(error) => error,
            };
            let shown = watched.shown;
            let name = provider.name.clone();
            let Some(next) = self.chain.get(self.active + 1).map(|p| p.name.clone()) else {
                return Err(error);
            };
            if shown {
                return Err(error);
            }
            if !error.is_retryable() {
                if let Some(why) = why_not_failover(&error) {
                    let notice =
                        format!("provider {name} failed ({error}); not switching to {next}: {why}");
                    sink.emit(Event::System(notice));
                }
                return Err(error);
            }
            let notice = format!("provider {name} failed ({error}); switching to {next}");
            if sink.emit(Event::System(notice)) == Flow::Cancel {
                return Err(BackendError::Cancelled);
            }
            self.active += 1;
        }
    }

    fn count_tokens(&self, message: &Message) -> u32 {
        self.chain[self.active].backend.count_tokens(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{fake, Sampling};
    use crate::core::FinishReason;
    use std::sync::{Arc, Mutex};

    /// A backend that answers from a script and counts its calls.
    struct Scripted {
        kind: &'static str,
        script: Vec<Result<Reply, BackendError>>,
        calls: Arc<Mutex<u32>>,
        show_first: bool,
    }

    impl Backend for Scripted {
        fn info(&self) -> BackendInfo {
            BackendInfo {
                kind: self.kind,
                model: "m".into(),
                context_size: 1,
                local: false,
            }
        }

        fn generate(
            &mut self,
            _session: &Session,
            _request: &GenerateRequest<'_>,
            sink: &mut dyn EventSink,
        ) -> Result<Reply, BackendError> {
            *self.calls.lock().expect("lock") += 1;
            sink.emit(Event::System("retrying in 0.1s".into()));
            if self.show_first {
                sink.emit(Event::Content("partial".into()));
            }
            self.script.remove(0)
        }

        fn count_tokens(&self, _message: &Message) -> u32 {
            if self.kind == "a" {
                1
            } else {
                2
            }
        }
    }

    fn reply(text: &str) -> Reply {
        Reply {
            content: text.into(),
            thinking: String::new(),
            tool_calls: Vec::new(),
            finish: FinishReason::Stop,
            usage: None,
            artefacts: Vec::new(),
        }
    }

    fn provider(
        name: &'static str,
        script: Vec<Result<Reply, BackendError>>,
        show_first: bool,
    ) -> (Provider, Arc<Mutex<u32>>) {
        let calls = Arc::new(Mutex::new(0));
        let backend = Scripted {
            kind: name,
            script,
            calls: calls.clone(),
            show_first,
        };
        let provider = Provider {
            name: name.into(),
            backend: Box::new(backend),
        };
        (provider, calls)
    }

    fn run(chain: &mut FailoverBackend, events: &mut Vec<Event>) -> Result<Reply, BackendError> {
        let sampling = Sampling::default();
        let request = fake::request(&[], &sampling, true);
        chain.generate(&fake::session(), &request, events)
    }

    fn notices(events: &[Event]) -> Vec<&str> {
        fake::notices(events)
            .into_iter()
            .filter(|n| n.starts_with("provider"))
            .collect()
    }

    #[test]
    fn a_transient_error_moves_to_the_next_provider_and_stays_there() {
        let refused = BackendError::Connect("refused".into());
        let (a, a_calls) = provider("a", vec![Err(refused)], false);
        let (b, b_calls) = provider("b", vec![Ok(reply("from b")), Ok(reply("again"))], false);
        let mut chain = FailoverBackend::new(vec![a, b]).expect("non-empty");
        assert_eq!(chain.info().kind, "a");
        let mut events = Vec::new();
        assert_eq!(
            run(&mut chain, &mut events).expect("reply").content,
            "from b"
        );
        assert_eq!(
            notices(&events),
            ["provider a failed (cannot connect: refused); switching to b"]
        );
        assert_eq!(
            (chain.info().kind, chain.count_tokens(&Message::user("x"))),
            ("b", 2)
        );
        assert_eq!(
            run(&mut chain, &mut Vec::new()).expect("reply").content,
            "again"
        );
        assert_eq!((*a_calls.lock().unwrap(), *b_calls.lock().unwrap()), (1, 2));
    }

    #[test]
    fn auth_errors_do_not_fail_over_and_say_why() {
        let denied = BackendError::Http {
            status: 401,
            code: "authentication_error".into(),
            message: "bad key".into(),
            retry_after: None,
        };
        let (a, _) = provider("a", vec![Err(denied.clone())], false);
        let (b, b_calls) = provider("b", vec![Ok(reply("unused"))], false);
        let mut chain = FailoverBackend::new(vec![a, b]).expect("non-empty");
        let mut events = Vec::new();
        assert_eq!(run(&mut chain, &mut events), Err(denied));
        let said = notices(&events);
        assert!(
            said.len() == 1 && said[0].contains("not switching to b: authentication"),
            "{said:?}"
        );
        assert_eq!(*b_calls.lock().unwrap(), 0);
    }

    #[test]
    fn no_failover_after_output_or_on_overflow_or_at_the_end() {
        let busy = BackendError::Http {
            status: 503,
            code: String::new(),
            message: "busy".into(),
            retry_after: None,
        };
        let overflow = BackendError::ContextOverflow {
            message: "too long".into(),
            prompt_tokens: None,
            limit: None,
        };
        let (a, _) = provider("a", vec![Err(busy.clone())], true);
        let (b, b_calls) = provider("b", vec![Ok(reply("unused"))], false);
        let mut chain = FailoverBackend::new(vec![a, b]).expect("non-empty");
        assert_eq!(run(&mut chain, &mut Vec::new()), Err(busy.clone()));
        let (a, _) = provider("a", vec![Err(overflow.clone())], false);
        let (b, _) = provider("b", vec![Ok(reply("unused"))], false);
        let mut chain2 = FailoverBackend::new(vec![a, b]).expect("non-empty");
        let mut events = Vec::new();
        assert_eq!(run(&mut chain2, &mut events), Err(overflow));
        assert!(notices(&events).is_empty());
        let (only, _) = provider("only", vec![Err(busy.clone())], false);
        let mut single = FailoverBackend::new(vec![only]).expect("non-empty");
        assert_eq!(run(&mut single, &mut Vec::new()), Err(busy));
        assert_eq!(*b_calls.lock().unwrap(), 0);
        assert!(FailoverBackend::new(Vec::new()).is_none());
    }
}
