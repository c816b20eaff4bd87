//! The agent over the TensorRT-LLM backend and its scripted test library
//! (feature `tensorrt-testlib`): a tool call split across responses is run and
//! its result reaches the model's next prompt.

use crate::agent::{AgentConfig, AgentHandle};
use crate::backend::tensorrt::tests::{
    backend, contents, engine, field, ids, line, log, sampling, tokenizer,
};
use crate::backend::ToolChoice;
use crate::core::{Event, FinishReason, Message};
use crate::tools::ToolRegistry;

#[test]
fn the_agent_runs_a_tool_call_and_answers() {
    let probe = engine("probe", "");
    let call = ids(
        &probe,
        r#"<tool_call>{"name": "get_time", "arguments": {}}</tool_call>"#,
    );
    let answer = ids(&probe, "It is noon.");
    let script = format!(
        "request\n{}{}request\n{}",
        line("chunk", &call[..call.len() / 2]),
        line("final end_id", &call[call.len() / 2..]),
        line("final end_id", &answer)
    );
    let dir = engine("agent", &script);
    // The tool instructions alone are hundreds of this small vocabulary's tokens.
    std::fs::write(
        dir.join("config.json"),
        r#"{"build_config": {"max_seq_len": 4096}}"#,
    )
    .unwrap();
    let mut tools = ToolRegistry::builtin();
    tools.disable("*");
    tools.enable("get_time");
    let config = AgentConfig {
        system_prompt: "You are helpful.".into(),
        sampling: sampling(64, &[]),
        stream: true,
        max_rounds: 3,
        tools_enabled: true,
        first_tool_choice: ToolChoice::Auto,
    };
    let agent = AgentHandle::spawn(Box::new(backend(&dir)), tools, std::env::temp_dir(), config)
        .expect("agent");
    let mut events = Vec::new();
    let reason = agent.run_message(Message::user("What time is it?"), |e| {
        events.push(e.clone());
        Ok(())
    });
    assert_eq!(reason, FinishReason::Stop, "{events:?}");
    let call = events
        .iter()
        .find_map(|e| match e {
            Event::ToolCall(call) => Some(call.clone()),
            _ => None,
        })
        .expect("the call is announced");
    assert_eq!(call.name, "get_time");
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::ToolResult(r) if r.success && r.id == call.id)));
    assert!(
        contents(&events).concat().ends_with("It is noon."),
        "{events:?}"
    );
    assert!(
        !contents(&events).concat().contains("tool_call"),
        "tool-call markup never reaches the user"
    );
    // The second request's prompt carries the tool's result back to the model.
    let enqueues: Vec<String> = log(&dir)
        .into_iter()
        .filter(|l| l.starts_with("enqueue"))
        .collect();
    assert_eq!(enqueues.len(), 2);
    let second: Vec<u32> = field(&enqueues[1], "tokens")
        .split(',')
        .map(|t| t.parse().unwrap())
        .collect();
    let prompt = tokenizer(&dir).decode_for_test(&second);
    assert!(prompt.contains("get_time"), "{prompt}");
    assert!(
        prompt.contains("UTC"),
        "the tool result is in the prompt: {prompt}"
    );
}
