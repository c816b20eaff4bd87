//! Tests of [`super`] (failover.rs).

use super::*;
use crate::backend::{fake, Sampling};
use crate::core::{FinishReason, Stats};
use crossbeam_channel::{bounded, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// A backend that answers from a script and counts its calls.
struct Scripted {
    kind: &'static str,
    script: Vec<Result<Reply, BackendError>>,
    calls: Arc<Mutex<u32>>,
    show_first: bool,
    /// Says it started, then waits to be let go.
    hold: Option<(Sender<()>, Receiver<()>)>,
    /// What `takes_images` answers.
    images: bool,
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
        if let Some((started, release)) = &self.hold {
            started.send(()).expect("the test waits");
            release.recv().expect("the test lets go");
        }
        sink.emit(Event::System("retrying in 0.1s".into()));
        sink.emit(Event::Stats(Stats::default()));
        if self.show_first {
            sink.emit(Event::Content("partial".into()));
        }
        self.script.remove(0)
    }

    fn takes_images(&self) -> bool {
        self.images
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
        stop_sequence: None,
    }
}

/// A provider whose priority is its name's place in the alphabet, so
/// `a`, `b`, ... are tiers one after the other.
fn provider(
    name: &'static str,
    script: Vec<Result<Reply, BackendError>>,
    show_first: bool,
) -> (Provider, Arc<Mutex<u32>>) {
    let priority = u32::from(name.as_bytes()[0]);
    scripted(name, priority, script, show_first, None)
}

fn scripted(
    name: &'static str,
    priority: u32,
    script: Vec<Result<Reply, BackendError>>,
    show_first: bool,
    hold: Option<(Sender<()>, Receiver<()>)>,
) -> (Provider, Arc<Mutex<u32>>) {
    let calls = Arc::new(Mutex::new(0));
    let backend = Scripted {
        kind: name,
        script,
        calls: calls.clone(),
        show_first,
        hold,
        images: false,
    };
    let provider = Provider {
        name: name.into(),
        priority,
        backend: Box::new(backend),
    };
    (provider, calls)
}

/// Providers of one priority that answer `n` times with their own name.
fn fleet(names: &[&'static str], n: usize) -> Vec<Provider> {
    let answers = |name: &str| (0..n).map(|_| Ok(reply(name))).collect();
    let made = names
        .iter()
        .map(|&name| scripted(name, 10, answers(name), false, None));
    made.map(|(provider, _)| provider).collect()
}

fn chain_of(providers: Vec<Provider>) -> FailoverBackend {
    FailoverBackend::new(providers, Arc::default()).expect("non-empty")
}

fn provider_of(events: &[Event]) -> Option<String> {
    events.iter().rev().find_map(|e| match e {
        Event::Stats(stats) => stats.provider.clone(),
        _ => None,
    })
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
    let mut chain = chain_of(vec![a, b]);
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
    let mut chain = chain_of(vec![a, b]);
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
    let mut chain = chain_of(vec![a, b]);
    assert_eq!(run(&mut chain, &mut Vec::new()), Err(busy.clone()));
    let (a, _) = provider("a", vec![Err(overflow.clone())], false);
    let (b, _) = provider("b", vec![Ok(reply("unused"))], false);
    let mut chain2 = chain_of(vec![a, b]);
    let mut events = Vec::new();
    assert_eq!(run(&mut chain2, &mut events), Err(overflow));
    assert!(notices(&events).is_empty());
    let (only, _) = provider("only", vec![Err(busy.clone())], false);
    let mut single = chain_of(vec![only]);
    assert_eq!(run(&mut single, &mut Vec::new()), Err(busy));
    assert_eq!(*b_calls.lock().unwrap(), 0);
    assert!(FailoverBackend::new(Vec::new(), Arc::default()).is_none());
}

#[test]
fn equal_priorities_take_turns_and_the_stats_name_who_answered() {
    let mut chain = chain_of(fleet(&["a", "b", "c"], 2));
    let mut answered = Vec::new();
    for _ in 0..6 {
        let mut events = Vec::new();
        let reply = run(&mut chain, &mut events).expect("reply");
        assert_eq!(
            provider_of(&events).as_deref(),
            Some(reply.content.as_str())
        );
        answered.push(reply.content);
    }
    assert_eq!(answered, ["a", "b", "c", "a", "b", "c"]);
}

#[test]
fn a_busy_provider_gets_no_more_work_while_an_idle_one_of_its_tier_is_free() {
    let board: Arc<Board> = Arc::default();
    let (started, started_rx) = bounded(1);
    let (release_tx, release) = bounded(1);
    let (held, _) = scripted(
        "a",
        10,
        vec![Ok(reply("a"))],
        false,
        Some((started, release)),
    );
    let mut first = FailoverBackend::new(vec![held], Arc::clone(&board)).expect("one");
    // The second chain (another worker) has the same providers on the same board.
    let mut second = FailoverBackend::new(fleet(&["a", "b", "c"], 4), board).expect("three");
    let worker = std::thread::spawn(move || run(&mut first, &mut Vec::new()));
    started_rx.recv().expect("a is busy");
    let answered: Vec<String> = (0..4)
        .map(|_| run(&mut second, &mut Vec::new()).expect("reply").content)
        .collect();
    // Round robin alone would have sent one of them to the busy `a`.
    let count = |name: &str| answered.iter().filter(|a| *a == name).count();
    assert_eq!(
        (count("a"), count("b"), count("c")),
        (0, 2, 2),
        "{answered:?}"
    );
    release_tx.send(()).expect("a goes on");
    assert_eq!(worker.join().expect("joins").expect("reply").content, "a");
    // `a` is idle again: all three take turns.
    let mut next: Vec<String> = (0..3)
        .map(|_| run(&mut second, &mut Vec::new()).expect("reply").content)
        .collect();
    next.sort();
    assert_eq!(next, ["a", "b", "c"]);
}

#[test]
fn a_failed_provider_hands_over_within_its_tier_and_is_passed_over_after() {
    let refused = BackendError::Connect("refused".into());
    let (a, a_calls) = scripted("a", 10, vec![Err(refused)], false, None);
    let (b, b_calls) = scripted(
        "b",
        10,
        (0..3).map(|_| Ok(reply("b"))).collect(),
        false,
        None,
    );
    let (z, z_calls) = scripted("z", 20, vec![Ok(reply("z"))], false, None);
    let mut chain = chain_of(vec![z, a, b]);
    let mut events = Vec::new();
    assert_eq!(run(&mut chain, &mut events).expect("reply").content, "b");
    assert_eq!(
        notices(&events),
        ["provider a failed (cannot connect: refused); switching to b"]
    );
    assert_eq!(provider_of(&events).as_deref(), Some("b"));
    // `a` cools down: `b` takes the next requests although it is `a`'s turn.
    for _ in 0..2 {
        assert_eq!(
            run(&mut chain, &mut Vec::new()).expect("reply").content,
            "b"
        );
    }
    let calls = |c: &Arc<Mutex<u32>>| *c.lock().unwrap();
    assert_eq!(
        (calls(&a_calls), calls(&b_calls), calls(&z_calls)),
        (1, 3, 0)
    );
}

/// Provider `name` of the tier its name gives ([`provider`]) that reads images
/// and answers from `script`.
fn seeing(name: &'static str, script: Vec<Result<Reply, BackendError>>) -> Provider {
    Provider {
        name: name.into(),
        priority: u32::from(name.as_bytes()[0]),
        backend: Box::new(Scripted {
            kind: name,
            script,
            calls: Arc::default(),
            show_first: false,
            hold: None,
            images: true,
        }),
    }
}

#[test]
fn images_are_taken_only_while_every_provider_of_the_active_tier_takes_them() {
    assert!(chain_of(vec![seeing("a", Vec::new())]).takes_images());
    // The fallback tier does not count until it is the active one.
    let (blind_b, _) = provider("b", vec![Ok(reply("from b"))], false);
    let refused = BackendError::Connect("refused".into());
    let mut chain = chain_of(vec![seeing("a", vec![Err(refused)]), blind_b]);
    assert!(chain.takes_images());
    run(&mut chain, &mut Vec::new()).expect("b answers");
    assert!(!chain.takes_images(), "b is now the active tier");
    // In one tier, a request may go to either.
    let (blind, _) = scripted("blind", 10, Vec::new(), false, None);
    let mut same_tier = seeing("a", Vec::new());
    same_tier.priority = 10;
    assert!(!chain_of(vec![same_tier, blind]).takes_images());
}
