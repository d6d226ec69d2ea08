//! Forking a process that uses the library: what to call around `fork()`.
//!
//! A forked child gets a copy of its parent's memory and only the forking thread. A lock that
//! another thread of the parent held at that moment stays held in the child for good. The
//! library's process-wide state is built to be forked (each piece says how: the deadline
//! thread, fresh random values, a Python manager's runtime and connections), except for one
//! lock that threads of any manager take all the time: the table of round deadlines
//! (`deadlines` invariant 5). Measured from Python, 12 children of 2,000 forked while 16
//! threads locked hung on it at their first lock.
//!
//! A program that forks while managers are at work calls [`before_fork`] on the forking thread
//! just before `fork()`, and [`after_fork`] on the same thread just after it, in the parent and
//! in the child (`pthread_atfork`'s *prepare*, *parent* and *child*). Python's package does so
//! with `os.register_at_fork`. A program that only forks before it first uses the library, or
//! that `exec`s at once in the child, need not.

/// Call on the forking thread just before `fork()`: waits for the deadline table's lock (held
/// by any thread for microseconds at a time) and keeps it until [`after_fork`].
pub fn before_fork() {
    crate::round::deadlines::before_fork();
}

/// Call on the forking thread just after `fork()`, in the parent and in the child.
pub fn after_fork() {
    crate::round::deadlines::after_fork();
}
