//! A one-shot reply from a worker thread, awaited either by blocking the
//! caller's thread or as a future (no async runtime needed). A reply whose
//! waiter went away is marked abandoned, so a worker can skip a request
//! nobody waits for any more; a worker that drops its end without answering
//! (it cannot, short of a bug) wakes the waiter with an error.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::CueFailure;

type Answer = Result<(), CueFailure>;

#[derive(Default)]
struct State {
    answer: Option<Answer>,
    waker: Option<Waker>,
    abandoned: bool,
}

#[derive(Default)]
struct Slot {
    state: Mutex<State>,
    ready: Condvar,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The worker's end.
pub(crate) struct Replier(Arc<Slot>);

/// The waiter's end: a future, or [`Pending::wait`] to block.
pub struct Pending(Arc<Slot>);

/// A connected pair.
pub(crate) fn channel() -> (Replier, Pending) {
    let slot = Arc::new(Slot::default());
    (Replier(Arc::clone(&slot)), Pending(slot))
}

impl Replier {
    /// Whether the waiter has gone (its future was dropped).
    pub(crate) fn is_abandoned(&self) -> bool {
        self.0.lock().abandoned
    }

    /// Delivers the answer and wakes the waiter.
    pub(crate) fn send(self, answer: Answer) {
        self.deliver(answer);
    }

    fn deliver(&self, answer: Answer) {
        let mut state = self.0.lock();
        if state.answer.is_none() {
            state.answer = Some(answer);
        }
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
        drop(state);
        self.0.ready.notify_all();
    }
}

impl Drop for Replier {
    fn drop(&mut self) {
        if self.0.lock().answer.is_none() {
            self.deliver(Err(CueFailure::Guest(
                "the CUE worker stopped without answering".into(),
            )));
        }
    }
}

impl Pending {
    /// An answer that is already known (no worker involved).
    pub(crate) fn ready(answer: Answer) -> Self {
        let slot = Slot::default();
        slot.lock().answer = Some(answer);
        Self(Arc::new(slot))
    }

    /// Blocks the calling thread until the answer arrives.
    pub fn wait(self) -> Answer {
        let mut state = self.0.lock();
        loop {
            if let Some(answer) = state.answer.take() {
                return answer;
            }
            state = self
                .0
                .ready
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Future for Pending {
    type Output = Answer;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        let mut state = self.0.lock();
        match state.answer.take() {
            Some(answer) => Poll::Ready(answer),
            None => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.lock().abandoned = true;
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").finish_non_exhaustive()
    }
}
