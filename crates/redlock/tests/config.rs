//! Every configuration that cannot work is a clear error before any request, never a panic;
//! passwords never appear in messages.

use std::time::Duration;

use redlock::{ConfigError, Error, Redlock};

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
