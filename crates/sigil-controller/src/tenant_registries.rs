//! Which registries namespaces' ImagePolicies may name
//! ([`sigil_compile::registries`]): the admin's list
//! (`--image-policy-registry`), or else those the accepted
//! ClusterImagePolicies name, rebuilt when what they name changes. The
//! ImagePolicy controller checks every ImagePolicy against it and, without
//! an admin's list, checks them again when the ClusterImagePolicies' hosts
//! change ([`AllowedRegistries::fingerprint`]).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use sigil_compile::registries::TenantRegistries;
use tokio::sync::Mutex;

use crate::publish::Publisher;

/// The registries ImagePolicies may name, kept for the controller's life.
pub struct AllowedRegistries {
    listed: Option<Arc<TenantRegistries>>,
    /// The list built from the ClusterImagePolicies, with their fingerprint.
    built: Mutex<Option<(u64, Arc<TenantRegistries>)>>,
}

/// Checks an `--image-policy-registry` value when the flag is parsed.
pub fn registry_flag(value: &str) -> Result<String, String> {
    TenantRegistries::listed([value]).map(|_| value.to_owned())
}

impl AllowedRegistries {
    /// From the admin's list (values checked by [`registry_flag`]); an
    /// empty list means the ClusterImagePolicies' registries.
    pub fn new(listed: &[String]) -> Self {
        let listed = if listed.is_empty() {
            None
        } else {
            TenantRegistries::listed(listed.iter().map(String::as_str))
                .ok()
                .map(Arc::new)
        };
        Self {
            listed,
            built: Mutex::default(),
        }
    }

    /// A number that changes when what the allowed registries are made of
    /// changes: constant with an admin's list, else a hash of the globs and
    /// `source[].oci` of every accepted ClusterImagePolicy.
    pub async fn fingerprint(&self, publisher: &Publisher) -> u64 {
        if self.listed.is_some() {
            return 0;
        }
        let mut h = DefaultHasher::new();
        publisher
            .visit_cluster_policies(|spec| {
                for image in &spec.images {
                    image.glob.hash(&mut h);
                }
                for source in spec.authorities.iter().flat_map(|a| &a.sources) {
                    source.oci.hash(&mut h);
                }
                0u8.hash(&mut h);
            })
            .await;
        h.finish()
    }

    /// The registries ImagePolicies may name now.
    pub async fn current(&self, publisher: &Publisher) -> Arc<TenantRegistries> {
        if let Some(listed) = &self.listed {
            return listed.clone();
        }
        let fingerprint = self.fingerprint(publisher).await;
        let mut built = self.built.lock().await;
        if let Some((held, registries)) = built.as_ref()
            && *held == fingerprint
        {
            return registries.clone();
        }
        let mut registries = TenantRegistries::of_cluster_policies([]);
        publisher
            .visit_cluster_policies(|spec| registries.add_cluster_policy(spec))
            .await;
        let registries = Arc::new(registries);
        *built = Some((fingerprint, registries.clone()));
        registries
    }
}
