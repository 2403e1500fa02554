//! Fenced writes of the Secrets only the leading controller writes (the
//! policy snapshot and its shards, the TUF state): every write checks,
//! right before it is sent, that this replica still holds the Lease
//! ([`Fence`]), and is conditioned on what this replica last read or wrote
//! of that Secret ([`Seen`]: its `resourceVersion`, or that it did not
//! exist). A replica that lost the Lease therefore writes nothing, and one
//! whose view is stale (another controller wrote since: a rolling update, a
//! paused process) has its write refused by the API server with
//! [`Error::WriteConflict`] instead of overwriting what the other wrote. The
//! owner then reads the Secret again before its next write.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::Resource as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::names::MANAGER;

/// Whether this replica may write: it holds the leader Lease.
#[derive(Clone)]
pub struct Fence {
    leading: watch::Receiver<bool>,
    lease: String,
}

impl Fence {
    /// A fence over the elector's `leading` flag for Lease `lease`.
    pub fn new(leading: watch::Receiver<bool>, lease: &str) -> Self {
        Self {
            leading,
            lease: lease.to_owned(),
        }
    }

    /// Fails with [`Error::NotLeader`] unless this replica leads now.
    pub fn check(&self) -> Result<()> {
        if *self.leading.borrow() {
            Ok(())
        } else {
            Err(Error::NotLeader(self.lease.clone()))
        }
    }
}

/// What this replica last saw of a Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// It did not exist.
    Absent,
    /// It existed at this `resourceVersion`.
    At(String),
}

/// Reads and fenced writes of Secrets in sigil's namespace.
#[derive(Clone)]
pub struct SecretWriter {
    api: Api<Secret>,
    namespace: String,
    fence: Fence,
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

impl SecretWriter {
    /// A writer of Secrets in `namespace`, fenced by `fence`.
    pub fn new(client: Client, namespace: &str, fence: Fence) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            fence,
        }
    }

    /// The fence every write checks.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    fn conflict(&self, name: &str, what: &str) -> Error {
        Error::WriteConflict(format!(
            "{what} Secret {}/{name}: it changed since this replica last read it (another \
             controller wrote it); nothing was overwritten, and this replica reads it again \
             before its next write",
            self.namespace
        ))
    }

    /// Reads Secret `name`: what was seen, and the Secret if it exists.
    pub async fn read(&self, name: &str) -> Result<(Seen, Option<Secret>)> {
        let secret = self
            .api
            .get_opt(name)
            .await
            .map_err(|e| Error::kube(format!("reading Secret {}/{name}", self.namespace), e))?;
        let seen = match &secret {
            None => Seen::Absent,
            Some(s) => Seen::At(s.metadata.resource_version.clone().unwrap_or_default()),
        };
        Ok((seen, secret))
    }

    /// Writes Secret `name` with `data` and `annotations` (and the
    /// managed-by label), if this replica leads and the Secret is still as
    /// `seen`: created when it was absent, else applied at that
    /// `resourceVersion`. Returns what is seen after the write.
    pub async fn write(
        &self,
        name: &str,
        seen: &Seen,
        data: BTreeMap<String, Vec<u8>>,
        annotations: BTreeMap<String, String>,
        what: &str,
    ) -> Result<Seen> {
        self.fence.check()?;
        let mut secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.namespace.clone()),
                labels: Some(
                    [(
                        "app.kubernetes.io/managed-by".to_owned(),
                        MANAGER.to_owned(),
                    )]
                    .into(),
                ),
                annotations: Some(annotations),
                ..Default::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
            ..Default::default()
        };
        let failed = |e| Error::kube(format!("{what} Secret {}/{name}", self.namespace), e);
        let written = match seen {
            Seen::Absent => match self.api.create(&PostParams::default(), &secret).await {
                Ok(written) => written,
                // Created by another writer since it was read absent.
                Err(e) if is_conflict(&e) => return Err(self.conflict(name, what)),
                Err(e) => return Err(failed(e)),
            },
            Seen::At(version) => {
                // The resourceVersion makes the apply a compare-and-swap.
                secret.metadata.resource_version = Some(version.clone());
                let mut body =
                    serde_json::to_value(&secret).map_err(|e| Error::Snapshot(e.to_string()))?;
                if let Some(obj) = body.as_object_mut() {
                    obj.insert("apiVersion".into(), Secret::API_VERSION.into());
                    obj.insert("kind".into(), Secret::KIND.into());
                }
                let params = PatchParams::apply(MANAGER).force();
                match self.api.patch(name, &params, &Patch::Apply(body)).await {
                    Ok(written) => written,
                    // Changed, or deleted, since it was seen.
                    Err(e) if is_conflict(&e) || is_not_found(&e) => {
                        return Err(self.conflict(name, what));
                    }
                    Err(e) => return Err(failed(e)),
                }
            }
        };
        Ok(Seen::At(
            written.metadata.resource_version.unwrap_or_default(),
        ))
    }

    /// Deletes Secret `name` if this replica leads and it is still as
    /// `seen` (nothing to do when it was absent).
    pub async fn delete(&self, name: &str, seen: &Seen, what: &str) -> Result<()> {
        let Seen::At(version) = seen else {
            return Ok(());
        };
        self.fence.check()?;
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(version.clone()),
                uid: None,
            }),
            ..Default::default()
        };
        match self.api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) if is_conflict(&e) => Err(self.conflict(name, what)),
            Err(e) => Err(Error::kube(
                format!("{what} Secret {}/{name}", self.namespace),
                e,
            )),
        }
    }
}
