//! One acquisition as plain data (`Redlock::request`), the way every package reaches the core:
//! each kind takes what its typed method takes and keeps its promise, and a request whose
//! resources do not fit its kind is refused before anything is sent.

mod common;

use std::time::Duration;

use common::{cluster, connected, pttl_on, value_on};
use redquorum::{Acquired, ConfigError, Error, Kind, Request, Retry};

const TTL: Duration = Duration::from_secs(10);

fn lock(acquired: Acquired) -> redquorum::Lock {
    match acquired {
        Acquired::Lock(lock) => lock,
        other => panic!("expected a lock, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_request_holds_what_its_typed_method_holds() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let once = |kind: Kind, resources: &[&str]| {
        Request::new(kind, resources.iter().copied(), TTL).retry(Retry::once())
    };

    // One resource: the standard wire format, its value on every node, for the TTL asked.
    let one = lock(
        redlock
            .request(&once(Kind::Lock, &["r"]))
            .await
            .expect("free"),
    );
    for node in cluster.iter() {
        assert_eq!(value_on(node, "r").as_deref(), Some(one.value()));
        assert!(pttl_on(node, "r") > 5_000, "the request's TTL reached PX");
    }
    assert!(
        redlock.request(&once(Kind::Lock, &["r"])).await.is_err(),
        "a held lock is not granted again"
    );
    // A set excludes a lock on any of its members, and the other way round.
    assert!(
        redlock
            .request(&once(Kind::Lock, &["q", "r"]))
            .await
            .is_err()
    );
    one.release().await;
    let set = lock(
        redlock
            .request(&once(Kind::Lock, &["r", "q"]))
            .await
            .expect("free"),
    );
    assert_eq!(set.resources(), ["q", "r"], "a set is taken sorted");
    assert!(redlock.try_acquire("q", TTL).await.is_err());
    set.release().await;

    // Readers together, a writer alone.
    let reader = lock(
        redlock
            .request(&once(Kind::Read, &["rw"]))
            .await
            .expect("free"),
    );
    let other = lock(
        redlock
            .request(&once(Kind::Read, &["rw"]))
            .await
            .expect("readers share"),
    );
    assert!(reader.is_read() && other.is_read());
    assert!(redlock.request(&once(Kind::Write, &["rw"])).await.is_err());
    reader.release().await;
    other.release().await;
    let writer = lock(
        redlock
            .request(&once(Kind::Write, &["rw"]))
            .await
            .expect("free"),
    );
    assert!(!writer.is_read());
    assert!(redlock.request(&once(Kind::Read, &["rw"])).await.is_err());
    writer.release().await;

    // A semaphore: two permits, two holders, no third.
    let permits = Kind::Permit { permits: 2 };
    let first = lock(
        redlock
            .request(&once(permits.clone(), &["pool"]))
            .await
            .expect("free"),
    );
    let second = lock(
        redlock
            .request(&once(permits.clone(), &["pool"]))
            .await
            .expect("free"),
    );
    assert_ne!(first.permit(), second.permit());
    assert!(redlock.request(&once(permits, &["pool"])).await.is_err());

    // A campaign: the leadership, kept alive, read by observers under the identity given.
    let campaign = Kind::Campaign {
        identity: "me".into(),
    };
    let leading = match redlock.request(&once(campaign, &["election"])).await {
        Ok(Acquired::KeptAlive(guard)) => guard,
        other => panic!("expected the leadership, kept alive, got {other:?}"),
    };
    let leader = redlock.leader("election").await.expect("a leader");
    assert_eq!(leader.identity, "me");
    leading.release().await.expect("still leading");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_does_not_fit_its_kind_is_refused_before_anything_is_sent() {
    let mut cluster = cluster(1);
    let redlock = connected(&cluster).await;
    let refused = |result: Result<Acquired, Error>| match result {
        Err(Error::Config(e)) => e,
        other => panic!("expected a configuration error, got {other:?}"),
    };
    let none: [&str; 0] = [];
    assert_eq!(
        refused(redlock.request(&Request::new(Kind::Lock, none, TTL)).await),
        ConfigError::NoResources
    );
    for kind in [Kind::Read, Kind::Write, Kind::Permit { permits: 2 }] {
        let two = Request::new(kind.clone(), ["a", "b"], TTL);
        let error = refused(redlock.request(&two).await);
        assert!(
            error.to_string().contains("exactly one resource"),
            "{kind}: {error}"
        );
    }
    assert!(
        refused(
            redlock
                .request(&Request::new(Kind::Permit { permits: 0 }, ["a"], TTL))
                .await
        )
        .to_string()
        .contains("permits")
    );
    // Nothing reached the node: no key of any of those names.
    for key in ["a", "b"] {
        assert_eq!(value_on(cluster.node(0), key), None);
    }
}

#[test]
fn a_kind_is_read_from_its_name_as_every_package_spells_it() {
    assert_eq!(Kind::named("lock", None, None), Ok(Kind::Lock));
    assert_eq!(
        Kind::named("lock", Some(3), None),
        Ok(Kind::Permit { permits: 3 })
    );
    assert_eq!(Kind::named("read", None, None), Ok(Kind::Read));
    assert_eq!(Kind::named("write", None, None), Ok(Kind::Write));
    assert_eq!(
        Kind::named("campaign", None, Some("me".into())),
        Ok(Kind::Campaign {
            identity: "me".into()
        })
    );
    for (name, permits) in [("read", Some(2)), ("write", Some(2)), ("campaign", Some(2))] {
        let error = Kind::named(name, permits, None).expect_err("no permits but a lock's");
        assert!(error.to_string().contains("permits"), "{error}");
    }
    let error = Kind::named("mutex", None, None).expect_err("not a kind");
    assert!(error.to_string().contains("\"mutex\""), "{error}");
}
