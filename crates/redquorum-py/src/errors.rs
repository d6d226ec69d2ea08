//! The library's errors as Python exceptions that code can branch on, one class per [`Cause`].
//!
//! The classes live in Python (`redquorum/errors.py`, where multiple inheritance such as
//! `ConfigError(RedquorumError, ValueError)` is natural and their docstrings are read); this
//! module only chooses the class and fills its attributes. The message is the library's own
//! `Display`, which names every node without credentials, made one line.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use redquorum::{Cause, Error, Released, RoundFailure};

use crate::exit;

/// The module that defines the exception classes.
const MODULE: &str = "redquorum.errors";

/// The Python exception class `name` of [`MODULE`], raised with `message` and `attributes`.
/// Once the interpreter's exit has begun, a plain `RuntimeError` (built without the GIL; the
/// thread that would raise it never runs Python again: `exit` invariant 2).
pub(crate) fn raise(name: &str, message: &str, attributes: &[(&str, Py<PyAny>)]) -> PyErr {
    let message = one_line(message);
    let exiting = || PyRuntimeError::new_err(message.clone());
    exit::attach(|py| {
        let built = (|| -> PyResult<PyErr> {
            let class = py.import(MODULE)?.getattr(name)?;
            let error = class.call1((message.as_str(),))?;
            for (key, value) in attributes {
                error.setattr(*key, value.bind(py))?;
            }
            Ok(PyErr::from_value(error))
        })();
        // The classes are part of the package: failing to build one is a broken install,
        // reported as such rather than hidden.
        built.unwrap_or_else(|e| {
            PyRuntimeError::new_err(format!("{message} (and redquorum.errors is broken: {e})"))
        })
    })
    .unwrap_or_else(exiting)
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A configuration or argument error (`ConfigError`, also a `ValueError`).
pub(crate) fn config(message: impl AsRef<str>) -> PyErr {
    raise("ConfigError", message.as_ref(), &[])
}

/// The error of an object made before a fork, used in the child (runtime invariant 1).
pub(crate) fn forked(what: &str, parent: u32) -> PyErr {
    raise(
        "ProcessForked",
        &format!(
            "{what} belongs to process {parent}, and this is a child forked from it: a lock (or a \
             watch) stays with the process that took it, and the child never extends or releases \
             the parent's; acquire anew in the child (a manager made before the fork works there)"
        ),
        &[],
    )
}

/// The Python class for a round that failed with `cause`.
fn class_of(cause: &Cause) -> &'static str {
    match cause {
        Cause::Busy => "LockBusy",
        Cause::Unavailable => "Unavailable",
        Cause::Quarantined { .. } => "Quarantined",
        Cause::WrongType { .. } => "WrongType",
        Cause::TooSlow => "TooSlow",
        Cause::NotHeld => "NotHeld",
        // A release left to its lock-delay came after the lock's validity: it was lost.
        _ => "LockLost",
    }
}

/// The attributes every round failure carries: its cause, resource, and every node's reply,
/// plus what the cause itself knows (a quarantine's end, a key's node).
fn round_attributes(
    py: Python<'_>,
    resource: &str,
    cause: &Cause,
    quorum: usize,
    replies: &[redquorum::NodeReply],
) -> Vec<(&'static str, Py<PyAny>)> {
    let replies: Vec<(String, String)> = replies
        .iter()
        .map(|r| (r.node.clone(), r.reply.to_string()))
        .collect();
    let mut attributes = vec![
        ("resource", resource.into_pyobject_or_none(py)),
        ("cause", cause.name().into_pyobject_or_none(py)),
        ("quorum", quorum.into_pyobject_or_none(py)),
        ("replies", replies.into_pyobject_or_none(py)),
    ];
    match cause {
        Cause::Quarantined {
            nodes, ready_in, ..
        } => {
            let ready_at = SystemTime::now()
                .checked_add(*ready_in)
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .unwrap_or(Duration::ZERO);
            attributes.push(("nodes", nodes.into_pyobject_or_none(py)));
            attributes.push(("ready_in", ready_in.as_secs_f64().into_pyobject_or_none(py)));
            attributes.push(("ready_at", ready_at.as_secs_f64().into_pyobject_or_none(py)));
        }
        Cause::WrongType { node } => attributes.push(("node", node.into_pyobject_or_none(py))),
        _ => {}
    }
    attributes
}

/// Anything `IntoPyObject` as a plain object (a conversion of these types cannot fail; if one
/// did, the attribute is `None`).
trait IntoObject {
    fn into_pyobject_or_none(self, py: Python<'_>) -> Py<PyAny>;
}

impl<T: for<'py> IntoPyObject<'py>> IntoObject for T {
    fn into_pyobject_or_none(self, py: Python<'_>) -> Py<PyAny> {
        self.into_py_any(py).unwrap_or_else(|_| py.None())
    }
}

fn round_failure(resource: &str, failure: &RoundFailure, message: &str) -> PyErr {
    let cause = failure.cause();
    let attributes =
        exit::attach(|py| round_attributes(py, resource, &cause, failure.quorum, &failure.replies))
            .unwrap_or_default();
    raise(class_of(&cause), message, &attributes)
}

/// The Python exception for a library error.
pub(crate) fn from_error(error: Error) -> PyErr {
    let message = error.message(redquorum::Reader::Python);
    match &error {
        Error::Config(_) => config(message),
        Error::NotAcquired {
            resource, failure, ..
        } => round_failure(resource, failure, &message),
        Error::LockLost {
            resource,
            failure: Some(failure),
        } => {
            let err = round_failure(resource, failure, &message);
            // An extension that failed for any reason but "not held" still lost the lock.
            if failure.cause() == Cause::NotHeld {
                err
            } else {
                let attributes = exit::attach(|py| {
                    round_attributes(
                        py,
                        resource,
                        &failure.cause(),
                        failure.quorum,
                        &failure.replies,
                    )
                })
                .unwrap_or_default();
                raise("LockLost", &message, &attributes)
            }
        }
        Error::LockLost {
            resource,
            failure: None,
        } => lost(resource, &message, "validity_ran_out"),
        Error::HoldLost { resource, reason } => lost(resource, &message, reason.name()),
        _ => raise("RedquorumError", &message, &[]),
    }
}

fn lost(resource: &str, message: &str, cause: &str) -> PyErr {
    let attributes = exit::attach(|py| {
        vec![
            ("resource", resource.into_pyobject_or_none(py)),
            ("cause", cause.into_pyobject_or_none(py)),
        ]
    })
    .unwrap_or_default();
    raise("LockLost", message, &attributes)
}

/// `Ok` when a quorum confirmed the release; otherwise the exception for why not.
pub(crate) fn released(resource: &str, released: &Released) -> PyResult<usize> {
    let Some(cause) = released.cause() else {
        return Ok(released.confirmed);
    };
    let message = format!(
        "release of {resource:?}: {cause} ({} of {} nodes confirmed, {} needed)",
        released.confirmed,
        released.replies.len(),
        released.quorum
    );
    let attributes = exit::attach(|py| {
        round_attributes(py, resource, &cause, released.quorum, &released.replies)
    })
    .unwrap_or_default();
    Err(raise(class_of(&cause), &message, &attributes))
}

/// Lets `?` turn a library error into its exception.
/// A library error on its way to the thread that raises it: futures that run on the runtime
/// return it, and it becomes a Python exception where the GIL is held anyway (the caller's
/// thread, or the event loop's), so that a refusal costs the runtime's worker no GIL
/// (`runtime` invariant 6). Measured with 8 threads of busy try-locks on one node: 31.0–31.8k
/// refusals/s, against 12.6–17.7k with each `LockBusy` built on the worker behind
/// `block_in_place`, and 25.7–27.8k built on the worker without it.
pub(crate) struct Failed(pub(crate) Error);

impl From<Failed> for PyErr {
    fn from(failed: Failed) -> Self {
        from_error(failed.0)
    }
}

pub(crate) trait OrRaise<T> {
    fn or_raise(self) -> PyResult<T>;
}

impl<T> OrRaise<T> for Result<T, Error> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(from_error)
    }
}
