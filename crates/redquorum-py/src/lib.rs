//! The `redquorum` Python package's native module (`redquorum._redquorum`): the library itself,
//! exposed to Python, not a re-implementation of it.
//!
//! The Python package (`python/redquorum`) gives it its shape: `Redlock` for threads and
//! `redquorum.asyncio.Redlock` for asyncio, context managers, `threading.Event` and
//! `asyncio.Event` loss signals, the exception classes. Everything that touches Redis, keeps
//! time or decides a quorum happens here, in the Rust library.
//!
//! # Layout
//! - `exit`: the interpreter's exit, which no thread of ours enters Python after.
//! - `runtime`: one Tokio runtime per process (a forked child builds its own), and blocking
//!   waits with the GIL released.
//! - `bridge`: awaitables for asyncio, completed on the loop's own thread.
//! - `settings`: durations in seconds and `Redlock(...)`'s keywords, handed to the library's
//!   builder, which checks them.
//! - `manager`: the manager and every acquisition, blocking and awaitable.
//! - `held`: the held lock: ownership is the handle, the loss signal, keep-alive.
//! - `views`: read-only answers (leader, node status) and the leader watch.
//! - `errors`: the library's errors as the exception classes of `redquorum.errors`.

mod bridge;
mod errors;
mod exit;
mod fork;
mod held;
mod manager;
mod runtime;
mod settings;
mod views;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _redquorum(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<manager::Manager>()?;
    m.add_class::<held::Held>()?;
    m.add_class::<views::Leader>()?;
    m.add_class::<views::NodeStatus>()?;
    m.add_class::<views::Watch>()?;
    m.add_function(wrap_pyfunction!(exit::_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(fork::_before_fork, m)?)?;
    m.add_function(wrap_pyfunction!(fork::_after_fork_in_parent, m)?)?;
    m.add_function(wrap_pyfunction!(fork::_after_fork_in_child, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    let py = m.py();
    // `exit` invariant 1: no thread of ours enters Python once the interpreter is exiting.
    py.import("atexit")?
        .call_method1("register", (m.getattr("_at_exit")?,))?;
    // `fork`'s invariants: the library's locks cross a fork free, and a child's exit gate is
    // open and empty.
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("before", m.getattr("_before_fork")?)?;
    kwargs.set_item("after_in_parent", m.getattr("_after_fork_in_parent")?)?;
    kwargs.set_item("after_in_child", m.getattr("_after_fork_in_child")?)?;
    py.import("os")?
        .call_method("register_at_fork", (), Some(&kwargs))?;
    Ok(())
}
