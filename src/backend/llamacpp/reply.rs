//! How a request's answer reaches its caller's sink: the prefill's report,
//! then the worker's messages through the output filter, until the reply.

use super::*;

/// Waits for the prefill's answer, passing the prompt's progress on to `sink`
/// meanwhile; gives up once the sink is cancelled. The worker sends the answer
/// before any text, so a message other than progress means the answer is there:
/// that message comes back to be handled first.
pub(super) fn await_prefill(
    result: &Receiver<Result<PrefillReport, BackendError>>,
    events: &Receiver<WorkerMsg>,
    cancel: &AtomicBool,
    sink: &mut dyn EventSink,
) -> Result<(PrefillReport, Option<WorkerMsg>), BackendError> {
    let answer = |early| match result.recv() {
        Ok(report) => Ok((report?, early)),
        Err(_) => Err(worker_gone()),
    };
    loop {
        select! {
            recv(result) -> report => return match report {
                Ok(report) => Ok((report?, None)),
                Err(_) => Err(worker_gone()),
            },
            recv(events) -> message => match message {
                Ok(WorkerMsg::Progress(progress)) => {
                    if sink.emit(Event::Progress(progress)) == Flow::Cancel {
                        cancel.store(true, Ordering::Relaxed);
                        return Err(BackendError::Cancelled);
                    }
                }
                Ok(other) => return answer(Some(other)),
                // The request ended before it generated: its answer says why.
                Err(_) => return answer(None),
            },
            default(POLL) => {
                if sink.cancelled() {
                    cancel.store(true, Ordering::Relaxed);
                    return Err(BackendError::Cancelled);
                }
            }
        }
    }
}

/// Tells `sink` the prompt is read ([`Event::Prefilled`]).
pub(super) fn prefilled(report: &PrefillReport, sink: &mut dyn EventSink) {
    sink.emit(Event::Prefilled {
        prompt_tokens: report.prompt_tokens as u64,
        cached_tokens: report.reused_tokens as u64,
        rendered: report.rendered.clone(),
    });
}

/// Shows the text a non-streaming request held back, in one piece.
pub(super) fn flush_held(
    held: &mut String,
    filter: &mut Option<OutputFilter>,
    sink: &mut dyn EventSink,
) {
    if !held.is_empty() {
        show(std::mem::take(held), filter, sink);
    }
}

/// Raw text through the output filter (visible text, reasoning, tool calls);
/// without a filter (a forced call sends none) it is the text itself.
pub(super) fn show(
    text: String,
    filter: &mut Option<OutputFilter>,
    sink: &mut dyn EventSink,
) -> Flow {
    match filter.as_mut() {
        Some(f) => f.push(&text, sink),
        None => sink.emit(Event::Content(text)),
    }
}

/// The generation's figures, after whatever the filter still holds.
pub(super) fn close(
    message: WorkerMsg,
    filter: &mut Option<OutputFilter>,
    sink: &mut dyn EventSink,
) -> Flow {
    let WorkerMsg::Stats(stats, end) = message else {
        return Flow::Continue;
    };
    if filter
        .as_mut()
        .is_some_and(|f| f.finish_as(end, sink) == Flow::Cancel)
    {
        return Flow::Cancel;
    }
    sink.emit(Event::Stats(stats))
}

/// The reply with the filter's view of the text: visible content, thinking, tool calls.
pub(super) fn filtered_reply(
    result: Result<Reply, BackendError>,
    filter: Option<OutputFilter>,
    sink: &mut dyn EventSink,
) -> Result<Reply, BackendError> {
    let (Ok(mut reply), Some(mut filter)) = (result.clone(), filter) else {
        return result;
    };
    // Flushing twice is harmless: an already finished filter holds nothing.
    filter.finish(sink);
    ending::finish_local(&mut reply, &mut filter);
    Ok(reply)
}

pub(super) fn worker_gone() -> BackendError {
    BackendError::Config("the llama.cpp generation thread has stopped".into())
}
