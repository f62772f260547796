//! A replay from a point through the proxy: `session/load` and `session/resume` take
//! v2's `replayFrom` under `_meta`, as `sessionstore acp` does; such a replay
//! begins with the partial notice, holds what `restore --format acp-updates --tail N`
//! prints, and ends with the replay-complete marker. A plain load is as before.

use agent_client_protocol::v1::schema::{LoadSessionRequest, ResumeSessionRequest};
use serde_json::{Value, json};
use sessionstore::format::REPLAY_META_KEY;

use super::{
    Seen, Setup, assert_schema_accepts, call, client, initialize, open_session, prompt_text,
    store_id,
};
use crate::support::stdout;

fn meta(cursor: Value) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("replayFrom".to_owned(), cursor);
    m
}

/// The `params` of each `session/update` the client received, in order.
fn params(seen: &Seen) -> Vec<Value> {
    seen.raw()
        .into_iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"].clone())
        .collect()
}

#[tokio::test]
async fn load_and_resume_through_the_proxy_replay_from_a_point_under_meta() {
    let s = Setup::new();
    // Two turns, recorded through the proxy.
    let seen = Seen::default();
    let mut proxy = s.proxy(&[]);
    let id = client(&mut proxy, &seen, {
        let cwd = s.cwd.clone();
        async move |cx| {
            let id = open_session(&cx, &cwd).await?;
            prompt_text(&cx, &id, "first").await?;
            prompt_text(&cx, &id, "second").await?;
            Ok(id)
        }
    })
    .await;
    assert!(proxy.wait().success());
    let session = store_id(&id);

    // A fresh proxy: a tail of two on load, the start on resume, a plain load.
    let seen = Seen::default();
    let mut proxy = s.proxy(&["--resume"]);
    let (tail, start, plain) = client(&mut proxy, &seen, {
        let cwd = s.cwd.clone();
        let seen = seen.clone();
        async move |cx| {
            call(&cx, initialize()).await?;
            let load = LoadSessionRequest::new(id.clone(), &cwd)
                .meta(meta(json!({"type": "_tail", "count": 2})));
            call(&cx, load).await?;
            let tail = params(&seen);
            seen.clear();
            let resume =
                ResumeSessionRequest::new(id.clone(), &cwd).meta(meta(json!({"type": "start"})));
            call(&cx, resume).await?;
            let start = params(&seen);
            seen.clear();
            call(&cx, LoadSessionRequest::new(id.clone(), &cwd)).await?;
            let plain = params(&seen);
            Ok((tail, start, plain))
        }
    })
    .await;
    assert!(proxy.wait().success());
    assert_schema_accepts(&seen, &s.report);

    let printed = |point: &[&str]| -> Vec<Value> {
        let sid = session.to_string();
        let mut args = vec!["restore", "--session", &sid, "--format", "acp-updates"];
        args.extend_from_slice(point);
        let out = s.t.bin().args(args).output();
        assert!(out.status.success(), "{}", crate::support::stderr(&out));
        stdout(&out)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["params"].clone())
            .collect()
    };
    let marker = |p: &Value| p["_meta"][REPLAY_META_KEY].clone();
    let expected = printed(&["--tail", "2"]);
    assert!(expected.len() >= 2, "{expected:#?}");
    assert_eq!(
        tail[..tail.len() - 1],
        expected[..],
        "the tail is what restore --tail 2 prints"
    );
    assert_eq!(
        marker(&tail[0])["partial"]["skipped"]
            .as_u64()
            .map(|n| n > 0),
        Some(true)
    );
    assert_eq!(
        marker(tail.last().unwrap())["sessionUpdate"],
        "replay_complete"
    );
    let whole = printed(&[]);
    assert!(whole.len() > expected.len());
    assert_eq!(
        start[..start.len() - 1],
        whole[..],
        "from the start: the whole history"
    );
    assert_eq!(
        marker(start.last().unwrap()),
        json!({"sessionUpdate": "replay_complete"})
    );
    assert_eq!(plain, whole, "a plain load is the whole history, no marker");
}
