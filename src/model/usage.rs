//! What sessions cost: a turn's tokens, a session's cost and context, `usage`'s report.

use serde::{Deserialize, Serialize};

use crate::ids::SessionId;

/// The tokens an agent reported for one turn, by kind; one not reported is `None`, never 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_read_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_write_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
}

impl TurnUsage {
    /// The `usage` of a `session/prompt` result, read leniently (non-negative integers
    /// count); `None` when it reports nothing.
    pub fn of_answer(result: &serde_json::Value) -> Option<TurnUsage> {
        let usage = result.get("usage")?.as_object()?;
        let kind = |name: &str| usage.get(name).and_then(serde_json::Value::as_u64);
        let read = TurnUsage {
            input_tokens: kind("inputTokens"),
            output_tokens: kind("outputTokens"),
            thought_tokens: kind("thoughtTokens"),
            cached_read_tokens: kind("cachedReadTokens"),
            cached_write_tokens: kind("cachedWriteTokens"),
            total_tokens: kind("totalTokens"),
        };
        (read != TurnUsage::default()).then_some(read)
    }

    /// The kinds in the order of the `turns` columns.
    pub fn kinds(&self) -> [Option<u64>; 6] {
        [
            self.input_tokens,
            self.output_tokens,
            self.thought_tokens,
            self.cached_read_tokens,
            self.cached_write_tokens,
            self.total_tokens,
        ]
    }

    /// From the kinds in column order.
    pub fn from_kinds(k: [Option<u64>; 6]) -> TurnUsage {
        TurnUsage {
            input_tokens: k[0],
            output_tokens: k[1],
            thought_tokens: k[2],
            cached_read_tokens: k[3],
            cached_write_tokens: k[4],
            total_tokens: k[5],
        }
    }
}

/// What a session's `usage_update`s said: the latest context window and the latest
/// cost (ACP's running total).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionFigures {
    pub cost: Option<Cost>,
    pub context: Option<Context>,
}

/// A session's cost as its agent reported it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cost {
    pub amount: f64,
    pub currency: String,
}

/// A session's context window as its agent reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Context {
    pub used: u64,
    pub size: u64,
}

/// What `usage` reports: each session's turns and tokens, and their total.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageReport {
    pub sessions: Vec<SessionUsage>,
    pub total: UsageTotal,
}

/// One session's usage: its turns from the report's start, their tokens summed, and
/// the latest cost and context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionUsage {
    pub id: SessionId,
    pub title: Option<String>,
    pub turns: u64,
    #[serde(flatten)]
    pub tokens: TokenSums,
    pub cost: Option<Cost>,
    pub context: Option<Context>,
}

/// The sessions' turns and tokens, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UsageTotal {
    pub turns: u64,
    #[serde(flatten)]
    pub tokens: TokenSums,
}

/// Tokens summed by kind; a kind no counted turn reported is `None` (`null`), never 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenSums {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub thought_tokens: Option<u64>,
    pub cached_read_tokens: Option<u64>,
    pub cached_write_tokens: Option<u64>,
    pub total_tokens: Option<u64>,
}

impl TokenSums {
    /// The kinds in column order, as [`TurnUsage::kinds`].
    pub fn kinds(&self) -> [Option<u64>; 6] {
        [
            self.input_tokens,
            self.output_tokens,
            self.thought_tokens,
            self.cached_read_tokens,
            self.cached_write_tokens,
            self.total_tokens,
        ]
    }

    /// From the kinds in column order.
    pub fn from_kinds(k: [Option<u64>; 6]) -> TokenSums {
        TokenSums {
            input_tokens: k[0],
            output_tokens: k[1],
            thought_tokens: k[2],
            cached_read_tokens: k[3],
            cached_write_tokens: k[4],
            total_tokens: k[5],
        }
    }

    /// Adds `other` in, kind by kind: a kind stays `None` only where both are.
    pub fn add(&mut self, other: &TokenSums) {
        let mut k = self.kinds();
        for (mine, theirs) in k.iter_mut().zip(other.kinds()) {
            *mine = match (*mine, theirs) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
            };
        }
        *self = TokenSums::from_kinds(k);
    }
}
