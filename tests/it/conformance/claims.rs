//! One owner per session on both engines: `Store::claim_session` refuses a session
//! another claim holds with `SessionOpenElsewhere`, lets different sessions be held
//! side by side on one database, and lets a session go when its claim is dropped. A
//! claim writes nothing: the store's own writers need none and go on beside it.

use sessionstore::model::NewSession;
use sessionstore::store::Outgoing;
use sessionstore::store::{Access, Verify};
use sessionstore::{Error, Store};

use crate::support::{TestStore, conformance, snapshot};

conformance!(
    a_claimed_session_is_refused_elsewhere_until_its_claim_is_dropped,
    a_claim_writes_nothing_and_is_refused_on_a_read_only_store,
);

async fn a_claimed_session_is_refused_elsewhere_until_its_claim_is_dropped(b: TestStore) {
    let one = b.open().await;
    let other = b.open().await;
    let first = one.create_session(NewSession::default()).await.unwrap().id;
    let second = one.create_session(NewSession::default()).await.unwrap().id;

    let held = one.claim_session(first).await.unwrap();
    assert_eq!(held.session(), first);
    let refused = other.claim_session(first).await.unwrap_err();
    assert!(
        matches!(refused, Error::SessionOpenElsewhere { session } if session == first),
        "{refused:?}"
    );
    assert_eq!(refused.kind(), "session_open_elsewhere");
    assert!(refused.to_string().contains("open elsewhere"), "{refused}");
    assert!(
        !refused.is_refused(),
        "a failure that may pass later: exit 1"
    );
    // The same store asking again is refused too: one claim, one owner.
    assert!(matches!(
        one.claim_session(first).await,
        Err(Error::SessionOpenElsewhere { .. })
    ));

    // Two holders with different sessions share the database.
    let beside = other.claim_session(second).await.unwrap();
    assert!(matches!(
        one.claim_session(second).await,
        Err(Error::SessionOpenElsewhere { .. })
    ));
    // Writers do not need a claim: a write to a session held elsewhere goes through.
    other
        .send(first, Outgoing::user("beside the claim"))
        .await
        .unwrap();

    drop(held);
    let taken_over = other.claim_session(first).await.unwrap();
    drop(beside);
    let back = one.claim_session(second).await.unwrap();
    drop((taken_over, back));
    let report = one.verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "{:?}", report.problems);
}

async fn a_claim_writes_nothing_and_is_refused_on_a_read_only_store(b: TestStore) {
    let store = b.open().await;
    let session = store
        .create_session(NewSession::default())
        .await
        .unwrap()
        .id;
    drop(store);
    let reader = Store::open_as(b.config.clone(), Access::ReadOnly)
        .await
        .unwrap();
    assert!(
        matches!(reader.claim_session(session).await, Err(Error::ReadOnly(_))),
        "a claim is for a writer"
    );
    drop(reader);
    if !b.is_postgres() {
        // Every SQLite connection closed, so the folder is at rest: a claim and its
        // release leave every file as it was and nothing beside the database.
        let store = Store::open(b.config.clone()).await.unwrap();
        drop(store);
        let settled = snapshot(b.dir.path());
        let store = Store::open(b.config.clone()).await.unwrap();
        let claim = store.claim_session(session).await.unwrap();
        drop(claim);
        drop(store);
        assert!(
            snapshot(b.dir.path()) == settled,
            "a claim changed or added a file: {:?}",
            snapshot(b.dir.path()).keys().collect::<Vec<_>>()
        );
    }
}
