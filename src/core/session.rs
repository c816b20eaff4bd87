//! The conversation the agent owns: system prompt, history, token accounting and eviction.
//!
//! Only the session owner (the agent) evicts; backends read the session and
//! report usage. Eviction runs in two passes:
//! first whole old turns, oldest first; then assistant/tool pairs inside the
//! current turn. The system prompt, the current question and the last
//! assistant message are never evicted, and an assistant message that asked
//! for tools always leaves together with every result that answers it.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::message::{Message, Role};

/// The conversation state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Session {
    /// Kept apart from `messages` so it can never be evicted.
    pub system_prompt: String,
    pub system_tokens: u32,
    pub messages: Vec<Message>,
    /// Tokens the whole conversation occupied at the last generation (prompt + completion).
    pub total_tokens: u64,
    /// Prompt tokens of the last generation.
    pub last_prompt_tokens: u64,
    /// Completion tokens of the last generation.
    pub last_assistant_message_tokens: u64,
}

/// Which messages to drop, as sorted, non-overlapping index ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionPlan {
    pub ranges: Vec<Range<usize>>,
    pub tokens_freed: u64,
}

impl Session {
    pub fn new(system_prompt: impl Into<String>) -> Self {
        Session {
            system_prompt: system_prompt.into(),
            ..Session::default()
        }
    }

    /// Sum of the per-message token counts plus the system prompt.
    pub fn estimated_tokens(&self) -> u64 {
        let messages: u64 = self.messages.iter().map(|m| u64::from(m.tokens)).sum();
        messages + u64::from(self.system_tokens)
    }

    /// Clears the history, keeping the system prompt.
    pub fn clear(&mut self) {
        self.messages.clear();
        self.total_tokens = u64::from(self.system_tokens);
        self.last_prompt_tokens = 0;
        self.last_assistant_message_tokens = 0;
    }

    fn last_index_of(&self, role: Role) -> Option<usize> {
        self.messages.iter().rposition(|m| m.role == role)
    }

    /// Plans the removal of at least `tokens_needed` tokens, or `None` when even
    /// evicting everything that may go would not free that much.
    pub fn plan_eviction(&self, tokens_needed: u64) -> Option<EvictionPlan> {
        let plan = self.plan_up_to(tokens_needed)?;
        (plan.tokens_freed >= tokens_needed).then_some(plan)
    }

    /// Plans the removal of everything that may go, for when estimates and the
    /// provider disagree; `None` when nothing may be evicted.
    pub fn plan_full_eviction(&self) -> Option<EvictionPlan> {
        self.plan_up_to(u64::MAX)
    }

    /// Takes evictable ranges in eviction order until `tokens_needed` are freed
    /// or nothing evictable is left.
    fn plan_up_to(&self, tokens_needed: u64) -> Option<EvictionPlan> {
        let current_user = self.last_index_of(Role::User);
        let last_assistant = self.last_index_of(Role::Assistant);
        let mut candidates = old_turns(&self.messages, current_user);
        candidates.extend(current_turn_pairs(
            &self.messages,
            current_user,
            last_assistant,
        ));
        let mut ranges = Vec::new();
        let mut tokens_freed = 0;
        for range in candidates {
            if tokens_freed >= tokens_needed {
                break;
            }
            tokens_freed += self.messages[range.clone()]
                .iter()
                .map(|m| u64::from(m.tokens))
                .sum::<u64>();
            ranges.push(range);
        }
        if ranges.is_empty() {
            return None;
        }
        ranges.sort_by_key(|r| r.start);
        Some(EvictionPlan {
            ranges,
            tokens_freed,
        })
    }

    /// Removes the planned ranges and fixes the token totals.
    pub fn evict(&mut self, plan: &EvictionPlan) {
        for range in plan.ranges.iter().rev() {
            self.messages.drain(range.clone());
        }
        self.total_tokens = self.total_tokens.saturating_sub(plan.tokens_freed);
    }
}

/// Whole turns (a user message up to the next one) that end before the current question.
fn old_turns(messages: &[Message], current_user: Option<usize>) -> Vec<Range<usize>> {
    let end = current_user.unwrap_or(0);
    let starts: Vec<usize> = (0..end)
        .filter(|&i| messages[i].role == Role::User)
        .collect();
    let mut turns = Vec::new();
    // Messages before the first user message (e.g. a restored greeting) form a turn of their own.
    if let Some(&first) = starts.first() {
        if first > 0 {
            turns.push(0..first);
        }
    }
    for (n, &start) in starts.iter().enumerate() {
        let stop = starts.get(n + 1).copied().unwrap_or(end);
        turns.push(start..stop);
    }
    turns
}

/// Assistant messages of the current turn with the tool results that answer them,
/// oldest first, never including the last assistant message.
fn current_turn_pairs(
    messages: &[Message],
    current_user: Option<usize>,
    last_assistant: Option<usize>,
) -> Vec<Range<usize>> {
    let Some(user) = current_user else {
        return Vec::new();
    };
    let mut pairs = Vec::new();
    let mut i = user + 1;
    while i < messages.len() {
        if messages[i].role != Role::Assistant || Some(i) == last_assistant {
            i += 1;
            continue;
        }
        let mut end = i + 1;
        while end < messages.len() && messages[end].role == Role::Tool {
            end += 1;
        }
        pairs.push(i..end);
        i = end;
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::message::ToolCall;
    use serde_json::json;

    fn msg(role: Role, tokens: u32) -> Message {
        let mut m = match role {
            Role::User => Message::user("u"),
            Role::Assistant => Message::assistant("a"),
            Role::System => Message::system("s"),
            Role::Tool => {
                let call = ToolCall {
                    id: "c".into(),
                    name: "t".into(),
                    arguments: json!({}),
                };
                Message::tool_result(&call, "r")
            }
        };
        m.tokens = tokens;
        m
    }

    fn session(spec: &[(Role, u32)]) -> Session {
        let mut s = Session::new("sys");
        s.messages = spec.iter().map(|&(r, t)| msg(r, t)).collect();
        s.total_tokens = s.estimated_tokens();
        s
    }

    use Role::{Assistant as A, Tool as T, User as U};

    #[test]
    fn old_turns_go_first_oldest_first() {
        let s = session(&[(U, 10), (A, 10), (U, 20), (A, 20), (U, 5)]);
        let plan = s.plan_eviction(15).unwrap();
        assert_eq!(plan.ranges, vec![0..2]);
        assert_eq!(plan.tokens_freed, 20);
    }

    #[test]
    fn several_old_turns_when_one_is_not_enough() {
        let s = session(&[(U, 10), (A, 10), (U, 20), (A, 20), (U, 5)]);
        let plan = s.plan_eviction(30).unwrap();
        assert_eq!(plan.ranges, vec![0..2, 2..4]);
    }

    #[test]
    fn current_turn_tool_pairs_go_second_and_last_answer_is_kept() {
        // old turn, then current question with two tool rounds and a final answer.
        let s = session(&[
            (U, 5),
            (A, 5),
            (U, 5),
            (A, 10),
            (T, 100),
            (A, 10),
            (T, 100),
            (A, 10),
        ]);
        let plan = s.plan_eviction(50).unwrap();
        assert_eq!(plan.ranges, vec![0..2, 3..5]);
        let mut evicted = s.clone();
        evicted.evict(&plan);
        let roles: Vec<Role> = evicted.messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, vec![U, A, T, A]);
    }

    #[test]
    fn protected_messages_are_never_planned() {
        let s = session(&[(U, 1000), (A, 1000)]);
        assert_eq!(s.plan_eviction(1), None);
    }

    #[test]
    fn tool_results_leave_with_their_call() {
        let s = session(&[(U, 5), (A, 5), (T, 5), (T, 5), (A, 5), (T, 5), (A, 5)]);
        let plan = s.plan_eviction(1).unwrap();
        assert_eq!(plan.ranges, vec![1..4]);
    }

    #[test]
    fn full_eviction_takes_everything_evictable() {
        let s = session(&[(U, 10), (A, 10), (U, 5), (A, 5), (T, 5), (A, 5)]);
        assert_eq!(s.plan_eviction(1000), None);
        let plan = s.plan_full_eviction().unwrap();
        assert_eq!(plan.ranges, vec![0..2, 3..5]);
        assert_eq!(plan.tokens_freed, 30);
        assert_eq!(session(&[(U, 10)]).plan_full_eviction(), None);
    }

    #[test]
    fn evict_fixes_totals() {
        let mut s = session(&[(U, 10), (A, 10), (U, 7)]);
        let plan = s.plan_eviction(5).unwrap();
        s.evict(&plan);
        assert_eq!(s.messages.len(), 1);
        assert_eq!(s.total_tokens, 7);
    }
}
