//! Every configuration that cannot work is a clear error before any request, never a panic;
//! passwords never appear in messages. Huge durations are refused where they cannot work, and
//! mean "forever" where that has a meaning.

mod common;

use std::time::Duration;

use common::cluster;
use redquorum::{ConfigError, Error, HoldOptions, LossReason, Redlock, Retry};

/// The documented bounds (`redquorum::defaults::LONGEST_CONNECT_TIMEOUT`, `LONGEST_FENCE_RETENTION`).
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(3600);
const MAX_FENCE_RETENTION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn config_error(result: Result<Redlock, Error>) -> ConfigError {
    match result {
        Err(Error::Config(e)) => e,
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[test]
fn an_empty_server_list_is_refused() {
    assert_eq!(config_error(Redlock::from_list("")), ConfigError::NoServers);
    assert_eq!(
        config_error(Redlock::from_list(" , ,")),
        ConfigError::NoServers
    );
    let none: [&str; 0] = [];
    assert_eq!(
        config_error(Redlock::builder(none).build()),
        ConfigError::NoServers
    );
}

#[test]
fn a_server_listed_twice_is_refused() {
    let err = config_error(Redlock::from_list(
        "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7001/3",
    ));
    assert_eq!(err, ConfigError::DuplicateServer("127.0.0.1:7001".into()));
}

#[test]
fn an_unparsable_url_is_refused_without_showing_its_password() {
    for url in [
        "http://127.0.0.1:6379",
        "not a url",
        "redis://:hunter2@127.0.0.1:notaport",
    ] {
        let err = config_error(Redlock::from_list(url));
        assert!(
            matches!(err, ConfigError::InvalidUrl { .. }),
            "{url}: {err:?}"
        );
        let message = Error::from(err).to_string();
        assert!(!message.contains("hunter2"), "{message}");
        assert!(message.contains("invalid server URL"), "{message}");
    }
}

#[test]
fn every_supported_url_form_is_accepted() {
    let redlock = Redlock::from_list(
        "redis://127.0.0.1:7001, rediss://user:secret@db.example:6380/2, redis+unix:///run/redis.sock?db=1",
    )
    .expect("valid URLs");
    assert_eq!(
        redlock.nodes(),
        vec!["127.0.0.1:7001", "db.example:6380/2", "/run/redis.sock/1"],
        "addresses are shown without credentials"
    );
    assert_eq!(redlock.quorum(), 2);
}

#[test]
fn out_of_range_settings_are_refused() {
    let b = || Redlock::builder(["redis://127.0.0.1:7001"]);
    assert!(matches!(
        config_error(b().node_timeout(Duration::ZERO).build()),
        ConfigError::InvalidSetting {
            setting: "node_timeout",
            ..
        }
    ));
    assert!(matches!(
        config_error(b().connect_timeout(Duration::ZERO).build()),
        ConfigError::InvalidSetting {
            setting: "connect_timeout",
            ..
        }
    ));
    for factor in [-0.1, 1.0, f64::NAN] {
        assert!(matches!(
            config_error(b().drift_factor(factor).build()),
            ConfigError::InvalidSetting {
                setting: "drift_factor",
                ..
            }
        ));
    }
}

#[tokio::test]
async fn a_ttl_that_leaves_no_validity_is_refused_before_any_request() {
    // Nothing listens on port 1: a request would fail as unreachable, not as a config error.
    let redlock = Redlock::from_list("redis://127.0.0.1:1").unwrap();
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(500),
        Duration::from_millis(2),
    ] {
        let err = redlock.try_acquire("res", ttl).await.unwrap_err();
        assert!(
            matches!(err, Error::Config(ConfigError::InvalidTtl { .. })),
            "{ttl:?}: {err:?}"
        );
    }
    let err = redlock
        .extend_value("res", "v", Duration::ZERO)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::InvalidTtl { .. })),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_reported_without_its_password() {
    let redlock = Redlock::from_list("redis://user:hunter2@127.0.0.1:1").unwrap();
    let err = redlock
        .try_acquire("res", Duration::from_secs(1))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("unreachable"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
    assert!(!format!("{err:?}").contains("hunter2"), "{err:?}");
}

/// The setting a configuration error names, checking that its message is one line naming it.
fn refused_setting(result: Result<Redlock, Error>) -> &'static str {
    let err = config_error(result);
    let message = Error::from(err.clone()).to_string();
    match err {
        ConfigError::InvalidSetting { setting, .. } => {
            assert!(!message.contains('\n'), "{message}");
            assert!(message.contains(setting), "{message}");
            setting
        }
        other => panic!("expected an invalid setting, got {other:?}"),
    }
}

#[test]
fn timeouts_too_long_to_mean_anything_are_refused_naming_their_bound() {
    let b = || Redlock::builder(["redis://127.0.0.1:7001"]);
    for (builder, setting, bound) in [
        (
            b().node_timeout(Duration::MAX),
            "node_timeout",
            "max_ttl (60s)",
        ),
        (
            b().max_ttl(Duration::from_secs(5))
                .node_timeout(Duration::from_secs(6)),
            "node_timeout",
            "max_ttl (5s)",
        ),
        (
            b().connect_timeout(Duration::MAX),
            "connect_timeout",
            "3600s",
        ),
        (
            b().connect_timeout(MAX_CONNECT_TIMEOUT + Duration::from_nanos(1)),
            "connect_timeout",
            "3600s",
        ),
        (b().max_ttl(Duration::MAX), "max_ttl", "a year"),
    ] {
        let result = builder.build();
        let message = result.as_ref().err().map(ToString::to_string);
        assert_eq!(refused_setting(result), setting);
        let message = message.unwrap_or_default();
        assert!(message.contains(bound), "{message}");
    }
    // The bounds themselves are fine.
    b().node_timeout(Duration::from_secs(60))
        .connect_timeout(MAX_CONNECT_TIMEOUT)
        .build()
        .expect("a node timeout of max_ttl and the longest connect timeout");
}

#[tokio::test]
async fn a_ttl_of_duration_max_is_refused_everywhere_before_any_request() {
    let redlock = Redlock::from_list("redis://127.0.0.1:1").unwrap();
    let huge = Duration::MAX;
    let results = [
        redlock.try_acquire("res", huge).await.map(drop),
        redlock.acquire("res", huge).await.map(drop),
        redlock.acquire_many(&["a", "b"], huge).await.map(drop),
        redlock.extend_value("res", "v", huge).await.map(drop),
    ];
    for result in results {
        assert!(
            matches!(result, Err(Error::Config(ConfigError::InvalidTtl { .. }))),
            "{result:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_retry_durations_mean_forever_and_never_panic() {
    let cluster = cluster(3);
    let ttl = Duration::from_secs(10);
    for fair in [false, true] {
        // The patient node timeout: with a delay that never polls, the first attempt is the only
        // one (unless a release wakes the waiter).
        let redlock = Redlock::builder(cluster.urls())
            .node_timeout(common::PATIENT_NODE_TIMEOUT)
            .fair(fair)
            .build()
            .unwrap();
        // A delay of Duration::MAX: never poll. The first attempt wins a free lock.
        let never_polls = Retry::forever().delay(Duration::MAX);
        let lock = redlock
            .acquire_with("huge", ttl, &never_polls)
            .await
            .unwrap_or_else(|e| panic!("fair {fair}: {e}"));
        // Busy: max_wait still ends the wait, however long the delay.
        let other = Redlock::builder(cluster.urls())
            .node_timeout(common::PATIENT_NODE_TIMEOUT)
            .fair(fair)
            .build()
            .unwrap();
        let bounded = never_polls.clone().max_wait(Duration::from_millis(300));
        let err = tokio::time::timeout(
            Duration::from_secs(30),
            other.acquire_with("huge", ttl, &bounded),
        )
        .await
        .unwrap_or_else(|_| panic!("fair {fair}: max_wait did not end a Duration::MAX delay"))
        .unwrap_err();
        assert!(err.is_busy(), "fair {fair}: {err}");
        // A max_wait of Duration::MAX is no deadline: the waiter gets the lock once it is freed.
        let forever = Retry::forever()
            .delay(Duration::from_millis(20))
            .max_wait(Duration::MAX);
        let waiting = tokio::spawn(async move { other.acquire_with("huge", ttl, &forever).await });
        lock.release().await;
        let lock = tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .unwrap_or_else(|_| panic!("fair {fair}: never acquired"))
            .unwrap()
            .unwrap_or_else(|e| panic!("fair {fair}: {e}"));
        lock.release().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_retention_of_duration_max_keeps_counters_100_years() {
    let cluster = cluster(3);
    let redlock = Redlock::builder(cluster.urls())
        .fence_retention(Duration::MAX)
        .build()
        .unwrap();
    let mut lock = redlock
        .acquire("kept", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(lock.fence().await.ok().is_some());
    lock.release().await;
    redlock.settle().await;
    let years_100_ms = i64::try_from(MAX_FENCE_RETENTION.as_millis()).unwrap();
    let stored = cluster
        .iter()
        .filter(|node| {
            let pttl: i64 = node
                .cli(&["PTTL", "redlock-fence:kept"])
                .ok()
                .and_then(|ms| ms.parse().ok())
                .unwrap_or(-2);
            pttl > years_100_ms - 3_600_000 && pttl <= years_100_ms
        })
        .count();
    assert!(stored >= 2, "the counter is kept 100 years on a quorum");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_hold_options_are_refused_or_mean_no_bound() {
    let cluster = cluster(3);
    let redlock = common::manager(&cluster);
    let ttl = Duration::from_secs(10);
    for (options, ttl_kept) in [
        (HoldOptions::new(), Duration::MAX),
        (HoldOptions::new().interval(Duration::MAX), ttl),
    ] {
        let lock = redlock.acquire("hold", ttl).await.unwrap();
        let guard = lock.keep_alive_with(ttl_kept, options.clone());
        tokio::time::timeout(Duration::from_secs(30), guard.lost())
            .await
            .unwrap_or_else(|_| panic!("{options:?}, {ttl_kept:?}: not reported at once"));
        assert!(
            matches!(guard.loss_reason(), Some(LossReason::Invalid(_))),
            "{:?}",
            guard.loss_reason()
        );
        // Lost: the release says so, and still deletes the keys.
        let _ = guard.release().await;
    }
    // No end to the hold: kept alive like without the option.
    let lock = redlock.acquire("hold", ttl).await.unwrap();
    let guard = lock.keep_alive_with(
        ttl,
        HoldOptions::new()
            .max_hold(Duration::MAX)
            .interval(Duration::from_millis(100)),
    );
    assert!(
        common::eventually(Duration::from_secs(30), || guard.extensions() >= 2).await,
        "not extended"
    );
    assert!(!guard.is_lost(), "{:?}", guard.loss_reason());
    guard.release().await.unwrap();
}

/// `Settings` (what the Python and Node packages fill from their users' keywords) is the
/// builder's methods applied one by one: each value given reaches the manager, each check is
/// the builder's, and what is not given keeps the builder's default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_as_plain_data_are_the_builders_methods() {
    use redquorum::Settings;
    let cluster = cluster(1);
    // Out of range: the builder's own refusal, naming the setting.
    for (settings, setting) in [
        (
            Settings {
                node_timeout: Some(Duration::ZERO),
                ..Settings::default()
            },
            "node_timeout",
        ),
        (
            Settings {
                drift_factor: Some(2.0),
                ..Settings::default()
            },
            "drift_factor",
        ),
        (
            Settings {
                lock_delay: Some(Duration::from_secs(3600)),
                max_ttl: Some(Duration::from_secs(10)),
                ..Settings::default()
            },
            "lock_delay",
        ),
    ] {
        let built = Redlock::builder(cluster.urls()).settings(&settings).build();
        assert_eq!(refused_setting(built), setting);
    }
    // Given values reach the manager: no fencing token, a TTL bound of 2 s, one attempt.
    let redlock = Redlock::builder(cluster.urls())
        .settings(&Settings {
            fencing: Some(false),
            max_ttl: Some(Duration::from_secs(2)),
            retry: Some(Retry::once()),
            ..Settings::default()
        })
        .build()
        .expect("valid settings");
    assert!(matches!(
        redlock.acquire("r", Duration::from_secs(3)).await,
        Err(Error::Config(ConfigError::InvalidTtl { .. }))
    ));
    let mut lock = redlock
        .acquire("r", Duration::from_secs(1))
        .await
        .expect("free");
    assert!(lock.fence().await.is_err(), "fencing is off");
    match redlock.acquire("r", Duration::from_secs(1)).await {
        Err(Error::NotAcquired { attempts, .. }) => assert_eq!(attempts, 1, "Retry::once"),
        other => panic!("a held lock is not granted: {other:?}"),
    }
    lock.release().await;
    // Nothing given: the builder's defaults (fencing on).
    let defaults = Redlock::builder(cluster.urls())
        .settings(&Settings::default())
        .build()
        .expect("defaults");
    let mut lock = defaults
        .acquire("d", Duration::from_secs(1))
        .await
        .expect("free");
    assert!(lock.fence().await.is_ok(), "fencing is on by default");
    lock.release().await;
}
