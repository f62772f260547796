//! What sessions cost, on either engine: a turn's tokens and a session's latest cost
//! and context, recorded through the library and summed by the database for `usage`.

use serde_json::json;
use sessionstore::model::{ToolsHost, TurnEnd, TurnUsage};
use sessionstore::store::Since;
use sessionstore::store::Verify;
use sessionstore::turns::Update;

use super::common::session;
use crate::support::Whole;
use crate::support::{TestStore, conformance, json as json_of, user_text};

conformance!(a_turns_tokens_and_a_sessions_cost_are_recorded_and_summed);

/// Two turns with usage (one reporting 0 thought tokens, which stays 0), one without,
/// two `usage_update`s (the second without a cost, which leaves the cost); the turns
/// read back with their usage, the report sums by kind (`null` for a kind none
/// reported), `--since` in the future counts nothing, the session with no turn is all
/// `null`, and `verify` agrees with the log.
async fn a_turns_tokens_and_a_sessions_cost_are_recorded_and_summed(b: TestStore) {
    let store = b.open().await;
    let a = session(&store, ToolsHost::Local).await;
    let quiet = session(&store, ToolsHost::Local).await;
    let usages = [
        Some(TurnUsage {
            input_tokens: Some(1_000_000_000_000),
            output_tokens: Some(7),
            thought_tokens: Some(0),
            total_tokens: Some(1_000_000_000_007),
            ..TurnUsage::default()
        }),
        None,
        Some(TurnUsage {
            input_tokens: Some(5),
            output_tokens: Some(1),
            cached_write_tokens: Some(2),
            total_tokens: Some(8),
            ..TurnUsage::default()
        }),
    ];
    let updates = [
        Some(
            json!({"sessionUpdate": "usage_update", "used": 10, "size": 100,
            "cost": {"amount": 1.5, "currency": "EUR"}}),
        ),
        None,
        Some(json!({"sessionUpdate": "usage_update", "used": 30, "size": 100})),
    ];
    for (usage, update) in usages.iter().zip(&updates) {
        let message = store.send(a, user_text("go")).await.unwrap().id;
        let turn = store.begin_turn(a, vec![message]).await.unwrap();
        if let Some(update) = update {
            let update = Update::from_value(update).unwrap();
            store.record(a, vec![update]).await.unwrap();
        }
        let end = TurnEnd::Stopped {
            stop_reason: "end_turn".to_owned(),
        };
        store.end_turn(a, turn.id, end, *usage).await.unwrap();
    }
    let turns = store.all_turns(a).await.unwrap();
    assert_eq!(
        turns.iter().map(|t| t.usage).collect::<Vec<_>>(),
        usages.to_vec()
    );
    let report = store.usage(vec![a], None).await.unwrap();
    let expected = json!({"sessions": [{"id": a.to_string(), "title": "go", "turns": 3,
            "inputTokens": 1_000_000_000_005_u64, "outputTokens": 8, "thoughtTokens": 0,
            "cachedReadTokens": null, "cachedWriteTokens": 2,
            "totalTokens": 1_000_000_000_015_u64,
            "cost": {"amount": 1.5, "currency": "EUR"}, "context": {"used": 30, "size": 100}}],
        "total": {"turns": 3, "inputTokens": 1_000_000_000_005_u64, "outputTokens": 8,
            "thoughtTokens": 0, "cachedReadTokens": null, "cachedWriteTokens": 2,
            "totalTokens": 1_000_000_000_015_u64}});
    assert_eq!(serde_json::to_value(&report).unwrap(), expected);
    let later = Since::parse("2999-12-31").unwrap();
    let none = store.usage(vec![a], Some(later)).await.unwrap();
    assert_eq!(none.sessions[0].turns, 0);
    assert_eq!(none.total.tokens, Default::default());
    assert_eq!(none.sessions[0].cost, report.sessions[0].cost);
    let report = store.verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "{:?}", report.problems);
    drop(store);

    // The binary reports the same, most recently updated first.
    let all = json_of(&b.run(&["usage", "--json"]));
    assert_eq!(all["sessions"][0], expected["sessions"][0]);
    assert_eq!(
        all["sessions"][1],
        json!({"id": quiet.to_string(), "title": null, "turns": 0, "inputTokens": null,
            "outputTokens": null, "thoughtTokens": null, "cachedReadTokens": null,
            "cachedWriteTokens": null, "totalTokens": null, "cost": null, "context": null})
    );
    assert_eq!(all["total"], expected["total"]);
}
