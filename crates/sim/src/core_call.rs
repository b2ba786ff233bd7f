//! Attribution of panics: a panic while the simulator is inside a call into the core is a
//! core failure (`node-invariant`); any other panic is the simulator's own bug.

use std::cell::Cell;

thread_local! {
    static IN_CORE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, a call into `tenure-core`, marking the thread as inside the core meanwhile.
pub fn in_core<R>(f: impl FnOnce() -> R) -> R {
    IN_CORE.with(|c| c.set(true));
    let result = f();
    IN_CORE.with(|c| c.set(false));
    result
}

/// True if the thread panicked inside the core (the flag stays set when unwinding).
pub fn panicked_in_core() -> bool {
    IN_CORE.with(|c| c.get())
}

/// Clears the flag before a run.
pub fn reset() {
    IN_CORE.with(|c| c.set(false));
}
