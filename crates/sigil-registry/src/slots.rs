//! Request slots: how many requests to one registry host may be in flight
//! at once. The client takes a slot for each request to a registry (its
//! token exchange and redirects included) from the [`RequestSlots`] the
//! embedding program configures, and holds it only while that request
//! runs, so a slow or hanging registry holds its own slots and nothing else
//! waits on them; how slots are shared (per host, among tenants) is the
//! embedding program's.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;

/// A held slot: dropping it gives the slot back.
pub type Slot = Box<dyn Any + Send>;

/// Hands out request slots per registry host.
pub trait RequestSlots: Send + Sync + fmt::Debug {
    /// Waits for a slot for one request to registry `host` (`host[:port]`
    /// as the reference names it). The caller bounds the wait.
    fn acquire<'a>(&'a self, host: &'a str) -> Pin<Box<dyn Future<Output = Slot> + Send + 'a>>;
}
